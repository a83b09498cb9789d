/* DeepSpeed-style progress lines: every steps_per_print optimizer steps, one
 * INFO line through the log sink, so a long run says how it is going without
 * the application printing anything:
 *
 *   step=20, skipped=1, lr=0.001, loss_scale=32768, samples/s=412.3,
 *   MemAllocated device=1.2GiB pinned=0B host=3.4MiB nvme=0B,
 *   MaxMemAllocated device=1.3GiB pinned=0B host=3.4MiB nvme=0B,
 *   comm_bytes_per_step_by_link intra_node=1.5MiB inter_node=3.0MiB
 *
 * samples/s counts every rank's samples (micro batch x accumulation x world)
 * over the wall time since the previous line (or the build). Memory is this
 * rank's, from the engine's account: what the library allocated, not what
 * the process holds; the bytes are what this rank sent in the last step's
 * collectives, to ranks on its node and on others (zc_stats). With
 * wall_clock_breakdown the line ends with the mean
 * of each timer (timers.h) over the steps since the previous line:
 *
 *   ..., time (ms, mean of 20 steps): forward=1.203 backward=2.410
 *   reduce=0.311 gather=0.000 optimizer=0.502 io_wait=0.000 step=4.426
 *
 * When the program stated its work per step (zc_engine_set_workload), the
 * throughput follows samples/s: tokens/s over every rank, and with FLOPs
 * the achieved TFLOP/s of one rank (the step's FLOPs over the ranks) and
 * MFU = that / the peak (stated, or on the host path the estimate of
 * zc_host_peak_flops; none on a device without a stated peak):
 *
 *   ..., samples/s=412.3, tokens/s=52774.4, TFLOP/s=0.041 per rank,
 *   MFU=13.9% of 0.294 TFLOP/s, MemAllocated ... */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "core/engine.h"

/* Remembers the timer sums at a line, so the next one prints the means
 * over the steps in between. */
static void mark_timers(zc_engine *e)
{
    for (int i = 0; i < ZC_TIMER__COUNT; i++)
        e->prog_tsum0[i] = e->timers.sum[i];
    e->prog_ttotal0 = e->timers.sum_total;
    e->prog_timed0 = e->timers.timed;
}

void zc__progress_start(zc_engine *e)
{
    e->prog_t0 = zc__now_s();
    e->prog_steps0 = e->steps;
    mark_timers(e);
}

/* ", time (ms, mean of N steps): forward=.. ... step=.." with
 * wall_clock_breakdown, else nothing. */
static void timer_text(const zc_engine *e, char *buf, size_t cap)
{
    buf[0] = '\0';
    const int64_t n = e->timers.timed - e->prog_timed0;
    if (!e->timers.report || n <= 0)
        return;
    size_t off = 0;
    int w = snprintf(buf, cap, ", time (ms, mean of %lld steps):", (long long)n);
    for (int i = 0; i <= ZC_TIMER__COUNT && w >= 0 && (size_t)w < cap - off; i++) {
        off += (size_t)w;
        const double s = i < ZC_TIMER__COUNT ? e->timers.sum[i] - e->prog_tsum0[i]
                                             : e->timers.sum_total - e->prog_ttotal0;
        w = snprintf(buf + off, cap - off, " %s=%.3f",
                     i < ZC_TIMER__COUNT ? zc_timer_name((zc_timer_phase)i) : "step",
                     1e3 * s / (double)n);
    }
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

/* ", tokens/s=.., TFLOP/s=.. per rank, MFU=..% of .. TFLOP/s" over `steps`
 * steps in dt seconds, from what the program stated; else nothing. */
static void throughput_text(const zc_engine *e, double steps, double dt, char *buf, size_t cap)
{
    buf[0] = '\0';
    const zc_workload *w = &e->workload;
    if (!(dt > 0) || !(steps > 0))
        return;
    size_t off = 0;
    int n = 0;
    if (w->tokens_per_step > 0)
        n = snprintf(buf, cap, ", tokens/s=%.1f", steps * w->tokens_per_step / dt);
    if (n > 0)
        off += (size_t)n;
    if (w->flops_per_step > 0 && off < cap) {
        const double per_rank = steps * w->flops_per_step / (double)e->world / dt;
        n = snprintf(buf + off, cap - off, ", TFLOP/s=%.3f per rank", per_rank / 1e12);
        if (n > 0)
            off += (size_t)n;
        if (e->peak_flops > 0 && off < cap)
            snprintf(buf + off, cap - off, ", MFU=%.1f%% of %.3f TFLOP/s",
                     100.0 * per_rank / e->peak_flops, e->peak_flops / 1e12);
    }
}

ZC_API zc_status zc_engine_set_workload(zc_engine *e, const zc_workload *w)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_set_workload", false));
    if (!w || w->size < sizeof(zc_workload))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_set_workload: %s",
                      !w ? "w is NULL" : "w->size is smaller than sizeof(zc_workload)");
    const struct {
        const char *name;
        double v;
    } f[] = {{"tokens_per_step", w->tokens_per_step}, {"flops_per_step", w->flops_per_step},
             {"peak_flops", w->peak_flops}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].v) || f[i].v < 0)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_engine_set_workload: %s = %g; want a finite number >= 0", f[i].name,
                          f[i].v);
    e->workload = *w;
    e->workload.size = sizeof(zc_workload);
    e->peak_flops = w->peak_flops;
    snprintf(e->peak_how, sizeof e->peak_how, "%s", w->peak_flops > 0 ? "stated" : "none");
    if (!(w->peak_flops > 0) && e->dev->mem_kind != ZC_MEMKIND_DEVICE) {
        /* The host path: the machine's own estimate. */
        double p = 0;
        if (zc_host_peak_flops(&p, e->peak_how, sizeof e->peak_how) == ZC_OK)
            e->peak_flops = p;
        else
            zc__error_clear();
    }
    return ZC_OK;
}

void zc__progress_step(zc_engine *e, double lr)
{
    const int64_t every = e->cfg->steps_per_print;
    if (every <= 0 || e->steps % every)
        return;
    if (!zc__log_enabled(ZC_LOG_INFO))
        return;
    const double t = zc__now_s(), dt = t - e->prog_t0;
    const int64_t micro = e->cfg->train_micro_batch_size_per_gpu > 0
                              ? e->cfg->train_micro_batch_size_per_gpu : 1;
    const double samples =
        (double)(e->steps - e->prog_steps0) * (double)micro * (double)e->gas * (double)e->world;
    char cur[160], peak[160], tm[320], tput[160], intra[32], inter[32];
    fmt_bytes(intra, sizeof intra, e->link_last[ZC_LINK_INTRA_NODE]);
    fmt_bytes(inter, sizeof inter, e->link_last[ZC_LINK_INTER_NODE]);
    by_kind(cur, sizeof cur, e->acct.kind_total);
    by_kind(peak, sizeof peak, e->acct.kind_peak);
    timer_text(e, tm, sizeof tm);
    throughput_text(e, (double)(e->steps - e->prog_steps0), dt, tput, sizeof tput);
    ZC_LOGI("core", "step=%lld, skipped=%lld, lr=%g, loss_scale=%g, samples/s=%.1f%s, "
            "MemAllocated %s, MaxMemAllocated %s, comm_bytes_per_step_by_link intra_node=%s "
            "inter_node=%s%s",
            (long long)e->steps, (long long)e->skipped, lr, e->scaler.scale,
            dt > 0 ? samples / dt : 0.0, tput, cur, peak, intra, inter, tm);
    e->prog_t0 = t;
    e->prog_steps0 = e->steps;
    mark_timers(e);
}
