/* Lion's coefficients, shard checks and host entry (lion.h). */
#include "optim/lion.h"

#include "base/dtype.h"
#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/ew_split.h"

zc_lion_coeffs zc__lion_coeffs(const zc_lion_hparams *hp)
{
    /* 1 - lr * wd in double, rounded once: what DeepSpeed's after_decay is
     * up to its fp32 evaluation. wd 0 gives exactly 1 (no decay). */
    return (zc_lion_coeffs){
        .beta1 = (float)hp->beta1,
        .beta2 = (float)hp->beta2,
        .one_minus_beta1 = (float)(1.0 - hp->beta1),
        .one_minus_beta2 = (float)(1.0 - hp->beta2),
        .lr = (float)hp->lr,
        .decay = hp->weight_decay != 0.0 ? (float)(1.0 - hp->lr * hp->weight_decay) : 1.0f,
        .sign_rule = hp->sign_rule,
    };
}

zc_lion_shard zc__lion_slice(const zc_lion_shard *s, size_t lo, size_t hi)
{
    zc_lion_shard r = *s;
    r.master = s->master + lo;
    r.m = s->m + lo;
    r.grad = (const char *)s->grad + lo * zc_dtype_size(s->grad_dtype);
    if (s->param_out)
        r.param_out = (char *)s->param_out + lo * zc_dtype_size(s->param_out_dtype);
    r.n = hi - lo;
    return r;
}

zc_status zc__lion_check(const zc_lion_shard *s, const zc_lion_coeffs *c, const char *who)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL %s", who, s ? "coefficients" : "shard");
    if (c->sign_rule != ZC_LION_SIGN_BIT && c->sign_rule != ZC_LION_SIGN_GT0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: unknown sign rule %u", who, c->sign_rule);
    return zc__ew_shard_check(who, s->master, s->m, "m", s->grad, s->grad_dtype, s->param_out,
                              s->param_out_dtype, s->n);
}

typedef struct lion_ctx {
    const zc_lion_shard *s;
    const zc_lion_coeffs *c;
    zc_lion_fn fn;
} lion_ctx;

static void lion_range(const void *arg, size_t lo, size_t hi)
{
    const lion_ctx *x = arg;
    zc_lion_shard part = zc__lion_slice(x->s, lo, hi);
    x->fn(&part, x->c);
}

zc_status zc__lion_host_run(const zc_lion_shard *s, const zc_lion_coeffs *c, int variant,
                            int nthreads)
{
    ZC_CHECK(zc__lion_check(s, c, "host Lion"));
    ZC_CHECK(zc__adam_variant_resolve(&variant));
    lion_ctx x = {.s = s, .c = c, .fn = zc__adam_variant(variant)->lion_fn};
    return zc__ew_split(s->n, nthreads, lion_range, &x, s->master);
}

zc_status zc__lion_host(const zc_lion_shard *s, const zc_lion_coeffs *c)
{
    return zc__lion_host_run(s, c, -1, 0);
}
