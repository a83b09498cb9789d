/* DeepSpeed's model-state estimators (plan.h, zc__est_deepspeed), which
 * `zeroc estimate` prints beside the planner's own figures. */
#include "plan/plan.h"

static zc_status too_big(void)
{
    return ZC_ERR(ZC_ERR_NO_MEMORY, "the memory plan overflows 64-bit byte counts");
}
/* a * b, then + c, checked; false on overflow. */
static bool mad(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
}

/* x 1.5, DeepSpeed's additional_buffer_factor, in integers. */
static bool abf(uint64_t x, uint64_t *out)
{
    return mad(x, 3, 0, out) && (*out /= 2, true);
}

zc_status zc__est_deepspeed(int stage, bool offload, bool offload_params, uint64_t P,
                            uint64_t LL, uint64_t G, uint64_t gpn, uint64_t *gpu,
                            uint64_t *cpu)
{
    if (offload_params && (stage != 3 || !offload))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "DeepSpeed's estimators cover parameter offload only "
                      "at stage 3 with the optimizer offloaded too");
    if (stage < 1 || stage > 3 || G == 0 || gpn == 0 || G % gpn)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "DeepSpeed's estimators cover stages 1-3 with the "
                      "GPUs a whole number of nodes (stage %d, %llu GPUs, %llu per node)", stage,
                      (unsigned long long)G, (unsigned long long)gpn);
    const uint64_t N = G / gpn;
    uint64_t t = 0, lmem = 0;
    bool ok = true;
    if (stage < 3) {
        if (offload) {
            ok = mad(P, 2, 0, gpu) && mad(P, 4 * G > 16 ? 4 * G : 16, 0, &t) && abf(t, cpu);
        } else {
            ok = mad(P, 18, 0, &t) && mad(P, 2, t / G, gpu) && mad(P, 4, 0, &t) &&
                 mad(t, gpn, 0, &t) && abf(t, cpu);
        }
    } else {
        ok = mad(LL, 4, 0, &lmem);
        if (offload_params) {
            ok = ok && mad(1, lmem, 0, gpu) && mad(P, 18, 0, &t) && abf(t / N, cpu);
        } else if (offload) {
            ok = ok && mad(P, 2, 0, &t) && mad(1, lmem, t / G, gpu) && mad(P, 16, 0, &t) &&
                 abf(t / N, cpu);
        } else {
            ok = ok && mad(P, 18, 0, &t) && mad(1, lmem, t / G, gpu) && mad(lmem, gpn, 0, &t) &&
                 abf(t, cpu);
        }
    }
    if (!ok)
        return too_big();
    return ZC_OK;
}
