/* MPI in the process, for the MPI communicator (mpi.c) and the NCCL id's
 * broadcast under mpirun: MPI initialised on first need and finalised with
 * the last user when zeroc initialised it (never after a collective that did
 * not finish), MPI's error text, the launcher's rank and world held against
 * MPI's, and zc__mpi_bcast_blob (mpi.h). */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include <mpi.h>

#include "comm/mpi.h"
#include "comm/mpi_parts.h"
#include "base/clock.h"
#include "base/log.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_refs;     /* live MPI communicators and bootstraps */
static int g_we_init;  /* zeroc called MPI_Init_thread, so zeroc finalises */
static int g_poisoned; /* a collective never finished: never finalise */

zc_status zc__mpi_errstr(int code, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", code);
    return ZC_ERR(ZC_ERR_COMM, "%s: %s", what, s);
}

zc_status zc__mpi_ref(void)
{
    zc_status rc = ZC_OK;
    pthread_mutex_lock(&g_mu);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin) {
        rc = ZC_ERR(ZC_ERR_COMM, "MPI was already finalised in this process (zeroc finalises it "
                                 "with its last MPI communicator when zeroc initialised it): "
                                 "create every MPI communicator before destroying the last");
    } else if (!inited) {
        int provided = 0;
        int e = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (e != MPI_SUCCESS) {
            rc = zc__mpi_errstr(e, "MPI_Init_thread");
        } else {
            g_we_init = 1;
            /* SERIALIZED: the engine calls from one thread at a time, but not
             * necessarily the thread that initialised MPI. */
            if (provided < MPI_THREAD_SERIALIZED)
                ZC_LOGW("comm", "MPI provides thread level %d < MPI_THREAD_SERIALIZED: call "
                                "zeroc only from the thread that created the communicator",
                        provided);
        }
    }
    if (rc == ZC_OK)
        g_refs++;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void zc__mpi_unref(int healthy)
{
    pthread_mutex_lock(&g_mu);
    if (!healthy)
        g_poisoned = 1;
    if (--g_refs == 0 && g_we_init && !g_poisoned) {
        MPI_Finalize();
        g_we_init = 0;
    }
    pthread_mutex_unlock(&g_mu);
}

/* MPI's rank and size against the launcher's. */
zc_status zc__mpi_check_env(const zc_launch_env *env, int rank, int world, const char *what)
{
    if (env && (env->rank != rank || env->world != world))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "%s: the launcher (%s) says rank %d of %d but MPI says rank %d of %d: "
                      "start the processes with mpirun or srun (torchrun-style variables alone "
                      "do not connect MPI processes), or set ZC_COMM to another backend",
                      what, env->launcher, env->rank, env->world, rank, world);
    return ZC_OK;
}

zc_status zc__mpi_bcast_blob(const zc_launch_env *env, void *blob, size_t len, double timeout_s)
{
    if (len > INT_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__mpi_bcast_blob: %zu bytes", len);
    ZC_CHECK(zc__mpi_ref());
    zc_status rc = ZC_OK;
    MPI_Comm dup = MPI_COMM_NULL;
    int rank = 0, world = 0, e;
    int healthy = 1;
    if ((e = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) {
        rc = zc__mpi_errstr(e, "MPI bootstrap: MPI_Comm_dup(MPI_COMM_WORLD)");
        goto out;
    }
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &world);
    ZC_CHECK_GOTO(zc__mpi_check_env(env, rank, world, "MPI bootstrap"), rc, out);
    MPI_Request req;
    if ((e = MPI_Ibcast(blob, (int)len, MPI_BYTE, 0, dup, &req)) != MPI_SUCCESS) {
        rc = zc__mpi_errstr(e, "MPI bootstrap: MPI_Ibcast");
        goto out;
    }
    double deadline = zc__now_s() + timeout_s;
    for (;;) {
        int done = 0;
        if ((e = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            rc = zc__mpi_errstr(e, "MPI bootstrap: MPI_Test");
            healthy = 0;
            goto out;
        }
        if (done)
            break;
        if (zc__now_s() > deadline) {
            rc = ZC_ERR(ZC_ERR_COMM, "MPI bootstrap: rank %d of %d: the broadcast of %zu bytes "
                                     "from rank 0 timed out after %g s (ZC_BOOTSTRAP_TIMEOUT)",
                        rank, world, len, timeout_s);
            healthy = 0;
            goto out;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
out:
    if (dup != MPI_COMM_NULL && healthy)
        MPI_Comm_free(&dup);
    zc__mpi_unref(healthy);
    return rc;
}
