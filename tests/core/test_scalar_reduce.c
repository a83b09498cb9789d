/* zc_all_reduce_f64 on the local communicator (rank threads), W 1-4:
 *
 *   - sum, max and min equal a plain rank-order fold written here, bitwise,
 *     on every rank; the sum's inputs are chosen so that another order
 *     (pairwise, reversed) gives a different double, so a tree reduction
 *     would be caught; max and min propagate NaN and handle +-inf;
 *   - 1 and ZC_ALL_REDUCE_F64_MAX values;
 *   - failure agreement: a NULL array, a count out of range or an unknown op
 *     on one rank, and ranks passing different counts or ops, fail every
 *     rank with ZC_ERR_INVALID_ARG and one message naming the rank; values
 *     are unchanged and the engine still works (the next call succeeds);
 *   - before zc_engine_build: ZC_ERR_INVALID_STATE, no exchange;
 *   - called after every step of a stage-3 training, it changes nothing of
 *     the training: the master equals the run without it, bitwise.
 * The same under mpirun, one rank per process: tests/comm/check_mpi.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

#define NV 5

/* Rank r's value i: the sum over ranks of value 0 cancels 1e16 against
 * -1e16 with small terms in between, which only a left-to-right fold rounds
 * the way the reference does. */
static double value(int r, int i)
{
    static const double big[T_MAX_WORLD] = {1e16, 1.0, -1e16, 3.5};
    switch (i) {
    case 0: return big[r];
    case 1: return 0.1 * (r + 1);                   /* 0.1 + 0.2 + ... */
    case 2: return r == 1 ? NAN : (double)r;        /* NaN on rank 1 */
    case 3: return r == 0 ? -INFINITY : -(double)r; /* -inf on rank 0 */
    default: return 1.0 / (r + 3);                  /* inexact thirds, quarters, ... */
    }
}

static double fold(zc_reduce_op op, double a, double b)
{
    if (op == ZC_REDUCE_SUM)
        return a + b;
    if (isnan(a) || isnan(b))
        return NAN;
    return op == ZC_REDUCE_MAX ? fmax(a, b) : fmin(a, b);
}

static bool same_bits(double a, double b)
{
    if (isnan(a) && isnan(b))
        return true;
    return memcmp(&a, &b, sizeof a) == 0;
}

typedef struct srun {
    int world;
    double got[T_MAX_WORLD][3][NV];
    double big[T_MAX_WORLD][ZC_ALL_REDUCE_F64_MAX];
    zc_status pre_build[T_MAX_WORLD];
    zc_status bad_rc[T_MAX_WORLD][5];
    char bad_msg[T_MAX_WORLD][5][512];
    double kept[T_MAX_WORLD][5];      /* values[0] after each refused call */
    double after_bad[T_MAX_WORLD];    /* a sum after the refused calls */
    char err[T_MAX_WORLD][512];
} srun;

#define STRY(call)                                                                          \
    do {                                                                                    \
        zc_status rc_ = (call);                                                             \
        if (rc_ != ZC_OK) {                                                                 \
            snprintf(s->err[rank], sizeof s->err[rank], "%s: %s", #call, zc_last_error()); \
            goto out;                                                                       \
        }                                                                                   \
    } while (0)

static void srank(void *arg, zc_comm *comm, int rank)
{
    srun *s = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    STRY(zc_config_create(&cfg));
    STRY(zc_config_set_int(cfg, "zero_optimization.stage", 2));
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    STRY(zc_engine_create(&e, cfg, comm, &o));
    const int64_t shape = 100;
    if (!zc_param_add(e, "w", &shape, 1, 0))
        STRY(ZC_ERR_INTERNAL);
    double v[ZC_ALL_REDUCE_F64_MAX];
    v[0] = 1;
    s->pre_build[rank] = zc_all_reduce_f64(e, v, 1, ZC_REDUCE_SUM);
    STRY(zc_engine_build(e));
    const zc_reduce_op ops[3] = {ZC_REDUCE_SUM, ZC_REDUCE_MAX, ZC_REDUCE_MIN};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < NV; i++)
            v[i] = value(rank, i);
        STRY(zc_all_reduce_f64(e, v, NV, ops[k]));
        memcpy(s->got[rank][k], v, sizeof s->got[rank][k]);
    }
    for (int i = 0; i < ZC_ALL_REDUCE_F64_MAX; i++)
        v[i] = (double)(rank + 1) * (i + 1);
    STRY(zc_all_reduce_f64(e, v, ZC_ALL_REDUCE_F64_MAX, ZC_REDUCE_SUM));
    memcpy(s->big[rank], v, sizeof s->big[rank]);

    /* Refused calls: the last rank alone is wrong, or the ranks disagree. */
    const bool odd = rank == s->world - 1;
    for (int c = 0; c < 5; c++) {
        v[0] = 42.0 + rank;
        double *vals = v;
        int count = 2;
        zc_reduce_op op = ZC_REDUCE_SUM;
        if (c == 0 && odd) vals = NULL;
        if (c == 1 && odd) count = ZC_ALL_REDUCE_F64_MAX + 1;
        if (c == 2 && odd) op = (zc_reduce_op)7;
        if (c == 3 && odd) count = 1;             /* a different count */
        if (c == 4 && odd) op = ZC_REDUCE_MAX;    /* a different op */
        s->bad_rc[rank][c] = zc_all_reduce_f64(e, vals, count, op);
        snprintf(s->bad_msg[rank][c], sizeof s->bad_msg[rank][c], "%s", zc_last_error());
        s->kept[rank][c] = v[0];
    }
    v[0] = rank + 1;
    STRY(zc_all_reduce_f64(e, v, 1, ZC_REDUCE_SUM));
    s->after_bad[rank] = v[0];
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void check_world(int world)
{
    srun *s = calloc(1, sizeof *s);
    s->world = world;
    char err[512];
    cr_assert(t_on_ranks(world, srank, s, err, sizeof err), "%s", err);
    const zc_reduce_op ops[3] = {ZC_REDUCE_SUM, ZC_REDUCE_MAX, ZC_REDUCE_MIN};
    for (int r = 0; r < world; r++) {
        cr_assert_str_empty(s->err[r], "W %d rank %d: %s", world, r, s->err[r]);
        cr_assert_eq(s->pre_build[r], ZC_ERR_INVALID_STATE, "W %d rank %d before build: %s",
                     world, r, zc_status_str(s->pre_build[r]));
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < NV; i++) {
                double want = value(0, i);
                for (int q = 1; q < world; q++)
                    want = fold(ops[k], want, value(q, i));
                cr_assert(same_bits(s->got[r][k][i], want),
                          "W %d rank %d op %d value %d: %.17g, rank-order fold %.17g", world, r,
                          k, i, s->got[r][k][i], want);
            }
        for (int i = 0; i < ZC_ALL_REDUCE_F64_MAX; i++)
            cr_assert_eq(s->big[r][i], (double)(world * (world + 1) / 2) * (i + 1));
        for (int c = 0; c < 5; c++) {
            cr_assert_eq(s->bad_rc[r][c], world > 1 || c < 3 ? ZC_ERR_INVALID_ARG : ZC_OK,
                         "W %d rank %d refused call %d: %s (%s)", world, r, c,
                         zc_status_str(s->bad_rc[r][c]), s->bad_msg[r][c]);
            if (s->bad_rc[r][c] == ZC_OK)
                continue;
            cr_assert_str_eq(s->bad_msg[r][c], s->bad_msg[0][c], "W %d call %d", world, c);
            char who[32];
            snprintf(who, sizeof who, "rank %d of %d", world - 1, world);
            cr_assert(strstr(s->bad_msg[r][c], who), "W %d call %d: %s", world, c,
                      s->bad_msg[r][c]);
            cr_assert(strstr(s->bad_msg[r][c], "zc_all_reduce_f64"), "%s", s->bad_msg[r][c]);
            cr_assert_eq(s->kept[r][c], 42.0 + r, "W %d rank %d call %d changed the values",
                         world, r, c);
        }
        cr_assert_eq(s->after_bad[r], (double)(world * (world + 1) / 2),
                     "W %d rank %d: the engine did not work after the refused calls", world, r);
    }
    /* The sum's value 0 differs from a pairwise or reversed order for W 4:
     * the check above would not pass for a tree. */
    if (world == 4) {
        double pairwise = (value(0, 0) + value(1, 0)) + (value(2, 0) + value(3, 0));
        double reversed = ((value(3, 0) + value(2, 0)) + value(1, 0)) + value(0, 0);
        cr_assert(!same_bits(s->got[0][0][0], pairwise) && !same_bits(s->got[0][0][0], reversed),
                  "the test's sum does not tell orders apart: %.17g %.17g %.17g",
                  s->got[0][0][0], pairwise, reversed);
    }
    free(s);
}

Test(scalar_reduce, every_op_and_world)
{
    for (int w = 1; w <= T_MAX_WORLD; w++)
        check_world(w);
    t_assert_no_leaks();
}

/* ---- it changes nothing of the training -------------------------------- */

static void reduce_after_step(t_ctx *x, int step, void *arg)
{
    (void)arg;
    double v[2] = {step + 0.5, (double)x->rank};
    if (zc_all_reduce_f64(x->eng, v, 2, ZC_REDUCE_SUM) != ZC_OK || v[1] != 1.0 + 2.0)
        snprintf(x->run->err[x->rank], sizeof x->run->err[x->rank],
                 "rank %d: all-reduce after step %d: %s (sum of ranks %.17g)", x->rank, step,
                 zc_last_error(), v[1]);
}

Test(scalar_reduce, training_unchanged)
{
    t_run ref, r;
    t_run_init(&ref, 3, 3, ZC_DTYPE_BF16);
    ref.steps = 4;
    r = ref;
    r.after_step = reduce_after_step;
    cr_assert(t_engine_run(&ref), "%s", t_run_error(&ref));
    cr_assert(t_engine_run(&r), "%s", t_run_error(&r));
    cr_assert_eq(memcmp(r.master, ref.master, (size_t)t_total_numel() * sizeof(float)), 0,
                 "the all-reduce changed the training");
    free(r.master);
    free(ref.master);
    t_assert_no_leaks();
}
