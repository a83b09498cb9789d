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

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "base/log.h"

/* 1: set and parsed into *v; 0: unset (or empty); -1: malformed (error set). */
static int env_int(const char *name, int *v, const char *launcher)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\n')
        end++;
    if (errno || *end || x < INT_MIN || x > INT_MAX) {
        ZC_ERR(ZC_ERR_CONFIG, "%s='%s' is not an integer (set by %s)", name, s, launcher);
        return -1;
    }
    *v = (int)x;
    return 1;
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
    int rk = env_int(L->rank, &out->rank, L->name);
    int wd = env_int(L->world, &out->world, L->name);
    if (rk < 0 || wd < 0)
        return ZC_ERR_CONFIG;
    if (!rk)
        return need(L->rank, L->name, L->world);
    if (!wd)
        return need(L->world, L->name, L->rank);
    if (out->world < 1)
        return ZC_ERR(ZC_ERR_CONFIG, "%s=%d: the world needs at least one rank", L->world,
                      out->world);
    if (out->rank < 0 || out->rank >= out->world)
        return ZC_ERR(ZC_ERR_CONFIG, "%s=%d is outside 0..%d (%s=%d)", L->rank, out->rank,
                      out->world - 1, L->world, out->world);
    int lr = env_int(L->local_rank, &out->local_rank, L->name);
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
    int lw = env_int(L->local_world, &out->local_world, L->name);
    if (lw < 0)
        return ZC_ERR_CONFIG;
    if (!lw && L->local_world_alt && env_int(L->local_world_alt, &out->local_world, L->name) < 0)
        return ZC_ERR_CONFIG;
    if (out->local_rank < 0 ||
        (out->local_world > 0 && out->local_rank >= out->local_world))
        return ZC_ERR(ZC_ERR_CONFIG, "%s=%d is outside 0..%d", L->local_rank, out->local_rank,
                      out->local_world > 0 ? out->local_world - 1 : INT_MAX);
    if (out->local_world > out->world)
        return ZC_ERR(ZC_ERR_CONFIG, "%d local ranks on this node but %s=%d", out->local_world,
                      L->world, out->world);
    return ZC_OK;
}

zc_status zc__launch_env_read(zc_launch_env *out, bool need_master)
{
    memset(out, 0, sizeof *out);
    out->master_port = -1;
    const launcher_vars *L = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !L; i++) {
        const char *r = getenv(launchers[i].rank), *w = getenv(launchers[i].world);
        if ((r && *r) || (w && *w))
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

    const char *addr = getenv("MASTER_ADDR");
    int port = -1;
    int pr = env_int("MASTER_PORT", &port, L->name);
    if (pr < 0)
        return ZC_ERR_CONFIG;
    if (need_master && out->world > 1) {
        if (!addr || !*addr)
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
    if (pr && (port < 1 || port > 65534))
        return ZC_ERR(ZC_ERR_CONFIG, "MASTER_PORT=%d is outside 1..65534 (zeroc uses MASTER_PORT+1)",
                      port);
    if (addr && strlen(addr) >= sizeof out->master_addr)
        return ZC_ERR(ZC_ERR_CONFIG, "MASTER_ADDR is longer than %zu characters",
                      sizeof out->master_addr - 1);
    if (addr)
        snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
    out->master_port = pr ? port : -1;
    return ZC_OK;
}

double zc__bootstrap_timeout(void)
{
    const char *s = getenv("ZC_BOOTSTRAP_TIMEOUT");
    if (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (end != s && v > 0)
            return v;
        ZC_LOGW("comm", "ignoring ZC_BOOTSTRAP_TIMEOUT='%s' (want seconds > 0)", s);
    }
    return 300.0;
}

zc_status zc_comm_init_env(zc_comm **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_init_env: out is NULL");
    *out = NULL;
    /* With NCCL_COMM_ID set, NCCL's own bootstrap finds rank 0: no MASTER_*. */
    const char *cid = getenv("NCCL_COMM_ID");
    zc_launch_env env;
    ZC_CHECK(zc__launch_env_read(&env, !(cid && *cid)));
    ZC_LOGI("comm", "launcher %s: rank %d of %d, local rank %d", env.launcher, env.rank,
            env.world, env.local_rank);
#if ZC_HAVE_NCCL
    return zc__comm_nccl_from_env(&env, out);
#else
    return ZC_ERR(ZC_ERR_UNSUPPORTED,
                  "zc_comm_init_env: this zeroc has no NCCL, so it cannot reach other processes "
                  "(found rank %d of %d from %s); rebuild with -Dnccl=enabled, or run ranks as "
                  "threads with zc_comm_local_world", env.rank, env.world, env.launcher);
#endif
}
