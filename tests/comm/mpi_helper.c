/* One rank of the MPI communicator's tests: a separate process started by
 * mpirun, which tests/comm/check_mpi.py launches (tests never fork).
 *
 *   zc_mpi_helper collectives   every collective, dtype and a spread of
 *                               uneven sizes (in place and not, alone and in
 *                               a group) against the local communicator run
 *                               as W threads in this process on the same
 *                               inputs: bitwise equal. fp32/fp64 sums are
 *                               also checked against a plain rank-order loop
 *                               written here, all-to-all against the blocks
 *                               of every rank's input. Then MPI_Bcast of a blob (the
 *                               NCCL id path) and a clean teardown.
 *   zc_mpi_helper timeout       rank 1 sleeps past ZC_COMM_TIMEOUT; rank 0's
 *                               all-reduce must fail with ZC_ERR_COMM within
 *                               the timeout, and the next call too (sticky).
 *   zc_mpi_helper idle          the last rank sleeps 1 s before an all-reduce;
 *                               the others count how their wait went (its
 *                               naps and spin restarts, zc__comm_wait_counts)
 *                               and the most naps the backoff's schedule fits
 *                               in it (check_mpi.py holds the count to it),
 *                               and every rank checks the sums.
 *   zc_mpi_helper kill          the last rank kills itself (SIGKILL) before
 *                               an all-reduce; the others must not outlive
 *                               the timeout (mpirun ends the job, or the
 *                               all-reduce fails with ZC_ERR_COMM).
 *   zc_mpi_helper scalars       zc_all_reduce_f64 on an engine over the MPI
 *                               communicator: sum, max and min of rank
 *                               values (scalar_value below) printed as bit
 *                               patterns, which check_mpi.py compares across
 *                               ranks and with its own rank-order fold; then
 *                               the last rank passes count 0 and every rank
 *                               prints the refusal it got, and a last sum
 *                               shows the engine still works.
 *
 *   zc_mpi_helper split, caller   communicators from what the program has
 *                               (mpi_groups.c says what each checks).
 *
 * Prints "OK ..." (or "TIMEOUT_OK ...", "IDLE_OK ...", "SCALARS ...") and
 * exits 0; on a failed check prints "FAIL ..." and exits 1; 4 on bad usage. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "base/alloc.h"
#include "base/backoff.h"
#include "base/dtype.h"
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Inputs of rank r for case id: values of mixed magnitude, so the order of
 * the fp32 additions changes the rounding (a reordered sum would show). */
static void fill(void *buf, zc_dtype dt, size_t n, int id, int r, int with_nan)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(((uint64_t)id << 40) ^ ((uint64_t)r << 32) ^ i);
        double u = (double)(h >> 11) / 9007199254740992.0 - 0.5;
        double v = u * pow(10.0, (double)((h >> 3) % 7) - 3.0);
        switch (dt) {
        case ZC_DTYPE_F64: ((double *)buf)[i] = v; break;
        case ZC_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)(h % 2001) - 1000; break;
        default: zc__store_f32(buf, dt, i, (float)v); break;
        }
        if (with_nan && i % 17 == (size_t)r) {
            if (dt == ZC_DTYPE_F64) ((double *)buf)[i] = NAN;
            else if (dt == ZC_DTYPE_F32) ((float *)buf)[i] = NAN;
        }
    }
}

enum { OP_AR, OP_AR_INPLACE, OP_MAX, OP_RS, OP_RS_INPLACE, OP_AG, OP_AG_INPLACE, OP_BC, OP_A2A,
       OP__N };
static const char *op_name[] = {"all_reduce", "all_reduce(in place)", "all_reduce(MAX)",
                                "reduce_scatter", "reduce_scatter(in place)", "all_gather",
                                "all_gather(in place)", "broadcast", "all_to_all"};

/* Buffer sizes (elements) of one case: in, out. n is the collective's count. */
static void sizes(int op, size_t n, int W, size_t *in, size_t *out)
{
    switch (op) {
    case OP_RS: case OP_RS_INPLACE: *in = n * (size_t)W; *out = n; break;
    case OP_AG: case OP_AG_INPLACE: *in = n; *out = n * (size_t)W; break;
    case OP_A2A: *in = *out = n * (size_t)W; break;
    default: *in = n; *out = n; break;
    }
}

/* Runs case (op, dt, n) as rank r on comm c: inputs from fill(), result in
 * *res (malloc'd, out elements). */
static zc_status run_case(zc_comm *c, int r, int W, int op, zc_dtype dt, size_t n, int id,
                          void **res)
{
    size_t es = zc_dtype_size(dt), in, out;
    sizes(op, n, W, &in, &out);
    char *a = calloc(in + 1, es), *b = calloc((out > in ? out : in) + 1, es);
    if (!a || !b)
        abort();
    fill(a, dt, in, id, r, op == OP_MAX);
    zc_status rc;
    switch (op) {
    case OP_AR: rc = zc__all_reduce(c, a, b, n, dt, ZC_RED_SUM, NULL); break;
    case OP_AR_INPLACE:
        memcpy(b, a, in * es);
        rc = zc__all_reduce(c, b, b, n, dt, ZC_RED_SUM, NULL);
        break;
    case OP_MAX: rc = zc__all_reduce(c, a, b, n, dt, ZC_RED_MAX, NULL); break;
    case OP_RS: rc = zc__reduce_scatter(c, a, b, n, dt, NULL); break;
    case OP_RS_INPLACE: /* recv aliases slice r of send */
        rc = zc__reduce_scatter(c, a, a + (size_t)r * n * es, n, dt, NULL);
        memcpy(b, a + (size_t)r * n * es, n * es);
        break;
    case OP_AG: rc = zc__all_gather(c, a, b, n, dt, NULL); break;
    case OP_A2A: rc = zc__all_to_all(c, a, b, n, dt, NULL); break;
    case OP_AG_INPLACE:
        memcpy(b + (size_t)r * n * es, a, n * es);
        rc = zc__all_gather(c, b + (size_t)r * n * es, b, n, dt, NULL);
        break;
    default:
        memcpy(b, a, n * es);
        rc = zc__broadcast(c, b, n, dt, W - 1, NULL);
        break;
    }
    free(a);
    *res = b;
    return rc;
}

typedef struct ref_arg {
    zc_comm *c;
    int r, W, op, id;
    zc_dtype dt;
    size_t n;
    void *res;
    zc_status rc;
} ref_arg;

static void *ref_thread(void *p)
{
    ref_arg *a = p;
    a->rc = run_case(a->c, a->r, a->W, a->op, a->dt, a->n, a->id, &a->res);
    return NULL;
}

/* The local communicator's result for rank `me`: all W ranks as threads. */
static void *reference(zc_comm **lc, int me, int W, int op, zc_dtype dt, size_t n, int id)
{
    ref_arg args[64];
    pthread_t th[64];
    for (int r = 0; r < W; r++) {
        args[r] = (ref_arg){lc[r], r, W, op, id, dt, n, NULL, ZC_OK};
        pthread_create(&th[r], NULL, ref_thread, &args[r]);
    }
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    void *mine = NULL;
    for (int r = 0; r < W; r++) {
        CHECK(args[r].rc == ZC_OK, "local %s rank %d failed", op_name[op], r);
        if (r == me) mine = args[r].res;
        else free(args[r].res);
    }
    return mine;
}

/* All-to-all without a communicator: block k of rank r's result is block r
 * of rank k's input, byte for byte. */
static void check_plain_a2a(const void *got, int op, zc_dtype dt, size_t n, int id, int W, int r)
{
    if (op != OP_A2A)
        return;
    const size_t es = zc_dtype_size(dt), in = n * (size_t)W;
    char *src = malloc(in * es + 1);
    for (int k = 0; k < W; k++) {
        fill(src, dt, in, id, k, 0);
        if (memcmp((const char *)got + (size_t)k * n * es, src + (size_t)r * n * es, n * es)) {
            CHECK(0, "all_to_all %s n=%zu: block %d is not rank %d's block %d",
                  zc_dtype_name(dt), n, k, k, r);
            break;
        }
    }
    free(src);
}

/* An independent fp32/fp64 sum: a plain loop over ranks in order. */
static void check_plain_sum(const void *got, int op, zc_dtype dt, size_t n, int id, int W, int r)
{
    if ((dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F64) || (op != OP_AR && op != OP_RS))
        return;
    size_t es = zc_dtype_size(dt), in = op == OP_RS ? n * (size_t)W : n;
    size_t off = op == OP_RS ? (size_t)r * n : 0;
    char *src = malloc(in * es * (size_t)W + 1);
    for (int k = 0; k < W; k++)
        fill(src + (size_t)k * in * es, dt, in, id, k, 0);
    for (size_t i = 0; i < n; i++) {
        if (dt == ZC_DTYPE_F32) {
            float s = ((float *)src)[off + i];
            for (int k = 1; k < W; k++) s += ((float *)(src + (size_t)k * in * es))[off + i];
            float g = ((const float *)got)[i];
            if (memcmp(&s, &g, 4)) { CHECK(0, "%s f32 n=%zu [%zu]: %a != %a", op_name[op], n, i, g, s); break; }
        } else {
            double s = ((double *)src)[off + i];
            for (int k = 1; k < W; k++) s += ((double *)(src + (size_t)k * in * es))[off + i];
            double g = ((const double *)got)[i];
            if (memcmp(&s, &g, 8)) { CHECK(0, "%s f64 n=%zu [%zu]: %a != %a", op_name[op], n, i, g, s); break; }
        }
    }
    free(src);
}

static int collectives(void)
{
    zc_comm *c = NULL;
    zc_status rc = zc_comm_init_env(&c);
    CHECK(rc == ZC_OK, "zc_comm_init_env");
    if (rc != ZC_OK)
        return 1;
    g_rank = zc_comm_rank(c);
    const int W = g_world = zc_comm_world(c);
    CHECK(!strcmp(c->ops->name, "mpi"), "zc_comm_init_env under mpirun picked '%s'",
          c->ops->name);
    const char *er = getenv("OMPI_COMM_WORLD_RANK"), *ew = getenv("OMPI_COMM_WORLD_SIZE");
    CHECK(er && ew && atoi(er) == g_rank && atoi(ew) == W, "rank %d of %d vs mpirun's %s of %s",
          g_rank, W, er ? er : "?", ew ? ew : "?");
    zc_comm *lc[64] = {0};
    CHECK(W <= 64 && zc_comm_local_world(W, lc) == ZC_OK, "zc_comm_local_world(%d)", W);
    if (g_fail)
        return 1;

    static const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F64,
                                   ZC_DTYPE_I32};
    /* Uneven on purpose: below the world size, not a multiple of it, large
     * enough that every rank's slice has many elements. */
    static const size_t ns[] = {0, 1, 3, 7, 64, 1000, 4099};
    int id = 0, cases = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int op = 0; op < OP__N; op++)
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++, id++) {
                zc_dtype dt = dts[d];
                if (op == OP_MAX && dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F64 &&
                    dt != ZC_DTYPE_I32)
                    continue;
                size_t n = ns[k], in, out;
                sizes(op, n, W, &in, &out);
                void *got = NULL;
                rc = run_case(c, g_rank, W, op, dt, n, id, &got);
                CHECK(rc == ZC_OK, "mpi %s %s n=%zu", op_name[op], zc_dtype_name(dt), n);
                void *want = reference(lc, g_rank, W, op, dt, n, id);
                if (rc == ZC_OK && want)
                    CHECK(!memcmp(got, want, out * zc_dtype_size(dt)),
                          "%s %s n=%zu differs from the local communicator", op_name[op],
                          zc_dtype_name(dt), n);
                check_plain_sum(got, op, dt, n, id, W, g_rank);
                check_plain_a2a(got, op, dt, n, id, W, g_rank);
                free(got);
                free(want);
                cases++;
                if (g_fail)
                    return 1;
            }

    /* A group: several collectives posted together, finished at group_end,
     * each equal to the same call made alone on the local communicator. */
    {
        enum { G = 7 };
        const int gop[G] = {OP_AR, OP_RS, OP_AG, OP_AR_INPLACE, OP_BC, OP_A2A, OP_AR};
        const size_t gn[G] = {4099, 1000, 63, 7, 100, 333, 1};
        const zc_dtype gdt[G] = {ZC_DTYPE_BF16, ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_F32,
                                 ZC_DTYPE_F64, ZC_DTYPE_I32, ZC_DTYPE_F32};
        char *a[G], *b[G];
        CHECK(zc__comm_group_start(c) == ZC_OK, "group_start");
        for (int g = 0; g < G; g++) {
            size_t es = zc_dtype_size(gdt[g]), in, out;
            sizes(gop[g], gn[g], W, &in, &out);
            a[g] = calloc(in + 1, es);
            b[g] = calloc(out + in + 1, es);
            fill(a[g], gdt[g], in, 9000 + g, g_rank, 0);
            if (gop[g] == OP_AR_INPLACE || gop[g] == OP_BC)
                memcpy(b[g], a[g], in * es);
            switch (gop[g]) {
            case OP_AR: rc = zc__all_reduce(c, a[g], b[g], gn[g], gdt[g], ZC_RED_SUM, NULL); break;
            case OP_AR_INPLACE: rc = zc__all_reduce(c, b[g], b[g], gn[g], gdt[g], ZC_RED_SUM, NULL); break;
            case OP_RS: rc = zc__reduce_scatter(c, a[g], b[g], gn[g], gdt[g], NULL); break;
            case OP_AG: rc = zc__all_gather(c, a[g], b[g], gn[g], gdt[g], NULL); break;
            case OP_A2A: rc = zc__all_to_all(c, a[g], b[g], gn[g], gdt[g], NULL); break;
            default: rc = zc__broadcast(c, b[g], gn[g], gdt[g], W - 1, NULL); break;
            }
            CHECK(rc == ZC_OK, "grouped %s", op_name[gop[g]]);
        }
        CHECK(zc__comm_group_end(c) == ZC_OK, "group_end");
        for (int g = 0; g < G; g++) {
            size_t in, out;
            sizes(gop[g], gn[g], W, &in, &out);
            void *want = reference(lc, g_rank, W, gop[g], gdt[g], gn[g], 9000 + g);
            if (want)
                CHECK(!memcmp(b[g], want, out * zc_dtype_size(gdt[g])),
                      "grouped %s %s n=%zu differs from the local communicator",
                      op_name[gop[g]], zc_dtype_name(gdt[g]), gn[g]);
            free(want);
            free(a[g]);
            free(b[g]);
            cases++;
        }
    }
    CHECK(zc__barrier(c) == ZC_OK, "barrier");

    /* The NCCL unique id's path: rank 0's bytes everywhere. */
    zc_launch_env env;
    CHECK(zc__launch_env_read(&env, false) == ZC_OK, "launch env");
    unsigned char blob[128];
    for (int i = 0; i < 128; i++)
        blob[i] = g_rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
    CHECK(zc__mpi_bcast_blob(&env, blob, sizeof blob, 30) == ZC_OK, "zc__mpi_bcast_blob");
    for (int i = 0; i < 128; i++)
        if (blob[i] != (unsigned char)(i * 7 + 3)) {
            CHECK(0, "blob byte %d = %d", i, blob[i]);
            break;
        }

    for (int r = 0; r < W; r++)
        zc_comm_destroy(lc[r]);
    zc_comm_destroy(c);
    CHECK(zc__mem_global_bytes(ZC_MEMKIND_HOST) == 0, "%lld host bytes left after teardown",
          (long long)zc__mem_global_bytes(ZC_MEMKIND_HOST));
    if (g_fail)
        return 1;
    printf("OK rank %d of %d: %d cases bitwise equal to the local communicator\n", g_rank, W,
           cases);
    return 0;
}

static int timeout_case(void)
{
    zc_comm *c = NULL;
    CHECK(zc_comm_init_env(&c) == ZC_OK, "zc_comm_init_env");
    if (g_fail)
        return 1;
    g_rank = zc_comm_rank(c);
    g_world = zc_comm_world(c);
    float x[16] = {1};
    if (g_rank == g_world - 1) {
        /* Never joins: well past ZC_COMM_TIMEOUT; mpirun ends this process
         * once the others exit, so the line below is never printed. */
        sleep(30);
        printf("SLEEPER_WOKE rank %d\n", g_rank);
        fflush(stdout);
        return 0;
    }
    double t0 = now_s();
    zc_status rc = zc__all_reduce(c, x, x, 16, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
    double dt = now_s() - t0;
    CHECK(rc == ZC_ERR_COMM, "all_reduce with a sleeping rank returned %d", (int)rc);
    CHECK(strstr(zc_last_error(), "timed out") && strstr(zc_last_error(), "ZC_COMM_TIMEOUT"),
          "message");
    rc = zc__all_gather(c, x, x, 1, ZC_DTYPE_F32, NULL);
    CHECK(rc == ZC_ERR_COMM && strstr(zc_last_error(), "broken"), "later call is not sticky");
    if (g_fail)
        return 1;
    printf("TIMEOUT_OK rank %d after %.2f s\n", g_rank, dt);
    fflush(stdout);
    zc_comm_destroy(c);
    /* MPI is not finalised (a collective is stuck): end now, non-zero, so
     * mpirun stops the job. */
    _exit(3);
}

/* The backoff's schedule (base/backoff.h), for the idle wait's nap count:
 * after a spin of ZC_BACKOFF_SPIN_S, naps of an eighth of the time waited,
 * at least ZC_BACKOFF_NAP_MIN_NS, grow until they reach ZC_BACKOFF_NAP_MAX_NS.
 * Each nap sleeps at least its length, so a wait of `wait` seconds whose spin
 * restarted `restarts` times (a fresh ramp each) holds at most that many
 * ramps' naps plus one nap at the cap per ZC_BACKOFF_NAP_MAX_NS. */
static int ramp_naps(void)
{
    const double lo = (double)ZC_BACKOFF_NAP_MIN_NS * 1e-9, hi = (double)ZC_BACKOFF_NAP_MAX_NS * 1e-9;
    double t = ZC_BACKOFF_SPIN_S;
    int n = 0;
    for (;;) {
        double nap = t / ZC_BACKOFF_NAP_FRACTION;
        nap = nap < lo ? lo : nap;
        if (nap >= hi)
            return n;
        t += nap;
        n++;
    }
}

static uint64_t most_naps(double wait, uint64_t restarts)
{
    return (restarts + 1) * (uint64_t)(ramp_naps() + 1) +
           (uint64_t)(wait / ((double)ZC_BACKOFF_NAP_MAX_NS * 1e-9)) + 1;
}

static int idle_case(void)
{
    zc_comm *c = NULL;
    CHECK(zc_comm_init_env(&c) == ZC_OK, "zc_comm_init_env");
    if (g_fail)
        return 1;
    g_rank = zc_comm_rank(c);
    g_world = zc_comm_world(c);
    /* 256 KiB: past Open MPI's eager limit, so the data moves by a
     * single-copy read or in fragments, both driven by the waiter's polls. */
    enum { N = 1 << 16 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(g_rank + 1 + i % 7);
    /* Both ranks start the clock together, then the last one sleeps. */
    CHECK(zc__barrier(c) == ZC_OK, "barrier");
    if (g_rank == g_world - 1)
        sleep(1);
    zc_comm_wait_counts before, after;
    CHECK(zc__comm_wait_counts(c, &before), "wait counts");
    double t0 = now_s();
    CHECK(zc__all_reduce(c, x, x, N, ZC_DTYPE_F32, ZC_RED_SUM, NULL) == ZC_OK, "all_reduce");
    double wait = now_s() - t0;
    CHECK(zc__comm_wait_counts(c, &after), "wait counts");
    /* Sum over ranks r of r + 1 + i % 7: small integers, exact in fp32. */
    for (int i = 0; i < N && !g_fail; i++) {
        float want = (float)(g_world * (g_world + 1) / 2 + g_world * (i % 7));
        CHECK(x[i] == want, "x[%d] = %g, want %g", i, (double)x[i], (double)want);
    }
    if (g_fail)
        return 1;
    const uint64_t naps = after.sleeps - before.sleeps, restarts = after.restarts - before.restarts;
    if (g_rank != g_world - 1)
        printf("IDLE_OK rank %d waited %.3f s waits %llu naps %llu restarts %llu most %llu\n",
               g_rank, wait, (unsigned long long)(after.waits - before.waits),
               (unsigned long long)naps, (unsigned long long)restarts,
               (unsigned long long)most_naps(wait, restarts));
    fflush(stdout);
    zc_comm_destroy(c);
    return 0;
}

static int kill_case(void)
{
    zc_comm *c = NULL;
    CHECK(zc_comm_init_env(&c) == ZC_OK, "zc_comm_init_env");
    if (g_fail)
        return 1;
    g_rank = zc_comm_rank(c);
    g_world = zc_comm_world(c);
    float x[1024] = {1};
    CHECK(zc__all_reduce(c, x, x, 1024, ZC_DTYPE_F32, ZC_RED_SUM, NULL) == ZC_OK, "first");
    if (g_rank == g_world - 1)
        raise(SIGKILL); /* a rank dying mid-step, as an OOM kill would */
    zc_status rc = zc__all_reduce(c, x, x, 1024, ZC_DTYPE_F32, ZC_RED_SUM, NULL);
    /* Reached only when mpirun did not end this process first. */
    printf("KILL_SEEN rank %d: %d %s\n", g_rank, (int)rc, zc_last_error());
    fflush(stdout);
    _exit(rc == ZC_ERR_COMM ? 3 : 1);
}

/* Rank r's value i for the scalars case (check_mpi.py's scalar_value is
 * the same formula): value 0 cancels 1e16 against -1e16 with small terms
 * between, which only a rank-order fold rounds as the reference does. */
static double scalar_value(int r, int i)
{
    static const double big[4] = {1e16, 1.0, -1e16, 3.5};
    switch (i) {
    case 0: return big[r % 4];
    case 1: return 0.1 * (r + 1);
    case 2: return r == 1 ? NAN : (double)r;
    default: return 1.0 / (r + 3);
    }
}

static void print_bits(const char *tag, const double *v, int n)
{
    printf("%s rank %d", tag, g_rank);
    for (int i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &v[i], sizeof u);
        printf(" %016llx", (unsigned long long)u);
    }
    printf("\n");
}

static int scalars_case(void)
{
    zc_comm *c = NULL;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    CHECK(zc_comm_init_env(&c) == ZC_OK, "zc_comm_init_env");
    if (g_fail)
        return 1;
    g_rank = zc_comm_rank(c);
    g_world = zc_comm_world(c);
    CHECK(zc_config_create(&cfg) == ZC_OK, "zc_config_create");
    CHECK(!g_fail && zc_config_set_int(cfg, "zero_optimization.stage", 2) == ZC_OK, "stage");
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    CHECK(!g_fail && zc_engine_create(&e, cfg, c, &o) == ZC_OK, "zc_engine_create");
    const int64_t shape = 64;
    CHECK(!g_fail && zc_param_add(e, "w", &shape, 1, 0), "zc_param_add");
    CHECK(!g_fail && zc_engine_build(e) == ZC_OK, "zc_engine_build");
    static const zc_reduce_op ops[3] = {ZC_REDUCE_SUM, ZC_REDUCE_MAX, ZC_REDUCE_MIN};
    static const char *const tags[3] = {"SCALARS_SUM", "SCALARS_MAX", "SCALARS_MIN"};
    double v[4];
    for (int k = 0; k < 3 && !g_fail; k++) {
        for (int i = 0; i < 4; i++)
            v[i] = scalar_value(g_rank, i);
        CHECK(zc_all_reduce_f64(e, v, 4, ops[k]) == ZC_OK, "zc_all_reduce_f64 %s", tags[k]);
        if (!g_fail)
            print_bits(tags[k], v, 4);
    }
    if (!g_fail) {
        v[0] = 5.0;
        zc_status rc = zc_all_reduce_f64(e, v, g_rank == g_world - 1 ? 0 : 1, ZC_REDUCE_SUM);
        printf("SCALARS_REFUSED rank %d %s %s\n", g_rank, zc_status_str(rc), zc_last_error());
        CHECK(v[0] == 5.0, "the refused call changed the values");
        v[0] = g_rank + 1;
        CHECK(zc_all_reduce_f64(e, v, 1, ZC_REDUCE_SUM) == ZC_OK, "the call after the refusal");
        if (!g_fail)
            print_bits("SCALARS_AFTER", v, 1);
    }
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(c);
    fflush(stdout);
    return g_fail;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2)
        return 4;
    if (!strcmp(argv[1], "collectives"))
        return collectives();
    if (!strcmp(argv[1], "timeout"))
        return timeout_case();
    if (!strcmp(argv[1], "kill"))
        return kill_case();
    if (!strcmp(argv[1], "idle"))
        return idle_case();
    if (!strcmp(argv[1], "scalars"))
        return scalars_case();
    if (!strcmp(argv[1], "split"))
        return zc_mpi_split_case();
    if (!strcmp(argv[1], "caller"))
        return zc_mpi_caller_case();
    return 4;
}
