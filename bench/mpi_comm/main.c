/* bench_mpi_comm: bus bandwidth of the MPI communicator's all-reduce and
 * reduce-scatter against MPI_Allreduce / MPI_Reduce_scatter_block on the same
 * fp32 sizes in the same run (the ceiling: whatever algorithm Open MPI picks,
 * without the determinism this communicator adds). Run under mpirun:
 *
 *   mpirun -np 2 build/bench/mpi_comm/bench_mpi_comm [--quick]
 *
 * Rank 0 prints one JSON object per size and operation:
 *   {"op":"all_reduce","bytes":B,"zc_busbw_gbs":x,"mpi_busbw_gbs":y,"ratio":x/y}
 * Bus bandwidth as nccl-tests defines it: all-reduce 2(W-1)/W * bytes / t,
 * reduce-scatter (W-1)/W * bytes / t, bytes being the whole input; each time
 * is the median of the iterations, every rank's time being the slowest
 * rank's (MPI_MAX), after warm-up.
 *
 * Then the cost of waiting for a late peer: the last rank sleeps 0.3 s
 * before a 256 KiB all-reduce, and rank 0 reports the CPU time its process
 * spent in the wait, for the communicator (which naps: base/backoff.h) and
 * for MPI_Allreduce (Open MPI polls without sleeping: the ceiling, a wait
 * that holds its core the whole time), with the communicator's naps:
 *   {"op":"idle_wait","late_s":0.3,"zc_wait_s":..,"zc_cpu_ms":..,"zc_naps":..,
 *    "mpi_wait_s":..,"mpi_cpu_ms":..}
 * (tests/comm/check_mpi.py holds the nap count to the schedule; the CPU
 * time depends on the machine and is reported here only). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm/comm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { ZC_AR, MPI_AR, ZC_RS, MPI_RS };

static int once(zc_comm *c, int which, float *a, float *b, size_t n, int W)
{
    switch (which) {
    case ZC_AR: return zc__all_reduce(c, a, b, n, ZC_DTYPE_F32, ZC_RED_SUM, NULL) != ZC_OK;
    case MPI_AR: return MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case ZC_RS: return zc__reduce_scatter(c, a, b, n / (size_t)W, ZC_DTYPE_F32, NULL) != ZC_OK;
    default:
        return MPI_Reduce_scatter_block(a, b, (int)(n / (size_t)W), MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD);
    }
}

static double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One all-reduce (`which`) whose last rank arrives `late` seconds after the
 * others: the wall and CPU time rank 0's process spent in it. */
static void late_peer(zc_comm *c, int which, float *a, float *b, size_t n, int W, double late,
                      double *wall, double *cpu)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (zc_comm_rank(c) == W - 1) {
        struct timespec ts = {(time_t)late, (long)((late - (double)(time_t)late) * 1e9)};
        nanosleep(&ts, NULL);
    }
    const double c0 = process_cpu_s(), t0 = now_s();
    if (once(c, which, a, b, n, W)) {
        fprintf(stderr, "bench_mpi_comm: op %d failed: %s\n", which, zc_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    *wall = now_s() - t0;
    *cpu = process_cpu_s() - c0;
}

/* One timed call of `which` over n fp32 elements (the whole input). */

static double timed(zc_comm *c, int which, float *a, float *b, size_t n, int W, int iters)
{
    double t[64];
    for (int i = 0; i < 3; i++)
        if (once(c, which, a, b, n, W)) {
            fprintf(stderr, "bench_mpi_comm: op %d failed: %s\n", which, zc_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    for (int i = 0; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        once(c, which, a, b, n, W);
        double dt = now_s() - t0, mx;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[i] = mx;
    }
    qsort(t, (size_t)iters, sizeof t[0], cmp_d);
    return t[iters / 2];
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: bench_mpi_comm [--quick] (under mpirun)\n");
        return 2;
    }
    /* The program initialises MPI itself, so zeroc neither initialises nor
     * finalises it (mpi.h). */
    MPI_Init(&argc, &argv);
    setenv("ZC_COMM", "mpi", 1);
    zc_comm *c = NULL;
    if (zc_comm_init_env(&c) != ZC_OK) {
        fprintf(stderr, "bench_mpi_comm: %s\n", zc_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int W = zc_comm_world(c), rank = zc_comm_rank(c);
    const size_t max_n = quick ? (size_t)1 << 20 : (size_t)1 << 24; /* 4 or 64 MiB */
    float *a = malloc(max_n * sizeof(float)), *b = malloc(max_n * sizeof(float));
    if (!a || !b)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < max_n; i++)
        a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    static const char *names[] = {"all_reduce", "reduce_scatter"};
    for (size_t n = 1024; n <= max_n; n *= 4) {
        size_t nn = n - n % ((size_t)W * 64); /* reduce-scatter needs W | n */
        int iters = n >= ((size_t)1 << 22) ? 10 : 30;
        for (int op = 0; op < 2; op++) {
            double tz = timed(c, op == 0 ? ZC_AR : ZC_RS, a, b, nn, W, iters);
            double tm = timed(c, op == 0 ? MPI_AR : MPI_RS, a, b, nn, W, iters);
            double bytes = (double)nn * 4.0;
            double f = op == 0 ? 2.0 * (W - 1) / W : (double)(W - 1) / W;
            if (rank == 0)
                printf("{\"op\":\"%s\",\"world\":%d,\"bytes\":%.0f,\"zc_us\":%.1f,\"mpi_us\":%.1f,"
                       "\"zc_busbw_gbs\":%.3f,\"mpi_busbw_gbs\":%.3f,\"ratio\":%.3f}\n",
                       names[op], W, bytes, tz * 1e6, tm * 1e6, f * bytes / tz / 1e9,
                       f * bytes / tm / 1e9, tm / tz);
        }
    }
    const double late = 0.3;
    double zw, zcpu, mw, mcpu;
    zc_comm_wait_counts before, after;
    zc__comm_wait_counts(c, &before);
    late_peer(c, ZC_AR, a, b, (size_t)1 << 16, W, late, &zw, &zcpu);
    zc__comm_wait_counts(c, &after);
    late_peer(c, MPI_AR, a, b, (size_t)1 << 16, W, late, &mw, &mcpu);
    if (rank == 0)
        printf("{\"op\":\"idle_wait\",\"world\":%d,\"late_s\":%.1f,\"zc_wait_s\":%.3f,"
               "\"zc_cpu_ms\":%.1f,\"zc_naps\":%llu,\"mpi_wait_s\":%.3f,\"mpi_cpu_ms\":%.1f}\n",
               W, late, zw, zcpu * 1e3, (unsigned long long)(after.sleeps - before.sleeps), mw,
               mcpu * 1e3);
    fflush(stdout);
    free(a);
    free(b);
    zc_comm_destroy(c);
    MPI_Finalize();
    return 0;
}
