/* Reading a launcher's environment (internal; see zc_comm_init_env).
 *
 * Sources, first match wins:
 *   torchrun / deepspeed: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *                         (torchrun) or LOCAL_SIZE (deepspeed)
 *   Open MPI (mpirun):    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *   MPICH / Intel MPI (hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
 *                         MPI_LOCALNRANKS
 *   MVAPICH2:             MV2_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *   Slurm (srun):         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
 *                         SLURM_NTASKS_PER_NODE (last: mpirun inside an
 *                         allocation inherits the batch step's values)
 * plus MASTER_ADDR and MASTER_PORT (rank 0's host and the launcher's port;
 * zeroc uses MASTER_PORT + 1, never the port itself, which torchrun's agent
 * owns). */
#ifndef ZC_COMM_BOOTSTRAP_H
#define ZC_COMM_BOOTSTRAP_H

#include <stdbool.h>

#include "base/error.h"

typedef struct zc_launch_env {
    int rank, world;
    int local_rank;       /* this process's index on its node (the GPU comes from
                             zc__device_pick_from_env, which reads the same variable) */
    int local_world;      /* processes on this node, -1 when not given */
    const char *launcher; /* "torchrun/deepspeed", "openmpi", "mpich/hydra", "mvapich2",
                             "slurm" (static text) */
    char master_addr[256];/* "" when not needed and unset */
    int master_port;      /* -1 when not needed and unset */
} zc_launch_env;

/* Fills *out from the environment. need_master: MASTER_ADDR and MASTER_PORT
 * are required when the world has more than one rank. Fails with
 * ZC_ERR_CONFIG naming the missing or malformed variable (and the launcher
 * it was expected from); *out is then unspecified. */
zc_status zc__launch_env_read(zc_launch_env *out, bool need_master);

/* How the NCCL unique id reaches every rank. ZC_BOOTSTRAP forces one
 * ('rendezvous', 'nccl_comm_id', 'mpi'; anything else is ZC_ERR_CONFIG, 'mpi'
 * in a build without MPI ZC_ERR_UNSUPPORTED). Unset: nccl_comm_id when
 * NCCL_COMM_ID is set; mpi (MPI_Bcast) when the build has MPI, the launcher
 * is mpirun/srun and MASTER_ADDR is not set; otherwise the TCP rendezvous on
 * MASTER_ADDR:MASTER_PORT+1. env may be NULL. */
typedef enum zc_boot_mode { ZC_BOOT_RENDEZVOUS, ZC_BOOT_NCCL_COMM_ID, ZC_BOOT_MPI } zc_boot_mode;
zc_status zc__bootstrap_mode(const zc_launch_env *env, zc_boot_mode *out);

/* Seconds the bootstrap may take: ZC_BOOTSTRAP_TIMEOUT, default 300, else a
 * decimal number in ZC_COMM_TIMEOUT's range [0.001, 604800]; a bad value is
 * ZC_ERR_CONFIG naming it. */
zc_status zc__bootstrap_timeout(double *out);

#if defined(ZC_HAVE_NCCL) && ZC_HAVE_NCCL
/* Creates this process's NCCL rank (src/comm/nccl.c). */
zc_status zc__comm_nccl_from_env(const zc_launch_env *env, zc_comm **out);
#endif

#endif
