/* Quantized communication (ZeRO++'s qwZ and qgZ): DeepSpeed's blockwise
 * symmetric integer quantization, the seam of src/quant.
 *
 * DeepSpeed quantizes a buffer in groups of equal size, each with one fp32
 * scale (deepspeed/runtime/zero/partition_parameters.py CUDAQuantizer,
 * csrc/includes/quantization_utils.h Params<Symmetric>). The rules below
 * are read from that source; no fixture made by DeepSpeed holds them yet
 * (its quantizer needs a GPU build of its CUDA ops), so "DeepSpeed's" here
 * means its code as read, not a tested match:
 *
 *   groups     for n elements: start at ceil(n / 8000); step up until
 *              n % (8 groups) == 0; then double while n % (16 groups) == 0
 *              and n / groups > 8000 (zc__quant_groups). n must be a
 *              multiple of 8 (then a count always exists: n / 8 at worst);
 *   values     converted to fp16 first (DeepSpeed's kernel reads __half:
 *              a bf16 buffer is cast, round to nearest even, overflowing
 *              to infinity);
 *   per group  max = the largest |x| of the fp16 values; scale = 2^b /
 *              (2 max) in fp32 (1 when max is 0); q = x * scale rounded to
 *              the nearest integer, ties to even (__float2int_rn), clamped
 *              to [-2^(b-1), 2^(b-1) - 1] - so the largest value itself,
 *              at 2^(b-1), is clamped one step short; the scale stored is
 *              1 / scale;
 *   dequantize q * stored scale in fp32, rounded to fp16, then to the
 *              buffer's own dtype.
 *
 * b = 8 for the weights (qwZ). The functions here are the host's, and the
 * reference the device ops quant_int8 / dequant_int8 (device/device.h;
 * kernels/quant.cu on a GPU) are held to; the engine does not call them
 * yet (zero_quantized_weights is still "not implemented"). */
#ifndef ZC_QUANT_QUANT_H
#define ZC_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

/* The groups DeepSpeed's CUDAQuantizer picks for n elements, into *out.
 * ZC_ERR_INVALID_ARG, with DeepSpeed's reason, when n is 0 or not a
 * multiple of 8 (DeepSpeed's other asserts cannot fail then; they are
 * checked all the same). */
zc_status zc__quant_groups(size_t n, size_t *out);

/* Symmetric int8 quantization of n values of dt (F32, F16 or BF16) in
 * `groups` equal groups (groups divides n): q (n bytes) and the groups'
 * stored scales (groups floats), as DeepSpeed's kernel writes them.
 * ZC_ERR_INVALID_ARG for a dtype, a NULL buffer or groups not dividing n. */
zc_status zc__quant_int8(const void *x, zc_dtype dt, size_t n, size_t groups, int8_t *q,
                         float *scales);

/* The values back: out (n values of dt) = fp16(q * scale of its group),
 * then converted to dt. Same refusals. */
zc_status zc__dequant_int8(const int8_t *q, const float *scales, size_t n, size_t groups,
                           void *out, zc_dtype dt);

#endif
