/* Communicators from MPI handles: zc_comm_init_env's over MPI_COMM_WORLD,
 * and zc_comm_from_mpi's over the program's own MPI communicator. The
 * latter duplicates the caller's communicator with MPI_Comm_idup, polled
 * against ZC_COMM_TIMEOUT, and never initialises or finalises MPI: the
 * program did the one and will do the other. zeroc.h has the contract. */
#include <stdio.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "comm/mpi_parts.h"

/* Waits for the duplication within the timeout, napping 100 us between
 * polls (it is a one-off exchange, not a step's collective). */
static zc_status wait_idup(MPI_Request *req, double timeout, int *healthy)
{
    const double deadline = zc__now_s() + timeout;
    for (;;) {
        int done = 0;
        int e = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) {
            *healthy = 0;
            return zc__mpi_errstr(e, "zc_comm_from_mpi: MPI_Test(MPI_Comm_idup)");
        }
        if (done)
            return ZC_OK;
        if (zc__now_s() > deadline) {
            *healthy = 0;
            return ZC_ERR(ZC_ERR_COMM,
                          "zc_comm_from_mpi: duplicating the communicator (MPI_Comm_idup) did "
                          "not finish within %g s (ZC_COMM_TIMEOUT): every rank of it must "
                          "call zc_comm_from_mpi", timeout);
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

ZC_API zc_status zc_comm_from_mpi(const void *mpi_comm, zc_comm **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_mpi: out is NULL");
    *out = NULL;
    if (!mpi_comm)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_mpi: mpi_comm is NULL (pass the "
                                          "address of an MPI_Comm)");
    double timeout = 0;
    ZC_CHECK(zc__comm_timeout_env(&timeout));
    ZC_CHECK(zc__log_env_check());
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_comm_from_mpi: MPI is %s; the program initialises MPI (MPI_Init) "
                      "before and finalises it after zeroc's handles (zc_comm_init_env "
                      "initialises it itself)", fin ? "already finalised" : "not initialised");
    MPI_Comm user = *(const MPI_Comm *)mpi_comm;
    if (user == MPI_COMM_NULL)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_mpi: the communicator is MPI_COMM_NULL");
    ZC_CHECK(zc__mpi_ref()); /* MPI is up: only counts this handle */
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED)
        ZC_LOGI("comm", "zc_comm_from_mpi: MPI thread level %d (below MPI_THREAD_SERIALIZED): "
                "call zeroc on this communicator from the thread that initialised MPI", level);
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int healthy = 1;
    int e = MPI_Comm_idup(user, &dup, &req);
    zc_status rc = e == MPI_SUCCESS ? wait_idup(&req, timeout, &healthy)
                                    : zc__mpi_errstr(e, "zc_comm_from_mpi: MPI_Comm_idup");
    if (rc != ZC_OK) {
        /* A duplication still pending cannot be taken back: leave it. */
        if (healthy && dup != MPI_COMM_NULL)
            MPI_Comm_free(&dup);
        zc__mpi_unref(healthy);
        return rc;
    }
    /* The node map's coordinates: this process's rank in MPI_COMM_WORLD,
     * and the launcher's ranks per node when it says (else the ranks of
     * this communicator that share memory). */
    int wrank = 0, wsize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    int node_ranks = -1;
    zc_launch_env env;
    if (zc__launch_env_read(&env, false) == ZC_OK && env.local_world > 0)
        node_ranks = env.local_world;
    zc__error_clear();
    rc = zc__mpi_wrap(dup, timeout, wrank, node_ranks, "zc_comm_from_mpi", out);
    if (rc == ZC_OK)
        (*out)->world_size = wsize;
    return rc;
}

/* zc_comm_init_env under an MPI launcher: the world itself, duplicated. */
zc_status zc__comm_mpi_create(const zc_launch_env *env, zc_comm **out)
{
    *out = NULL;
    double timeout;
    ZC_CHECK(zc__comm_timeout_env(&timeout));
    ZC_CHECK(zc__mpi_ref());
    MPI_Comm dup = MPI_COMM_NULL;
    int rank = 0, world = 0, e;
    if ((e = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) {
        zc_status rc = zc__mpi_errstr(e, "zc_comm_init_env: MPI_Comm_dup(MPI_COMM_WORLD)");
        zc__mpi_unref(1);
        return rc;
    }
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &world);
    zc_status rc = zc__mpi_check_env(env, rank, world, "zc_comm_init_env");
    if (rc != ZC_OK) {
        MPI_Comm_free(&dup);
        zc__mpi_unref(1);
        return rc;
    }
    /* The world itself: its ranks sharing memory are the node's. */
    rc = zc__mpi_wrap(dup, timeout, rank, -1, "zc_comm_init_env", out);
    if (rc == ZC_OK)
        (*out)->world_size = world;
    return rc;
}
