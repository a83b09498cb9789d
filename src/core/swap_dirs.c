/* The swap directories of an NVMe home: see swap_dirs.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "core/swap_dirs.h"

zc_status zc__swap_dirs_init(zc_swap_dirs *s, const char *const *dirs, int n, const char *key)
{
    if (n < 1 || n > ZC_SWAP_MAX_DIRS)
        return ZC_ERR(ZC_ERR_CONFIG, "%s.nvme_path: %d directories given; give 1 to %d", key, n,
                      ZC_SWAP_MAX_DIRS);
    for (int i = 0; i < n; i++)
        if (!dirs[i] || !*dirs[i] || strlen(dirs[i]) > 400)
            return ZC_ERR(ZC_ERR_CONFIG, "%s.nvme_path entry %d is empty or longer than 400 "
                          "bytes", key, i);
    memset(s, 0, sizeof *s);
    s->n = n;
    for (int i = 0; i < n; i++)
        snprintf(s->given[i], sizeof s->given[i], "%s", dirs[i]);
    return ZC_OK;
}

zc_status zc__swap_aio_check(int64_t block_size, int64_t queue_depth, int64_t intra_op)
{
    if (block_size < (int64_t)ZC_SWAP_ALIGN || block_size > ((int64_t)1 << 30) ||
        (block_size & (block_size - 1)))
        return ZC_ERR(ZC_ERR_CONFIG, "aio.block_size %lld: NVMe offload needs a power of two "
                      "between %u and 1 GiB", (long long)block_size, ZC_SWAP_ALIGN);
    if (queue_depth < 1 || queue_depth > 4096 || intra_op < 1 || intra_op > 64)
        return ZC_ERR(ZC_ERR_CONFIG, "aio.queue_depth %lld must be 1..4096 and "
                      "aio.intra_op_parallelism %lld 1..64",
                      (long long)queue_depth, (long long)intra_op);
    return ZC_OK;
}

zc_status zc__swap_dirs_make(zc_swap_dirs *s, int rank, const char *key)
{
    for (int i = 0; i < s->n; i++) {
        char tmpl[512];
        int len = snprintf(tmpl, sizeof tmpl, "%s/zeroc-swap-r%d-XXXXXX", s->given[i], rank);
        if (len < 0 || (size_t)len >= sizeof tmpl - 64)
            return ZC_ERR(ZC_ERR_CONFIG, "%s.nvme_path '%s' is too long", key, s->given[i]);
        if (!mkdtemp(tmpl))
            return ZC_ERR(ZC_ERR_IO, "%s.nvme_path '%s': cannot create a swap directory there: "
                          "%s; point nvme_path at a writable directory", key, s->given[i],
                          strerror(errno));
        memcpy(s->made[i], tmpl, sizeof tmpl);
        s->present[i] = true;
    }
    return ZC_OK;
}

void zc__swap_dirs_remove(zc_swap_dirs *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->present[i]) {
            if (rmdir(s->made[i]) != 0)
                ZC_LOGW("offload", "cannot remove the swap directory '%s': %s", s->made[i],
                        strerror(errno));
            s->present[i] = false;
        }
}

void zc__swap_dirs_list(const zc_swap_dirs *s, const char **out)
{
    for (int i = 0; i < s->n; i++)
        out[i] = s->made[i];
}
