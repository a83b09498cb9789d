/* Static names of statuses and dtypes. */
#include "zeroc/zeroc.h"

const char *zc_status_str(zc_status s)
{
    switch (s) {
    case ZC_OK: return "success";
    case ZC_ERR_INVALID_ARG: return "invalid argument";
    case ZC_ERR_INVALID_STATE: return "invalid state";
    case ZC_ERR_NO_MEMORY: return "out of memory";
    case ZC_ERR_CONFIG: return "configuration error";
    case ZC_ERR_IO: return "I/O error";
    case ZC_ERR_COMM: return "communication error";
    case ZC_ERR_DEVICE: return "device error";
    case ZC_ERR_UNSUPPORTED: return "unsupported";
    case ZC_ERR_LOSS_SCALE: return "loss scale at minimum";
    case ZC_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
    }
}

size_t zc_dtype_size(zc_dtype dt)
{
    switch (dt) {
    case ZC_DTYPE_F32: return 4;
    case ZC_DTYPE_F16: return 2;
    case ZC_DTYPE_BF16: return 2;
    case ZC_DTYPE_F64: return 8;
    case ZC_DTYPE_I32: return 4;
    default: return 0;
    }
}

const char *zc_dtype_name(zc_dtype dt)
{
    switch (dt) {
    case ZC_DTYPE_F32: return "fp32";
    case ZC_DTYPE_F16: return "fp16";
    case ZC_DTYPE_BF16: return "bf16";
    case ZC_DTYPE_F64: return "fp64";
    case ZC_DTYPE_I32: return "int32";
    default: return "unknown";
    }
}
