/* Local communicator: collectives between threads, rank-order sums. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "base/dtype.h"
#include "helpers.h"

enum { N = 1031 }; /* not a multiple of any world size */

typedef struct world_ctx {
    zc_comm *comms[8];
    int world;
    float in[8][4 * N];
    float out[8][4 * N];
    uint16_t in16[8][N], out16[8][N];
    zc_status rc[8];
} world_ctx;

static float value(int rank, int i) { return (float)((rank + 1) * 0.37 + i * 1e-3 - 0.5); }

static void make_world(world_ctx *w, int world)
{
    memset(w, 0, sizeof *w);
    w->world = world;
    cr_assert_eq(zc_comm_local_world(world, w->comms), ZC_OK);
    for (int r = 0; r < world; r++)
        for (int i = 0; i < 4 * N; i++)
            w->in[r][i] = value(r, i);
}

static void end_world(world_ctx *w)
{
    for (int r = 0; r < w->world; r++)
        zc_comm_destroy(w->comms[r]);
    t_assert_no_leaks();
}

static void do_all_reduce_inplace(int r, void *p)
{
    world_ctx *w = p;
    w->rc[r] = zc__all_reduce(w->comms[r], w->in[r], w->in[r], N, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
}

Test(comm_local, all_reduce_in_place_rank_order)
{
    static world_ctx w;
    for (int W = 1; W <= 4; W++) {
        make_world(&w, W);
        t_run_ranks(W, do_all_reduce_inplace, &w);
        for (int r = 0; r < W; r++) {
            cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
            for (int i = 0; i < N; i++) {
                float want = value(0, i);
                for (int k = 1; k < W; k++)
                    want += value(k, i);
                cr_assert_eq(w.in[r][i], want, "W=%d rank %d elem %d", W, r, i);
            }
        }
        end_world(&w);
    }
}

static void do_reduce_scatter_gather(int r, void *p)
{
    world_ctx *w = p;
    /* reduce-scatter into this rank's slice of its own send buffer, then
     * all-gather the slices back in place: together an all-reduce. */
    float *slice = w->in[r] + (size_t)r * N;
    w->rc[r] = zc__reduce_scatter(w->comms[r], w->in[r], slice, N, ZC_DTYPE_F32, NULL);
    if (w->rc[r] == ZC_OK)
        w->rc[r] = zc__all_gather(w->comms[r], slice, w->out[r], N, ZC_DTYPE_F32, NULL);
}

Test(comm_local, reduce_scatter_then_all_gather)
{
    static world_ctx w;
    for (int W = 1; W <= 4; W++) {
        make_world(&w, W);
        t_run_ranks(W, do_reduce_scatter_gather, &w);
        for (int r = 0; r < W; r++) {
            cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
            for (int i = 0; i < W * N; i++) {
                float want = value(0, i);
                for (int k = 1; k < W; k++)
                    want += value(k, i);
                cr_assert_eq(w.out[r][i], want, "W=%d rank %d elem %d", W, r, i);
            }
        }
        end_world(&w);
    }
}

static void do_bf16_all_reduce(int r, void *p)
{
    world_ctx *w = p;
    for (int i = 0; i < N; i++)
        w->in16[r][i] = zc__f32_to_bf16(value(r, i));
    w->rc[r] = zc__all_reduce(w->comms[r], w->in16[r], w->out16[r], N, ZC_DTYPE_BF16, ZC_RED_SUM,
                              NULL);
}

Test(comm_local, bf16_summed_in_fp32_rounded_once)
{
    static world_ctx w;
    make_world(&w, 3);
    t_run_ranks(3, do_bf16_all_reduce, &w);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(w.rc[r], ZC_OK);
        for (int i = 0; i < N; i++) {
            float acc = 0;
            for (int k = 0; k < 3; k++)
                acc += zc__bf16_to_f32(zc__f32_to_bf16(value(k, i)));
            cr_assert_eq(w.out16[r][i], zc__f32_to_bf16(acc));
        }
    }
    end_world(&w);
}

static void do_broadcast_max(int r, void *p)
{
    world_ctx *w = p;
    w->rc[r] = zc__broadcast(w->comms[r], w->in[r], N, ZC_DTYPE_F32, 2, NULL);
    float flag = r == 1 ? 1.0f : 0.0f, got = -1;
    if (w->rc[r] == ZC_OK)
        w->rc[r] = zc__all_reduce(w->comms[r], &flag, &got, 1, ZC_DTYPE_F32, ZC_RED_MAX, NULL);
    w->out[r][0] = got;
}

Test(comm_local, broadcast_and_max)
{
    static world_ctx w;
    make_world(&w, 4);
    t_run_ranks(4, do_broadcast_max, &w);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
        for (int i = 0; i < N; i++)
            cr_assert_eq(w.in[r][i], value(2, i));
        cr_assert_eq(w.out[r][0], 1.0f);
    }
    end_world(&w);
}

static void do_mismatch(int r, void *p)
{
    world_ctx *w = p;
    size_t n = r == 0 ? N : N - 1;
    w->rc[r] = zc__all_reduce(w->comms[r], w->in[r], w->out[r], n, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
}

Test(comm_local, mismatched_counts_fail_on_every_rank)
{
    static world_ctx w;
    make_world(&w, 2);
    t_run_ranks(2, do_mismatch, &w);
    cr_assert_eq(w.rc[0], ZC_ERR_COMM);
    cr_assert_eq(w.rc[1], ZC_ERR_COMM);
    end_world(&w);
}

static void do_skip_one(int r, void *p)
{
    world_ctx *w = p;
    if (r == 1) {
        w->rc[r] = ZC_OK; /* this rank never calls the collective */
        return;
    }
    w->rc[r] = zc__all_reduce(w->comms[r], w->in[r], w->out[r], N, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
}

Test(comm_local, missing_rank_times_out_instead_of_hanging)
{
    setenv("ZC_COMM_TIMEOUT", "0.3", 1);
    static world_ctx w;
    make_world(&w, 2);
    t_run_ranks(2, do_skip_one, &w);
    cr_assert_eq(w.rc[0], ZC_ERR_COMM);
    end_world(&w);
}

/* Rank r's wait counts (zc__comm_wait_counts), read from any thread. */
static zc_comm_wait_counts counts_of(zc_comm *c)
{
    zc_comm_wait_counts n;
    cr_assert(zc__comm_wait_counts(c, &n), "the local backend counts its waits");
    return n;
}

static zc_comm_wait_counts late_before[2], late_after[2];

static void do_late_peer(int r, void *p)
{
    world_ctx *w = p;
    late_before[r] = counts_of(w->comms[r]);
    /* Rank 1 comes only once rank 0 is asleep on the futex: a waiter that
     * spun instead would never get there, and the test would not end. */
    if (r == 1)
        while (counts_of(w->comms[0]).sleeps == late_before[0].sleeps)
            nanosleep(&(struct timespec){0, 1000000L}, NULL);
    w->rc[r] = zc__all_reduce(w->comms[r], w->in[r], w->out[r], N, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
    late_after[r] = counts_of(w->comms[r]);
}

/* A rank whose peer comes late sleeps (a futex) instead of spinning: with
 * ranks sharing cores, the waiter leaves its core to the rank it waits for.
 * Held by what the wait did - the first rank waited and slept, and the
 * sleep ended with the peer's arrival, which waited for nothing - not by a
 * CPU time, which depends on what else the cores run. */
Test(comm_local, waiting_for_a_late_rank_sleeps)
{
    static world_ctx w;
    make_world(&w, 2);
    t_run_ranks(2, do_late_peer, &w);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < N; i++)
        cr_assert_eq(w.out[0][i], value(0, i) + value(1, i), "elem %d", i);
    /* One collective: two rendezvous (post and finish) count as one meeting. */
    for (int r = 0; r < 2; r++)
        cr_assert_eq(late_after[r].meetings - late_before[r].meetings, 1, "rank %d", r);
    cr_assert_geq(late_after[0].waits - late_before[0].waits, 1);
    cr_assert_geq(late_after[0].sleeps - late_before[0].sleeps, 1);
    end_world(&w);
}

/* Many rendezvous back to back, the ranks arriving in a different order
 * each time (a rank sleeps now and then, so some waits are met in the spin
 * and some on the futex): every round's sum is that round's, so no rank ever
 * ran ahead into the next rendezvous while another still read this one's
 * slots. */
enum { ROUNDS = 4000 };
static double round_sums[4][ROUNDS];

static void do_many_rounds(int r, void *p)
{
    world_ctx *w = p;
    unsigned seed = 12345u + (unsigned)r;
    for (int k = 0; k < ROUNDS && w->rc[r] == ZC_OK; k++) {
        double x = (double)k * 10.0 + r, y = 0;
        if (rand_r(&seed) % 16 == 0) {
            struct timespec ts = {0, (long)(rand_r(&seed) % 200) * 1000L};
            nanosleep(&ts, NULL);
        }
        w->rc[r] = zc__all_reduce(w->comms[r], &x, &y, 1, ZC_DTYPE_F64, ZC_RED_SUM, NULL);
        round_sums[r][k] = y;
    }
}

Test(comm_local, rendezvous_back_to_back_stay_in_step)
{
    static world_ctx w;
    for (int W = 2; W <= 4; W++) {
        make_world(&w, W);
        t_run_ranks(W, do_many_rounds, &w);
        for (int r = 0; r < W; r++) {
            cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
            for (int k = 0; k < ROUNDS; k++)
                cr_assert_eq(round_sums[r][k], (double)k * 10.0 * W + W * (W - 1) / 2.0,
                             "W=%d rank %d round %d", W, r, k);
        }
        end_world(&w);
    }
}

Test(comm_local, every_rank_is_local)
{
    static world_ctx w;
    for (int W = 1; W <= 4; W++) {
        make_world(&w, W);
        for (int r = 0; r < W; r++)
            cr_assert_eq(zc_comm_local_size(w.comms[r]), W, "W=%d rank %d", W, r);
        end_world(&w);
    }
    cr_assert_eq(zc_comm_local_size(NULL), -1);
}

Test(comm_local, world_size_zero_is_an_error)
{
    zc_comm *c[1] = {NULL};
    cr_assert_eq(zc_comm_local_world(0, c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "world size 0"), "%s", zc_last_error());
    t_assert_no_leaks();
}

/* Empty collectives complete on every rank and touch nothing. */
static void do_count_zero(int r, void *p)
{
    world_ctx *w = p;
    zc_status rc = zc__all_reduce(w->comms[r], w->in[r], w->in[r], 0, ZC_DTYPE_F32, ZC_RED_SUM,
                                  NULL);
    if (rc == ZC_OK)
        rc = zc__all_reduce(w->comms[r], w->in[r], w->out[r], 0, ZC_DTYPE_F32, ZC_RED_MAX, NULL);
    if (rc == ZC_OK)
        rc = zc__reduce_scatter(w->comms[r], w->in[r], w->out[r], 0, ZC_DTYPE_BF16, NULL);
    if (rc == ZC_OK)
        rc = zc__all_gather(w->comms[r], w->in[r], w->out[r], 0, ZC_DTYPE_F16, NULL);
    if (rc == ZC_OK)
        rc = zc__broadcast(w->comms[r], w->in[r], 0, ZC_DTYPE_F32, 1, NULL);
    w->rc[r] = rc;
}

Test(comm_local, count_zero_is_a_no_op)
{
    static world_ctx w;
    make_world(&w, 3);
    t_run_ranks(3, do_count_zero, &w);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(w.rc[r], ZC_OK, "%s", zc_last_error());
        for (int i = 0; i < 4 * N; i++) {
            cr_assert_eq(w.in[r][i], value(r, i));
            cr_assert_eq(w.out[r][i], 0.0f);
        }
    }
    end_world(&w);
}

/* A MAX over a dtype the local backend cannot compare fails on EVERY rank,
 * also on ranks whose share of a short buffer is empty (count 1, world 3),
 * so no rank goes on believing it holds the maximum. */
static void do_max_f16(int r, void *p)
{
    world_ctx *w = p;
    w->rc[r] = zc__all_reduce(w->comms[r], w->in16[r], w->out16[r], 1, ZC_DTYPE_F16, ZC_RED_MAX,
                              NULL);
}

Test(comm_local, unsupported_max_fails_on_every_rank)
{
    static world_ctx w;
    make_world(&w, 3);
    t_run_ranks(3, do_max_f16, &w);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(w.rc[r], ZC_ERR_INVALID_ARG, "rank %d returned %d", r, (int)w.rc[r]);
    end_world(&w);
}

/* A group's collectives run together at group_end, in one rendezvous (what
 * the engine's grouped publish and reduction bucket rely on): the calls
 * inside meet no other rank, so they return before the other ranks arrive,
 * and the results are those of the same collectives outside a group. Rank 1
 * comes 400 ms late; rank 0's calls inside the group must not meet it. */
typedef struct group_ctx {
    world_ctx *w;
    uint64_t inside[8], at_end[8]; /* meetings during the calls, and group_end's */
    int ops;                       /* collectives in the group */
} group_ctx;

static void do_grouped_gathers(int r, void *p)
{
    group_ctx *g = p;
    world_ctx *w = g->w;
    zc_comm *c = w->comms[r];
    if (r == 1)
        nanosleep(&(struct timespec){0, 400000000L}, NULL);
    const uint64_t m0 = counts_of(c).meetings;
    w->rc[r] = zc__comm_group_start(c);
    const int half = N / 2;
    for (int k = 0; k < g->ops && w->rc[r] == ZC_OK; k++)
        w->rc[r] = zc__all_gather(c, w->in[r] + (size_t)k * 3, w->out[r] + (size_t)k * 3 * w->world,
                                  3, ZC_DTYPE_F32, NULL);
    /* and one reduction in the same group */
    if (w->rc[r] == ZC_OK)
        w->rc[r] = zc__all_reduce(c, w->in[r] + N, w->out[r] + 3 * N, half, ZC_DTYPE_F32,
                                  ZC_RED_SUM, NULL);
    const uint64_t m1 = counts_of(c).meetings;
    zc_status end = zc__comm_group_end(c);
    if (w->rc[r] == ZC_OK)
        w->rc[r] = end;
    g->inside[r] = m1 - m0;
    g->at_end[r] = counts_of(c).meetings - m1;
}

static void check_grouped(world_ctx *w, int ops)
{
    const int W = w->world, half = N / 2;
    for (int r = 0; r < W; r++) {
        cr_assert_eq(w->rc[r], ZC_OK, "%s", zc_last_error());
        for (int k = 0; k < ops; k++)
            for (int src = 0; src < W; src++)
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(w->out[r][(size_t)k * 3 * W + src * 3 + i],
                                 value(src, k * 3 + i), "rank %d gather %d from %d elem %d", r,
                                 k, src, i);
        for (int i = 0; i < half; i++) {
            float want = value(0, N + i);
            for (int s = 1; s < W; s++)
                want += value(s, N + i);
            cr_assert_eq(w->out[r][3 * N + i], want, "rank %d sum elem %d", r, i);
        }
    }
}

Test(comm_local, a_group_runs_at_its_end_in_one_rendezvous)
{
    static world_ctx w;
    static group_ctx g;
    /* 5 collectives; then 70, more than one rendezvous holds (64): the
     * group runs in two, with the same results. */
    const int counts[] = {4, 69};
    for (int t = 0; t < 2; t++) {
        make_world(&w, 3);
        g = (group_ctx){.w = &w, .ops = counts[t]};
        t_run_ranks(3, do_grouped_gathers, &g);
        check_grouped(&w, counts[t]);
        /* Counted, not timed: no rendezvous inside the short group (rank 0
         * queues it while rank 1 sleeps, and would wait there with one
         * rendezvous per collective), one at its end; the long group (70
         * collectives) runs its first 64 when the 65th is queued and the
         * other 6 at its end. */
        for (int r = 0; r < 3; r++) {
            cr_assert_eq(g.inside[r], t == 0 ? 0u : 1u, "rank %d: %llu rendezvous inside a group "
                         "of %d", r, (unsigned long long)g.inside[r], counts[t] + 1);
            cr_assert_eq(g.at_end[r], 1u, "rank %d: %llu rendezvous at the end of a group of %d",
                         r, (unsigned long long)g.at_end[r], counts[t] + 1);
        }
        end_world(&w);
    }
}

/* A group whose collectives differ between ranks fails on every rank,
 * naming the first difference; a barrier inside a group and nested groups
 * are refused. */
static void do_mismatched_group(int r, void *p)
{
    world_ctx *w = p;
    zc_comm *c = w->comms[r];
    w->rc[r] = zc__comm_group_start(c);
    if (w->rc[r] == ZC_OK)
        w->rc[r] = zc__all_gather(c, w->in[r], w->out[r], 4, ZC_DTYPE_F32, NULL);
    if (w->rc[r] == ZC_OK)
        w->rc[r] = zc__all_gather(c, w->in[r], w->out[r], r == 2 ? 5 : 4, ZC_DTYPE_F32, NULL);
    zc_status nest = zc__comm_group_start(c), bar = zc__barrier(c);
    zc_status end = zc__comm_group_end(c);
    if (w->rc[r] == ZC_OK)
        w->rc[r] = end;
    if (nest != ZC_ERR_INVALID_ARG || bar != ZC_ERR_INVALID_ARG)
        w->rc[r] = ZC_ERR_INTERNAL;
}

Test(comm_local, a_mismatched_group_fails_on_every_rank)
{
    static world_ctx w;
    make_world(&w, 3);
    t_run_ranks(3, do_mismatched_group, &w);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(w.rc[r], ZC_ERR_COMM, "rank %d returned %d", r, (int)w.rc[r]);
    end_world(&w);
}
