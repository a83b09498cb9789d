/* zc_comm_init_env: join the job a launcher started.
 *
 * Reads rank, world and local rank from the launcher's environment
 * (bootstrap.h lists the variables), validates them, and hands them to the
 * NCCL backend, which picks the GPU (zc__device_pick_from_env, the launcher's
 * local rank) and exchanges the NCCL
 * unique id over the rendezvous on MASTER_ADDR:MASTER_PORT+1 (or through
 * NCCL_COMM_ID when the user set it). A build without NCCL validates the
 * environment the same way and then says it cannot reach other processes. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zc_build_config.h"

#include "base/env.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "base/log.h"
#include "comm/mpi.h"
#include "device/device.h"

/* 1: set and parsed into *v; 0: unset (or empty); -1: malformed (error set,
 * naming the variable, its value, the launcher and the range). */
static int env_int(const char *name, int lo, int hi, int *v, const char *launcher)
{
    char note[128];
    snprintf(note, sizeof note, "(set by %s)", launcher);
    bool set = false;
    if (zc__env_int(name, lo, hi, note, &set, v) != ZC_OK)
        return -1;
    return set ? 1 : 0;
}

static zc_status need(const char *name, const char *launcher, const char *have)
{
    return ZC_ERR(ZC_ERR_CONFIG, "%s is not set (%s is, so this looks like %s, which sets both)",
                  name, have, launcher);
}

typedef struct launcher_vars {
    const char *name;
    const char *rank, *world, *local_rank, *local_world, *local_world_alt;
} launcher_vars;

/* First match wins. Slurm comes last: a process that mpirun starts inside a
 * Slurm allocation inherits the batch step's SLURM_PROCID (0 everywhere) and
 * SLURM_NTASKS, while the MPI launcher's own variables describe it. The order
 * must stay the local-rank order of zc__device_pick_from_env
 * (src/device/select.c), which picks the GPU from the same launcher. */
static const launcher_vars launchers[] = {
    {"torchrun/deepspeed", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
    {"mpich/hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL},
    {"mvapich2", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE", NULL},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", NULL},
};

static zc_status read_ranks(const launcher_vars *L, zc_launch_env *out)
{
    int rk = env_int(L->rank, 0, INT_MAX - 1, &out->rank, L->name);
    int wd = env_int(L->world, 1, INT_MAX, &out->world, L->name);
    if (rk < 0 || wd < 0)
        return ZC_ERR_CONFIG;
    if (!rk)
        return need(L->rank, L->name, L->world);
    if (!wd)
        return need(L->world, L->name, L->rank);
    if (out->rank >= out->world)
        return ZC_ERR(ZC_ERR_CONFIG, "%s=%d is outside 0..%d (%s=%d)", L->rank, out->rank,
                      out->world - 1, L->world, out->world);
    int lr = env_int(L->local_rank, 0, INT_MAX - 1, &out->local_rank, L->name);
    if (lr < 0)
        return ZC_ERR_CONFIG;
    if (!lr) {
        /* One rank needs no local index; several need to know their GPU. */
        if (out->world > 1)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "%s is not set (%s=%d, %s=%d): each process needs its index on its "
                          "node to pick its GPU", L->local_rank, L->rank, out->rank, L->world,
                          out->world);
        out->local_rank = 0;
    }
    out->local_world = -1;
    int lw = env_int(L->local_world, 1, INT_MAX, &out->local_world, L->name);
    if (lw < 0)
        return ZC_ERR_CONFIG;
    if (!lw && L->local_world_alt &&
        env_int(L->local_world_alt, 1, INT_MAX, &out->local_world, L->name) < 0)
        return ZC_ERR_CONFIG;
    if (out->local_world > 0 && out->local_rank >= out->local_world)
        return ZC_ERR(ZC_ERR_CONFIG, "%s=%d is outside 0..%d", L->local_rank, out->local_rank,
                      out->local_world > 0 ? out->local_world - 1 : INT_MAX);
    if (out->local_world > out->world)
        return ZC_ERR(ZC_ERR_CONFIG, "%d local ranks on this node but %s=%d", out->local_world,
                      L->world, out->world);
    return ZC_OK;
}

/* MASTER_ADDR names a host: a name or address of printable characters
 * without blanks, at most `max` bytes (what getaddrinfo is given). */
static zc_status check_master_addr(const char *addr, size_t max)
{
    if (!addr)
        return ZC_OK;
    size_t n = 0;
    bool ok = true;
    for (; addr[n] && ok; n++)
        ok = addr[n] > 0x20 && addr[n] < 0x7f;
    if (ok && n <= max)
        return ZC_OK;
    char shown[ZC_ENV_SHOWN_MAX];
    return ZC_ERR(ZC_ERR_CONFIG, "MASTER_ADDR='%s': want rank 0's host name or address, 1 to %zu "
                  "printable characters without blanks", zc__env_shown(addr, shown, sizeof shown),
                  max);
}

zc_status zc__launch_env_read(zc_launch_env *out, bool need_master)
{
    memset(out, 0, sizeof *out);
    out->master_port = -1;
    const launcher_vars *L = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !L; i++) {
        if (zc__env(launchers[i].rank) || zc__env(launchers[i].world))
            L = &launchers[i];
    }
    if (!L)
        return ZC_ERR(ZC_ERR_CONFIG,
                      "no launcher environment found: set RANK and WORLD_SIZE (torchrun, "
                      "deepspeed), or start under mpirun (OMPI_COMM_WORLD_RANK/_SIZE, "
                      "PMI_RANK/PMI_SIZE, MV2_COMM_WORLD_RANK/_SIZE) or srun (SLURM_PROCID, "
                      "SLURM_NTASKS)");
    out->launcher = L->name;
    ZC_CHECK(read_ranks(L, out));

    const char *addr = zc__env("MASTER_ADDR");
    int port = -1;
    char who[96];
    snprintf(who, sizeof who, "%s; zeroc listens on MASTER_PORT+1", L->name);
    int pr = env_int("MASTER_PORT", 1, 65534, &port, who);
    if (pr < 0)
        return ZC_ERR_CONFIG;
    ZC_CHECK(check_master_addr(addr, sizeof out->master_addr - 1));
    if (need_master && out->world > 1) {
        if (!addr)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "MASTER_ADDR is not set (%s, rank %d of %d): it must name rank 0's "
                          "host%s", L->name, out->rank, out->world,
                          L == &launchers[0] ? "" : " (export it before srun/mpirun, e.g. the "
                                                    "first host of the allocation)");
        if (!pr)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "MASTER_PORT is not set (%s, rank %d of %d): zeroc listens on "
                          "MASTER_PORT+1 on rank 0", L->name, out->rank, out->world);
    }
    if (addr)
        snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
    out->master_port = pr ? port : -1;
    return ZC_OK;
}

/* ZC_BOOTSTRAP's values, in zc_boot_mode order. */
static const char *const boot_modes[] = {"rendezvous", "nccl_comm_id", "mpi"};
_Static_assert(ZC_BOOT_RENDEZVOUS == 0 && ZC_BOOT_NCCL_COMM_ID == 1 && ZC_BOOT_MPI == 2,
               "boot_modes[] is in zc_boot_mode order");

zc_status zc__bootstrap_timeout(double *out)
{
    double t = 300.0;
    ZC_CHECK(zc__env_seconds("ZC_BOOTSTRAP_TIMEOUT", ZC_COMM_TIMEOUT_MIN_S, ZC_COMM_TIMEOUT_MAX_S,
                             NULL, &t));
    *out = t;
    return ZC_OK;
}

zc_status zc__bootstrap_mode(const zc_launch_env *env, zc_boot_mode *out)
{
    const char *cid = zc__env("NCCL_COMM_ID");
    int mode = 0;
    bool set = false;
    ZC_CHECK(zc__env_choice("ZC_BOOTSTRAP", boot_modes, 3, 0, &set, &mode));
    if (set) {
        *out = (zc_boot_mode)mode;
        if (*out == ZC_BOOT_MPI && !ZC_HAVE_MPI)
            return ZC_ERR(ZC_ERR_UNSUPPORTED, "ZC_BOOTSTRAP=mpi but this zeroc was built "
                                              "without MPI (-Dmpi=enabled)");
        return ZC_OK;
    }
    const char *addr = zc__env("MASTER_ADDR");
    if (cid)
        *out = ZC_BOOT_NCCL_COMM_ID;
    /* Under mpirun/srun with no MASTER_ADDR exported, MPI already connects
     * the processes: no address or port to agree on. */
    else if (ZC_HAVE_MPI && env && strcmp(env->launcher, "torchrun/deepspeed") != 0 && !addr)
        *out = ZC_BOOT_MPI;
    else
        *out = ZC_BOOT_RENDEZVOUS;
    return ZC_OK;
}

/* Backends zc_comm_init_env can pick (ZC_COMM). */
enum { SEL_AUTO, SEL_LOCAL, SEL_MPI, SEL_NCCL };

/* Launchers whose processes MPI_Init connects (srun through PMI/PMIx). */
static bool mpi_launched(const zc_launch_env *env)
{
    return env && strcmp(env->launcher, "torchrun/deepspeed") != 0;
}

zc_status zc_comm_init_env(zc_comm **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_init_env: out is NULL");
    *out = NULL;
    /* ZC_COMM forces a backend; exact names only, so a typo is an error and
     * not a silent fallback to another backend. */
    static const char *const backends[] = {"local", "mpi", "nccl"};
    _Static_assert(SEL_LOCAL == 1 && SEL_MPI == 2 && SEL_NCCL == 3, "backends[] is in SEL order");
    int pick = 0;
    bool set = false;
    ZC_CHECK(zc__env_choice("ZC_COMM", backends, 3, 0, &set, &pick));
    int sel = set ? pick + 1 : SEL_AUTO;
    /* Every variable this call may depend on is checked before anything is
     * started, whichever backend ends up reading it: a bad value is an
     * error here, never ignored because another backend was chosen. */
    ZC_CHECK(zc__log_env_check());
    double seconds = 0;
    ZC_CHECK(zc__comm_timeout_env(&seconds));
    ZC_CHECK(zc__bootstrap_timeout(&seconds));
    ZC_CHECK(zc__env_choice("ZC_BOOTSTRAP", boot_modes, 3, 0, NULL, &pick));
    if (sel == SEL_MPI && !ZC_HAVE_MPI)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "ZC_COMM=mpi but this zeroc was built without MPI: "
                                          "install Open MPI (libopenmpi-dev) and reconfigure "
                                          "with -Dmpi=enabled");
    if (sel == SEL_NCCL && !ZC_HAVE_NCCL)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "ZC_COMM=nccl but this zeroc was built without NCCL: "
                                          "reconfigure with -Dnccl=enabled on a machine with "
                                          "CUDA and NCCL");

    /* The launcher's view; MASTER_ADDR/PORT are checked below only where a
     * TCP rendezvous needs them. With no launcher at all, ZC_COMM=local or
     * mpi still makes a world (of one, or MPI's singleton). */
    zc_launch_env envbuf, *env = &envbuf;
    zc_status erc = zc__launch_env_read(env, false);
    if (erc != ZC_OK) {
        const char *any = NULL;
        for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !any; i++)
            if (zc__env(launchers[i].rank) || zc__env(launchers[i].world))
                any = launchers[i].name;
        if (any || (sel != SEL_LOCAL && sel != SEL_MPI))
            return erc;
        zc__error_clear();
        env = NULL;
    } else {
        ZC_LOGI("comm", "launcher %s: rank %d of %d, local rank %d", env->launcher, env->rank,
                env->world, env->local_rank);
    }

    if (sel == SEL_AUTO) {
        if (ZC_HAVE_NCCL && zc__device_cuda_count() > 0)
            sel = SEL_NCCL;
        else if (ZC_HAVE_MPI && mpi_launched(env))
            sel = SEL_MPI;
        else
            return ZC_ERR(ZC_ERR_UNSUPPORTED,
                          "zc_comm_init_env: rank %d of %d (%s) cannot reach the other "
                          "processes: %s", env->rank, env->world, env->launcher,
                          ZC_HAVE_NCCL ? "NCCL needs a GPU and this process sees none, and "
                                         "torchrun-style variables do not connect MPI"
                          : ZC_HAVE_MPI ? "this zeroc has no NCCL, and its MPI communicator "
                                          "needs processes started by mpirun or srun"
                                        : "this zeroc has neither NCCL nor MPI; rebuild with "
                                          "-Dnccl=enabled or -Dmpi=enabled, or run ranks as "
                                          "threads with zc_comm_local_world (ZC_COMM=local for "
                                          "one rank)");
    }
    ZC_LOGI("comm", "communicator: %s", sel == SEL_LOCAL ? "local" : sel == SEL_MPI ? "mpi"
                                                                                    : "nccl");
    if (sel == SEL_LOCAL) {
        if (env && env->world != 1)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "ZC_COMM=local runs every rank as a thread of one process "
                          "(zc_comm_local_world), but this process is rank %d of %d (%s): "
                          "use ZC_COMM=mpi or nccl, or start one process", env->rank, env->world,
                          env->launcher);
        return zc_comm_local_world(1, out);
    }
#if ZC_HAVE_MPI
    if (sel == SEL_MPI)
        return zc__comm_mpi_create(env, out);
#endif
#if ZC_HAVE_NCCL
    if (sel == SEL_NCCL) {
        zc_boot_mode mode;
        ZC_CHECK(zc__bootstrap_mode(env, &mode));
        /* Only the TCP rendezvous (and NCCL_COMM_ID made from them) needs
         * MASTER_ADDR/MASTER_PORT: read again
         * requiring them, for the error that names what is missing. */
        const char *cid = zc__env("NCCL_COMM_ID");
        if (mode == ZC_BOOT_RENDEZVOUS || (mode == ZC_BOOT_NCCL_COMM_ID && !cid))
            ZC_CHECK(zc__launch_env_read(env, true));
        return zc__comm_nccl_from_env(env, out);
    }
#endif
    return ZC_ERR(ZC_ERR_INTERNAL, "zc_comm_init_env: backend %d not built", sel);
}
