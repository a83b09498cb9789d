/* zc_all_reduce_f64: a few doubles of the training loop (a loss, token
 * counts, metrics) reduced across the engine's ranks.
 *
 * Built on the agreement's status exchange (agree.c) rather than on the
 * communicator's all_reduce: every rank sends a record - its values, count
 * and op, or its error - and every rank reduces all the records itself, in
 * rank order. So
 *   - the result is bitwise the same on every rank and on every backend
 *     (local, MPI, NCCL): the exchange is an all-gather, which moves bits,
 *     and no backend's reduction order (NCCL's ring or tree) enters the sum;
 *   - argument errors on one rank, or ranks that disagree on count or op,
 *     fail every rank alike instead of leaving the others in a collective
 *     their peer never joined;
 *   - it needs no memory of its own: the records are reserved at build.
 * A few hundred bytes per rank, so the all-gather costs what the engine's
 * own agreements cost. */
#include <math.h>
#include <string.h>

#include "core/engine.h"

/* One rank's record. */
typedef struct scalar_rec {
    int32_t op, count;
    double values[ZC_ALL_REDUCE_F64_MAX];
} scalar_rec;

_Static_assert(sizeof(scalar_rec) <= ZC_AGREE_PAYLOAD_BYTES, "a record fits the agreement's");

static const char *op_name(int32_t op)
{
    switch (op) {
    case ZC_REDUCE_SUM: return "sum";
    case ZC_REDUCE_MAX: return "max";
    case ZC_REDUCE_MIN: return "min";
    default: return "unknown";
    }
}

/* This rank's arguments, checked; the message (without the call's name:
 * the agreement adds it) is the last error on failure. */
static zc_status check_args(const double *values, int count, zc_reduce_op op)
{
    if (!values)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "values is NULL");
    if (count < 1 || count > ZC_ALL_REDUCE_F64_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "count is %d; it takes 1 to %d values", count,
                      ZC_ALL_REDUCE_F64_MAX);
    if (op != ZC_REDUCE_SUM && op != ZC_REDUCE_MAX && op != ZC_REDUCE_MIN)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "op is %d; use ZC_REDUCE_SUM, ZC_REDUCE_MAX or ZC_REDUCE_MIN", (int)op);
    return ZC_OK;
}

/* a op b, for the rank-order fold; NaN wins in max and min. */
static double fold(int32_t op, double a, double b)
{
    if (op == ZC_REDUCE_SUM)
        return a + b;
    if (isnan(a) || isnan(b))
        return isnan(a) ? a : b;
    if (op == ZC_REDUCE_MAX)
        return b > a ? b : a;
    return b < a ? b : a;
}

ZC_API zc_status zc_all_reduce_f64(zc_engine *e, double *values, int count, zc_reduce_op op)
{
    ZC_CHECK(zc__eng_enter(e, "zc_all_reduce_f64", true));
    scalar_rec mine;
    memset(&mine, 0, sizeof mine);
    zc_status local = check_args(values, count, op);
    if (local == ZC_OK) {
        mine.op = (int32_t)op;
        mine.count = count;
        memcpy(mine.values, values, (size_t)count * sizeof(double));
    }
    /* Every rank takes part, also one whose arguments are wrong, so the
     * others never wait for it: the whole record is sent whatever count.
     * On the timeline: a loop call of its own (between two steps). */
    const int64_t t0 = zc__timeline_loop_begin(e);
    const zc_status arc =
        zc__eng_agree_keep_with(e, local, "zc_all_reduce_f64", &mine, sizeof mine);
    zc__timeline_loop_end(e, t0, "zc_all_reduce_f64");
    ZC_CHECK(arc);
    /* Every rank reads the same records: the same checks, the same result,
     * folded in rank order. */
    scalar_rec r0, rr;
    memcpy(&r0, zc__eng_agreed_payload(e, 0), sizeof r0);
    double acc[ZC_ALL_REDUCE_F64_MAX];
    memcpy(acc, r0.values, sizeof acc);
    for (int r = 1; r < e->world; r++) {
        memcpy(&rr, zc__eng_agreed_payload(e, r), sizeof rr);
        if (rr.count != r0.count || rr.op != r0.op)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_all_reduce_f64: rank %d of %d passed count %d and op %s, rank 0 "
                          "count %d and op %s; every rank must pass the same",
                          r, e->world, (int)rr.count, op_name(rr.op), (int)r0.count,
                          op_name(r0.op));
        for (int i = 0; i < count; i++)
            acc[i] = fold(r0.op, acc[i], rr.values[i]);
    }
    memcpy(values, acc, (size_t)count * sizeof(double));
    return ZC_OK;
}
