/* All-to-all on the local communicator (comm.h): block k of rank r's recv
 * is block r of rank k's send, checked against the inputs themselves for
 * W = 1..6, every dtype, counts 0, 1 and uneven ones; inside a group beside
 * other collectives; counts that differ between ranks fail on every rank
 * with one message. (The MPI backend is held to this one and to the same
 * reference by tests/comm/mpi_helper.c under mpirun; NCCL's by gpu/nccl.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "base/dtype.h"
#include "helpers.h"

enum { MAXW = 6, MAXN = 1031 };

typedef struct a2a_ctx {
    zc_comm *comms[MAXW];
    int world;
    size_t n[MAXW]; /* per rank, normally equal */
    zc_dtype dt;
    bool grouped;
    unsigned char *send[MAXW], *recv[MAXW];
    float extra_in[MAXW][64], extra_out[MAXW][64];
    zc_status rc[MAXW];
    char err[MAXW][256];
} a2a_ctx;

/* Rank r's send byte i: distinct for every (rank, offset). */
static unsigned char byte_of(int r, size_t i) { return (unsigned char)(r * 131 + i * 7 + (i >> 8)); }

static void rank_fn(int r, void *p)
{
    a2a_ctx *x = p;
    zc_comm *c = x->comms[r];
    if (x->grouped) {
        x->rc[r] = zc__comm_group_start(c);
        for (int i = 0; i < 64; i++)
            x->extra_in[r][i] = (float)(r + i);
        if (x->rc[r] == ZC_OK)
            x->rc[r] = zc__all_reduce(c, x->extra_in[r], x->extra_out[r], 64, ZC_DTYPE_F32,
                                      ZC_RED_SUM, NULL);
        if (x->rc[r] == ZC_OK)
            x->rc[r] = zc__all_to_all(c, x->send[r], x->recv[r], x->n[r], x->dt, NULL);
        const zc_status e = zc__comm_group_end(c);
        if (x->rc[r] == ZC_OK)
            x->rc[r] = e;
    } else {
        x->rc[r] = zc__all_to_all(c, x->send[r], x->recv[r], x->n[r], x->dt, NULL);
    }
    if (x->rc[r] != ZC_OK)
        snprintf(x->err[r], sizeof x->err[r], "%s", zc_last_error());
}

static void run(a2a_ctx *x, int W, zc_dtype dt, size_t n, bool grouped)
{
    memset(x, 0, sizeof *x);
    x->world = W;
    x->dt = dt;
    x->grouped = grouped;
    const size_t es = zc_dtype_size(dt), bytes = n * (size_t)W * es;
    cr_assert_eq(zc_comm_local_world(W, x->comms), ZC_OK);
    for (int r = 0; r < W; r++) {
        x->n[r] = n;
        x->send[r] = malloc(bytes + 1);
        x->recv[r] = malloc(bytes + 1);
        for (size_t i = 0; i < bytes; i++)
            x->send[r][i] = byte_of(r, i);
        memset(x->recv[r], 0xa5, bytes + 1);
    }
}

static void done(a2a_ctx *x)
{
    for (int r = 0; r < x->world; r++) {
        zc_comm_destroy(x->comms[r]);
        free(x->send[r]);
        free(x->recv[r]);
    }
    t_assert_no_leaks();
}

static void check(const a2a_ctx *x, size_t n, const char *what)
{
    const size_t es = zc_dtype_size(x->dt), blk = n * es;
    for (int r = 0; r < x->world; r++) {
        cr_assert_eq(x->rc[r], ZC_OK, "%s rank %d: %s", what, r, x->err[r]);
        for (int k = 0; k < x->world; k++)
            for (size_t i = 0; i < blk; i++)
                cr_assert_eq(x->recv[r][(size_t)k * blk + i], byte_of(k, (size_t)r * blk + i),
                             "%s: rank %d block %d byte %zu", what, r, k, i);
        cr_assert_eq(x->recv[r][(size_t)x->world * blk], 0xa5, "%s: rank %d wrote past its "
                     "buffer", what, r);
        if (x->grouped)
            for (int i = 0; i < 64; i++) {
                float want = 0;
                for (int k = 0; k < x->world; k++)
                    want += (float)(k + i);
                cr_assert_eq(x->extra_out[r][i], want, "%s: the grouped all-reduce", what);
            }
    }
}

Test(comm_all_to_all, blocks_in_rank_order)
{
    static a2a_ctx x;
    static const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F64,
                                   ZC_DTYPE_I32};
    static const size_t ns[] = {0, 1, 3, 64, MAXN};
    for (int W = 1; W <= MAXW; W++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
                for (int g = 0; g < 2; g++) {
                    run(&x, W, dts[d], ns[k], g);
                    t_run_ranks(W, rank_fn, &x);
                    char what[96];
                    snprintf(what, sizeof what, "W=%d %s n=%zu%s", W, zc_dtype_name(dts[d]),
                             ns[k], g ? " grouped" : "");
                    check(&x, ns[k], what);
                    done(&x);
                }
}

Test(comm_all_to_all, mismatched_counts_fail_on_every_rank)
{
    static a2a_ctx x;
    run(&x, 3, ZC_DTYPE_F32, 10, false);
    x.n[2] = 9;
    t_run_ranks(3, rank_fn, &x);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(x.rc[r], ZC_ERR_COMM, "rank %d: %s", r, x.err[r]);
        cr_assert(strstr(x.err[r], "all_to_all"), "rank %d: %s", r, x.err[r]);
    }
    done(&x);
}
