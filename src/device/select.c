/* Choosing the device backend, and the GPU, at run time. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/env.h"
#include "base/log.h"
#include "device/device.h"
#include "zc_build_config.h"
#if ZC_HAVE_CUDA
#include "cuda_plugin/load.h"
#endif

static pthread_once_t choice_logged = PTHREAD_ONCE_INIT;
static const char *choice_text = "host";

static void log_choice(void)
{
    ZC_LOGI("device", "device backend: %s", choice_text);
}

zc_status zc__device_open(zc_device_kind kind, int index, zc_device **out)
{
    *out = NULL;
    switch (kind) {
    case ZC_DEVICE_HOST:
        *out = zc__device_host();
        return ZC_OK;
    case ZC_DEVICE_CUDA:
        return zc__device_cuda_open(index, out);
    case ZC_DEVICE_AUTO:
        if (zc__device_cuda_count() > 0) {
            ZC_CHECK(zc__device_cuda_open(index, out));
            choice_text = "cuda";
        } else {
            *out = zc__device_host();
            choice_text = "host (no CUDA device)";
        }
        pthread_once(&choice_logged, log_choice);
        return ZC_OK;
    default:
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.device: unknown device kind %d",
                      (int)kind);
    }
}

/* ---- which GPU a process of a launched job uses ---------------------------
 *
 * The variables that give a process's index among the processes of its node,
 * most specific first. The order matters when several are present, and it
 * matches the launcher order of src/comm/bootstrap.c so the NCCL rank and the
 * device backend always read the same one:
 *   - torchrun under srun, or the deepspeed launcher under mpirun, set
 *     LOCAL_RANK for the worker while the outer launcher's variables describe
 *     the agent: LOCAL_RANK first;
 *   - mpirun inside a Slurm allocation inherits the batch step's
 *     SLURM_LOCALID (0 in every process): the MPI launchers' variables come
 *     before Slurm's, and Slurm's are the last resort. */
static const struct {
    const char *var, *launcher;
} local_rank_vars[] = {
    {"LOCAL_RANK", "torchrun/deepspeed"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "openmpi"},
    {"MPI_LOCALRANKID", "mpich/hydra"},
    {"MV2_COMM_WORLD_LOCAL_RANK", "mvapich2"},
    {"SLURM_LOCALID", "slurm"},
};

zc_status zc__device_pick_from_env(int visible, int *index, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    if (!index)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "device pick: index is NULL");
    *index = -1;
    if (visible <= 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "no CUDA device is visible to this process");

    const char *var = NULL, *launcher = NULL;
    for (size_t i = 0; i < sizeof local_rank_vars / sizeof local_rank_vars[0]; i++) {
        if (zc__env(local_rank_vars[i].var)) {
            var = local_rank_vars[i].var;
            launcher = local_rank_vars[i].launcher;
            break;
        }
    }
    if (!var) {
        /* A process started by hand (or ranks as threads of one process). */
        *index = 0;
        if (why)
            snprintf(why, why_len, "no launcher local rank set: device 0");
        return ZC_OK;
    }
    char note[64];
    snprintf(note, sizeof note, "(set by %s)", launcher);
    int lr = 0;
    ZC_CHECK(zc__env_int(var, 0, INT_MAX - 1, note, NULL, &lr));

    const char *cvd = zc__env("CUDA_VISIBLE_DEVICES");
    bool restricted = cvd != NULL;
    if (lr < visible) {
        *index = lr;
        if (why)
            snprintf(why, why_len, "%s=%d (%s)", var, lr, launcher);
        return ZC_OK;
    }
    if (restricted) {
        /* The launcher gave each task its own subset (srun --gpus-per-task,
         * an mpirun wrapper exporting CUDA_VISIBLE_DEVICES per rank) while the
         * local rank counts every process of the node: the visible devices
         * are this task's, so take them in turn. With one visible device
         * this is always device 0. */
        *index = lr % visible;
        if (why)
            snprintf(why, why_len, "%s=%d (%s) with CUDA_VISIBLE_DEVICES=%s (%d visible): "
                     "device %d of this task's", var, lr, launcher, cvd, visible, *index);
        return ZC_OK;
    }
    /* Every process sees every device and there are more processes than
     * devices: wrapping around would put two ranks on one GPU, which NCCL
     * refuses at init (and which only slows the local backend down). */
    return ZC_ERR(ZC_ERR_CONFIG,
                  "%s=%d (%s) but only %d CUDA device%s visible and CUDA_VISIBLE_DEVICES is "
                  "unset: start at most one process per GPU on this node, or give each process "
                  "its own CUDA_VISIBLE_DEVICES (srun --gpus-per-task=1)",
                  var, lr, launcher, visible, visible == 1 ? " is" : "s are");
}

ZC_API zc_status zc_cuda_device_index(int device_index, int *ordinal)
{
    if (!ordinal)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_cuda_device_index: ordinal is NULL");
    *ordinal = -1;
    if (device_index < -1)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_cuda_device_index: device_index %d (a CUDA ordinal, or -1 for the "
                      "launcher's local rank)", device_index);
    int count = zc__device_cuda_count();
    if (count <= 0) {
#if ZC_HAVE_CUDA
        char why[1024];
        zc__cuda_unusable_reason(why, sizeof why);
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_cuda_device_index: no usable CUDA device is visible to this process: %s",
                      why);
#else
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "zc_cuda_device_index: this build of zeroc has no CUDA");
#endif
    }
    if (device_index >= count)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_cuda_device_index: device_index %d but only %d CUDA device%s visible",
                      device_index, count, count == 1 ? " is" : "s are");
    if (device_index >= 0) {
        *ordinal = device_index;
        return ZC_OK;
    }
    int index = -1;
    char why[256];
    ZC_CHECK(zc__device_pick_from_env(count, &index, why, sizeof why));
    *ordinal = index;
    return ZC_OK;
}
