/* The table of host Adam variants and the run-time choice among them.
 *
 * Best first: the first variant that is compiled in and that this CPU runs is
 * the default; ZC_CPU_ISA names one explicitly. CPU flags come from
 * __builtin_cpu_supports (which also checks that the OS saves the vector
 * state) plus CPUID for the two flags it does not know everywhere (F16C,
 * AVX512_BF16). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "base/env.h"
#include "base/log.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"
#include "optim/zc_optim_isa.h"

static void scalar_kernel(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags)
{
    (void)flags;
    zc__adam_scalar(s, c);
}

static const zc_adam_variant variants[] = {
#if ZC_ADAM_HAVE_AVX512BF16 && ZC_ADAM_HAVE_AVX512
    /* Over 16-bit state the bf16 conversion instruction is not used (the
     * rounding is stochastic or done in integers): the AVX-512 kernel; so
     * for Lion and Adagrad, whose copy rounds in integers. */
    {"avx512bf16", zc__adam_avx512bf16, "avx512f avx512bw avx512dq avx512_bf16",
     zc__adam_lp_avx512, zc__lion_avx512, zc__adagrad_avx512},
#else
    {"avx512bf16", NULL, "avx512f avx512bw avx512dq avx512_bf16"},
#endif
#if ZC_ADAM_HAVE_AVX512
    {"avx512", zc__adam_avx512, "avx512f avx512bw", zc__adam_lp_avx512, zc__lion_avx512,
     zc__adagrad_avx512},
#else
    {"avx512", NULL, "avx512f avx512bw"},
#endif
#if ZC_ADAM_HAVE_AVX2
    {"avx2", zc__adam_avx2, "avx2 fma f16c", zc__adam_lp_avx2, zc__lion_avx2,
     zc__adagrad_avx2},
#else
    {"avx2", NULL, "avx2 fma f16c"},
#endif
    {"scalar", scalar_kernel, "", zc__adam_lp_scalar, zc__lion_scalar, zc__adagrad_scalar},
};
#define NVARIANTS ((int)(sizeof variants / sizeof variants[0]))

int zc__adam_variant_count(void) { return NVARIANTS; }

const zc_adam_variant *zc__adam_variant(int i)
{
    return i >= 0 && i < NVARIANTS ? &variants[i] : NULL;
}

#if defined(__x86_64__) || defined(__i386__)
static bool cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static bool cpu_avx512bf16(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1u;
}
#endif

static bool cpu_has(const char *name)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!strcmp(name, "avx512bf16"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && cpu_avx512bf16();
    if (!strcmp(name, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    if (!strcmp(name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
#endif
    return !strcmp(name, "scalar");
}

bool zc__adam_variant_usable(int i, const char **why)
{
    const zc_adam_variant *v = zc__adam_variant(i);
    const char *reason = NULL;
    if (!v)
        reason = "no such variant";
    else if (!v->fn)
        reason = "not compiled into this build (the compiler lacks the ISA flags)";
    else if (!cpu_has(v->name))
        reason = "this CPU lacks the instructions";
    if (why)
        *why = reason;
    return reason == NULL;
}

/* The resolved choice: index, or the error found while resolving. */
static pthread_mutex_t sel_lock = PTHREAD_MUTEX_INITIALIZER;
static int sel_idx = -1;
/* sel_idx once resolved without error, read without the lock: every Adam
 * call asks, from every rank thread, and a lock taken by all of them is one
 * a rank can be descheduled holding while the others sleep on it (a shared
 * machine: bench/RESULTS.md, "Contention"). -1 until then, and again after a
 * reset. */
static int sel_ready = -1;
static zc_status sel_status = ZC_OK;
static char sel_msg[256];

static void resolve(void)
{
    const char *env = zc__env("ZC_CPU_ISA");
    char usable[128] = "";
    for (int i = 0; i < NVARIANTS; i++)
        if (zc__adam_variant_usable(i, NULL)) {
            strncat(usable, usable[0] ? " " : "", sizeof usable - strlen(usable) - 1);
            strncat(usable, variants[i].name, sizeof usable - strlen(usable) - 1);
        }
    if (env) {
        int found = -1;
        for (int i = 0; i < NVARIANTS; i++)
            if (!strcmp(env, variants[i].name))
                found = i;
        const char *why = NULL;
        char shown[ZC_ENV_SHOWN_MAX];
        if (found < 0) {
            /* Malformed, like any other variable's bad value; a known
             * variant this CPU cannot run is ZC_ERR_UNSUPPORTED below. */
            snprintf(sel_msg, sizeof sel_msg,
                     "ZC_CPU_ISA='%s': want one of the host Adam variants 'scalar', 'avx2', "
                     "'avx512' or 'avx512bf16'; usable here: %s",
                     zc__env_shown(env, shown, sizeof shown), usable);
            sel_status = ZC_ERR_CONFIG;
        } else if (!zc__adam_variant_usable(found, &why)) {
            snprintf(sel_msg, sizeof sel_msg,
                     "ZC_CPU_ISA='%s' cannot run: %s (needs %s); usable here: %s; unset "
                     "ZC_CPU_ISA to pick the best one",
                     env, why, variants[found].needs, usable);
            sel_status = ZC_ERR_UNSUPPORTED;
        } else {
            sel_idx = found;
        }
    } else {
        for (int i = 0; i < NVARIANTS && sel_idx < 0; i++)
            if (zc__adam_variant_usable(i, NULL))
                sel_idx = i;
    }
    int threads = 0;
    if (sel_status == ZC_OK && zc__pool_default_threads(&threads) == ZC_OK)
        ZC_LOGI("optim", "host Adam: %s variant%s (usable: %s), %d threads",
                variants[sel_idx].name, env ? " forced by ZC_CPU_ISA" : "", usable, threads);
}

zc_status zc__adam_variant_selected(int *idx)
{
    const int ready = __atomic_load_n(&sel_ready, __ATOMIC_ACQUIRE);
    if (ready >= 0) {
        *idx = ready;
        return ZC_OK;
    }
    pthread_mutex_lock(&sel_lock);
    if (sel_idx < 0 && sel_status == ZC_OK)
        resolve();
    int i = sel_idx;
    zc_status st = sel_status;
    if (st == ZC_OK && i >= 0)
        __atomic_store_n(&sel_ready, i, __ATOMIC_RELEASE);
    char msg[sizeof sel_msg];
    memcpy(msg, sel_msg, sizeof msg);
    pthread_mutex_unlock(&sel_lock);
    if (st != ZC_OK)
        return ZC_ERR(st, "%s", msg);
    *idx = i;
    return ZC_OK;
}

void zc__adam_variant_reset(void)
{
    pthread_mutex_lock(&sel_lock);
    __atomic_store_n(&sel_ready, -1, __ATOMIC_RELEASE);
    sel_idx = -1;
    sel_status = ZC_OK;
    sel_msg[0] = 0;
    pthread_mutex_unlock(&sel_lock);
}

int zc__adam_isa_count(void) { return NVARIANTS; }

const char *zc__adam_isa_name(int i, bool *compiled, bool *usable, const char **why)
{
    if (i < 0 || i >= NVARIANTS)
        return NULL;
    *compiled = variants[i].fn != NULL;
    *usable = zc__adam_variant_usable(i, why);
    return variants[i].name;
}

int zc__adam_isa_selected(void)
{
    int idx = -1;
    return zc__adam_variant_selected(&idx) == ZC_OK ? idx : -1;
}

zc_status zc__adam_variant_resolve(int *variant)
{
    if (*variant < 0)
        return zc__adam_variant_selected(variant);
    const char *why = NULL;
    if (!zc__adam_variant_usable(*variant, &why))
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "host Adam variant %s: %s",
                      zc__adam_variant(*variant) ? zc__adam_variant(*variant)->name : "?", why);
    return ZC_OK;
}
