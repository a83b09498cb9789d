/* Random Adam shards for the optimizer tests (tests/optim only).
 *
 * A case owns two identical copies of master/m/v/param_out (one for the
 * reference, one for the code under test) and one gradient buffer. Buffers
 * come from the counting allocator with one spare element, so `offset`
 * (0 or 1 element) can misalign them; `mixed` misaligns only the master. */
#ifndef ZC_TESTS_OPTIM_ADAM_CASE_H
#define ZC_TESTS_OPTIM_ADAM_CASE_H

#include <stdbool.h>

#include "optim/adam.h"

typedef struct ta_case {
    size_t n;
    zc_dtype gdt;
    int odt; /* -1: no copy, else a zc_dtype */
    int offset;
    bool mixed;
    zc_adam_shard ref, test;
    void *bufs[9];
    size_t sizes[9];
} ta_case;

/* Fills a case with random data (specials: inf/NaN/denormal gradients and
 * master values, bf16/fp16 rounding ties) drawn from *rng. */
void ta_case_init(ta_case *c, uint64_t *rng, size_t n, zc_dtype gdt, int odt, int offset,
                  bool mixed, bool specials);
void ta_case_free(ta_case *c);

/* Asserts test == ref within 2 ulp (fp32: master, m, v) and 1 ulp (16-bit
 * copy); NaN must meet NaN. `what` names the case in failure messages.
 * Returns the largest fp32 ulp distance seen. */
uint32_t ta_case_compare(const ta_case *c, const char *what);

/* Asserts test == ref bitwise (every buffer). */
void ta_case_assert_bitwise(const ta_case *c, const char *what);

/* Random hyper-parameters for one step. */
zc_adam_hparams ta_random_hparams(uint64_t *rng, bool adamw, bool bias_correction);

#endif
