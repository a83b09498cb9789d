/* Writing a checkpoint directory (internal), shared by the engine's save and
 * the offline reshard.
 *
 *   rank 0:     zc__ck_stage_open   (DIR/.TAG.partial, fresh)
 *   every rank: zc__ck_shard_open / _append ... / _close   (rank_R.bin + its index)
 *   rank 0:     zc__ck_stage_commit (manifest, rename to DIR/TAG, then `latest`)
 *
 * The callers agree across ranks between the three phases. Until the rename
 * in zc__ck_stage_commit nothing under DIR/TAG or DIR/latest has changed, so a
 * crash (or a failure) at any point leaves the previous checkpoint and
 * `latest` as they were. */
#ifndef ZC_CKPT_DIRWRITE_H
#define ZC_CKPT_DIRWRITE_H

#include "ckpt/format.h"

#define ZC_CK_PATH_MAX 4096

/* Creates DIR if missing (one level), refuses an existing DIR/TAG, removes a
 * stale DIR/.TAG.partial left by a crashed save (only the names a save
 * writes; anything else there is an error naming it) and creates it anew. */
zc_status zc__ck_stage_open(const char *dir, const char *tag);
/* Removes DIR/.TAG.partial and what a save writes in it (best effort). */
void zc__ck_stage_abort(const char *dir, const char *tag);

/* One rank's shard file being written. */
typedef struct zc_ck_shard {
    int fd, rank;
    char tmp[ZC_CK_PATH_MAX], final[ZC_CK_PATH_MAX], dir[ZC_CK_PATH_MAX];
    uint64_t bytes;
    zc_ck_entry *ents;
    int64_t n, cap;
} zc_ck_shard;

zc_status zc__ck_shard_open(zc_ck_shard *s, const char *dir, const char *tag, int rank);
/* Appends elements [begin, end) of parameter `param`'s tensor `kind` (fp32
 * values in host memory) and records its entry and checksum. */
zc_status zc__ck_shard_append(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                              const float *values);
/* Makes the shard file and its index durable under their final names. */
zc_status zc__ck_shard_close(zc_ck_shard *s);
/* Frees and removes what was not closed (after a failure). */
void zc__ck_shard_discard(zc_ck_shard *s);

/* Rank 0: completes m (files and entries, from the ranks' indexes: nfiles
 * ranks), writes manifest.json, renames the staging directory to DIR/TAG and
 * updates DIR/latest, each step durable before the next. */
zc_status zc__ck_stage_commit(const char *dir, zc_ck_manifest *m, int nfiles);

#endif
