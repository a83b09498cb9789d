/* Crash-safe file operations for checkpoints (internal).
 *
 * A file becomes visible under its final name only complete and on disk:
 * written under a temporary name created with O_EXCL, fsync'd, renamed, and
 * its directory fsync'd. A crash at any moment leaves either the old state or
 * the new one, plus at worst a temporary file the next save removes. */
#ifndef ZC_CKPT_FSIO_H
#define ZC_CKPT_FSIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Whole-buffer pwrite / pread loops; a short read is "truncated" (ZC_ERR_IO
 * naming path and offset). */
zc_status zc__ck_pwrite(int fd, const void *buf, size_t n, uint64_t off, const char *path);
zc_status zc__ck_pread(int fd, void *buf, size_t n, uint64_t off, const char *path);

/* Files are created, renamed and synced relative to a directory descriptor
 * (the checkpoint directory or the staging directory, opened once and checked
 * by dirwrite.c), so a directory swapped for a symbolic link afterwards
 * cannot redirect a write; `shown` is the directory's path, for messages. */

/* Creates name in dfd exclusively for writing (O_EXCL | O_NOFOLLOW, mode
 * 0644: an existing file or a symbolic link of that name is an error). */
zc_status zc__ck_create_at(int dfd, const char *shown, const char *name, int *fd);
/* fsync (when sync_data) and close fd, a file named `name` in the directory
 * shown as `shown`; fd is closed on every path. ZC_ERR_IO naming the file
 * and the call that failed. */
zc_status zc__ck_sync_close(int fd, const char *shown, const char *name, bool sync_data);
/* fsync and close fd, then rename tmp to final inside the staging directory
 * sfd (dirwrite.h), without a directory fsync: the staging directory is
 * fsync'd once, with every name in it, before it is renamed into place
 * (zc__ck_stage_prepare), and a crash before that discards it whole, so one
 * fsync per name would buy nothing. sync_data false also skips the file's
 * fsync, for what is read only before the commit and never after a crash (the
 * ranks' indexes). */
zc_status zc__ck_place_staged_at(int fd, int sfd, const char *shown, const char *tmp,
                                 const char *final, bool sync_data);
/* fsync a directory by its descriptor. */
zc_status zc__ck_fsync_fd(int dfd, const char *shown);
/* Joins a and b with '/' into out (cap bytes); ZC_ERR_INVALID_ARG when it
 * does not fit. */
zc_status zc__ck_join(char *out, size_t cap, const char *a, const char *b);

#endif
