/* Adagrad's coefficients, shard checks and host entry (adagrad.h). */
#include "optim/adagrad.h"

#include "base/dtype.h"
#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/ew_split.h"

zc_adagrad_coeffs zc__adagrad_coeffs(const zc_adagrad_hparams *hp, int64_t step)
{
    /* torch.optim.Adagrad's clr = lr / (1 + (step - 1) * lr_decay), in
     * double as its Python computes it, rounded once. */
    double t = (double)(step < 1 ? 1 : step);
    return (zc_adagrad_coeffs){
        .step_size = (float)(hp->lr / (1.0 + (t - 1.0) * hp->lr_decay)),
        .eps = (float)hp->eps,
        .l2_decay = (float)hp->weight_decay,
        .numerator = hp->numerator,
    };
}

zc_adagrad_shard zc__adagrad_slice(const zc_adagrad_shard *s, size_t lo, size_t hi)
{
    zc_adagrad_shard r = *s;
    r.master = s->master + lo;
    r.sum = s->sum + lo;
    r.grad = (const char *)s->grad + lo * zc_dtype_size(s->grad_dtype);
    if (s->param_out)
        r.param_out = (char *)s->param_out + lo * zc_dtype_size(s->param_out_dtype);
    r.n = hi - lo;
    return r;
}

zc_status zc__adagrad_check(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c, const char *who)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL %s", who, s ? "coefficients" : "shard");
    if (c->numerator != ZC_ADAGRAD_NUM_RAW && c->numerator != ZC_ADAGRAD_NUM_DECAYED)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: unknown numerator %u", who, c->numerator);
    return zc__ew_shard_check(who, s->master, s->sum, "sum", s->grad, s->grad_dtype, s->param_out,
                              s->param_out_dtype, s->n);
}

typedef struct adagrad_ctx {
    const zc_adagrad_shard *s;
    const zc_adagrad_coeffs *c;
    zc_adagrad_fn fn;
} adagrad_ctx;

static void adagrad_range(const void *arg, size_t lo, size_t hi)
{
    const adagrad_ctx *x = arg;
    zc_adagrad_shard part = zc__adagrad_slice(x->s, lo, hi);
    x->fn(&part, x->c);
}

zc_status zc__adagrad_host_run(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c, int variant,
                            int nthreads)
{
    ZC_CHECK(zc__adagrad_check(s, c, "host Adagrad"));
    ZC_CHECK(zc__adam_variant_resolve(&variant));
    adagrad_ctx x = {.s = s, .c = c, .fn = zc__adam_variant(variant)->adagrad_fn};
    return zc__ew_split(s->n, nthreads, adagrad_range, &x, s->master);
}

zc_status zc__adagrad_host(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c)
{
    return zc__adagrad_host_run(s, c, -1, 0);
}
