/* Which elements DeepSpeedCPUAdam updated in its scalar tail (o_ds_tail,
 * oracle.h), from how DeepSpeed 0.19.8 lays out the tensors its optimizer
 * steps for the fixtures' model.
 *
 * ds_adam_step runs Step_8 -> Step_4 -> Step_1 (csrc/adam/cpu_adam_impl.cpp
 * 36-108): AVX-512 bodies of 128, 64 and 16 elements (SIMD_WIDTH 16 on the
 * machine that made the fixtures, index.json "machine"), and the last
 * numel % 16 elements of each tensor in a scalar loop (lines 49-84). That
 * loop is the same C++ expressions, but the compiler (g++ -O3 -march=native)
 * contracts them otherwise than the vector body's explicit FMAs: its m is
 * fma(m, beta1, g * (1 - beta1)) and its v fma(v, beta2, (g * g) * (1 -
 * beta2)) (read from the built fused_adam extension's code), where the body
 * has fma(g, 1 - beta1, m * beta1) and fma(g * g, 1 - beta2, v * beta2).
 * zeroc's DeepSpeed arithmetic is the body's: it does not know DeepSpeed's
 * tensor boundaries, so the tail's elements agree only to rounding level.
 *
 * The tensors, by the optimizer that ran the case (its ds_optimizer):
 *   FusedAdam (stage 0, fp32): every parameter on its own (ops/adam/
 *     fused_adam.py step: one tensor list entry per parameter);
 *   DeepSpeedZeroOptimizer, BF16_Optimizer (stages 1-2; bf16 ZeRO-1): each
 *     rank's partition of the flat buffer of all parameters, padded to a
 *     multiple of 2 * world (nccl_start_alignment_factor,
 *     stage_1_and_2.py 91-94 and the align_dense_tensors call);
 *   DeepSpeedZeroOptimizer_Stage3: each rank's fp32 sub-group (one here:
 *     sub_group_size 1e9), the concatenation of that rank's partition of
 *     every parameter, each ceil(numel / world) long, zero-padded
 *     (partition_parameters.py _padding_size 1693-1696);
 *   FP16_Optimizer (stage 0, fp16/bf16): the flat group of all parameters. */
#include <criterion/criterion.h>
#include <string.h>

#include "oracle.h"

#define SIMD 16

/* Marks the last n % SIMD elements of a tensor whose position j holds the
 * global element map[j] (-1: padding). */
static void tail_of(const int64_t *map, int64_t n, bool *mask)
{
    for (int64_t j = n - n % SIMD; j < n; j++)
        if (map[j] >= 0)
            mask[map[j]] = true;
}

void o_ds_tail(const o_fixtures *F, const o_case *C, bool *mask)
{
    const int64_t N = F->n;
    const int W = C->world;
    memset(mask, 0, (size_t)N * sizeof(bool));
    int64_t *map = malloc((size_t)(N + 2 * W * F->nparams + 2 * W) * sizeof(int64_t));
    cr_assert(map);
    const char *o = C->ds_optimizer;
    if (!strcmp(o, "FusedAdam")) {
        for (int p = 0, off = 0; p < F->nparams; off += (int)F->numel[p], p++) {
            for (int64_t j = 0; j < F->numel[p]; j++)
                map[j] = off + j;
            tail_of(map, F->numel[p], mask);
        }
    } else if (!strcmp(o, "DeepSpeedZeroOptimizer") || !strcmp(o, "BF16_Optimizer") ||
               !strcmp(o, "FP16_Optimizer")) {
        const int64_t align = strcmp(o, "FP16_Optimizer") ? 2 * W : 1;
        const int64_t padded = (N + align - 1) / align * align;
        const int64_t P = strcmp(o, "FP16_Optimizer") ? padded / W : N;
        for (int r = 0; r < (strcmp(o, "FP16_Optimizer") ? W : 1); r++) {
            for (int64_t j = 0; j < P; j++)
                map[j] = r * P + j < N ? r * P + j : -1;
            tail_of(map, P, mask);
        }
    } else if (!strcmp(o, "DeepSpeedZeroOptimizer_Stage3")) {
        for (int r = 0; r < W; r++) {
            int64_t n = 0;
            for (int p = 0, off = 0; p < F->nparams; off += (int)F->numel[p], p++) {
                const int64_t ps = (F->numel[p] + W - 1) / W;
                for (int64_t j = 0; j < ps; j++) {
                    const int64_t e = r * ps + j;
                    map[n++] = e < F->numel[p] ? off + e : -1;
                }
            }
            tail_of(map, n, mask);
        }
    } else {
        cr_assert_fail("%s: no tensor layout known for DeepSpeed optimizer %s", C->name, o);
    }
    free(map);
}
