/* The sum-of-squares kernel's index arithmetic (kernels/sumsq_tile.h), run on
 * the host: no GPU is needed to check where every byte goes.
 *
 *  - Every tile load reads whole 128-byte lines, and a tile's 32 x 16 loads
 *    cover its 32 rows x 256 bytes once each.
 *  - No shared-memory access of the kernel has a bank conflict (a 16-byte
 *    access is served 8 lanes at a time: those 8 must touch 32 different
 *    banks).
 *  - Replaying the kernels' schedule (the groups kernel's tiles and lane
 *    reads, then the tree kernel's in-place levels) with the same helpers
 *    gives the host backend's sum bitwise, for fp32, fp16 and bf16, aligned
 *    or not, with and without a short last block and group.
 *  - The host backend follows the order of device/sumsq_order.h, checked
 *    against a level-by-level computation written here from the order's
 *    text, which differs from a plain left-to-right sum of the partials on
 *    these inputs (so the check can tell the orders apart). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "base/dtype.h"
#include "device/device.h"
#include "helpers.h"
#include "kernels/sumsq_tile.h"

static const unsigned ESZ[2] = {4, 2};

/* The banks of a 16-byte shared access at byte offset off. */
static void banks_of(unsigned off, int hit[32])
{
    for (unsigned w = 0; w < 4; w++)
        hit[(off / 4 + w) % 32]++;
}

/* 8 lanes (a quarter-warp) at these offsets: conflict-free iff every bank is
 * hit exactly once. */
static void expect_no_conflict(const unsigned off[8], const char *what, unsigned a, unsigned q)
{
    int hit[32] = {0};
    for (int i = 0; i < 8; i++)
        banks_of(off[i], hit);
    for (int b = 0; b < 32; b++)
        cr_assert_eq(hit[b], 1, "%s %u, quarter %u: bank %d hit %d times", what, a, q, b, hit[b]);
}

Test(sumsq_tile, loads_cover_the_tile_in_whole_lines_without_bank_conflicts)
{
    cr_assert_eq(ZC_SUMSQ_LOADS_PER_LANE * 32, ZC_SUMSQ_FANIN * ZC_SUMSQ_VECS_PER_ROW);
    for (int d = 0; d < 2; d++) {
        const unsigned esz = ESZ[d];
        cr_assert_eq(zc__sumsq_tiles(esz) * ZC_SUMSQ_TILE_BYTES, ZC_SUMSQ_BLOCK * esz);
        static unsigned char seen[ZC_SUMSQ_FANIN][ZC_SUMSQ_VECS_PER_ROW];
        memset(seen, 0, sizeof seen);
        const size_t g = 3;
        const unsigned t = 5;
        for (unsigned k = 0; k < ZC_SUMSQ_LOADS_PER_LANE; k++) {
            /* The warp's 32 addresses (bytes from x) form 4 whole lines. */
            size_t lines[32];
            for (unsigned l = 0; l < 32; l++) {
                unsigned r = zc__sumsq_load_row(k, l), v = zc__sumsq_load_vec(k, l);
                cr_assert_lt(r, ZC_SUMSQ_FANIN);
                cr_assert_lt(v, ZC_SUMSQ_VECS_PER_ROW);
                seen[r][v]++;
                size_t byte = zc__sumsq_elem(g, r, t, v, esz) * esz;
                cr_assert_eq(byte % 16, 0);
                lines[l] = byte / 128;
            }
            for (unsigned l = 0; l < 32; l++) {
                int same = 0;
                for (unsigned m = 0; m < 32; m++)
                    same += lines[m] == lines[l];
                cr_assert_eq(same, 8, "esz %u load %u: line of lane %u read by %d lanes", esz,
                             k, l, same);
            }
            /* The stores of this load into shared memory, 8 lanes a time. */
            for (unsigned q = 0; q < 4; q++) {
                unsigned off[8];
                for (unsigned i = 0; i < 8; i++) {
                    unsigned l = 8 * q + i;
                    off[i] = zc__sumsq_smem_off(zc__sumsq_load_row(k, l), zc__sumsq_load_vec(k, l));
                    cr_assert_leq(off[i] + 16, ZC_SUMSQ_TILE_SMEM);
                }
                expect_no_conflict(off, "store of load", k, q);
            }
        }
        for (unsigned r = 0; r < ZC_SUMSQ_FANIN; r++)
            for (unsigned v = 0; v < ZC_SUMSQ_VECS_PER_ROW; v++)
                cr_assert_eq(seen[r][v], 1, "row %u vector %u loaded %d times", r, v, seen[r][v]);
    }
    /* The lanes' reads: lane r reads vector v of row r. */
    for (unsigned v = 0; v < ZC_SUMSQ_VECS_PER_ROW; v++)
        for (unsigned q = 0; q < 4; q++) {
            unsigned off[8];
            for (unsigned i = 0; i < 8; i++)
                off[i] = zc__sumsq_smem_off(8 * q + i, v);
            expect_no_conflict(off, "read of vector", v, q);
        }
}

/* ---- the kernels replayed ---------------------------------------------------------------- */

/* Element i as fp32, exactly (what the kernel's widening gives). */
static float elem_f32(const unsigned char *x, unsigned esz, zc_dtype dt, size_t i)
{
    if (esz == 4) {
        float f;
        memcpy(&f, x + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, x + i * 2, 2);
    return dt == ZC_DTYPE_BF16 ? zc__bf16_to_f32(h) : zc__f16_to_f32(h);
}

/* sumsq_groups_kernel for group g, one tile at a time through a shared-memory
 * image, lane by lane. */
static double replay_group(const unsigned char *x, zc_dtype dt, size_t n, size_t g)
{
    const unsigned esz = (unsigned)zc_dtype_size(dt), per = 16 / esz;
    static unsigned char smem[ZC_SUMSQ_TILE_SMEM];
    double part[32] = {0};
    for (unsigned t = 0; t < zc__sumsq_tiles(esz); t++) {
        memset(smem, 0xA5, sizeof smem); /* poison: every byte read must be stored first */
        for (unsigned l = 0; l < 32; l++)
            for (unsigned k = 0; k < ZC_SUMSQ_LOADS_PER_LANE; k++) {
                unsigned r = zc__sumsq_load_row(k, l), v = zc__sumsq_load_vec(k, l);
                size_t e = zc__sumsq_elem(g, r, t, v, esz);
                unsigned char vec[16] = {0}; /* past n: zero bits */
                for (unsigned j = 0; j < per; j++)
                    if (e + j < n)
                        memcpy(vec + j * esz, x + (e + j) * esz, esz);
                memcpy(smem + zc__sumsq_smem_off(r, v), vec, 16);
            }
        for (unsigned l = 0; l < 32; l++)
            for (unsigned v = 0; v < ZC_SUMSQ_VECS_PER_ROW; v++)
                for (unsigned j = 0; j < per; j++) {
                    double d = elem_f32(smem + zc__sumsq_smem_off(l, v), esz, dt, j);
                    part[l] = fma(d, d, part[l]);
                }
    }
    size_t nb = zc__sumsq_nblocks(n), left = nb - g * ZC_SUMSQ_FANIN;
    unsigned rows = left < ZC_SUMSQ_FANIN ? (unsigned)left : ZC_SUMSQ_FANIN;
    double sum = part[0];
    for (unsigned r = 1; r < rows; r++)
        sum += part[r];
    return sum;
}

/* sumsq_tree_kernel: the levels in place at stride 32^(level-1). */
static double replay_tree(double *s, size_t m)
{
    size_t stride = 1;
    while (m > 1) {
        size_t next = m / ZC_SUMSQ_FANIN + (m % ZC_SUMSQ_FANIN != 0);
        for (size_t j = 0; j < next; j++) {
            size_t lo = j * ZC_SUMSQ_FANIN;
            size_t len = m - lo < ZC_SUMSQ_FANIN ? m - lo : ZC_SUMSQ_FANIN;
            double acc = s[lo * stride];
            for (size_t i = 1; i < len; i++)
                acc += s[(lo + i) * stride];
            s[lo * stride] = acc;
        }
        stride *= ZC_SUMSQ_FANIN;
        m = next;
    }
    return m ? s[0] : 0.0;
}

static double replay(const unsigned char *x, zc_dtype dt, size_t n)
{
    size_t ng = zc__sumsq_ngroups(n);
    double *s = malloc((ng ? ng : 1) * sizeof *s);
    for (size_t g = 0; g < ng; g++)
        s[g] = replay_group(x, dt, n, g);
    double v = replay_tree(s, ng);
    free(s);
    return v;
}

/* The order's text, level by level over arrays (independent of both the
 * host's streaming tree and the kernels' in-place one). plain: the old
 * order, every partial added left to right. */
static double by_the_text(const unsigned char *x, zc_dtype dt, size_t n, double *plain)
{
    const unsigned esz = (unsigned)zc_dtype_size(dt);
    size_t m = zc__sumsq_nblocks(n);
    double *lev = malloc((m ? m : 1) * sizeof *lev);
    *plain = 0.0;
    for (size_t b = 0; b < m; b++) {
        double p = 0.0;
        for (size_t i = b * ZC_SUMSQ_BLOCK; i < n && i < (b + 1) * ZC_SUMSQ_BLOCK; i++) {
            double d = elem_f32(x, esz, dt, i);
            p += d * d;
        }
        lev[b] = p;
        *plain += p;
    }
    while (m > 1) {
        size_t next = (m + ZC_SUMSQ_FANIN - 1) / ZC_SUMSQ_FANIN;
        double *up = malloc(next * sizeof *up);
        for (size_t j = 0; j < next; j++) {
            up[j] = lev[j * ZC_SUMSQ_FANIN];
            for (size_t i = j * ZC_SUMSQ_FANIN + 1; i < m && i < (j + 1) * ZC_SUMSQ_FANIN; i++)
                up[j] += lev[i];
        }
        free(lev);
        lev = up;
        m = next;
    }
    double v = m ? lev[0] : 0.0;
    free(lev);
    return v;
}

/* Values over 2^-30 .. 2^30, so that the order of additions shows in the
 * last bits. */
static void fill(uint64_t *s, unsigned char *x, zc_dtype dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = ldexpf(t_rand_range(s, -1, 1), (int)(t_rand_u64(s) % 61) - 30);
        if (dt == ZC_DTYPE_F32)
            memcpy(x + 4 * i, &f, 4);
        else {
            uint16_t h = dt == ZC_DTYPE_BF16 ? zc__f32_to_bf16(f) : zc__f32_to_f16(f);
            memcpy(x + 2 * i, &h, 2);
        }
    }
}

Test(sumsq_tile, replayed_kernels_equal_the_host_bitwise)
{
    zc_device *h = zc__device_host();
    const size_t B = ZC_SUMSQ_BLOCK, G = ZC_SUMSQ_FANIN * ZC_SUMSQ_BLOCK;
    /* One element; short block; whole group; groups + a short block;
     * 33 groups (a level-2 run of 32 and one more, so the tree kernel runs
     * two levels). Deeper trees: tree_kernel_equals_the_streaming_tree. */
    const size_t NS[] = {1, 5, B - 3, G, 2 * G + B + 7, 33 * G + 3 * B + 1};
    const zc_dtype DTS[3] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    uint64_t s = t_seed("sumsq tile");
    int differs_from_plain = 0;
    for (size_t c = 0; c < sizeof NS / sizeof NS[0]; c++)
        for (int d = 0; d < 3; d++) {
            const zc_dtype dt = DTS[d];
            const size_t n = NS[c], esz = zc_dtype_size(dt);
            /* One element in front: a start that is not 16-byte aligned (the
             * kernel's scalar path) reads the same elements. */
            unsigned char *buf = malloc((n + 1) * esz), *x = buf + esz;
            fill(&s, x, dt, n);
            double want = -1, plain = -1;
            cr_assert_eq(h->ops->sumsq(h, x, dt, n, &want, NULL), ZC_OK);
            double text = by_the_text(x, dt, n, &plain);
            cr_assert(memcmp(&want, &text, 8) == 0, "%s n=%zu: host %a, the order's text %a",
                      zc_dtype_name(dt), n, want, text);
            differs_from_plain += memcmp(&want, &plain, 8) != 0;
            double got = replay(x, dt, n);
            cr_assert(memcmp(&want, &got, 8) == 0, "%s n=%zu: host %a, kernels %a",
                      zc_dtype_name(dt), n, want, got);
            free(buf);
        }
    cr_assert_gt(differs_from_plain, 0, "the inputs cannot tell the tree from a plain sum");
    double z = -1;
    cr_assert_eq(h->ops->sumsq(h, NULL, ZC_DTYPE_F32, 0, &z, NULL), ZC_OK);
    cr_assert(z == 0.0 && !signbit(z));
    uint8_t none = 0;
    cr_assert(replay(&none, ZC_DTYPE_F32, 0) == 0.0);
}

/* The tree above the groups at every depth the counts reach cheaply: the
 * tree kernel's in-place levels, the host's streaming tree fed the same
 * level-1 values, and the order's text agree bitwise. */
Test(sumsq_tile, tree_kernel_equals_the_streaming_tree)
{
    static const size_t MS[] = {1, 2, 31, 32, 33, 1023, 1024, 1025, 32 * 1024 + 5, 40000};
    uint64_t s = t_seed("sumsq tree");
    for (size_t c = 0; c < sizeof MS / sizeof MS[0]; c++) {
        const size_t m = MS[c];
        double *v = malloc(m * sizeof *v), *k = malloc(m * sizeof *k), *lev = malloc(m * sizeof *lev);
        zc_sumsq_tree t;
        zc__sumsq_tree_init(&t);
        for (size_t i = 0; i < m; i++) {
            v[i] = k[i] = lev[i] = ldexp(t_rand_unit(&s), (int)(t_rand_u64(&s) % 81) - 40);
            zc__sumsq_tree_push(&t, 1, v[i]);
        }
        double host = zc__sumsq_tree_finish(&t), kern = replay_tree(k, m);
        size_t n = m; /* the text, level by level */
        while (n > 1) {
            size_t next = (n + ZC_SUMSQ_FANIN - 1) / ZC_SUMSQ_FANIN;
            for (size_t j = 0; j < next; j++) {
                double a = lev[j * ZC_SUMSQ_FANIN];
                for (size_t i = j * ZC_SUMSQ_FANIN + 1; i < n && i < (j + 1) * ZC_SUMSQ_FANIN; i++)
                    a += lev[i];
                lev[j] = a; /* j <= 32 j: read before written */
            }
            n = next;
        }
        cr_assert(memcmp(&host, &lev[0], 8) == 0, "m=%zu: streaming %a, text %a", m, host, lev[0]);
        cr_assert(memcmp(&kern, &lev[0], 8) == 0, "m=%zu: kernel %a, text %a", m, kern, lev[0]);
        free(v), free(k), free(lev);
    }
}
