/* The scalar Adagrad reference: one element at a time, exactly adagrad.h's
 * formula. Built in the scalar library with -ffp-contract=off (meson.build);
 * every other variant is checked against it. */
#include "optim/adagrad.h"
#include "optim/adagrad_elem.h"

void zc__adagrad_scalar(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c)
{
    for (size_t i = 0; i < s->n; i++)
        zc__adagrad_elem(s, c, i);
}
