/* Writing a checkpoint directory (internal), shared by the engine's save and
 * the offline reshard.
 *
 *   rank 0:     zc__ck_stage_open   (DIR/.TAG.partial, fresh)
 *   every rank: zc__ck_shard_open / _run, _entry ... / _close   (rank_R.bin + its index;
 *               ckpt/shard_write.h)
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
/* DIR/.TAG.partial into out (ZC_CK_PATH_MAX bytes). */
zc_status zc__ck_staging_path(char *out, const char *dir, const char *tag);
/* Removes DIR/.TAG.partial and what a save writes in it (best effort). */
void zc__ck_stage_abort(const char *dir, const char *tag);

/* Shard files: ckpt/shard_write.h. Each rank leaves DIR/.TAG.partial/rank_R.idx
 * next to its shard for rank 0 (zc__ck_index_write). */
zc_status zc__ck_index_write(const char *staging_dir, int rank, const zc_ck_entry *ents,
                             int64_t n, uint64_t bytes);

/* Rank 0: completes m (files and entries, from the ranks' indexes: nfiles
 * ranks), writes manifest.json, renames the staging directory to DIR/TAG and
 * updates DIR/latest, each step durable before the next. */
zc_status zc__ck_stage_commit(const char *dir, zc_ck_manifest *m, int nfiles);

#endif
