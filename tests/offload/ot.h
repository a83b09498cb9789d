/* Helpers for the offload tests: temporary directories on the local disk,
 * small tmpfs mounts, and a log sink that counts warnings. */
#ifndef ZC_TESTS_OFFLOAD_OT_H
#define ZC_TESTS_OFFLOAD_OT_H

#include <stdbool.h>
#include <stddef.h>

#include "zeroc/zeroc.h"

/* Creates a fresh directory under ZC_TEST_TMPDIR (set by meson to the build
 * directory, which is on the local disk), else $TMPDIR, else ".". */
void ot_mkdtemp(char out[512]);

/* Removes a directory tree (files and subdirectories, one level of mounts
 * unmounted first). */
void ot_rmtree(const char *dir);

/* Mounts a tmpfs of `size` ("1m") on dir (flags "ro" or NULL). Returns false
 * with the reason in why when mounting is not permitted (CI containers). */
bool ot_mount_tmpfs(const char *dir, const char *size, const char *extra, char why[256]);
void ot_umount(const char *dir);

/* Installs a sink that counts WARN-and-above lines of subsystem "offload" and
 * keeps the last one. */
void ot_capture_logs(void);
int ot_warnings(void);
/* Warnings (of those kept: the first 64) whose text contains needle. */
int ot_warnings_with(const char *needle);
const char *ot_last_warning(void);

/* Fills buf with a pattern derived from (seed, byte index): data whose every
 * byte depends on where it belongs, so a misplaced block never matches. */
void ot_fill(void *buf, size_t len, unsigned long long seed, unsigned long long base);
/* Index of the first byte that differs from ot_fill's pattern, or -1. */
long long ot_check(const void *buf, size_t len, unsigned long long seed, unsigned long long base);

/* Drops CAP_IPC_LOCK from the effective set and sets RLIMIT_MEMLOCK to
 * `bytes`, so mlock and io_uring registration face the limit as an
 * unprivileged user would. Returns false if it could not. */
bool ot_limit_memlock(unsigned long long bytes);

#endif
