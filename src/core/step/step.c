/* zc_step: the end of an accumulation window.
 *
 *   1. every gradient has been made ready, so every chunk is reduced;
 *   2. norm: sum-of-squares partials, one per (chunk, rank shard), in fp64;
 *      stage 0 computes all of them from its full reduced gradient, stages
 *      1-3 compute their own shard's and all-gather the rest (fp64). The
 *      total is summed in (chunk, rank) order on every rank in every stage,
 *      so the norm, the overflow decision and the clip factor carry the same
 *      bits everywhere (stages 0-3 stay bitwise identical);
 *   3. overflow (fp16; bf16 with check_grad_overflow) = the total is not
 *      finite. The partials are finite for finite inputs (fp32 values squared
 *      in fp64 cannot overflow), so this is the same decision as an inf/nan
 *      scan agreed by all-reduce MAX, and it is identical on every rank by
 *      construction;
 *   4. on overflow the loss scaler is updated and the step skipped
 *      (gradients dropped, no parameter, moment or scheduler change; global
 *      steps still count);
 *   5. grad_scale = (1 / (world * K) averaging, less what prescaling and
 *      the stage 0/1 window division already applied: zc__grad_avg) / (loss_scale * clip), clip = (norm + 1e-6) / max_norm when
 *      > 1 (DeepSpeed's ((scaled_norm / scale) + 1e-6) / clip with the
 *      unscaled norm), rounded once to float (with
 *      fp16.deepspeed_unscale_order, loss_scale is the scaler's value after
 *      this step's update, DeepSpeed's order); one fused Adam pass per
 *      segment of the shards this rank owns, in zeroc's arithmetic or, with
 *      optimizer.params.deepspeed_arithmetic, DeepSpeedCPUAdam's (its fp32
 *      coefficients from the beta powers in e->adam_ds, its FMAs:
 *      optim/adam.h); its outcome (and the gradient
 *      reset's) is agreed across ranks (zc__eng_agree): a failure on any
 *      rank breaks the engine on every rank, so a part-applied step is never
 *      run again; then the loss scaler advances;
 *   6. the stage publishes the updated working parameters.
 *
 * Communication of the norm partials (world * chunks fp64 values) is not
 * counted in the step's payload stats, which hold the model-sized
 * collectives only.
 *
 * Host waits: one on the engine's stream per step, for the norm partials
 * (norm_partials); an applied step adds the agreement on the optimizer's
 * outcome, whose wait covers only its own status exchange on the control
 * stream (agree.c), not the optimizer pass queued before it. */
#include <math.h>
#include <string.h>

#include "base/checked.h"
#include "config/scheduler.h"
#include "core/engine.h"
#include "optim/adam_pace.h"

/* Shard rank r's shard of chunk c's reduced gradient, if this rank holds it. */
static bool grad_shard(const zc_engine *e, const zc_chunk *c, int r, const void **ptr,
                       zc_dtype *dt)
{
    if (e->pol->sharded_grads) {
        if (r != e->srank)
            return false;
        *ptr = c->acc;
        *dt = ZC_DTYPE_F32;
        return true;
    }
    if (!e->pol->full_optimizer && r != e->srank)
        return false; /* stage 1: only our slice of the reduce-scatter */
    if (c->rgrad) {
        *ptr = c->rgrad; /* MiCS: reduced across the replicas too, in fp32 */
        *dt = ZC_DTYPE_F32;
        return true;
    }
    *ptr = zc__elem(c->grad, (int64_t)r * c->shard, e->pesz);
    *dt = e->pdt;
    return true;
}

/* Computes the (chunk, rank) partials and returns their sum, chunk-major.
 *
 * Every partial is computed on the engine's stream into device memory
 * (sumsq_async, one scratch sized for the largest shard, reused in stream
 * order), all of them come back in one copy, and this is the step's one host
 * wait: the host needs the total to decide overflow and the clip factor
 * before it queues Adam. Stage 0 holds every shard's gradient and writes its
 * partials straight into part_recv as [k * W + r]; stages 1-3 write their own
 * into part_send[k] and all-gather them as [r * N + k]. Either way the sum
 * runs in (chunk, rank) order, so stages 0-3 give the same bits. */
static zc_status norm_partials(zc_engine *e, double *total)
{
    zc_device *d = e->dev;
    /* Over the shard group: every replica holds the same shards (MiCS), so
     * each computes the same total. */
    const int W = e->sworld, N = e->nchunks;
    const bool full = e->pol->full_optimizer;
    for (int k = 0; k < N; k++) {
        const int r0 = full ? 0 : e->srank, r1 = full ? W : e->srank + 1;
        for (int r = r0; r < r1; r++) {
            const void *g = NULL;
            zc_dtype dt = e->pdt;
            grad_shard(e, &e->chunks[k], r, &g, &dt);
            double *out = full ? &e->part_recv[k * W + r] : &e->part_send[k];
            const zc_chunk *c = &e->chunks[k];
            if (c->acc_swap || c->acc_host) {
                /* A swapped shard was summed when its last slice was added;
                 * a cpu-offloaded one is host memory and the host sums it
                 * (the same blocked fp64 sum, so the same bits). The value
                 * joins the device partials. */
                double v = c->acc_sumsq;
                if (c->acc_host) {
                    /* Its last slice may still be landing (cpu offload on a
                     * device): this chunk's copy alone is waited for, so
                     * the next chunks' copies overlap this sum. */
                    ZC_CHECK(zc__opt_copy_settle(e, k));
                    zc_device *h = zc__device_host();
                    ZC_CHECK(h->ops->sumsq(h, g, dt, (size_t)c->shard, &v, NULL));
                }
                ZC_CHECK(d->ops->copy(d, out, &v, sizeof v, ZC_COPY_H2D, e->stream));
                continue;
            }
            ZC_CHECK(d->ops->sumsq_async(d, g, dt, (size_t)e->chunks[k].shard, e->norm_scratch,
                                         out, e->stream));
        }
    }
    if (!full)
        ZC_CHECK(zc__eng_grp_all_gather(e, ZC_GRP_SHARD, e->part_send, e->part_recv, (size_t)N,
                                        ZC_DTYPE_F64, false, e->stream));
    double *all = e->partials;
    ZC_CHECK(d->ops->copy(d, all, e->part_recv, (size_t)N * (size_t)W * sizeof(double),
                          ZC_COPY_D2H, e->stream));
    ZC_CHECK(d->ops->stream_sync(d, e->stream));
    double s = 0.0;
    for (int k = 0; k < N; k++)
        for (int r = 0; r < W; r++)
            s += full ? all[k * W + r] : all[r * N + k];
    *total = s;
    return ZC_OK;
}

/* One fused Adam pass over the segments of every shard this rank updates,
 * chunk by chunk through the chunk's optimizer home (opt_state.c): fetch the
 * state (and the staged gradient), run Adam on each segment, put the output
 * and the state back. The segments and the kernel are the same whatever the
 * home, so the home changes where the bytes are, never the result. */
/* Elements per Adam call on a home whose I/O moves along between calls (the
 * NVMe home's progress): 1 MiB of each fp32 tensor, short enough that the
 * NVMe queue is refilled long before it drains, long enough that the call
 * overhead stays small. A multiple of 64, so every piece keeps its segment's
 * alignment. Every other home (the device, pinned host memory) takes a
 * segment in one call: one kernel launch (or one fork/join of the host
 * pool) per segment, never one per piece. Adam is elementwise, so where a
 * segment is cut changes no bit of the result. */
#define ADAM_PIECE ((int64_t)1 << 18)

/* The elements of one Adam call for chunk k's home. */
static int64_t adam_piece(const zc_engine *e, int k)
{
    const zc_opt_home *h = e->homes[e->chunks[k].home];
    return h->ops->progress ? ADAM_PIECE : INT64_MAX;
}

int64_t zc__step_adam_calls(const zc_engine *e)
{
    int64_t calls = 0;
    const bool full_opt = e->pol->full_optimizer;
    for (int k = 0; k < e->nchunks; k++) {
        const zc_chunk *c = &e->chunks[k];
        const int64_t piece = adam_piece(e, k);
        const int r0 = full_opt ? 0 : e->srank, r1 = full_opt ? e->sworld : e->srank + 1;
        for (int r = r0; r < r1; r++)
            for (int si = c->seg_begin[r]; si < c->seg_begin[r + 1]; si++)
                calls += piece == INT64_MAX ? 1 : (c->segs[si].n + piece - 1) / piece;
    }
    return calls;
}

/* Elements [x, x + len) of chunk c through Adam over 16-bit state
 * (optim/adam.h): each tensor in its dtype, the random bits of the
 * stochastic rounding keyed by the element's flat index in the model, so the
 * stage, the world and the chunking change no bit. pace: the host Adam paced
 * to the home's I/O (NULL: the device's op). */
static zc_status adam_lp_piece(zc_engine *e, const zc_opt_chunk *oc, const zc_chunk *c,
                               int64_t x, int64_t len, const zc_adam_coeffs *co,
                               float grad_scale, zc_adam_pace *pace, bool io)
{
    const int64_t at = x - oc->opt_base;
    zc_adam_lp_shard s = {
        .master = zc__elem(oc->master, at, zc_dtype_size(e->sdt.master)),
        .m = zc__elem(oc->m, at, zc_dtype_size(e->sdt.m)),
        .v = zc__elem(oc->v, at, zc_dtype_size(e->sdt.v)),
        .master_dtype = e->sdt.master,
        .m_dtype = e->sdt.m,
        .v_dtype = e->sdt.v,
        .grad = oc->grad + (size_t)(x - oc->grad_base) * zc_dtype_size(oc->grad_dtype),
        .grad_dtype = oc->grad_dtype,
        .grad_scale = grad_scale,
        .param_out = oc->pout + (size_t)(x - oc->pout_base) * e->pesz,
        .param_out_dtype = e->pdt,
        .n = (size_t)len,
        .index0 = (uint64_t)(c->gbase + x),
        .seed = e->sround_seed,
        .step = e->adam_steps + 1,
        .stochastic = e->sround,
    };
    if (pace)
        return zc__adam_pace_run_lp(pace, &s, co, io);
    return oc->dev->ops->adam_lp(oc->dev, &s, co, e->stream);
}

/* Chunk k's Adam through its home. On a home that moves its I/O along
 * between pieces the host Adam runs on the threads `pace` gives
 * (optim/adam_pace.h: while I/O is in flight, no more cores than keep it
 * ahead of that I/O); the thread count changes no bit of the result. */
static zc_status adam_chunk(zc_engine *e, int k, const zc_adam_coeffs *coeffs, float grad_scale,
                            zc_adam_pace *pace)
{
    zc_chunk *c = &e->chunks[k];
    const int64_t t0 = zc__tl_begin();
    zc_opt_chunk oc;
    ZC_CHECK(zc__opt_fetch(e, k, &oc));
    const bool full_opt = e->pol->full_optimizer;
    const int r0 = full_opt ? 0 : e->srank, r1 = full_opt ? e->sworld : e->srank + 1;
    const size_t gesz = zc_dtype_size(oc.grad_dtype);
    const int64_t piece = adam_piece(e, k);
    const bool paced = piece != INT64_MAX && oc.dev == zc__device_host();
    for (int r = r0; r < r1; r++) {
        for (int si = c->seg_begin[r]; si < c->seg_begin[r + 1]; si++) {
            const zc_seg *sg = &c->segs[si];
            /* Pieces from the segment's start (the whole segment unless the
             * home moves its I/O along between them). */
            const int64_t end = sg->start + sg->n;
            for (int64_t x = sg->start, len; x < end; x += len) {
                len = end - x < piece ? end - x : piece;
                const bool io = zc__opt_progress(e, k);
                if (e->state_lp) {
                    ZC_CHECK(adam_lp_piece(e, &oc, c, x, len, &coeffs[sg->group], grad_scale,
                                           paced ? pace : NULL, io));
                    continue;
                }
                zc_adam_shard s = {
                    .master = (float *)oc.master + (x - oc.opt_base),
                    .m = (float *)oc.m + (x - oc.opt_base),
                    .v = (float *)oc.v + (x - oc.opt_base),
                    .grad = oc.grad + (size_t)(x - oc.grad_base) * gesz,
                    .grad_dtype = oc.grad_dtype,
                    .grad_scale = grad_scale,
                    .param_out = oc.pout + (size_t)(x - oc.pout_base) * e->pesz,
                    .param_out_dtype = e->pdt,
                    .n = (size_t)len,
                };
                /* The I/O moved along before the piece, and whether any
                 * is in flight decides its threads. */
                if (paced)
                    ZC_CHECK(zc__adam_pace_run(pace, &s, &coeffs[sg->group], io));
                else
                    ZC_CHECK(oc.dev->ops->adam(oc.dev, &s, &coeffs[sg->group], e->stream));
            }
        }
    }
    const zc_status rc = zc__opt_put(e, k, &oc);
    zc__tl_span(t0, ZC_TLK_SPAN, "adam chunk", k, c->shard);
    return rc;
}

/* ds: DeepSpeed's beta powers for this step (already advanced to it), read
 * under optimizer.params.deepspeed_arithmetic only. */
static zc_status run_adam(zc_engine *e, float grad_scale, double lr, double beta1, double beta2,
                          const zc_adam_ds_state *ds)
{
    const zc_config *cfg = e->cfg;
    zc_adam_coeffs coeffs[e->ngroups];
    for (int g = 0; g < e->ngroups; g++) {
        zc_adam_hparams hp = {
            .lr = lr * e->groups[g].lr_scale,
            .beta1 = beta1,
            .beta2 = beta2,
            .eps = cfg->optimizer.eps,
            .weight_decay = e->groups[g].weight_decay,
            .adamw = cfg->optimizer.adam_w_mode || cfg->optimizer.adamw_type,
            .bias_correction = cfg->optimizer.bias_correction,
        };
        coeffs[g] = cfg->optimizer.deepspeed_arithmetic ? zc__adam_coeffs_ds(ds, &hp)
                                                        : zc__adam_coeffs(&hp, e->adam_steps + 1);
    }
    /* Reads and gathers made ahead for chunks nothing holds are dropped
     * first: the update changes those shards (and an nvme parameter home
     * needs its buffers for the writes). */
    if (e->pol->quiesce)
        e->pol->quiesce(e);
    /* The pace's clock starts with the pass: its first reads are part of
     * the I/O Adam hides behind. */
    zc_adam_pace pace;
    zc_status rc = zc__adam_pace_begin(&pace); /* ZC_CPU_THREADS, checked at create */
    if (rc == ZC_OK)
        rc = zc__opt_pass_begin(e);
    for (int k = 0; rc == ZC_OK && k < e->nchunks; k++) {
        rc = adam_chunk(e, k, coeffs, grad_scale, &pace);
    }
    if (pace.calls > 0)
        ZC_LOGD("optim",
                "optimizer pass through swap files: Adam %.3f s on %.2f threads on average "
                "(%lld of %lld pieces on fewer than %d)",
                pace.adam_s, zc__adam_pace_mean_threads(&pace), (long long)pace.calls_below,
                (long long)pace.calls, pace.max_threads);
    /* Always ends the pass: it drains the I/O still in flight, the
     * optimizer's and the parameter shards' written home. */
    zc_status erc = zc__opt_pass_end(e);
    /* wall_clock_breakdown: the pass's waits for NVMe, by the nvme home's
     * own clock (reset at each pass), leave the optimizer phase. */
    const zc_opt_home *off = zc__opt_offload_home(e);
    if (e->timers.on && off && !strcmp(off->ops->name, "nvme")) {
        zc_opt_nvme_info ni;
        zc__opt_home_nvme_info(off, &ni);
        zc__timers_move(&e->timers, ZC_TIMER_OPTIMIZER, ZC_TIMER_IO_WAIT,
                        ni.read_wait_s + ni.write_wait_s);
    }
    zc_status frc = zc__param_flush(e);
    return rc != ZC_OK ? rc : erc != ZC_OK ? erc : frc;
}

static void snapshot_stats(zc_engine *e)
{
    for (int k = 0; k < ZC_COLL__COUNT; k++) {
        e->comm_last[k] = e->comm_cur[k];
        e->comm_cur[k] = 0;
    }
    for (int l = 0; l < ZC_LINK__COUNT; l++) {
        e->link_last[l] = e->link_cur[l];
        e->link_cur[l] = 0;
    }
    e->gathers_last = e->gathers_cur;
    e->gathers_cur = 0;
    for (int k = 0; k < e->nchunks; k++) {
        e->chunks[k].gathers_last = e->chunks[k].gathers_cur;
        e->chunks[k].gathers_cur = 0;
    }
    e->live_peak_last = e->live_peak_cur;
    e->live_peak_cur = e->live_elems;
    /* Offload figures: the homes count from build, the step is the
     * difference since the last snapshot. */
    zc_param_home_io io;
    zc__param_io(e, &io);
    e->pread_last = io.read_bytes - e->pio_mark.read_bytes;
    e->pwrite_last = io.write_bytes - e->pio_mark.write_bytes;
    e->preads_last = io.reads - e->pio_mark.reads;
    e->pio_mark = io;
    for (int k = 0; k < e->nchunks; k++) {
        e->chunks[k].reads_last = e->chunks[k].reads_cur;
        e->chunks[k].reads_cur = 0;
    }
    zc_opt_nvme_info oi;
    zc__opt_home_nvme_info(zc__opt_offload_home(e), &oi);
    e->oread_last = oi.read_bytes - e->oread_mark;
    e->owrite_last = oi.write_bytes - e->owrite_mark;
    e->oread_mark = oi.read_bytes;
    e->owrite_mark = oi.write_bytes;
    e->off_last = e->off_cur;
    e->off_cur = (struct zc_offload_step){0};
}

/* The unscale and clip factor for optimizer.params.deepspeed_arithmetic: as
 * DeepSpeed computes it at the same stage (zeroc's grad_scale is the
 * factor DeepSpeed multiplies its averaged gradient by; avg, the averaging
 * its reduction applied before, is a power of two for power-of-two worlds
 * and accumulations, so the product with it rounds nothing more).
 *   stages 1-2: DeepSpeedZeroOptimizer (stage_1_and_2.py get_grad_norm_direct
 *     2684-2697 sums the squares in fp64 and rounds the sum to fp32 before
 *     the square root; unscale_and_clip_grads 3198-3216 works on that fp32
 *     0-d tensor): clip = max(1, (norm / scale + 1e-6) / max_norm),
 *     combined = clip * scale, the gradient times 1 / combined, all fp32;
 *   stage 3: DeepSpeedZeroOptimizer_Stage3 keeps the norm in fp64
 *     (get_norm_dtype, stage3.py 2457-2476) and clips in fp64 (2981-2988),
 *     multiplying by 1 / combined rounded to fp32: zeroc's own formula;
 *   stage 0, fp32: the engine's clip_grad_norm_ (runtime/utils.py 422-427):
 *     the gradient times min(1, max_norm / (norm + 1e-6)), fp32;
 *   stage 0, fp16/bf16: DeepSpeed runs FP16_Optimizer there (D2/D4, not
 *     copied); zeroc's stage 0 is its stages 1-3, so its own formula.
 * The norm is zeroc's (fp64 partials); rounded to fp32 as DeepSpeed's
 * stage 1-2 norm is, it comes within an fp32 ulp of DeepSpeed's fp32 sum of
 * the same squares. Returns false where the default formula is DeepSpeed's. */
static bool ds_grad_scale(const zc_engine *e, double sumsq, double avg, double scale,
                          double max_norm, float *out)
{
    const float ls = (float)scale, mx = (float)max_norm;
    if (e->stage == 1 || e->stage == 2) {
        const float norm = sqrtf((float)(sumsq * avg * avg));
        float combined = ls;
        if (max_norm > 0) {
            float clip = (norm / ls + 1e-6f) / mx;
            if (!(clip >= 1.0f)) /* torch.clamp(clip, min=1.0) */
                clip = 1.0f;
            combined = clip * ls;
        }
        *out = (float)(avg * (double)(1.0f / combined));
        return true;
    }
    if (e->stage == 0 && e->pdt == ZC_DTYPE_F32) {
        float coef = 1.0f;
        if (max_norm > 0) {
            const float norm = (float)(sqrt(sumsq) * avg);
            const float c = mx / (norm + 1e-6f);
            coef = c < 1.0f ? c : 1.0f; /* torch.min(1.0, clip_coef) */
        }
        *out = (float)(avg * (double)coef);
        return true;
    }
    return false;
}

/* zc_step's work; the public call times it and prints the progress line. */
static zc_status step_window(zc_engine *e, zc_step_info *info)
{
    if (e->micro != e->gas - 1)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_step: this is micro-step %lld of the window but "
                      "gradient_accumulation_steps is %lld; end the earlier micro-steps with "
                      "zc_micro_step_end",
                      (long long)e->micro, (long long)e->gas);
    const zc_param *miss = zc__grads_first_missing(e);
    if (miss)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_step: the gradient of parameter '%s' is missing in micro-step %lld "
                      "(%d of %d parameters are ready); call zc_grad_ready for it first",
                      miss->name, (long long)e->micro, e->nready, e->nparams);
    /* The counters the step advances, checked before anything changes (the
     * same on every rank: they move together and a load sets them alike). A
     * checkpoint with larger counters does not load (ckpt/manifest.c). */
    if (e->steps >= ZC_STEPS_MAX || e->scaler.cur_iter >= ZC_STEPS_MAX)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_step: the step counter is at its limit (step %lld, loss scaler "
                      "iteration %lld; at most %lld): nothing was changed",
                      (long long)e->steps, (long long)e->scaler.cur_iter,
                      (long long)ZC_STEPS_MAX);
    /* Before anything of the step: a late write fails it unchanged. */
    ZC_CHECK(zc__debug_check(e, "zc_step"));
    /* Parameter shards loaded since the last acquire go home, agreed. */
    ZC_CHECK(zc__param_loads_agree(e));

    const zc_config *cfg = e->cfg;
    double sumsq = 0.0;
    /* With overlap_comm the last reductions may still run on comm_stream:
     * the norm, Adam and the reset read or clear what they wrote. */
    ZC_CHECK(zc__order_engine_after_reductions(e));
    const int64_t tn = zc__tl_begin();
    ZC_CHECK(norm_partials(e, &sumsq));
    zc__tl_span(tn, ZC_TLK_SPAN, "norm", -1, e->nchunks);
    const double ls = e->scaler.scale;
    const double avg = zc__grad_avg(e);
    const bool finite = isfinite(sumsq);
    const double norm = finite ? sqrt(sumsq) * avg / ls : -1.0;
    const bool overflow = e->check_overflow && !finite;

    double beta1 = cfg->optimizer.beta1, beta2 = cfg->optimizer.beta2;
    const double lr = zc__sched_lr(&cfg->scheduler, cfg->optimizer.lr, cfg->optimizer.beta1,
                                   cfg->optimizer.beta2, e->adam_steps, &beta1, &beta2);
    if (info)
        *info = (zc_step_info){.step = e->steps, .skipped = overflow, .grad_norm = norm,
                               .loss_scale = ls, .lr = lr};

    if (overflow) {
        /* Identical on every rank (the norm carries the same bits), so the
         * scaler decides the same everywhere, and nothing else has changed
         * yet when it refuses. */
        zc_status rc = zc__scaler_update(&e->scaler, true);
        if (rc != ZC_OK) {
            /* Overflow at the minimum scale: drop the window's gradients so
             * the engine stays usable, change nothing else, and report. */
            if (zc__grads_reset(e) == ZC_OK)
                (void)e->pol->publish(e, false);
            snapshot_stats(e);
            zc__error_context("zc_step");
            return rc;
        }
        ZC_LOGI("core", "step %lld: gradient overflow, step skipped (loss scale %g -> %g)",
                (long long)e->steps, ls, e->scaler.scale);
        if (!zc__count_step(&e->skipped))
            return ZC_ERR(ZC_ERR_INTERNAL, "zc_step: skipped-step counter overflow");
    } else {
        /* The scaler as it will be after this step. zeroc unscales with the
         * scale the gradients were computed with (ls); DeepSpeed updates the
         * scaler first and unscales and clips with its new scale, which on a
         * growth step is 2 * ls (stage_1_and_2.py / stage3.py step(): the
         * _update_scale call precedes unscale_and_clip_grads). With
         * fp16.deepspeed_unscale_order that order is reproduced for runs that
         * must match DeepSpeed's bit for bit; the reported norm stays the
         * gradient's (DeepSpeed's too: scaled norm / the previous scale). The
         * copy is committed only once the update is agreed, so a failed step
         * still moves nothing. */
        zc_loss_scaler next = e->scaler;
        ZC_CHECK(zc__scaler_update(&next, false)); /* cannot fail without overflow */
        const double uls = cfg->fp16.deepspeed_unscale_order ? next.scale : ls;
        const double unorm = sqrt(sumsq) * avg / uls;
        double clip = 1.0;
        if (cfg->gradient_clipping > 0 && finite) {
            double c = (unorm + 1e-6) / cfg->gradient_clipping;
            if (c > 1.0)
                clip = c;
        }
        float grad_scale;
        if (!cfg->optimizer.deepspeed_arithmetic ||
            !ds_grad_scale(e, sumsq, avg, uls, cfg->gradient_clipping, &grad_scale))
            grad_scale = (float)(avg / (uls * clip));
        /* With fp16.deepspeed_unscale_order the norm is reported as
         * DeepSpeed reports it on a growth step: divided by the new scale at
         * stages 0 and 3 (stage3.py step() line 2897 and fused_optimizer.py
         * 340 divide after _update_scale), by the previous one at stages 1-2
         * (stage_1_and_2.py 3071: prev_scale). Elsewhere it is the gradient's. */
        if (info && cfg->fp16.deepspeed_unscale_order && (e->stage == 0 || e->stage == 3))
            info->grad_norm = sqrt(sumsq) * avg / next.scale;
        /* DeepSpeed's beta powers advanced to this step (IncrementStep), kept
         * only once the step is agreed, like the scaler. */
        zc_adam_ds_state ds = e->adam_ds;
        if (cfg->optimizer.deepspeed_arithmetic)
            zc__adam_ds_increment(&ds, e->adam_steps + 1, beta1, beta2);
        /* The first state change: Adam writes master, moments and params
         * shard by shard, so a failure part-way leaves some updated. Nothing
         * may then run the step again (it would apply the update twice),
         * and the other ranks, whose Adam worked, must not go on into the
         * publish collectives alone: the outcome is agreed first, and any
         * failure breaks the engine on every rank with one message. The
         * gradient reset is rank-local work of the same kind, so it is
         * agreed together with Adam. The scaler and the counters advance
         * only after that, so a failed step never moves them. */
        const int64_t ta = zc__tl_begin();
        zc_status rc = run_adam(e, grad_scale, lr, beta1, beta2, &ds);
        zc__tl_span(ta, ZC_TLK_SPAN, "optimizer pass", -1, e->nchunks);
        if (rc == ZC_OK)
            rc = zc__grads_reset(e);
        ZC_CHECK(zc__eng_agree(e, rc, "zc_step: the optimizer update"));
        e->scaler = next;
        e->adam_ds = ds;
        if (!zc__count_step(&e->adam_steps))
            return ZC_ERR(ZC_ERR_INTERNAL, "zc_step: optimizer-step counter overflow");
        ZC_LOGD("core", "step %lld: norm %g clip %g lr %g", (long long)e->steps, norm, clip, lr);
    }
    if (!zc__count_step(&e->steps))
        return ZC_ERR(ZC_ERR_INTERNAL, "zc_step: step counter overflow");
    if (overflow)
        ZC_CHECK(zc__grads_reset(e));
    /* Stage 0's publish does nothing: no gather phase to charge. */
    const double waited = zc__param_wait_begin(e);
    if (e->stage > 0)
        zc__timers_push(&e->timers, ZC_TIMER_GATHER);
    const int64_t tp = e->stage > 0 ? zc__tl_begin() : 0;
    const zc_status prc = e->pol->publish(e, !overflow);
    zc__tl_span(tp, ZC_TLK_SPAN, "publish", -1, e->nchunks);
    if (e->stage > 0)
        zc__timers_pop(&e->timers);
    zc__param_wait_end(e, waited);
    ZC_CHECK(prc);
    /* fp32 views of blocks held across the step show the update. */
    if (!overflow)
        ZC_CHECK(zc__view_refresh(e));
    snapshot_stats(e);
    if (info)
        info->step = e->steps;
    return ZC_OK;
}

/* ---- the norm partials' buffers (at build) ------------------------------- */

/* Buffers for the fp64 norm partials: every stage sums the same
 * (chunk, rank) partials in the same order (norm_partials above). Sized for
 * the layout check too (3 values per rank). */
static size_t partial_count(const zc_engine *e)
{
    return (size_t)(e->nchunks > 3 ? e->nchunks : 3);
}

/* Doubles of sumsq_async scratch for the largest shard the norm reads (every
 * shard of a chunk has the same length): one scratch serves every partial,
 * reused in the engine's stream order. */
static size_t scratch_elems(const zc_engine *e)
{
    size_t m = 1;
    for (int k = 0; k < e->nchunks; k++) {
        size_t b = zc__sumsq_scratch_elems((size_t)e->chunks[k].shard);
        if (b > m)
            m = b;
    }
    return m;
}

zc_status zc__partials_alloc(zc_engine *e)
{
    size_t n = partial_count(e);
    void *mem = NULL;
    e->norm_scratch_elems = scratch_elems(e);
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, e->norm_scratch_elems * sizeof(double),
                           "norm scratch", &mem));
    e->norm_scratch = mem;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * (size_t)e->world * sizeof(double),
                            "norm partials", &mem));
    e->partials = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, n * sizeof(double), "norm partials (send)", &mem));
    e->part_send = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, n * (size_t)e->world * sizeof(double),
                           "norm partials (recv)", &mem));
    e->part_recv = mem;
    return ZC_OK;
}

void zc__partials_free(zc_engine *e)
{
    size_t n = partial_count(e);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->partials, n * (size_t)e->world * sizeof(double));
    e->partials = NULL;
    void *p = e->part_send;
    zc__eng_free(e, ZC_MEM_OTHER, &p, n * sizeof(double));
    p = e->part_recv;
    zc__eng_free(e, ZC_MEM_OTHER, &p, n * (size_t)e->world * sizeof(double));
    e->part_send = e->part_recv = NULL;
    p = e->norm_scratch;
    zc__eng_free(e, ZC_MEM_OTHER, &p, e->norm_scratch_elems * sizeof(double));
    e->norm_scratch = NULL;
    e->norm_scratch_elems = 0;
}

ZC_API zc_status zc_step(zc_engine *e, zc_step_info *info)
{
    ZC_CHECK(zc__eng_enter(e, "zc_step", true));
    ZC_CHECK(zc__pass_train_only(e, "zc_step"));
    zc_step_info local, *out = info ? info : &local;
    const int64_t before = e->steps;
    zc__timers_push(&e->timers, ZC_TIMER_OPTIMIZER);
    const zc_status rc = step_window(e, out);
    zc__timers_pop(&e->timers);
    /* A refused call (a missing gradient) leaves the window open; a step
     * taken, applied or skipped, closes it. */
    if (e->steps != before) {
        zc__timers_end(&e->timers, e->steps, (int)e->gas, out->skipped);
        zc__timeline_step_end(e); /* the window's end or beginning */
    }
    if (rc != ZC_OK)
        return rc;
    zc__progress_step(e, out->lr);
    return ZC_OK;
}
