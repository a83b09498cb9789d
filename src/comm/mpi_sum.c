/* The rank-order arithmetic of the MPI communicator's reductions (mpi.c):
 * which slice of an all-reduce each rank owns, the fp32 adds of the
 * contributions in rank order, and MAX in the local communicator's order -
 * what keeps the results bitwise equal to the local communicator's. */
#include <stdint.h>
#include <string.h>

#include "comm/mpi_parts.h"

/* all_reduce's split: rank k owns [n*k/W, n*(k+1)/W), the local
 * communicator's. los has W+1 entries. */
void zc__mpi_ranges(size_t n, int W, size_t *los)
{
    for (int k = 0; k <= W; k++)
        los[k] = n * (size_t)k / (size_t)W;
}

/* d[i] += s[i]. Built with the dynamic vectoriser cost model: -O2's
 * "very cheap" model leaves this loop scalar (its trip count is unknown),
 * and it is the all-reduce's one pass over the data. Lane-wise adds keep
 * each element's order of additions, so the bits do not change. */
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
void zc__mpi_add_f32(float *restrict d, const float *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

/* d[i] = a[i] + b[i]; d may be a or b (in-place collectives), so no
 * restrict: the compiler checks for overlap and still vectorises. */
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
void zc__mpi_add2_f32(float *d, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] + b[i];
}

int zc__mpi_overlaps(const void *a, const void *b, size_t bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bytes && y < x + bytes;
}

/* The local communicator's MAX (max_reduce_host): rank order, the first
 * maximum kept, a NaN replaces whatever came before. */
void zc__mpi_max_rank_order(void *dst, const void *scratch, size_t n, int W, zc_dtype dt)
{
    size_t es = zc_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        double best = 0;
        const unsigned char *pick = NULL;
        for (int r = 0; r < W; r++) {
            const unsigned char *p = (const unsigned char *)scratch + ((size_t)r * n + i) * es;
            double v;
            if (dt == ZC_DTYPE_F64) { double x; memcpy(&x, p, 8); v = x; }
            else if (dt == ZC_DTYPE_I32) { int32_t x; memcpy(&x, p, 4); v = x; }
            else { float x; memcpy(&x, p, 4); v = x; }
            if (r == 0 || v > best || v != v) {
                best = v;
                pick = p;
            }
        }
        memcpy((unsigned char *)dst + i * es, pick, es);
    }
}
