/* Host Adam variants and how a shard is split over threads (internal to
 * src/optim; the tests and the bench use it to run one variant directly).
 * The element-wise optimizers (Lion, Adagrad) share the table: a variant is
 * an ISA, and its row holds that ISA's kernel of each optimizer, so
 * ZC_CPU_ISA and the choice of the best variant apply to all of them.
 *
 * Variants are listed best first. Each SIMD variant lives in its own file,
 * built as its own static library with only its ISA flags; a variant that the
 * compiler could not build has fn == NULL. zc__adam_host picks the first
 * variant that is compiled and that the CPU supports, or the one ZC_CPU_ISA
 * names. */
#ifndef ZC_OPTIM_ADAM_ISA_H
#define ZC_OPTIM_ADAM_ISA_H

#include <stdbool.h>

#include "base/dtype.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lion.h"

/* Kernel flags. */
#define ZC_ADAM_NT 0x1u /* non-temporal stores (the shard is larger than the caches) */

typedef void (*zc_adam_kernel_fn)(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags);
/* The same ISA's kernel over 16-bit state (adam.h). */
typedef void (*zc_adam_lp_fn)(const zc_adam_lp_shard *s, const zc_adam_coeffs *c);
/* The same ISA's Lion and Adagrad kernels (lion.h, adagrad.h). */
typedef void (*zc_lion_fn)(const zc_lion_shard *s, const zc_lion_coeffs *c);
typedef void (*zc_adagrad_fn)(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c);

typedef struct zc_adam_variant {
    const char *name;     /* scalar, avx2, avx512, avx512bf16: the ZC_CPU_ISA values */
    zc_adam_kernel_fn fn; /* NULL when this build does not contain it */
    const char *needs;    /* CPU features it needs, for messages */
    zc_adam_lp_fn lp_fn;  /* set whenever fn is */
    zc_lion_fn lion_fn;   /* set whenever fn is */
    zc_adagrad_fn adagrad_fn; /* set whenever fn is */
} zc_adam_variant;

int zc__adam_variant_count(void);
const zc_adam_variant *zc__adam_variant(int i);

/* True when variant i is compiled in and this CPU runs it; otherwise false
 * with *why (may be NULL) set to a static reason. */
bool zc__adam_variant_usable(int i, const char **why);

/* The variant zc__adam_host uses: ZC_CPU_ISA if set, else the best usable one.
 * Resolved once and logged once at INFO; ZC_ERR_CONFIG when ZC_CPU_ISA names
 * no variant, ZC_ERR_UNSUPPORTED (with the reason) when it names one this
 * build or CPU cannot run. */
zc_status zc__adam_variant_selected(int *idx);

/* A caller's variant: *variant < 0 becomes the selected one
 * (zc__adam_variant_selected's errors); else ZC_ERR_UNSUPPORTED naming it
 * and the reason when this build or CPU cannot run it. */
zc_status zc__adam_variant_resolve(int *variant);

/* Test hook: forget the resolved choice so ZC_CPU_ISA is read again. */
void zc__adam_variant_reset(void);

/* Runs variant `variant` (-1: the selected one) over s with `nthreads` threads
 * of the host pool (0: the pool's default size). The shard is cut into tiles
 * of ZC_ADAM_TILE elements and thread k of T takes the contiguous tiles
 * [k*ntiles/T, (k+1)*ntiles/T): every element is computed by the same code
 * whatever T is, so the result is bitwise independent of the thread count.
 * Shards of fewer than ZC_ADAM_SMALL elements run on the calling thread. */
zc_status zc__adam_host_run(const zc_adam_shard *s, const zc_adam_coeffs *c, int variant,
                            int nthreads);

/* The threads zc__adam_host_run runs a shard of n elements on when asked for
 * `want` (>= 1): 1 below ZC_ADAM_SMALL, at most one per tile. */
int zc__adam_host_threads(size_t n, int want);

/* Flags zc__adam_host_run passes to the kernels for a shard of n elements. */
unsigned zc__adam_flags_for(const zc_adam_shard *s);

/* Validates a shard (non-NULL buffers, supported dtypes). */
zc_status zc__adam_shard_check(const zc_adam_shard *s, const char *who);

#define ZC_ADAM_TILE ((size_t)16384)  /* 64 KiB of each fp32 stream: L2-sized working set */
#define ZC_ADAM_SMALL ((size_t)65536) /* below this, waking threads costs more than it saves */

/* Elements [lo, hi) of s as a shard of its own. */
static inline zc_adam_shard zc__adam_shard_slice(const zc_adam_shard *s, size_t lo, size_t hi)
{
    zc_adam_shard r = *s;
    r.master = s->master + lo;
    r.m = s->m + lo;
    r.v = s->v + lo;
    r.grad = (const char *)s->grad + lo * zc_dtype_size(s->grad_dtype);
    if (s->param_out)
        r.param_out = (char *)s->param_out + lo * zc_dtype_size(s->param_out_dtype);
    r.n = hi - lo;
    return r;
}

/* The SIMD kernels (each defined in its own per-ISA library when built). */
void zc__adam_avx2(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags);
void zc__adam_avx512(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags);
void zc__adam_avx512bf16(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags);

#endif
