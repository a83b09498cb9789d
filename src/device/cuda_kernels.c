/* The CUDA device backend's kernel operations: argument checks, the
 * launchers of kernels/ with the handle's geometry (zc_k_geometry, queried
 * at open), and the note of each launch for error messages. The scratch of
 * the synchronous sumsq / nonfinite is the handle's, under its mutex. */
#include <stdio.h>

#include "device/cuda_internal.h"

/* The kernel launchers return their own launch's status (kernels/kernels.h):
 * an error here is this launch's, or a context that earlier work broke. */
static zc_status launched(zc_device *d, cudaError_t e, const char *kernel, zc_dtype dt, size_t n,
                          void *stream)
{
    cuda_device *c = (cuda_device *)d;
    if (e == cudaSuccess) {
        zc__cuda_note(c, stream, kernel, (int)dt, n);
        return ZC_OK;
    }
    char what[128];
    snprintf(what, sizeof what, "launching %s (%s, %zu elements)", kernel, zc_dtype_name(dt), n);
    return zc__cuda_fail_work(c, e, __FILE__, __LINE__, what, stream, AT_ENQUEUE);
}

zc_status zc__cuda_cast(zc_device *d, void *dst, zc_dtype dst_dt, const void *src,
                        zc_dtype src_dt, size_t n, void *s)
{
    if (!zc__cuda_float_dtype(dst_dt) || !zc__cuda_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cast: unsupported dtypes %s -> %s",
                      zc_dtype_name(src_dt), zc_dtype_name(dst_dt));
    if (dst_dt == src_dt)
        return d->ops->copy(d, dst, src, n * zc_dtype_size(dst_dt), ZC_COPY_D2D, s);
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_cast(zc__cuda_geo(d), dst, dst_dt, src, src_dt, n, (cudaStream_t)s),
                    "cast kernel", src_dt, n, s);
}

zc_status zc__cuda_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *s)
{
    if (!zc__cuda_float_dtype(dt) && dt != ZC_DTYPE_F64)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "scale: unsupported dtype %s", zc_dtype_name(dt));
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_scale(zc__cuda_geo(d), x, dt, n, a, (cudaStream_t)s), "scale kernel",
                    dt, n, s);
}

zc_status zc__cuda_accumulate(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                              size_t n, void *s)
{
    if (!zc__cuda_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate: unsupported dtype %s",
                      zc_dtype_name(src_dt));
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_accumulate(zc__cuda_geo(d), acc, src, src_dt, n, (cudaStream_t)s),
                    "accumulate kernel", src_dt, n, s);
}

zc_status zc__cuda_accumulate_rounded(zc_device *d, float *acc, const void *src,
                                      zc_dtype src_dt, zc_dtype acc_dt, size_t n, void *s)
{
    if (!zc__cuda_float_dtype(src_dt) || !zc__cuda_float_dtype(acc_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate_rounded: unsupported dtypes %s into %s",
                      zc_dtype_name(src_dt), zc_dtype_name(acc_dt));
    ZC_CHECK(zc__cuda_use(d));
    return launched(d,
                    zc_k_accumulate_rounded(zc__cuda_geo(d), acc, src, src_dt, acc_dt, n,
                                            (cudaStream_t)s),
                    "accumulate_rounded kernel", src_dt, n, s);
}

zc_status zc__cuda_reduce_sum(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                              zc_dtype dt, size_t n, void *s)
{
    if (nsrc < 1 || nsrc > ZC_K_MAX_REDUCE_SRCS)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: nsrc = %d (the CUDA kernel takes 1..%d)",
                      nsrc, ZC_K_MAX_REDUCE_SRCS);
    if (!zc__cuda_float_dtype(dt) && dt != ZC_DTYPE_F64 && dt != ZC_DTYPE_I32)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: unsupported dtype %d", (int)dt);
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_reduce_sum(zc__cuda_geo(d), dst, srcs, nsrc, dt, n, (cudaStream_t)s),
                    "reduce_sum kernel", dt, n, s);
}

/* Grows the partials scratch to hold nb doubles; called with c->mu held. */
static zc_status ensure_partials(cuda_device *c, size_t nb)
{
    if (nb <= c->partials_cap)
        return ZC_OK;
    size_t cap = nb < 1024 ? 1024 : nb;
    double *dp = NULL;
    ZC_CHECK(zc__cuda_alloc(&c->base, NULL, ZC_MEM_BUFFERS, cap * sizeof(double),
                        "sum-of-squares partials", (void **)&dp));
    if (c->partials_cap)
        zc__cuda_free(&c->base, NULL, ZC_MEM_BUFFERS, c->d_partials,
                      c->partials_cap * sizeof(double));
    c->d_partials = dp;
    c->partials_cap = cap;
    return ZC_OK;
}

/* The two kernels of sumsq_async into the handle's scratch (level-1 sums,
 * then the total after them), and one double back. */
static zc_status sumsq_locked(cuda_device *c, const void *x, zc_dtype dt, size_t n, double *out,
                              cudaStream_t st)
{
    zc_device *d = &c->base;
    size_t ng = zc__sumsq_ngroups(n);
    ZC_CHECK(ensure_partials(c, ng + 1));
    double *total = c->d_partials + ng;
    ZC_CHECK(launched(d, zc_k_sumsq_groups(x, dt, n, c->d_partials, st), "sumsq kernel", dt, n,
                      st));
    ZC_CHECK(launched(d, zc_k_sumsq_tree(c->d_partials, ng, total, st), "sumsq tree kernel",
                      ZC_DTYPE_F64, ng, st));
    double v = 0.0;
    CU_ENQ(c, cudaMemcpyAsync(&v, total, sizeof v, cudaMemcpyDeviceToHost, st),
           "copying the sum of squares", st, -1, sizeof v);
    CU_WAIT(c, cudaStreamSynchronize(st), "cudaStreamSynchronize after sumsq", st);
    *out = v;
    return ZC_OK;
}

zc_status zc__cuda_sumsq(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                         void *s)
{
    if (!zc__cuda_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq: unsupported dtype %s", zc_dtype_name(dt));
    *out = 0.0;
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    cuda_device *c = (cuda_device *)d;
    pthread_mutex_lock(&c->mu);
    zc_status rc = sumsq_locked(c, x, dt, n, out, (cudaStream_t)s);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static zc_status nonfinite_locked(cuda_device *c, const void *x, zc_dtype dt, size_t n,
                                  int *flag, cudaStream_t st)
{
    zc_device *d = &c->base;
    if (!c->d_flag)
        ZC_CHECK(zc__cuda_alloc(d, NULL, ZC_MEM_BUFFERS, sizeof(int), "nonfinite flag",
                            (void **)&c->d_flag));
    int h = 0;
    CU_ENQ(c, cudaMemsetAsync(c->d_flag, 0, sizeof(int), st), "clearing the nonfinite flag", st,
           -1, sizeof(int));
    ZC_CHECK(launched(d, zc_k_nonfinite(&c->geo, x, dt, n, c->d_flag, st), "nonfinite kernel", dt,
                      n, st));
    CU_ENQ(c, cudaMemcpyAsync(&h, c->d_flag, sizeof(int), cudaMemcpyDeviceToHost, st),
           "copying the nonfinite flag", st, -1, sizeof(int));
    CU_WAIT(c, cudaStreamSynchronize(st), "cudaStreamSynchronize after nonfinite", st);
    *flag = h != 0;
    return ZC_OK;
}

zc_status zc__cuda_nonfinite(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                             void *s)
{
    if (!zc__cuda_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite: unsupported dtype %s", zc_dtype_name(dt));
    *flag = 0;
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    cuda_device *c = (cuda_device *)d;
    pthread_mutex_lock(&c->mu);
    zc_status rc = nonfinite_locked(c, x, dt, n, flag, (cudaStream_t)s);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* No handle scratch and no lock: the caller's scratch and result live on
 * the device and are ordered by its stream, so any number of streams can run
 * this at once. */
zc_status zc__cuda_sumsq_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                               double *scratch, double *out, void *s)
{
    if (!zc__cuda_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: unsupported dtype %s",
                      zc_dtype_name(dt));
    if (!out || (n && !scratch))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: NULL %s", out ? "scratch" : "out");
    ZC_CHECK(zc__cuda_use(d));
    size_t ng = zc__sumsq_ngroups(n);
    if (n)
        ZC_CHECK(launched(d, zc_k_sumsq_groups(x, dt, n, scratch, (cudaStream_t)s),
                          "sumsq kernel", dt, n, s));
    /* The tree over the level-1 sums; n = 0 still writes +0.0 so *out is
     * defined on the stream. */
    return launched(d, zc_k_sumsq_tree(scratch, ng, out, (cudaStream_t)s), "sumsq tree kernel",
                    ZC_DTYPE_F64, ng, s);
}

zc_status zc__cuda_nonfinite_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                   int *flag, void *s)
{
    if (!zc__cuda_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite_async: unsupported dtype %s",
                      zc_dtype_name(dt));
    if (!flag)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite_async: flag is NULL");
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_nonfinite(zc__cuda_geo(d), x, dt, n, flag, (cudaStream_t)s),
                    "nonfinite kernel", dt, n, s);
}

zc_status zc__cuda_adam(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c,
                        void *stream)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: NULL shard or coefficients");
    if (s->n == 0)
        return ZC_OK;
    if (!s->master || !s->m || !s->v || !s->grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: NULL buffer in a shard of %zu elements",
                      s->n);
    if (!zc__cuda_float_dtype(s->grad_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: gradient dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->grad_dtype));
    if (s->param_out && !zc__cuda_float_dtype(s->param_out_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "cuda adam: parameter copy dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->param_out_dtype));
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_adam(zc__cuda_geo(d), s, c, (cudaStream_t)stream), "adam kernel",
                    s->grad_dtype, s->n, stream);
}

/* The checks of zc__adam_lp_check (libzeroc's, not this plugin's to call). */
zc_status zc__cuda_adam_lp(zc_device *d, const zc_adam_lp_shard *s, const zc_adam_coeffs *c,
                           void *stream)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): NULL shard or coefficients");
    if (c->arith != ZC_ADAM_ARITH_ZEROC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): DeepSpeed's arithmetic is "
                                          "not offered over 16-bit optimizer state");
    const zc_dtype st[3] = {s->master_dtype, s->m_dtype, s->v_dtype};
    for (int i = 0; i < 3; i++)
        if (st[i] != ZC_DTYPE_F32 && st[i] != ZC_DTYPE_BF16)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): state dtypes master %s, "
                          "m %s, v %s (each must be fp32 or bf16)", zc_dtype_name(st[0]),
                          zc_dtype_name(st[1]), zc_dtype_name(st[2]));
    if (!zc__cuda_float_dtype(s->grad_dtype) ||
        (s->param_out && !zc__cuda_float_dtype(s->param_out_dtype)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): gradient dtype %s or copy "
                      "dtype %s is not fp32, fp16 or bf16", zc_dtype_name(s->grad_dtype),
                      zc_dtype_name(s->param_out_dtype));
    if (s->n == 0)
        return ZC_OK;
    if (!s->master || !s->m || !s->v || !s->grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): NULL buffer in a shard of "
                      "%zu elements", s->n);
    if (s->index0 > UINT64_MAX - s->n)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam (16-bit state): elements %llu + %zu pass "
                      "2^64", (unsigned long long)s->index0, s->n);
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_adam_lp(zc__cuda_geo(d), s, c, (cudaStream_t)stream),
                    "adam kernel (16-bit state)", s->grad_dtype, s->n, stream);
}

/* The checks of zc__lion_check and zc__adagrad_check (libzeroc's, not this
 * plugin's to call): the dtypes of the gradient and the copy, the buffers of
 * a non-empty shard, the rule's value. */
static zc_status ew_shard_ok(const char *who, const void *master, const void *state,
                             const void *grad, zc_dtype gdt, const void *out, zc_dtype odt,
                             size_t n)
{
    if (!zc__cuda_float_dtype(gdt) || (out && !zc__cuda_float_dtype(odt)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: gradient dtype %s or copy dtype %s is not fp32, "
                      "fp16 or bf16", who, zc_dtype_name(gdt), zc_dtype_name(odt));
    if (n && (!master || !state || !grad))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL buffer in a shard of %zu elements", who, n);
    return ZC_OK;
}

zc_status zc__cuda_lion(zc_device *d, const zc_lion_shard *s, const zc_lion_coeffs *c,
                        void *stream)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda lion: NULL shard or coefficients");
    if (c->sign_rule != ZC_LION_SIGN_BIT && c->sign_rule != ZC_LION_SIGN_GT0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda lion: sign rule %u", (unsigned)c->sign_rule);
    ZC_CHECK(ew_shard_ok("cuda lion", s->master, s->m, s->grad, s->grad_dtype, s->param_out,
                         s->param_out_dtype, s->n));
    if (s->n == 0)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_lion(zc__cuda_geo(d), s, c, (cudaStream_t)stream), "lion kernel",
                    s->grad_dtype, s->n, stream);
}

zc_status zc__cuda_adagrad(zc_device *d, const zc_adagrad_shard *s, const zc_adagrad_coeffs *c,
                           void *stream)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adagrad: NULL shard or coefficients");
    if (c->numerator != ZC_ADAGRAD_NUM_RAW && c->numerator != ZC_ADAGRAD_NUM_DECAYED)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adagrad: numerator %u", (unsigned)c->numerator);
    ZC_CHECK(ew_shard_ok("cuda adagrad", s->master, s->sum, s->grad, s->grad_dtype,
                         s->param_out, s->param_out_dtype, s->n));
    if (s->n == 0)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_adagrad(zc__cuda_geo(d), s, c, (cudaStream_t)stream),
                    "adagrad kernel", s->grad_dtype, s->n, stream);
}

/* The refusals of quant/quant.h's host functions (libzeroc's, not this
 * plugin's to call). */
static zc_status quant_check(const void *a, const void *b, const void *c, zc_dtype dt, size_t n,
                             size_t groups, const char *who)
{
    if (!zc__cuda_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: dtype %s is not fp32, fp16 or bf16", who,
                      zc_dtype_name(dt));
    if (n && (!a || !b || !c))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", who, n);
    if (groups == 0 || n % groups || groups > 0x7fffffffu)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %zu groups do not divide %zu elements", who,
                      groups, n);
    return ZC_OK;
}

zc_status zc__cuda_quant_int8(zc_device *d, const void *x, zc_dtype dt, size_t n, size_t groups,
                              int8_t *q, float *scales, void *stream)
{
    ZC_CHECK(quant_check(x, q, scales, dt, n, groups, "cuda quant_int8"));
    if (!n)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_quant_int8(zc__cuda_geo(d), x, dt, n, groups, q, scales,
                                       (cudaStream_t)stream),
                    "int8 quantize kernel", dt, n, stream);
}

zc_status zc__cuda_dequant_int8(zc_device *d, const int8_t *q, const float *scales, size_t n,
                                size_t groups, void *out, zc_dtype dt, void *stream)
{
    ZC_CHECK(quant_check(q, scales, out, dt, n, groups, "cuda dequant_int8"));
    if (!n)
        return ZC_OK;
    ZC_CHECK(zc__cuda_use(d));
    return launched(d, zc_k_dequant_int8(zc__cuda_geo(d), q, scales, n, groups, out, dt,
                                         (cudaStream_t)stream),
                    "int8 dequantize kernel", dt, n, stream);
}
