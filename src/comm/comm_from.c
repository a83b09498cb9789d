/* Communicators over the program's own handles that have no backend file
 * of their own in every build: zc_comm_from_nccl's checks before the CUDA
 * plugin (which wraps the ncclComm_t: nccl_wrap.c), and zc_comm_from_mpi in
 * a build without MPI (with MPI: mpi_split.c). */
#include "zc_build_config.h"

#include "base/log.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/nccl.h"

#if !ZC_HAVE_MPI
ZC_API zc_status zc_comm_from_mpi(const void *mpi_comm, zc_comm **out)
{
    (void)mpi_comm;
    zc__error_clear();
    if (out)
        *out = NULL;
    return ZC_ERR(ZC_ERR_UNSUPPORTED, "zc_comm_from_mpi: this zeroc was built without MPI: "
                                      "install Open MPI (libopenmpi-dev) and reconfigure with "
                                      "-Dmpi=enabled");
}
#endif

ZC_API zc_status zc_comm_from_nccl(void *nccl_comm, int rank, int world, void *stream,
                                   zc_comm **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_nccl: out is NULL");
    *out = NULL;
    if (!nccl_comm)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_nccl: nccl_comm is NULL");
    if (world < 1 || rank < 0 || rank >= world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_nccl: rank %d of world %d", rank, world);
#if ZC_HAVE_NCCL
    ZC_CHECK(zc__log_env_check());
    double t = 0;
    ZC_CHECK(zc__comm_timeout_env(&t));
    /* The node map's coordinates: the launcher's rank and ranks per node
     * when a launcher started the process, else this communicator's. */
    int world_rank = rank, world_size = world, node_ranks = -1;
    zc_launch_env env;
    if (zc__launch_env_read(&env, false) == ZC_OK && env.world >= world) {
        world_rank = env.rank;
        world_size = env.world;
        node_ranks = env.local_world;
    }
    zc__error_clear();
    zc_status rc = zc__comm_nccl_wrap(nccl_comm, rank, world, stream, world_rank, node_ranks, out);
    if (rc == ZC_OK)
        (*out)->world_size = world_size;
    return rc;
#else
    (void)stream;
    return ZC_ERR(ZC_ERR_UNSUPPORTED, "zc_comm_from_nccl: this zeroc was built without NCCL: "
                                      "reconfigure with -Dnccl=enabled on a machine with CUDA "
                                      "and NCCL");
#endif
}
