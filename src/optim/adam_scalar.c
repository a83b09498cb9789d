/* The scalar Adam reference: one element at a time, exactly the formula of
 * adam.h, in either arithmetic. Built as its own static library with
 * -ffp-contract=off (see meson.build) so no FMA the compiler chose changes
 * its rounding; every other variant is checked against it. */
#include "optim/adam.h"
#include "optim/adam_elem.h"

void zc__adam_scalar(const zc_adam_shard *s, const zc_adam_coeffs *c)
{
    if (c->arith == ZC_ADAM_ARITH_DEEPSPEED) {
        for (size_t i = 0; i < s->n; i++)
            zc__adam_elem_ds(s, c, i);
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        zc__adam_elem(s, c, i);
}
