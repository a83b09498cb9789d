/* The swap directories of an NVMe home (internal).
 *
 * Both NVMe homes (optimizer state: opt_home_nvme.c, stage-3 parameter
 * shards: param_home_nvme.c) keep their store's files under the nvme_path
 * entries the config names, each in a private directory of its own made
 * with mkdtemp (zeroc-swap-r<rank>-XXXXXX): the store creates its file
 * there with no name (O_TMPFILE, or unlinked right after it is opened:
 * offload.h), and the directory is removed as soon as the files are open
 * (zc__home_store_open), so a run never touches a file it did not create and
 * even a killed process leaves nothing under nvme_path. Where the files keep
 * a name (a filesystem that allows neither), the directory stays until the
 * home is destroyed. `key` names the config block in errors
 * ("zero_optimization.offload_optimizer" or "...offload_param"). */
#ifndef ZC_OFFLOAD_SWAP_DIRS_H
#define ZC_OFFLOAD_SWAP_DIRS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define ZC_SWAP_MAX_DIRS 16

typedef struct zc_swap_dirs {
    int n;
    char given[ZC_SWAP_MAX_DIRS][512]; /* nvme_path entries as given */
    char made[ZC_SWAP_MAX_DIRS][512];  /* our mkdtemp directories ("" until made;
                                          the path stays for messages) */
    bool present[ZC_SWAP_MAX_DIRS];    /* made and not yet removed */
} zc_swap_dirs;

/* Copies the n entries of dirs into s (nothing made yet); ZC_ERR_CONFIG
 * naming key when n is outside 1..16 or an entry is empty or longer than 400
 * bytes (room for the names made under it). s is unchanged on failure. */
zc_status zc__swap_dirs_init(zc_swap_dirs *s, const char *const *dirs, int n, const char *key);

/* The aio block's values an NVMe store takes: block_size a power of two
 * from 4096 to 1 GiB, queue_depth 1..4096, intra_op_parallelism 1..64;
 * ZC_ERR_CONFIG naming the key otherwise. */
zc_status zc__swap_aio_check(int64_t block_size, int64_t queue_depth, int64_t intra_op);

/* Makes the private directory under every entry. ZC_ERR_IO naming the entry
 * and the reason when one cannot be made; the ones already made stay
 * recorded, so zc__swap_dirs_remove cleans up after a failure too. */
zc_status zc__swap_dirs_make(zc_swap_dirs *s, int rank, const char *key);

/* Removes the directories made (they must be empty: the store's files have
 * no name, or it removed them), warning about any that cannot be; safe to
 * call more than once. rmdir never follows a link and removes only an empty
 * directory. */
void zc__swap_dirs_remove(zc_swap_dirs *s);

/* The made directories, as the store's options take them (out[n]). */
void zc__swap_dirs_list(const zc_swap_dirs *s, const char **out);

#endif
