/* The NCCL communicator from a launcher's environment (zc_comm_init_env):
 * the GPU this rank uses, the NCCL unique id from rank 0 (NCCL_COMM_ID,
 * the TCP rendezvous, or MPI_Bcast under mpirun), then
 * zc__comm_nccl_create (nccl.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "zc_build_config.h"

#include "comm/bootstrap.h"
#include "comm/mpi.h"
#include "comm/nccl.h"
#include "comm/rendezvous.h"
#include "base/env.h"
#include "base/log.h"
#include "device/cuda_guard.h"

static zc_status from_env_on_device(const zc_launch_env *env, int dev, const char *why,
                                    zc_comm **out);

zc_status zc__comm_nccl_from_env(const zc_launch_env *env, zc_comm **out)
{
    *out = NULL;
    int ndev = zc__device_cuda_count();
    if (ndev <= 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_comm_init_env: rank %d of %d (%s) has no usable CUDA device; the NCCL "
                      "communicator needs one GPU per rank", env->rank, env->world, env->launcher);
    /* The same choice the CUDA device backend makes for device_index -1, so
     * zc_engine_create binds a device this communicator accepts. */
    int dev = -1;
    char why[256];
    zc_status prc = zc__device_pick_from_env(ndev, &dev, why, sizeof why);
    if (prc != ZC_OK) {
        zc__error_context("zc_comm_init_env: rank %d of %d (%s); NCCL %d needs one GPU per rank",
                          env->rank, env->world, env->launcher, NCCL_VERSION_CODE);
        return prc;
    }
    ZC_LOGI("comm", "rank %d of %d uses cuda:%d (%s)", env->rank, env->world, dev, why);
    zc_cuda_guard dev_guard; /* the caller's thread stays on its own device */
    zc__cuda_guard_enter(&dev_guard, dev);
    zc_status rc = from_env_on_device(env, dev, why, out);
    zc__cuda_guard_leave(&dev_guard);
    return rc;
}

/* The rest of zc__comm_nccl_from_env, with `dev` current. */
static zc_status from_env_on_device(const zc_launch_env *env, int dev, const char *why,
                                    zc_comm **out)
{
    cudaError_t ce = cudaSetDevice(dev);
    if (ce != cudaSuccess)
        return ZC_ERR(ZC_ERR_DEVICE, "cudaSetDevice(%d) (%s): %s", dev, why,
                      cudaGetErrorString(ce));

    double timeout = 0;
    ZC_CHECK(zc__bootstrap_timeout(&timeout));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    const char *cid = zc__env("NCCL_COMM_ID");
    zc_boot_mode mode;
    ZC_CHECK(zc__bootstrap_mode(env, &mode));
    if (mode == ZC_BOOT_NCCL_COMM_ID) {
        /* NCCL encodes NCCL_COMM_ID in the id and rank 0 listens there. */
        if (!cid) {
            char buf[300];
            snprintf(buf, sizeof buf, "%s:%d", env->master_addr, env->master_port + 1);
            setenv("NCCL_COMM_ID", buf, 0);
        }
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            char shown[ZC_ENV_SHOWN_MAX];
            const char *now = zc__env("NCCL_COMM_ID");
            return ZC_ERR(ZC_ERR_COMM, "ncclGetUniqueId with NCCL_COMM_ID='%s': %s",
                          now ? zc__env_shown(now, shown, sizeof shown) : "",
                          ncclGetErrorString(r));
        }
    } else if (env->world > 1) {
        if (env->rank == 0) {
            ncclResult_t r = ncclGetUniqueId(&id);
            if (r != ncclSuccess)
                return ZC_ERR(ZC_ERR_COMM, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        }
        zc_status rc;
#if ZC_HAVE_MPI
        if (mode == ZC_BOOT_MPI) {
            /* mpirun already connected the processes: rank 0's id over
             * MPI_Bcast, MPI finalised again unless the program holds it. */
            rc = zc__mpi_bcast_blob(env, &id, sizeof id, timeout);
            if (rc != ZC_OK) {
                zc__error_context("zc_comm_init_env (NCCL id over MPI)");
                return rc;
            }
        } else
#endif
        {
            zc_rdv_opts o = {.addr = env->master_addr, .port = env->master_port + 1,
                             .rank = env->rank, .world = env->world, .timeout_s = timeout};
            rc = zc__rendezvous(&o, &id, sizeof id);
            if (rc != ZC_OK) {
                zc__error_context("zc_comm_init_env (MASTER_ADDR=%s, MASTER_PORT+1=%d)",
                                  env->master_addr, env->master_port + 1);
                return rc;
            }
        }
    } else {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return ZC_ERR(ZC_ERR_COMM, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    zc_status rc = zc__comm_nccl_create(env->rank, env->world, dev, &id, timeout, out);
    if (rc == ZC_OK) {
        (*out)->local_rank = env->local_rank;
        (*out)->local_world = env->local_world;
        (*out)->world_rank = env->rank;
        (*out)->node_ranks = env->local_world;
        (*out)->world_size = env->world;
    }
    return rc;
}
