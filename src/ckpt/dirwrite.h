/* Writing a checkpoint directory (internal), shared by the engine's save and
 * the offline reshard.
 *
 *   rank 0:     zc__ck_stage_open    (DIR/.TAG.partial, fresh)
 *   every rank: zc__ck_shard_open / _put ... / _seal   (rank_R.bin handed to the
 *               disk, named, and its index; ckpt/shard_write.h)
 *   rank 0:     zc__ck_stage_prepare (manifest, the staging directory's names
 *               durable, DIR/latest.tmp)
 *   every rank: zc__ck_shard_close   (rank_R.bin's bytes durable)
 *   rank 0:     zc__ck_stage_publish (rename to DIR/TAG, then `latest`)
 *
 * The callers agree across ranks after the open, after the seals, after the
 * prepare and the closes, and after the publish. The prepare needs only the
 * indexes, so rank 0 does it while the disk is still writing the shard
 * files' last bytes, and the publish waits for those bytes on every rank.
 * zc__ck_stage_commit is the prepare and the publish together, for a caller
 * whose shard files are closed already. Until the rename in the publish
 * nothing under DIR/TAG or DIR/latest has changed, so a crash (or a failure)
 * at any point leaves the previous checkpoint and `latest` as they were (at
 * worst with a DIR/latest.tmp, which the next save replaces and an abort
 * removes).
 *
 * What is fsync'd, and why no more: the marker (with the staging directory's
 * fsync) before anything is written next to it, so a crash leaves the
 * staging directory empty, marked or gone; each shard file's and the
 * manifest's bytes; the staging directory once, with every name in it,
 * before it is renamed; DIR/TAG (the marker removed) and DIR after the
 * rename; `latest`'s next content as a file before its rename, then DIR
 * after it. The ranks' indexes are not fsync'd at all: rank 0 reads them
 * before the commit, and a crash discards the staging directory.
 *
 * Nothing outside what a save created is written or removed: the staging
 * directory is made by zc__ck_stage_open with a marker file in it
 * (ZC_CK_STAGING_MARK), and every later step opens it with O_NOFOLLOW and
 * checks it is a directory of this user holding the marker before it works
 * inside it, relative to its descriptor. A staging path that is a symbolic
 * link, or a directory without the marker, is refused, never cleared. The
 * marker stays until the staging directory has become DIR/TAG, so at every
 * instant the directory is either empty, marked, or the complete checkpoint
 * (which a crash right after the rename may leave holding the marker; readers
 * ignore it). */
#ifndef ZC_CKPT_DIRWRITE_H
#define ZC_CKPT_DIRWRITE_H

#include "ckpt/format.h"

#define ZC_CK_PATH_MAX 4096
/* The empty file that says "a zeroc save made this staging directory". */
#define ZC_CK_STAGING_MARK ".zeroc-staging"

/* Creates DIR if missing (one level), refuses an existing DIR/TAG, removes a
 * stale DIR/.TAG.partial left by a crashed save (only when it is a directory
 * holding the marker, and only the names a save writes; anything else there
 * is an error naming it; an empty directory is removed too) and creates it
 * anew with the marker. */
zc_status zc__ck_stage_open(const char *dir, const char *tag);
/* DIR/.TAG.partial into out (ZC_CK_PATH_MAX bytes). */
zc_status zc__ck_staging_path(char *out, const char *dir, const char *tag);
/* Opens DIR (*dfd, may be NULL) and DIR/.TAG.partial (*sfd) for a writer of
 * the save: ZC_ERR_IO naming the staging path when it is missing, a symbolic
 * link, not a directory, another user's, or without the marker. The caller
 * closes the descriptors. */
zc_status zc__ck_staging_open(const char *dir, const char *tag, int *dfd, int *sfd);
/* Removes DIR/.TAG.partial and what a save writes in it (best effort; only a
 * staging directory that holds the marker is touched), and a DIR/latest.tmp
 * a prepare left. */
void zc__ck_stage_abort(const char *dir, const char *tag);

/* Shard files: ckpt/shard_write.h. Each rank leaves rank_R.idx in the
 * staging directory (sfd; sp its path for messages) next to its shard for
 * rank 0 (zc__ck_index_write). */
zc_status zc__ck_index_write(int sfd, const char *sp, int rank, const zc_ck_entry *ents,
                             int64_t n, uint64_t bytes);
/* rank_R.idx, rank R's index name in the staging directory. */
void zc__ck_index_name(int rank, char out[32]);

/* Rank 0, once every rank has sealed its shard file: completes m (files and
 * entries, from the ranks' indexes: nfiles ranks), writes manifest.json
 * (durable), reads it back through zc__ck_manifest_read (the validation
 * every reader applies: a checkpoint a load would refuse is never published),
 * checks each shard file's size against it, removes the indexes, fsyncs the
 * staging directory and writes DIR/latest.tmp naming m->tag (durable).
 * Nothing a reader sees changes. On failure the caller aborts
 * (zc__ck_stage_abort). */
zc_status zc__ck_stage_prepare(const char *dir, zc_ck_manifest *m, int nfiles);
/* Rank 0, once the prepare succeeded and every rank's shard bytes are
 * durable (zc__ck_shard_close): renames the staging directory to DIR/TAG
 * (never over an existing one), removes the marker, fsyncs DIR/TAG and DIR,
 * then renames DIR/latest.tmp over DIR/latest and fsyncs DIR. */
zc_status zc__ck_stage_publish(const char *dir, const char *tag);
/* zc__ck_stage_prepare, then zc__ck_stage_publish: for shard files that are
 * closed already (the reshard). */
zc_status zc__ck_stage_commit(const char *dir, zc_ck_manifest *m, int nfiles);

#endif
