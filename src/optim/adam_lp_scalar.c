/* The scalar Adam reference over 16-bit state (adam.h): one element at a
 * time. Built in the scalar library with -ffp-contract=off (meson.build);
 * the SIMD variants are checked against it bitwise. */
#include "optim/adam.h"
#include "optim/adam_lp_elem.h"

void zc__adam_lp_scalar(const zc_adam_lp_shard *s, const zc_adam_coeffs *c)
{
    const zc_lp_keys k = zc__lp_keys(s);
    for (size_t i = 0; i < s->n; i++)
        zc__adam_lp_elem(s, c, &k, i);
}
