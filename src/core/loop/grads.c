/* Gradients: the buffers the backward pass writes, the ready protocol, the
 * averaging factors and the accumulation window stages 0/1 share. The
 * reductions themselves are each stage's own, reached through the stage
 * policy: stage 0 all-reduces (stage0.c), stage 1 reduce-scatters the full
 * gradient at the window's end (src/zero1), stages 2/3 reduce-scatter a
 * transient buffer into the fp32 shard every micro-step (src/zero2).
 *
 * Averaging. Gradients are averaged over ranks and micro-steps exactly once:
 * the reductions sum (in fp32, in rank order), and the 1 / (world * K) factor
 * is folded into the single grad_scale the optimizer applies together with
 * 1 / loss_scale and 1 / clip (step.c) - except that stages 0/1 divide their
 * fp32 window sum by K before rounding it to the parameter dtype (see
 * zc__grads_full_window), so fp16 overflows on the same windows as stages
 * 2/3, and that with 16-bit accumulation the 1 / K is applied to every
 * micro-step (below). DeepSpeed's prescale_gradients and gradient_predivide_factor only
 * move part of that factor before the reduction (to keep fp16 sums in
 * range); zc__grad_prescale / zc__grad_postscale split it the way
 * DeepSpeed's allreduce_bucket does.
 *
 * The accumulation dtype. By default a window's micro-steps are summed in
 * fp32 (stages 0/1 in the full accumulator, stages 2/3 in the fp32 gradient
 * shard), which is exact for any number of micro-steps. DeepSpeed's default
 * (data_types.grad_accum_dtype unset) sums them in the model dtype, and
 * zeroc does the same when the key names the 16-bit working dtype
 * (e->acc_dt): every micro-step's gradient is multiplied by 1 / K in fp32
 * and rounded to the working dtype - what DeepSpeed's division of the loss
 * by K before backward hands its 16-bit gradients - and the running sum is
 * rounded to the working dtype after every add (accumulate_rounded: the
 * fp32 sum of the two 16-bit values rounded once, as torch adds into a
 * 16-bit tensor), kept in the same fp32 buffers, so nothing else is
 * allocated. Stages 0/1 round in the full accumulator before the window's
 * one reduction (DeepSpeed's ZeRO-1 sums the module's 16-bit .grad), stages
 * 2/3 round the shard after adding each micro-step's reduced slice (its
 * ZeRO-2/3 add each reduction into a 16-bit partition buffer) - in device
 * memory, in the cpu home's pinned shard and in the nvme home's gradient
 * buffer between its read-back and its write alike (zc__grad_acc_add). The
 * optimizer then leaves K out of its averaging at every stage.
 *
 * Collective order. A chunk is reduced once its last parameter is made ready,
 * in buckets of reduce_bucket_size elements (grad_bucket.c), so every rank
 * must complete chunks in the same order (the same backward pass), as with
 * DeepSpeed's gradient hooks and NCCL.
 *
 * Streams (streams.c). The caller writes gradients on its compute stream
 * (zc_engine_options.stream): zc_grad_buffer orders that stream after the
 * zero-fill, the chunk's last zc_grad_ready orders the engine's stream after
 * it. The work on the gradient before the collective (accumulation window,
 * prescale) runs on the engine's stream; the collective - and, for stages
 * 2/3, adding this rank's slice to its fp32 shard - on comm_stream, which is
 * the engine's stream unless overlap_comm gives it its own. */
#include "core/engine.h"

double zc__grad_prescale(const zc_engine *e)
{
    if (e->cfg->prescale_gradients)
        return 1.0 / (double)e->world;
    double f = e->cfg->gradient_predivide_factor;
    if (f > 0 && f != 1.0)
        return 1.0 / f;
    return 1.0;
}

double zc__grad_postscale(const zc_engine *e)
{
    return 1.0 / ((double)e->world * zc__grad_prescale(e));
}

double zc__grad_avg(const zc_engine *e)
{
    /* Stages 0/1 divide the window by K before rounding it (full_window);
     * stages 2/3 accumulate every micro-step's reduced gradient in fp32 and
     * leave the division to the optimizer - unless the window is summed in
     * 16 bits, where every micro-step was divided by K already. */
    const double micro =
        e->pol->sharded_grads && e->acc_dt == ZC_DTYPE_F32 ? (double)e->gas : 1.0;
    return zc__grad_postscale(e) / micro;
}

zc_status zc__grads_micro_scale(zc_engine *e, void *buf, size_t n)
{
    if (e->acc_dt == ZC_DTYPE_F32)
        return ZC_OK;
    /* (float)(1 / K): DeepSpeed divides the fp32 loss by K, so autograd
     * multiplies every gradient element by that fp32 quotient before the
     * cast to the parameter dtype; scale computes x * a in fp32 and rounds
     * it to the buffer's dtype, the same two roundings. */
    return e->dev->ops->scale(e->dev, buf, e->pdt, n, (float)(1.0 / (double)e->gas),
                              e->stream);
}

zc_status zc__grads_apply_prescale(zc_engine *e, void *buf, size_t n)
{
    double pre = zc__grad_prescale(e);
    if (pre == 1.0)
        return ZC_OK;
    return e->dev->ops->scale(e->dev, buf, e->pdt, n, (float)pre, e->stream);
}

zc_status zc__grads_full_window(zc_engine *e, zc_chunk *c, bool last_micro, bool *reduce)
{
    zc_device *d = e->dev;
    size_t n = (size_t)c->padded;
    *reduce = false;
    if (e->acc_dt != ZC_DTYPE_F32) {
        /* DeepSpeed's 16-bit accumulation (see the top): this micro-step's
         * gradient divided by K and rounded, added to the running sum, the
         * sum rounded; at the window's end the sum is a 16-bit value already,
         * so the cast back into the gradient is exact. */
        ZC_CHECK(zc__grads_micro_scale(e, c->grad, n));
        ZC_CHECK(zc__grad_acc_add(e, d, c->acc, c->grad, n, e->stream));
        if (!last_micro)
            return d->ops->memset0(d, c->grad, n * e->pesz, e->stream);
        ZC_CHECK(zc__eng_convert(e, c->grad, e->pdt, c->acc, ZC_DTYPE_F32, n));
    } else if (e->gas > 1) {
        /* The user's buffer is zeroed for every micro-step, so the window is
         * summed in a full fp32 accumulator and reduced once at its end, in
         * the parameter dtype like a single micro-step. The sum is divided by
         * K in fp32 before it is rounded to the 16-bit dtype: a window whose
         * mean fits fp16 but whose sum does not must not overflow here when
         * stages 2/3, which reduce every micro-step, do not (DeepSpeed gets
         * the same effect by scaling the loss by 1/K before backward). The
         * optimizer then leaves K out of its averaging (zc__grad_avg). */
        ZC_CHECK(d->ops->accumulate(d, c->acc, c->grad, e->pdt, n, e->stream));
        if (!last_micro)
            return d->ops->memset0(d, c->grad, n * e->pesz, e->stream);
        ZC_CHECK(d->ops->scale(d, c->acc, ZC_DTYPE_F32, n, (float)(1.0 / (double)e->gas),
                               e->stream));
        ZC_CHECK(zc__eng_convert(e, c->grad, e->pdt, c->acc, ZC_DTYPE_F32, n));
    }
    ZC_CHECK(zc__grads_apply_prescale(e, c->grad, n));
    ZC_CHECK(zc__order_comm_after_engine(e));
    *reduce = true;
    return ZC_OK;
}

zc_status zc__grads_full_buffer(zc_engine *e, zc_chunk *c, void **out)
{
    (void)e;
    *out = c->grad;
    return ZC_OK;
}

static void reset_micro_flags(zc_engine *e)
{
    zc__bucket_clear(e);
    zc__act_micro_done(e); /* the activation store's checkpoints end with it */
    for (int i = 0; i < e->nparams; i++)
        e->params[i]->ready = false;
    for (int k = 0; k < e->nchunks; k++) {
        e->chunks[k].nready = 0;
        e->chunks[k].reduced = false;
    }
    e->nready = 0;
}

zc_status zc__grads_reset(zc_engine *e)
{
    zc_device *d = e->dev;
    /* The optimizer's gradient copies read what is cleared here. */
    ZC_CHECK(zc__opt_copy_order_reset(e));
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (e->pol->sharded_grads) {
            /* A swapped shard has no memory: the window's first slice
             * starts it afresh. */
            zc_device *ad = zc__opt_acc_dev(e, c);
            if (c->acc)
                ZC_CHECK(ad->ops->memset0(ad, c->acc, (size_t)c->shard * sizeof(float),
                                          ad == d ? e->stream : NULL));
            zc__bufpool_put(&e->pool_grad, &c->gbuf);
        } else {
            ZC_CHECK(d->ops->memset0(d, c->grad, (size_t)c->padded * e->pesz, e->stream));
            if (c->acc)
                ZC_CHECK(d->ops->memset0(d, c->acc, (size_t)c->padded * sizeof(float),
                                         e->stream));
        }
    }
    reset_micro_flags(e);
    e->micro = 0;
    e->window_started = false;
    return ZC_OK;
}

zc_status zc__grad_buffer(zc_engine *e, zc_param *p, void **out)
{
    *out = NULL;
    ZC_CHECK(zc__eng_enter(e, "zc_grad_buffer", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_grad_buffer"));
    ZC_CHECK(zc__pass_train_only(e, "zc_grad_buffer"));
    if (p->ready)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_grad_buffer('%s'): the gradient was already made ready in this "
                      "micro-step",
                      p->name);
    zc__timers_backward(&e->timers);
    zc_chunk *c = &e->chunks[p->chunk];
    /* The chunk's buffer is the stage's: the resident full gradient (stages
     * 0/1) or a transient one from the gradient pool (stages 2/3). */
    void *buf = NULL;
    ZC_CHECK(e->pol->grad_buffer(e, c, &buf));
    buf = zc__elem(buf, p->offset, e->pesz);
    ZC_CHECK(zc__debug_grad_buffer(e, p, &buf));
    /* The buffer was zeroed (this micro-step's fill, or the last window's
     * reset) on the engine's stream: the caller's compute stream must not
     * write it before that. */
    zc_status rc = zc__order_caller_after_engine(e, e->user_stream);
    if (rc != ZC_OK) {
        zc__error_context("zc_grad_buffer('%s')", p->name);
        return rc;
    }
    *out = buf;
    return ZC_OK;
}

ZC_API void *zc_grad_buffer(zc_engine *e, zc_param *p)
{
    void *buf = NULL;
    return zc__grad_buffer(e, p, &buf) == ZC_OK ? buf : NULL;
}

ZC_API zc_status zc_grad_ready(zc_engine *e, zc_param *p)
{
    ZC_CHECK(zc__eng_enter(e, "zc_grad_ready", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_grad_ready"));
    ZC_CHECK(zc__pass_train_only(e, "zc_grad_ready"));
    if (p->ready)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_grad_ready('%s'): called twice in micro-step %lld of the window; each "
                      "parameter is made ready once per micro-step",
                      p->name, (long long)e->micro);
    zc_chunk *c = &e->chunks[p->chunk];
    /* An fp32 gradient (zc_block_grad_buffers_f32) is narrowed into the
     * buffer zc_grad_buffer handed out - the ZC_DEBUG shadow included, which
     * the next lines then move on. */
    ZC_CHECK(zc__view_grad_ready(e, p));
    if (e->debug) {
        /* The gradient moves from the shadow the caller wrote into the
         * buffer the reduction reads (stages 2/3: the chunk's pool slot). */
        void *real = NULL;
        ZC_CHECK(e->pol->grad_buffer(e, c, &real));
        ZC_CHECK(zc__debug_grad_ready(e, p, zc__elem(real, p->offset, e->pesz)));
    }
    p->ready = true;
    c->nready++;
    e->nready++;
    e->window_started = true;
    if (c->nready < c->count)
        return ZC_OK;
    bool last = e->micro == e->gas - 1;
    /* Every gradient of the chunk was written on the caller's compute stream
     * before this call: the reduction waits for that stream's work so far. */
    zc_status rc = zc__order_engine_after_caller(e, e->user_stream);
    if (rc == ZC_OK)
        rc = zc__bucket_add(e, c, last);
    if (rc != ZC_OK) {
        /* A failure that did not break the engine changed nothing (no
         * gradient buffer free: the chunk did not join the bucket); one
         * while a bucket was reduced broke it. */
        if (e->state == ZC_ENG_BUILT) {
            p->ready = false;
            c->nready--;
            e->nready--;
        }
        zc__error_context("zc_grad_ready('%s'): reducing chunk %d", p->name, p->chunk);
        return rc;
    }
    return ZC_OK;
}

const zc_param *zc__grads_first_missing(const zc_engine *e)
{
    if (e->nready == e->nparams)
        return NULL;
    for (int i = 0; i < e->nparams; i++)
        if (!e->params[i]->ready)
            return e->params[i];
    return NULL;
}

ZC_API zc_status zc_micro_step_end(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_micro_step_end", true));
    ZC_CHECK(zc__pass_train_only(e, "zc_micro_step_end"));
    if (e->micro + 1 >= e->gas)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_micro_step_end: micro-step %lld is the last of the accumulation window "
                      "(gradient_accumulation_steps = %lld); end it with zc_step",
                      (long long)e->micro, (long long)e->gas);
    const zc_param *miss = zc__grads_first_missing(e);
    if (miss)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_micro_step_end: the gradient of parameter '%s' was not made ready in "
                      "micro-step %lld (%d of %d are); call zc_grad_ready for every parameter",
                      miss->name, (long long)e->micro, e->nready, e->nparams);
    ZC_CHECK(zc__debug_check(e, "zc_micro_step_end"));
    /* cpu offload on a device: the slices copied D2H in this micro-step are
     * added to the host shards, freeing the landing buffers for the next. */
    ZC_CHECK(zc__opt_copy_settle_all(e));
    reset_micro_flags(e);
    e->micro++;
    zc__timers_forward(&e->timers);
    return ZC_OK;
}
