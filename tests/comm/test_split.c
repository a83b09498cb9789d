/* zc_comm_split on the local communicator (threads): MPI_Comm_split's
 * semantics against an independent reference (ranks ordered by key, ties by
 * old rank; ZC_COMM_SPLIT_NONE joins nothing), collectives on the new
 * groups, splits of splits, the world ranks carried over, refusals agreed by
 * every rank, and teardown in any order. The same rules on MPI are checked
 * against MPI_Comm_split itself (check_mpi.py, mpi_helper.c split). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "helpers.h"

#define MAXW 8

typedef struct split_ctx {
    zc_comm *world[MAXW], *sub[MAXW], *subsub[MAXW];
    int W;
    int colour[MAXW], key[MAXW];
    zc_status rc[MAXW];
    char msg[MAXW][512];
    float sum[MAXW];
} split_ctx;

/* The reference: rank r's new rank and size, by counting - written apart
 * from the library's insertion order (src/comm/split.c). */
static void reference(const split_ctx *s, int r, int *nr, int *nw)
{
    *nr = *nw = -1;
    if (s->colour[r] < 0)
        return;
    int before = 0, n = 0;
    for (int k = 0; k < s->W; k++) {
        if (s->colour[k] != s->colour[r])
            continue;
        n++;
        if (s->key[k] < s->key[r] || (s->key[k] == s->key[r] && k < r))
            before++;
    }
    *nr = before;
    *nw = n;
}

static void do_split(int r, void *p)
{
    split_ctx *s = p;
    s->rc[r] = zc_comm_split(s->world[r], s->colour[r], s->key[r], &s->sub[r]);
    snprintf(s->msg[r], sizeof s->msg[r], "%s", s->rc[r] ? zc_last_error() : "");
    /* A sum over the new group of the old ranks + 1: the members are the
     * right ones and the group works. */
    if (s->rc[r] == ZC_OK && s->sub[r]) {
        float v = (float)(r + 1);
        zc_status rc = zc__all_reduce(s->sub[r], &v, &s->sum[r], 1, ZC_DTYPE_F32, ZC_RED_SUM,
                                      NULL);
        if (rc != ZC_OK)
            s->rc[r] = rc;
    }
}

static void make(split_ctx *s, int W)
{
    memset(s, 0, sizeof *s);
    s->W = W;
    cr_assert_eq(zc_comm_local_world(W, s->world), ZC_OK, "%s", zc_last_error());
}

static void check_against_reference(const split_ctx *s, const char *what)
{
    for (int r = 0; r < s->W; r++) {
        cr_assert_eq(s->rc[r], ZC_OK, "%s: rank %d: %s", what, r, s->msg[r]);
        int nr, nw;
        reference(s, r, &nr, &nw);
        if (nr < 0) {
            cr_assert_null(s->sub[r], "%s: rank %d passed NONE but got a handle", what, r);
            continue;
        }
        cr_assert_not_null(s->sub[r], "%s: rank %d", what, r);
        cr_assert_eq(zc_comm_rank(s->sub[r]), nr, "%s: rank %d (colour %d key %d)", what, r,
                     s->colour[r], s->key[r]);
        cr_assert_eq(zc_comm_world(s->sub[r]), nw, "%s: rank %d", what, r);
        cr_assert_eq(s->sub[r]->world_rank, r, "%s: world rank carried over", what);
        float want = 0;
        for (int k = 0; k < s->W; k++)
            if (s->colour[k] == s->colour[r])
                want += (float)(k + 1);
        cr_assert_eq(s->sum[r], want, "%s: rank %d's group sums %g, want %g", what, r,
                     s->sum[r], want);
    }
}

static void end(split_ctx *s, bool parents_first)
{
    for (int r = 0; r < s->W && parents_first; r++)
        zc_comm_destroy(s->world[r]);
    for (int r = 0; r < s->W; r++) {
        zc_comm_destroy(s->subsub[r]);
        zc_comm_destroy(s->sub[r]);
    }
    for (int r = 0; r < s->W && !parents_first; r++)
        zc_comm_destroy(s->world[r]);
    t_assert_no_leaks();
}

Test(comm_split, megatron_tp_and_dp_groups)
{
    static split_ctx s;
    /* 4 ranks, TP = 2: DP groups by rank % 2, TP groups by rank / 2. */
    make(&s, 4);
    for (int r = 0; r < 4; r++) {
        s.colour[r] = r % 2;
        s.key[r] = r;
    }
    t_run_ranks(4, do_split, &s);
    check_against_reference(&s, "dp");
    cr_assert_eq(zc_comm_rank(s.sub[2]), 1);
    cr_assert_eq(zc_comm_world(s.sub[2]), 2);
    end(&s, false);
}

Test(comm_split, random_colours_keys_ties_and_none)
{
    static split_ctx s;
    uint64_t seed = t_seed("comm_split.random");
    for (int round = 0; round < 40; round++) {
        const int W = 1 + (int)(t_rand_u64(&seed) % MAXW);
        make(&s, W);
        for (int r = 0; r < W; r++) {
            /* Few colours, few keys (ties), negative keys, some NONE. */
            const int c = (int)(t_rand_u64(&seed) % 4);
            s.colour[r] = c == 3 ? ZC_COMM_SPLIT_NONE : c;
            s.key[r] = (int)(t_rand_u64(&seed) % 3) - 1;
        }
        t_run_ranks(W, do_split, &s);
        check_against_reference(&s, "random");
        end(&s, round % 2 == 0);
    }
}

static void do_split_twice(int r, void *p)
{
    split_ctx *s = p;
    do_split(r, p);
    if (s->rc[r] == ZC_OK && s->sub[r])
        s->rc[r] = zc_comm_split(s->sub[r], 0, -zc_comm_rank(s->sub[r]), &s->subsub[r]);
}

Test(comm_split, a_split_of_a_split)
{
    static split_ctx s;
    make(&s, 6);
    for (int r = 0; r < 6; r++) {
        s.colour[r] = r % 2;
        s.key[r] = r;
    }
    t_run_ranks(6, do_split_twice, &s);
    for (int r = 0; r < 6; r++) {
        cr_assert_eq(s.rc[r], ZC_OK, "%s", s.msg[r]);
        /* Reversed keys: the sub-group's last rank comes first. */
        cr_assert_eq(zc_comm_rank(s.subsub[r]), 2 - zc_comm_rank(s.sub[r]));
        cr_assert_eq(zc_comm_world(s.subsub[r]), 3);
        cr_assert_eq(s.subsub[r]->world_rank, r);
    }
    end(&s, true);
}

Test(comm_split, a_bad_colour_fails_every_rank_naming_it)
{
    static split_ctx s;
    make(&s, 3);
    s.colour[0] = 0;
    s.colour[1] = -7;
    s.colour[2] = 1;
    t_run_ranks(3, do_split, &s);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(s.rc[r], ZC_ERR_INVALID_ARG, "rank %d: %s", r, s.msg[r]);
        cr_assert_null(s.sub[r]);
        cr_assert_str_eq(s.msg[r], s.msg[0]);
    }
    cr_assert(strstr(s.msg[0], "rank 1 of 3 passed colour -7"), "%s", s.msg[0]);
    /* Nothing was made, and the parent still works. */
    for (int r = 0; r < 3; r++)
        s.colour[r] = 0;
    t_run_ranks(3, do_split, &s);
    check_against_reference(&s, "after the refusal");
    end(&s, false);
}

Test(comm_split, argument_errors)
{
    zc_comm *c[1], *out = (zc_comm *)&out;
    cr_assert_eq(zc_comm_local_world(1, c), ZC_OK);
    cr_assert_eq(zc_comm_split(NULL, 0, 0, &out), ZC_ERR_INVALID_ARG);
    cr_assert_null(out);
    cr_assert_eq(zc_comm_split(c[0], 0, 0, NULL), ZC_ERR_INVALID_ARG);
    /* One rank, NONE: nothing made, success. */
    out = (zc_comm *)&out;
    cr_assert_eq(zc_comm_split(c[0], ZC_COMM_SPLIT_NONE, 5, &out), ZC_OK, "%s", zc_last_error());
    cr_assert_null(out);
    zc_comm_destroy(c[0]);
    t_assert_no_leaks();
}

static void do_split_missing(int r, void *p)
{
    if (r == 1)
        return; /* never calls: the others time out */
    do_split(r, p);
}

Test(comm_split, a_rank_that_never_calls_times_the_others_out)
{
    static split_ctx s;
    setenv("ZC_COMM_TIMEOUT", "0.5", 1);
    make(&s, 3);
    unsetenv("ZC_COMM_TIMEOUT");
    t_run_ranks(3, do_split_missing, &s);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(s.rc[r], ZC_ERR_COMM, "rank %d: %s", r, s.msg[r]);
        cr_assert_null(s.sub[r]);
    }
    end(&s, false);
}

/* ---- bytes by link (comm/links.c) ----------------------------------------- */

/* The direct exchange written out peer by peer, apart from the library. */
static void ref_links(int kind, size_t count, size_t esz, const int *node, int n, int me,
                      int64_t out[2])
{
    out[0] = out[1] = 0;
    for (int k = 0; k < n; k++) {
        if (k == me)
            continue;
        size_t elems = count;
        if (kind == K_ALL_REDUCE) {
            const size_t to_k = count * (size_t)(k + 1) / (size_t)n - count * (size_t)k / (size_t)n;
            const size_t back = count * (size_t)(me + 1) / (size_t)n -
                                count * (size_t)me / (size_t)n;
            elems = to_k + back;
        }
        out[node[k] == node[me] ? 0 : 1] += (int64_t)(elems * esz);
    }
}

Test(comm_links, both_forms_match_the_direct_exchange)
{
    uint64_t seed = t_seed("comm_links");
    static const int kinds[3] = {K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER};
    for (int round = 0; round < 2000; round++) {
        const int n = 1 + (int)(t_rand_u64(&seed) % 12), rpn = 1 + (int)(t_rand_u64(&seed) % 5);
        const int me = (int)(t_rand_u64(&seed) % (uint64_t)n);
        const size_t count = t_rand_u64(&seed) % 1000, esz = 1u << (t_rand_u64(&seed) % 4);
        const int kind = kinds[t_rand_u64(&seed) % 3];
        int node[12];
        for (int i = 0; i < n; i++)
            node[i] = i / rpn; /* members in node order */
        int lo = me, hi = me;
        while (lo > 0 && node[lo - 1] == node[me])
            lo--;
        while (hi < n && node[hi] == node[me])
            hi++;
        int64_t want[2], got[2], fast[2];
        ref_links(kind, count, esz, node, n, me, want);
        zc__link_bytes(kind, count, esz, node, n, me, got);
        zc__link_bytes_range(kind, count, esz, n, me, lo, hi, fast);
        cr_assert(got[0] == want[0] && got[1] == want[1] && fast[0] == want[0] &&
                      fast[1] == want[1],
                  "kind %d n %d me %d count %zu: %lld/%lld, range %lld/%lld, want %lld/%lld",
                  kind, n, me, count, (long long)got[0], (long long)got[1], (long long)fast[0],
                  (long long)fast[1], (long long)want[0], (long long)want[1]);
    }
}
