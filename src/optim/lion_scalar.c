/* The scalar Lion reference: one element at a time, exactly lion.h's
 * formula. Built in the scalar library with -ffp-contract=off (meson.build);
 * every other variant is checked against it. */
#include "optim/lion.h"
#include "optim/lion_elem.h"

void zc__lion_scalar(const zc_lion_shard *s, const zc_lion_coeffs *c)
{
    for (size_t i = 0; i < s->n; i++)
        zc__lion_elem(s, c, i);
}
