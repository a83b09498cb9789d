/* The swap directories of an NVMe home (swap_dirs.h), and nvme_path split into
 * its directories (homes.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "config/config.h"
#include "offload/homes.h"
#include "offload/swap_dirs.h"

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
    /* The rule `zeroc config check` and zc_engine_create apply (support.c). */
    return zc__config_aio_check(block_size, queue_depth, intra_op);
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

/* The engine reads nvme_path with it (opt_state.c, param_state.c, the
 * pre-flight) before any home exists: homes.h. */
zc_status zc__split_nvme_paths(const char *key, const char *s, char *buf, size_t cap,
                               const char **dirs, int *n)
{
    *n = 0;
    if (!s || !*s)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.%s.nvme_path is required with device "
                      "\"nvme\": a writable directory (or a list of them)", key);
    if (strlen(s) >= cap)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.%s.nvme_path is longer than %zu bytes",
                      key, cap - 1);
    memcpy(buf, s, strlen(s) + 1);
    char *save = NULL;
    for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
        if (*n == 16)
            return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.%s.nvme_path lists more than 16 "
                          "directories", key);
        dirs[(*n)++] = t;
    }
    if (!*n)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.%s.nvme_path is empty", key);
    return ZC_OK;
}
