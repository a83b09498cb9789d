/* DeepSpeed-style progress lines: every steps_per_print optimizer steps, one
 * INFO line through the log sink, so a long run says how it is going without
 * the application printing anything:
 *
 *   step=20, skipped=1, lr=0.001, loss_scale=32768, samples/s=412.3,
 *   MemAllocated device=1.2GiB pinned=0B host=3.4MiB nvme=0B,
 *   MaxMemAllocated device=1.3GiB pinned=0B host=3.4MiB nvme=0B
 *
 * samples/s counts every rank's samples (micro batch x accumulation x world)
 * over the wall time since the previous line (or the build). Memory is this
 * rank's, from the engine's account: what the library allocated, not what
 * the process holds. */
#include <stdio.h>
#include <time.h>

#include "core/engine.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zc__progress_start(zc_engine *e)
{
    e->prog_t0 = now_s();
    e->prog_steps0 = e->steps;
}

static void fmt_bytes(char *buf, size_t cap, int64_t b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lldB", (long long)b);
    else
        snprintf(buf, cap, "%.1f%s", v, unit[u]);
}

/* "device=.. pinned=.. host=.. nvme=.." of one counter array. */
static void by_kind(char *buf, size_t cap, const _Atomic int64_t *v)
{
    static const zc_mem_kind order[] = {ZC_MEMKIND_DEVICE, ZC_MEMKIND_PINNED, ZC_MEMKIND_HOST,
                                        ZC_MEMKIND_NVME};
    static const char *const name[] = {"device", "pinned", "host", "nvme"};
    size_t off = 0;
    for (int i = 0; i < 4 && off < cap; i++) {
        char b[32];
        fmt_bytes(b, sizeof b, atomic_load(&v[order[i]]));
        int n = snprintf(buf + off, cap - off, "%s%s=%s", i ? " " : "", name[i], b);
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

void zc__progress_step(zc_engine *e, double lr)
{
    const int64_t every = e->cfg->steps_per_print;
    if (every <= 0 || e->steps % every)
        return;
    if (!zc__log_enabled(ZC_LOG_INFO))
        return;
    const double t = now_s(), dt = t - e->prog_t0;
    const int64_t micro = e->cfg->train_micro_batch_size_per_gpu > 0
                              ? e->cfg->train_micro_batch_size_per_gpu : 1;
    const double samples =
        (double)(e->steps - e->prog_steps0) * (double)micro * (double)e->gas * (double)e->world;
    char cur[160], peak[160];
    by_kind(cur, sizeof cur, e->acct.kind_total);
    by_kind(peak, sizeof peak, e->acct.kind_peak);
    ZC_LOGI("core", "step=%lld, skipped=%lld, lr=%g, loss_scale=%g, samples/s=%.1f, "
            "MemAllocated %s, MaxMemAllocated %s",
            (long long)e->steps, (long long)e->skipped, lr, e->scaler.scale,
            dt > 0 ? samples / dt : 0.0, cur, peak);
    e->prog_t0 = t;
    e->prog_steps0 = e->steps;
}
