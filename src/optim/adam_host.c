/* The host optimizer entry point the engine calls. */
#include "core/error.h"
#include "optim/adam.h"

zc_status zc__adam_host(const zc_adam_shard *s, const zc_adam_coeffs *c)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__adam_host: NULL shard or coefficients");
    if (s->n == 0)
        return ZC_OK;
    if (!s->master || !s->m || !s->v || !s->grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__adam_host: NULL buffer in a shard of %zu elements",
                      s->n);
    if (s->grad_dtype != ZC_DTYPE_F32 && s->grad_dtype != ZC_DTYPE_F16 &&
        s->grad_dtype != ZC_DTYPE_BF16)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__adam_host: gradient dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->grad_dtype));
    if (s->param_out && s->param_out_dtype != ZC_DTYPE_F32 &&
        s->param_out_dtype != ZC_DTYPE_F16 && s->param_out_dtype != ZC_DTYPE_BF16)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__adam_host: parameter copy dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->param_out_dtype));
    zc__adam_scalar(s, c);
    return ZC_OK;
}
