/* What the machine has, for the checks of a plan and the "auto" budgets: the
 * test overrides of the device's free memory, the swap directories' free
 * space and the root the host limits are read under (fit.c and the engine's
 * placement, core/engine/place_build.c, both ask here), and the figures of an
 * "auto" budget of zero_optimization.max_memory (plan.h:
 * zc__preflight_auto_budget). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "offload/homes.h"
#include "offload/offload.h"
#include "plan/plan.h"

static _Atomic(const char *) limits_root;

/* < 0: ask the device (zc_device_ops.mem_info). */
static _Atomic int64_t fake_device_free = -1;

void zc__preflight_limits_root(const char *root) { atomic_store(&limits_root, root); }
void zc__preflight_device_free(int64_t bytes) { atomic_store(&fake_device_free, bytes); }
/* Free test capacity for every swap directory (< 0: ask statvfs). */
static _Atomic int64_t fake_nvme_free = -1;
void zc__preflight_nvme_free(int64_t bytes) { atomic_store(&fake_nvme_free, bytes); }

const char *zc__machine_limits_root(void) { return atomic_load(&limits_root); }
int64_t zc__machine_device_free_set(void) { return atomic_load(&fake_device_free); }
int64_t zc__machine_nvme_free_set(void) { return atomic_load(&fake_nvme_free); }

/* ---- "auto" budgets of zero_optimization.max_memory ----------------------- */

/* Margins: activations and the application's buffers come on top of the
 * plan, and the filesystem's reserve on top of the swap files. */
#define AUTO_MEM_KEEP 10  /* percent of device / host memory left alone */
#define AUTO_NVME_KEEP 5  /* percent of free swap space left alone */

static int64_t less_percent(uint64_t v, int pct)
{
    const uint64_t r = v - v / 100 * (uint64_t)pct;
    return r > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r;
}

/* This rank's share of the host's memory: MemAvailable (or the cgroup's
 * headroom, the smaller) over the ranks of this node. */
static zc_status host_share(int ranks, const char *key, uint64_t *out)
{
    zc_host_mem_limits lim;
    zc__host_mem_limits_read(zc__machine_limits_root(), &lim);
    uint64_t avail = lim.mem_available;
    if (lim.cgroup_limit != UINT64_MAX) {
        const uint64_t head = lim.cgroup_limit > lim.cgroup_usage
                                  ? lim.cgroup_limit - lim.cgroup_usage : 0;
        avail = head < avail ? head : avail;
    }
    if (avail == UINT64_MAX)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.max_memory.%s \"auto\": the host's "
                      "available memory cannot be read (/proc/meminfo MemAvailable); write a "
                      "size instead", key);
    *out = avail / (uint64_t)(ranks > 0 ? ranks : 1);
    return ZC_OK;
}

/* Free space of the filesystems under both blocks' nvme_path (each counted
 * once). */
static zc_status nvme_free(const zc_config *cfg, uint64_t *out)
{
    char bufs[2][16 * 512];
    const char *dirs[32];
    int nd = 0;
    for (int p = 0; p < 2; p++) {
        const char *path = p ? cfg->zero.offload_param.nvme_path
                             : cfg->zero.offload_optimizer.nvme_path;
        int n = 0;
        if (path && *path)
            ZC_CHECK(zc__split_nvme_paths(p ? "offload_param" : "offload_optimizer", path,
                                          bufs[p], sizeof bufs[p], dirs + nd, &n));
        nd += n;
    }
    const int64_t fake = zc__machine_nvme_free_set();
    struct stat st[32];
    *out = 0;
    for (int i = 0; i < nd; i++) {
        if (stat(dirs[i], &st[i]) != 0)
            return ZC_ERR(ZC_ERR_IO, "zero_optimization.max_memory.nvme \"auto\": nvme_path "
                          "'%s': %s", dirs[i], strerror(errno));
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen = seen || st[j].st_dev == st[i].st_dev;
        if (seen)
            continue;
        uint64_t avail = 0;
        if (fake >= 0) {
            avail = (uint64_t)fake;
        } else {
            struct statvfs vf;
            if (statvfs(dirs[i], &vf) != 0)
                return ZC_ERR(ZC_ERR_IO, "zero_optimization.max_memory.nvme \"auto\": "
                              "statvfs('%s'): %s", dirs[i], strerror(errno));
            if (__builtin_mul_overflow((uint64_t)vf.f_bavail, (uint64_t)vf.f_frsize, &avail))
                avail = UINT64_MAX;
        }
        if (__builtin_add_overflow(*out, avail, out))
            *out = UINT64_MAX;
    }
    return ZC_OK;
}

zc_status zc__preflight_auto_budget(const zc_config *cfg, zc_device *dev, int local_ranks,
                                    zc_budget_kind kind, int64_t *bytes)
{
    uint64_t v = 0;
    if (kind == ZC_BUDGET_NVME) {
        ZC_CHECK(nvme_free(cfg, &v));
        *bytes = less_percent(v, AUTO_NVME_KEEP);
        return ZC_OK;
    }
    const int64_t fake = zc__machine_device_free_set();
    if (kind == ZC_BUDGET_DEVICE && fake >= 0) {
        v = (uint64_t)fake;
    } else if (kind == ZC_BUDGET_DEVICE && !dev) {
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.max_memory.device \"auto\": a plan made "
                      "before any device is opened cannot read a GPU's free memory; write a "
                      "size instead");
    } else if (kind == ZC_BUDGET_DEVICE && dev->mem_kind == ZC_MEMKIND_DEVICE) {
        size_t free_b = 0, total_b = 0;
        if (!dev->ops->mem_info || dev->ops->mem_info(dev, &free_b, &total_b) != ZC_OK)
            return ZC_ERR(ZC_ERR_DEVICE, "zero_optimization.max_memory.device \"auto\": the "
                          "device's free memory cannot be read (%s); write a size instead",
                          zc_last_error());
        v = free_b;
    } else {
        /* cpu, and the host path's "device": memory of this rank's share of
         * the host (the pre-flight still holds both together to it). */
        ZC_CHECK(host_share(local_ranks, kind == ZC_BUDGET_CPU ? "cpu" : "device", &v));
    }
    *bytes = less_percent(v, AUTO_MEM_KEEP);
    return ZC_OK;
}

