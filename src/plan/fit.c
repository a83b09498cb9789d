/* A plan held to what the machine can give (zc__plan_fits): the device's
 * free memory, the free space of the swap directories' filesystems and the
 * host's available memory. zc_engine_build's pre-flight (core/engine/
 * preflight.c) runs it on the built engine's plan before any buffer is
 * allocated. The optimizer's offload homes check their own parts again at
 * prepare (the nvme home also the swap files' free space); the parameter
 * homes (offload_param) leave it to this check. It sees the sum, so a
 * configuration whose parts each fit but whose total does not is refused up
 * front. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "base/log.h"
#include "offload/homes.h"
#include "offload/offload.h"
#include "plan/plan.h"

static const char *const kind_names[ZC_MEMKIND__COUNT] = {"host", "pinned host", "device",
                                                          "NVMe"};

/* A swap store's share of one directory: the store stripes its file over
 * its nvme_path directories in aio.block_size units, so each holds the
 * store's bytes / directories rounded up to a stripe. */
typedef struct swap_dir {
    const char *dir;
    uint64_t need;
    int store;      /* STORE_*: whose swap file */
} swap_dir;

enum { STORE_OPT = 0, STORE_PARAM, STORE_ACT, STORES };

static int add_store(const zc_config *cfg, const char *key, const char *nvme_path, uint64_t total,
                     int store, char *buf, size_t cap, swap_dir *out, int n)
{
    const char *dirs[16];
    int nd = 0;
    if (!total)
        return n;
    if (zc__split_nvme_paths(key, nvme_path, buf, cap, dirs, &nd) != ZC_OK) {
        zc__error_clear(); /* the home reports the bad path with its own words */
        return n;
    }
    const uint64_t blk = cfg->aio.block_size > 0 ? (uint64_t)cfg->aio.block_size : 1;
    const uint64_t stripes = (total + blk * (uint64_t)nd - 1) / (blk * (uint64_t)nd);
    uint64_t per_dir = 0;
    if (__builtin_mul_overflow(stripes, blk, &per_dir))
        per_dir = UINT64_MAX;
    for (int i = 0; i < nd; i++)
        out[n++] = (swap_dir){dirs[i], per_dir, store};
    return n;
}


/* The swap stores against the free space of their filesystems: the
 * optimizer's (offload_optimizer.nvme_path) and the parameters'
 * (offload_param.nvme_path), summed where directories share a filesystem
 * (st_dev), so two stores that each fit but not together are refused. The
 * message names the directory, the store with the larger share there and its
 * key. A directory that cannot be examined is left to the home, which names
 * it with its errno. */
static zc_status check_nvme(const zc_plan_who *who, const zc_config *cfg, const zc_est *est)
{
    const int64_t popt = est->kind_total[ZC_MEMKIND_NVME] - est->param_nvme - est->act_nvme;
    char obuf[16 * 512], pbuf[16 * 512], abuf[16 * 512];
    swap_dir sd[48];
    /* A placement may put a home's files under the other block's nvme_path
     * (zc__place_nvme_path); without one, each block uses its own. */
    int n = add_store(cfg, "offload_optimizer", zc__place_nvme_path(cfg, false),
                      popt > 0 ? (uint64_t)popt : 0, STORE_OPT, obuf, sizeof obuf, sd, 0);
    n = add_store(cfg, "offload_param", zc__place_nvme_path(cfg, true),
                  (uint64_t)est->param_nvme, STORE_PARAM, pbuf, sizeof pbuf, sd, n);
    /* The activation store's (its section's nvme_path, else the blocks'). */
    n = add_store(cfg, "activation_checkpointing", zc__act_nvme_path(cfg),
                  (uint64_t)est->act_nvme, STORE_ACT, abuf, sizeof abuf, sd, n);
    const int64_t fake = zc__machine_nvme_free_set();
    struct stat st[48];
    bool ok[48];
    for (int i = 0; i < n; i++)
        ok[i] = stat(sd[i].dir, &st[i]) == 0;
    for (int i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        uint64_t need[STORES] = {0, 0, 0};
        bool first = true;
        for (int j = 0; j < n; j++) {
            if (!ok[j] || st[j].st_dev != st[i].st_dev)
                continue;
            first = first && j >= i;
            need[sd[j].store] += sd[j].need;
        }
        if (!first)
            continue; /* this filesystem was checked at its first directory */
        uint64_t avail = 0;
        if (fake >= 0) {
            avail = (uint64_t)fake;
        } else {
            struct statvfs vf;
            if (statvfs(sd[i].dir, &vf) != 0)
                continue;
            if (__builtin_mul_overflow((uint64_t)vf.f_bavail, (uint64_t)vf.f_frsize, &avail))
                avail = UINT64_MAX;
        }
        uint64_t total = 0;
        if (__builtin_add_overflow(need[0], need[1], &total) ||
            __builtin_add_overflow(total, need[2], &total))
            total = UINT64_MAX;
        if (total <= avail)
            continue;
        int big = STORE_OPT;
        for (int k = 1; k < STORES; k++)
            big = need[k] > need[big] ? k : big;
        static const char *const block[STORES] = {"zero_optimization.offload_optimizer",
                                                  "zero_optimization.offload_param",
                                                  "activation_checkpointing"};
        static const char *const what[STORES] = {
            "optimizer state (master, Adam m and v)",
            "the parameter shards' swap file (offload_param)",
            "the activation checkpoints' swap file (nvme_checkpointing)"};
        static const char *const cure[STORES] = {
            "lower offload_optimizer.ratio (stage 3)", "raise offload_param.max_in_cpu",
            "keep the checkpoints in pinned memory (cpu_checkpointing)"};
        return ZC_ERR(ZC_ERR_IO,
                      "zc_engine_build (rank %d, stage %d): %s.nvme_path '%s': the swap files "
                      "need %.1f MiB on its filesystem (optimizer %.1f MiB, parameters %.1f MiB, "
                      "activations %.1f MiB) but it has %.1f MiB free%s; the biggest consumer "
                      "is %s: free space, give nvme_path more directories (a list) or %s",
                      who->rank, who->stage, block[big], sd[i].dir, (double)total / 1048576.0,
                      (double)need[0] / 1048576.0, (double)need[1] / 1048576.0,
                      (double)need[2] / 1048576.0, (double)avail / 1048576.0,
                      fake >= 0 ? " (as set by a test)" : "", what[big], cure[big]);
    }
    return ZC_OK;
}

/* The biggest part of the plan in kind k (ties: the first part). */
static zc_est_part biggest_part(const zc_est *est, zc_mem_kind k, int64_t *bytes)
{
    zc_est_part best = ZC_EST_PARAMS;
    *bytes = -1;
    for (int p = 0; p < ZC_EST__PARTS; p++) {
        const int64_t v = zc__est_part_bytes(est, k, (zc_est_part)p);
        if (v > *bytes) {
            *bytes = v;
            best = (zc_est_part)p;
        }
    }
    return best;
}

/* The engine's device buffers against the device's free memory. Only a
 * device with memory of its own is asked (the host backend's buffers are
 * host memory, checked below); a test may set a capacity for any backend
 * (zc__preflight_device_free), which then applies to the buffers in the
 * engine's device memory kind. Activations and the application's own
 * buffers come on top of the plan, so a plan that only just fits is let
 * through: the check catches what cannot fit at all. */
static zc_status check_device(const zc_plan_who *who, zc_device *dev, const zc_est_in *in,
                              const zc_est *est)
{
    const zc_mem_kind dk = ZC_MEMKIND_DEVICE; /* the host device's stand-in too */
    const int64_t need = est->kind_total[dk];
    int64_t fake = zc__machine_device_free_set();
    size_t free_b = 0, total_b = 0;
    if (fake >= 0) {
        free_b = (size_t)fake;
    } else {
        if (dev->mem_kind != ZC_MEMKIND_DEVICE || !dev->ops->mem_info)
            return ZC_OK;
        if (dev->ops->mem_info(dev, &free_b, &total_b) != ZC_OK) {
            /* Not knowing the free memory is no reason to refuse: the
             * allocations report what they could not get. */
            ZC_LOGW("core", "zc_engine_build: cannot read the device's free memory (%s); "
                    "the memory plan is not checked against it", zc_last_error());
            zc__error_clear();
            return ZC_OK;
        }
        if (total_b == 0)
            return ZC_OK;
    }
    if (need <= 0 || (uint64_t)need <= (uint64_t)free_b)
        return ZC_OK;
    int64_t best = 0;
    const zc_est_part bp = biggest_part(est, dk, &best);
    return ZC_ERR(ZC_ERR_NO_MEMORY,
                  "zc_engine_build (rank %d, stage %d, %d chunks): the plan needs %.1f MiB of "
                  "device memory but the device has %.1f MiB free%s; the biggest consumer is %s "
                  "(%.1f MiB): change %s",
                  who->rank, who->stage, who->nchunks, (double)need / 1048576.0,
                  (double)free_b / 1048576.0, fake >= 0 ? " (as set by a test)" : "",
                  zc__est_part_name(bp), (double)best / 1048576.0,
                  zc__est_key(in, est, dk, bp));
}

/* Pageable and pinned host memory against MemAvailable and the cgroup. */
static zc_status check_host(const zc_plan_who *who, const zc_est_in *in, const zc_est *est)
{
    uint64_t host = 0;
    if (__builtin_add_overflow((uint64_t)est->kind_total[ZC_MEMKIND_HOST],
                               (uint64_t)est->kind_total[ZC_MEMKIND_PINNED], &host))
        host = UINT64_MAX;
    /* The host device's "device" memory is host memory too. */
    if (in->dev_kind == ZC_MEMKIND_HOST &&
        __builtin_add_overflow(host, (uint64_t)est->kind_total[ZC_MEMKIND_DEVICE], &host))
        host = UINT64_MAX;
    zc_host_mem_limits lim;
    zc__host_mem_limits_read(zc__machine_limits_root(), &lim);
    char what[256];
    snprintf(what, sizeof what, "zc_engine_build (rank %d, stage %d, %d chunks)", who->rank,
             who->stage, who->nchunks);
    if (zc__host_mem_check(&lim, host, false, what) == ZC_OK)
        return ZC_OK;
    int64_t best = -1;
    int bk = ZC_MEMKIND_HOST, bp = 0;
    const int last = in->dev_kind == ZC_MEMKIND_HOST ? ZC_MEMKIND_DEVICE : ZC_MEMKIND_PINNED;
    for (int k = ZC_MEMKIND_HOST; k <= last; k++)
        for (int p = 0; p < ZC_EST__PARTS; p++) {
            const int64_t v = zc__est_part_bytes(est, (zc_mem_kind)k, (zc_est_part)p);
            if (v > best) {
                best = v;
                bk = k;
                bp = p;
            }
        }
    zc__error_context("the plan needs %.1f MiB of host memory; the biggest consumer is %s in "
                      "%s memory (%.1f MiB): change %s",
                      (double)host / 1048576.0, zc__est_part_name((zc_est_part)bp),
                      kind_names[bk], (double)best / 1048576.0,
                      zc__est_key(in, est, (zc_mem_kind)bk, (zc_est_part)bp));
    return ZC_ERR_NO_MEMORY;
}

zc_status zc__plan_fits(const zc_plan_who *who, const zc_config *cfg, zc_device *dev,
                        const zc_est_in *in, const zc_est *est)
{
    ZC_CHECK(check_device(who, dev, in, est));
    ZC_CHECK(check_nvme(who, cfg, est));
    return check_host(who, in, est);
}
