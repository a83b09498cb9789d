/* zc_mpi_helper's cases for communicators from what a program has
 * (mpi_helper.c's main dispatches to them; check_mpi.py launches them):
 *
 *   zc_mpi_helper split    zc_comm_split against MPI_Comm_split itself:
 *                          rounds of colours (some ZC_COMM_SPLIT_NONE) and
 *                          keys with ties, the same rank, size and members
 *                          from zeroc's MPI split, from zeroc's local split
 *                          (W threads on rank 0 splitting with every rank's
 *                          colour and key) and from MPI_Comm_split
 *                          (all-gathered world ranks) from both, a split of a
 *                          split, and a bad colour on the last rank refused
 *                          on every rank with one message naming it.
 *   zc_mpi_helper caller   the program initialises MPI itself and splits
 *                          MPI_COMM_WORLD; zc_comm_from_mpi wraps its half:
 *                          rank-order sums on it, an engine built over it
 *                          (the build agreement and zc_all_reduce_f64 stay
 *                          in the half), destroy leaves MPI initialised and
 *                          the program's communicator working;
 *                          zc_comm_init_env under mpirun works after the
 *                          program's MPI_Init and does not finalise MPI
 *                          either; the program finalises. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "mpi_groups.h"

static int g_rank, g_world, g_fail;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            printf("FAIL rank %d line %d: ", g_rank, __LINE__);           \
            printf(__VA_ARGS__);                                          \
            printf(" (%s)\n", zc_last_error());                           \
            fflush(stdout);                                               \
            g_fail = 1;                                                   \
        }                                                                 \
    } while (0)

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The members of a communicator in rank order, as world ranks: from zeroc's
 * all-gather on sub and from MPI_Allgather on ref. */
static void compare_members(zc_comm *sub, MPI_Comm ref, int round)
{
    int n = zc_comm_world(sub);
    int32_t mine = (int32_t)g_rank, got[64] = {0};
    int want[64] = {0}, me = g_rank;
    CHECK(n <= 64, "round %d: %d members", round, n);
    if (g_fail)
        return;
    CHECK(zc__all_gather(sub, &mine, got, 1, ZC_DTYPE_I32, NULL) == ZC_OK, "round %d gather",
          round);
    MPI_Allgather(&me, 1, MPI_INT, want, 1, MPI_INT, ref);
    for (int i = 0; i < n && !g_fail; i++)
        CHECK(got[i] == want[i], "round %d: member %d is world rank %d, MPI_Comm_split says %d",
              round, i, (int)got[i], want[i]);
    CHECK(sub->world_rank == g_rank, "round %d: world rank %d", round, sub->world_rank);
}

/* The round's colour and key of rank r (every rank computes the table). */
static void round_entry(int round, int r, int *colour, int *key)
{
    const uint64_t h = mix((uint64_t)round * 977 + (uint64_t)r);
    *colour = (int)(h % 4) == 3 ? ZC_COMM_SPLIT_NONE : (int)(h % 4);
    *key = (int)((h >> 8) % 3) - 1;
}

/* The local communicator's split of the same table on W threads. */
typedef struct local_round {
    zc_comm *world[64], *sub[64];
    int round;
    zc_status rc[64];
} local_round;

static void *local_rank(void *p)
{
    local_round *L = ((void **)p)[0];
    const int r = (int)(intptr_t)((void **)p)[1];
    int colour, key;
    round_entry(L->round, r, &colour, &key);
    L->rc[r] = zc_comm_split(L->world[r], colour, key, &L->sub[r]);
    return NULL;
}

/* Every rank's (rank, size) from MPI_Comm_split against what the local
 * split gives on threads. Rank 0 checks; the others only contribute. */
static void compare_local(int round, MPI_Comm ref)
{
    int mine[2] = {-1, -1}, all[2 * 64];
    if (ref != MPI_COMM_NULL) {
        MPI_Comm_rank(ref, &mine[0]);
        MPI_Comm_size(ref, &mine[1]);
    }
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    if (g_rank != 0 || g_world > 64)
        return;
    static local_round L;
    memset(&L, 0, sizeof L);
    L.round = round;
    CHECK(zc_comm_local_world(g_world, L.world) == ZC_OK, "local world");
    pthread_t th[64];
    void *args[64][2];
    for (int r = 0; r < g_world; r++) {
        args[r][0] = &L;
        args[r][1] = (void *)(intptr_t)r;
        pthread_create(&th[r], NULL, local_rank, args[r]);
    }
    for (int r = 0; r < g_world; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < g_world; r++) {
        CHECK(L.rc[r] == ZC_OK, "round %d: local split on thread %d", round, r);
        const int lr = L.sub[r] ? zc_comm_rank(L.sub[r]) : -1;
        const int lw = L.sub[r] ? zc_comm_world(L.sub[r]) : -1;
        CHECK(lr == all[2 * r] && lw == all[2 * r + 1],
              "round %d: the local split gives thread %d rank %d of %d, MPI_Comm_split rank %d "
              "of %d", round, r, lr, lw, all[2 * r], all[2 * r + 1]);
        zc_comm_destroy(L.sub[r]);
    }
    for (int r = 0; r < g_world; r++)
        zc_comm_destroy(L.world[r]);
}

int zc_mpi_split_case(void)
{
    zc_comm *c = NULL;
    CHECK(zc_comm_init_env(&c) == ZC_OK, "zc_comm_init_env");
    if (g_fail)
        return 1;
    g_rank = zc_comm_rank(c);
    g_world = zc_comm_world(c);
    int rounds = 0;
    for (int round = 0; round < 24 && !g_fail; round++, rounds++) {
        /* Every rank computes the same table: colours 0..2 or NONE, keys
         * -1..1 (ties), from the round's seed. */
        int colour, key;
        round_entry(round, g_rank, &colour, &key);
        zc_comm *sub = NULL;
        CHECK(zc_comm_split(c, colour, key, &sub) == ZC_OK, "round %d split", round);
        MPI_Comm ref = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, colour < 0 ? MPI_UNDEFINED : colour, key, &ref);
        compare_local(round, ref);
        CHECK((sub == NULL) == (ref == MPI_COMM_NULL), "round %d: zeroc %s, MPI %s", round,
              sub ? "made one" : "made none", ref == MPI_COMM_NULL ? "made none" : "made one");
        if (sub && ref != MPI_COMM_NULL && !g_fail) {
            int rr, rw;
            MPI_Comm_rank(ref, &rr);
            MPI_Comm_size(ref, &rw);
            CHECK(zc_comm_rank(sub) == rr && zc_comm_world(sub) == rw,
                  "round %d colour %d key %d: zeroc rank %d of %d, MPI rank %d of %d", round,
                  colour, key, zc_comm_rank(sub), zc_comm_world(sub), rr, rw);
            compare_members(sub, ref, round);
            /* A split of the split, keys reversed. */
            zc_comm *subsub = NULL;
            MPI_Comm ref2 = MPI_COMM_NULL;
            CHECK(zc_comm_split(sub, 0, -rr, &subsub) == ZC_OK, "round %d split of split",
                  round);
            MPI_Comm_split(ref, 0, -rr, &ref2);
            if (subsub && !g_fail) {
                int r2;
                MPI_Comm_rank(ref2, &r2);
                CHECK(zc_comm_rank(subsub) == r2, "round %d: split of split rank %d, MPI %d",
                      round, zc_comm_rank(subsub), r2);
                compare_members(subsub, ref2, round);
            }
            zc_comm_destroy(subsub);
            if (ref2 != MPI_COMM_NULL)
                MPI_Comm_free(&ref2);
        }
        zc_comm_destroy(sub);
        if (ref != MPI_COMM_NULL)
            MPI_Comm_free(&ref);
    }
    /* A bad colour on the last rank: refused on every rank alike. */
    zc_comm *bad = (zc_comm *)&bad;
    zc_status rc = zc_comm_split(c, g_rank == g_world - 1 ? -5 : 0, 0, &bad);
    printf("SPLIT_REFUSED rank %d %s %s\n", g_rank, zc_status_str(rc), zc_last_error());
    CHECK(rc == ZC_ERR_INVALID_ARG && bad == NULL, "the bad colour was not refused");
    /* The parent works after the refusal. */
    float x = 1.0f;
    CHECK(zc__all_reduce(c, &x, &x, 1, ZC_DTYPE_F32, ZC_RED_SUM, NULL) == ZC_OK &&
              x == (float)g_world, "all_reduce after the refusal");
    zc_comm_destroy(c);
    if (!g_fail)
        printf("SPLIT_OK rank %d rounds %d\n", g_rank, rounds);
    fflush(stdout);
    return g_fail;
}

/* Rank r's values: mixed magnitudes, so the order of the fp32 adds shows. */
static float value(int r, int i) { return (float)((r + 1) * 1e-3 + (i % 5) * 1e3 + i * 1e-7); }

static void sums_on(zc_comm *c, const char *what)
{
    enum { N = 4099 };
    static float x[N], want[N];
    const int r = zc_comm_rank(c), W = zc_comm_world(c);
    for (int i = 0; i < N; i++) {
        x[i] = value(r, i);
        want[i] = value(0, i);
        for (int k = 1; k < W; k++)
            want[i] += value(k, i); /* rank order, as zeroc sums */
    }
    CHECK(zc__all_reduce(c, x, x, N, ZC_DTYPE_F32, ZC_RED_SUM, NULL) == ZC_OK, "%s", what);
    for (int i = 0; i < N && !g_fail; i++)
        CHECK(memcmp(&x[i], &want[i], sizeof(float)) == 0, "%s: element %d is %.9g, want %.9g",
              what, i, (double)x[i], (double)want[i]);
}

int zc_mpi_caller_case(void)
{
    MPI_Comm world = MPI_COMM_WORLD;
    zc_comm *c = (zc_comm *)&c;
    CHECK(zc_comm_from_mpi(&world, &c) == ZC_ERR_INVALID_STATE && c == NULL,
          "zc_comm_from_mpi before MPI_Init");
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    /* The program's own groups: two halves by rank parity. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
    int hr, hw;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hw);
    MPI_Comm none = MPI_COMM_NULL;
    CHECK(zc_comm_from_mpi(&none, &c) == ZC_ERR_INVALID_ARG, "MPI_COMM_NULL accepted");
    CHECK(zc_comm_from_mpi(NULL, &c) == ZC_ERR_INVALID_ARG, "NULL accepted");
    CHECK(zc_comm_from_mpi(&half, &c) == ZC_OK, "zc_comm_from_mpi(half)");
    if (g_fail)
        return 1;
    CHECK(zc_comm_rank(c) == hr && zc_comm_world(c) == hw, "rank %d of %d, the half says %d of %d",
          zc_comm_rank(c), zc_comm_world(c), hr, hw);
    CHECK(c->world_rank == g_rank, "world rank %d", c->world_rank);
    sums_on(c, "sums on the program's half");

    /* An engine over the half: its build agreement and its scalar
     * all-reduce see the half only. */
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    CHECK(zc_config_create(&cfg) == ZC_OK, "config");
    CHECK(!g_fail && zc_config_set_int(cfg, "zero_optimization.stage", 3) == ZC_OK, "stage");
    CHECK(!g_fail && zc_engine_create(&e, cfg, c, &o) == ZC_OK, "zc_engine_create");
    const int64_t shape = 300;
    CHECK(!g_fail && zc_param_add(e, "w", &shape, 1, 0), "zc_param_add");
    CHECK(!g_fail && zc_engine_build(e) == ZC_OK, "zc_engine_build");
    double v = g_rank;
    CHECK(!g_fail && zc_all_reduce_f64(e, &v, 1, ZC_REDUCE_SUM) == ZC_OK, "scalar sum");
    double want = 0;
    for (int r = g_rank % 2; r < g_world; r += 2)
        want += r;
    CHECK(v == want, "the scalar sum over the half is %g, want %g", v, want);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(c);
    int fin = 1;
    MPI_Finalized(&fin);
    CHECK(!fin, "zc_comm_destroy finalised the program's MPI");
    int one = 1, sum = 0;
    CHECK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, half) == MPI_SUCCESS && sum == hw,
          "the program's communicator after zc_comm_destroy: %d", sum);

    /* zc_comm_init_env under mpirun with MPI already up. */
    zc_comm *w = NULL;
    CHECK(zc_comm_init_env(&w) == ZC_OK, "zc_comm_init_env after the program's MPI_Init");
    if (w) {
        CHECK(zc_comm_world(w) == g_world && zc_comm_rank(w) == g_rank, "init_env's world");
        sums_on(w, "sums on zc_comm_init_env's world");
        zc_comm_destroy(w);
    }
    MPI_Finalized(&fin);
    CHECK(!fin, "zc_comm_init_env's destroy finalised the program's MPI");
    MPI_Comm_free(&half);
    MPI_Finalize();
    if (!g_fail)
        printf("CALLER_OK rank %d half %d of %d\n", g_rank, hr, hw);
    fflush(stdout);
    return g_fail;
}
