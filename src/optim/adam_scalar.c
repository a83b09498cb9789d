/* The scalar Adam reference: one element at a time, exactly the formula of
 * adam.h. Built as its own static library with -ffp-contract=off (see
 * meson.build) so no FMA changes its rounding; every other variant is checked
 * against it. */
#include "optim/adam.h"
#include "optim/adam_elem.h"

void zc__adam_scalar(const zc_adam_shard *s, const zc_adam_coeffs *c)
{
    for (size_t i = 0; i < s->n; i++)
        zc__adam_elem(s, c, i);
}
