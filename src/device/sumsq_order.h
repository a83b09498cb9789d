/* The order of the sum of squares behind the global gradient norm: one
 * definition for the host backend, the CUDA kernels and the tests, so that
 * every backend and every ZeRO stage adds the same numbers in the same order
 * and gets the same bits.
 *
 * For x[0..n) (fp32, fp16 or bf16, widened exactly to fp64):
 *   1. Blocks: x is cut into blocks of ZC_SUMSQ_BLOCK consecutive elements
 *      (the last one shorter). Block b's partial is the left-to-right sum
 *      p_b = ((x_i^2 + x_{i+1}^2) + x_{i+2}^2) + ...  over its elements, in
 *      fp64, each square exact (a float's 24-bit significand squared fits in
 *      53 bits), so squaring and adding may be one fused multiply-add.
 *   2. Tree: the partials p_0 .. p_{m-1} are replaced by the left-to-right
 *      sums of consecutive runs of ZC_SUMSQ_FANIN (runs start at multiples
 *      of the fan-in; the last run may be shorter; a run of one is its
 *      value), and so on level by level until one value is left: the sum.
 *      n = 0 gives +0.0. A run's left-to-right sum starts with its first
 *      value (the same as starting from +0.0: every value is >= +0.0 or
 *      NaN).
 * Up to ZC_SUMSQ_FANIN blocks (131072 elements) the tree is one run: the
 * plain left-to-right sum of the block partials.
 *
 * Why a tree: a left-to-right sum of all n / 4096 partials is a chain of
 * dependent fp64 additions that no processor can run in parallel (at 10^8
 * bf16 elements, 24415 additions: on a GPU longer than reading the 200 MB).
 * The tree's first level is what one GPU warp computes from its 32 lanes'
 * blocks; the levels above are a few microseconds on one thread block.
 *
 * Plain C (static inline): included by src/device (gcc) and by kernels/ (nvcc,
 * where ZC_SUMSQ_HD makes the index helpers callable on the device too). */
#ifndef ZC_DEVICE_SUMSQ_ORDER_H
#define ZC_DEVICE_SUMSQ_ORDER_H

#include <stddef.h>

#ifdef __CUDACC__
#define ZC_SUMSQ_HD __host__ __device__
#else
#define ZC_SUMSQ_HD
#endif

/* Elements per block partial. */
#define ZC_SUMSQ_BLOCK 4096
/* Values per run of the tree; also the blocks of one level-1 node (a GPU
 * warp's 32 lanes each own one block). */
#define ZC_SUMSQ_FANIN 32
/* Most tree levels a size_t count can need (32^13 > 2^64). */
#define ZC_SUMSQ_MAX_LEVELS 14

/* Block partials for n elements. */
ZC_SUMSQ_HD static inline size_t zc__sumsq_nblocks(size_t n)
{
    return n / ZC_SUMSQ_BLOCK + (n % ZC_SUMSQ_BLOCK != 0);
}

/* Level-1 nodes (runs of ZC_SUMSQ_FANIN block partials) for n elements:
 * what the stream-ordered form keeps in its scratch. */
ZC_SUMSQ_HD static inline size_t zc__sumsq_ngroups(size_t n)
{
    size_t nb = zc__sumsq_nblocks(n);
    return nb / ZC_SUMSQ_FANIN + (nb % ZC_SUMSQ_FANIN != 0);
}

/* The tree (step 2) fed one value at a time, in order, in O(levels) memory:
 * level l holds the running left-to-right sum of the current run at that
 * level and how many values it has taken. A full run moves up a level. */
typedef struct zc_sumsq_tree {
    double acc[ZC_SUMSQ_MAX_LEVELS];
    unsigned cnt[ZC_SUMSQ_MAX_LEVELS];
} zc_sumsq_tree;

static inline void zc__sumsq_tree_init(zc_sumsq_tree *t)
{
    for (int l = 0; l < ZC_SUMSQ_MAX_LEVELS; l++) {
        t->acc[l] = 0.0;
        t->cnt[l] = 0;
    }
}

/* Adds v as the next value of level `level` (0: a block partial). */
static inline void zc__sumsq_tree_push(zc_sumsq_tree *t, int level, double v)
{
    for (int l = level; l < ZC_SUMSQ_MAX_LEVELS; l++) {
        t->acc[l] = t->cnt[l] ? t->acc[l] + v : v;
        if (++t->cnt[l] < ZC_SUMSQ_FANIN)
            return;
        v = t->acc[l]; /* a full run: its sum is the next value one level up */
        t->cnt[l] = 0;
    }
}

/* The sum: the unfinished (shorter) runs close from the bottom up, each
 * becoming the last value of the level above, until a level holds the only
 * value left. */
static inline double zc__sumsq_tree_finish(zc_sumsq_tree *t)
{
    for (int l = 0; l < ZC_SUMSQ_MAX_LEVELS; l++) {
        int above = 0;
        for (int u = l + 1; u < ZC_SUMSQ_MAX_LEVELS; u++)
            above |= t->cnt[u] != 0;
        if (!t->cnt[l])
            continue;
        if (!above && t->cnt[l] == 1)
            return t->acc[l];
        double v = t->acc[l];
        t->cnt[l] = 0;
        zc__sumsq_tree_push(t, l + 1, v);
    }
    return 0.0; /* nothing was pushed: n = 0 */
}

#endif
