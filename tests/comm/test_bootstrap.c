/* Launcher bootstrap: environment parsing (in process, setenv: Criterion runs
 * each test in its own process) and the TCP rendezvous with W real processes
 * on loopback (the zc_rdv_helper executable, started with posix_spawn). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "zc_build_config.h"

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/rendezvous.h"
#include "device/device.h"
#include "helpers.h"
#include "test_bootstrap_spawn.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "NCCL_COMM_ID", "ZC_BOOTSTRAP", NULL};

/* The test runner may itself run under a launcher: start from nothing. */
static void clean_env(void)
{
    for (int i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
}

static void set(const char *k, const char *v) { setenv(k, v, 1); }

TestSuite(bootstrap, .init = clean_env);

Test(bootstrap, torchrun_variables)
{
    set("RANK", "5");
    set("WORLD_SIZE", "8");
    set("LOCAL_RANK", "1");
    set("LOCAL_WORLD_SIZE", "4");
    set("MASTER_ADDR", "node0.example");
    set("MASTER_PORT", "29500");
    zc_launch_env e;
    cr_assert_eq(zc__launch_env_read(&e, true), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.rank, 5);
    cr_assert_eq(e.world, 8);
    cr_assert_eq(e.local_rank, 1);
    cr_assert_eq(e.local_world, 4);
    cr_assert_str_eq(e.master_addr, "node0.example");
    cr_assert_eq(e.master_port, 29500);
    cr_assert_str_eq(e.launcher, "torchrun/deepspeed");
    t_assert_no_leaks();
}

Test(bootstrap, deepspeed_local_size)
{
    set("RANK", "0");
    set("WORLD_SIZE", "2");
    set("LOCAL_RANK", "0");
    set("LOCAL_SIZE", "2"); /* the deepspeed launcher's name for LOCAL_WORLD_SIZE */
    set("MASTER_ADDR", "127.0.0.1");
    set("MASTER_PORT", "29500");
    zc_launch_env e;
    cr_assert_eq(zc__launch_env_read(&e, true), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.local_world, 2);
}

Test(bootstrap, slurm_and_openmpi)
{
    set("SLURM_PROCID", "3");
    set("SLURM_NTASKS", "4");
    set("SLURM_LOCALID", "1");
    set("SLURM_NTASKS_PER_NODE", "2");
    zc_launch_env e;
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.rank, 3);
    cr_assert_eq(e.world, 4);
    cr_assert_eq(e.local_rank, 1);
    cr_assert_eq(e.local_world, 2);
    cr_assert_str_eq(e.launcher, "slurm");
    /* Under srun, MASTER_ADDR is the user's to export: the error says so. */
    cr_assert_eq(zc__launch_env_read(&e, true), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "MASTER_ADDR"), "%s", zc_last_error());

    clean_env();
    set("OMPI_COMM_WORLD_RANK", "2");
    set("OMPI_COMM_WORLD_SIZE", "3");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.rank, 2);
    cr_assert_eq(e.world, 3);
    cr_assert_str_eq(e.launcher, "openmpi");

    /* torchrun's variables win when both are present (torchrun under srun). */
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    set("LOCAL_RANK", "1");
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.rank, 1);
    cr_assert_eq(e.world, 2);
}

/* mpirun inside a Slurm allocation: the processes inherit the batch step's
 * SLURM_PROCID=0 and SLURM_NTASKS; the MPI launcher's variables describe
 * them. Also MPICH/Intel MPI (hydra) and MVAPICH2. */
Test(bootstrap, mpi_launchers_before_inherited_slurm)
{
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "1");
    set("SLURM_LOCALID", "0");
    set("OMPI_COMM_WORLD_RANK", "5");
    set("OMPI_COMM_WORLD_SIZE", "8");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    zc_launch_env e;
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(e.launcher, "openmpi");
    cr_assert_eq(e.rank, 5);
    cr_assert_eq(e.world, 8);
    cr_assert_eq(e.local_rank, 1);
    cr_assert_eq(e.local_world, 4);

    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    set("PMI_RANK", "3");
    set("PMI_SIZE", "6");
    set("MPI_LOCALRANKID", "0");
    set("MPI_LOCALNRANKS", "3");
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(e.launcher, "mpich/hydra");
    cr_assert_eq(e.rank, 3);
    cr_assert_eq(e.world, 6);
    cr_assert_eq(e.local_world, 3);

    clean_env();
    set("MV2_COMM_WORLD_RANK", "1");
    set("MV2_COMM_WORLD_SIZE", "2");
    set("MV2_COMM_WORLD_LOCAL_RANK", "1");
    set("MV2_COMM_WORLD_LOCAL_SIZE", "2");
    cr_assert_eq(zc__launch_env_read(&e, false), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(e.launcher, "mvapich2");
    cr_assert_eq(e.local_rank, 1);
}

/* Each case: the variables set, and the name the error must mention. */
Test(bootstrap, errors_name_the_variable)
{
    static const struct {
        const char *vars[8];
        const char *named;
    } cases[] = {
        {{NULL}, "RANK"},
        {{"RANK", "1", NULL}, "WORLD_SIZE"},
        {{"WORLD_SIZE", "2", NULL}, "RANK"},
        {{"RANK", "x1", "WORLD_SIZE", "2", NULL}, "RANK='x1'"},
        {{"RANK", "2", "WORLD_SIZE", "2", "LOCAL_RANK", "0", NULL}, "RANK=2"},
        {{"RANK", "0", "WORLD_SIZE", "0", NULL}, "WORLD_SIZE='0'"},
        {{"RANK", "1", "WORLD_SIZE", "2", NULL}, "LOCAL_RANK"},
        {{"RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", NULL}, "MASTER_ADDR"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        clean_env();
        for (int i = 0; cases[c].vars[i]; i += 2)
            set(cases[c].vars[i], cases[c].vars[i + 1]);
        zc_launch_env e;
        cr_assert_eq(zc__launch_env_read(&e, true), ZC_ERR_CONFIG, "case %zu", c);
        cr_assert(strstr(zc_last_error(), cases[c].named), "case %zu: '%s' does not name %s", c,
                  zc_last_error(), cases[c].named);
    }
    clean_env();
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    set("LOCAL_RANK", "1");
    set("MASTER_ADDR", "127.0.0.1");
    zc_launch_env e;
    cr_assert_eq(zc__launch_env_read(&e, true), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "MASTER_PORT"), "%s", zc_last_error());
    set("MASTER_PORT", "65535"); /* +1 would overflow */
    cr_assert_eq(zc__launch_env_read(&e, true), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "MASTER_PORT='65535'"), "%s", zc_last_error());
    t_assert_no_leaks();
}

/* Without NCCL (or without a GPU) a valid environment is recognised and then
 * refused as unsupported; an invalid one is still a configuration error. */
Test(bootstrap, init_env_without_a_usable_backend)
{
    zc_comm *c = (zc_comm *)1;
    cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG);
    cr_assert_null(c);
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    if (ZC_HAVE_NCCL && zc__device_cuda_count() > 0)
        cr_skip_test("a CUDA device is present: tests/gpu covers zc_comm_init_env with NCCL");
    cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_UNSUPPORTED);
    cr_assert_null(c);
    cr_assert(strstr(zc_last_error(), "rank 0 of 1"), "%s", zc_last_error());
    t_assert_no_leaks();
}

/* ---- the rendezvous, in this process ------------------------------------- */

Test(bootstrap, rendezvous_single_rank_and_bad_options)
{
    char blob[4] = "abc";
    zc_rdv_opts o = {.addr = "127.0.0.1", .port = 1, .rank = 0, .world = 1, .timeout_s = 1};
    cr_assert_eq(zc__rendezvous(&o, blob, sizeof blob), ZC_OK);
    cr_assert_str_eq(blob, "abc");
    o.world = 2;
    o.rank = 2;
    cr_assert_eq(zc__rendezvous(&o, blob, sizeof blob), ZC_ERR_INVALID_ARG);
    o.rank = 1;
    o.addr = "no-such-host.invalid";
    o.port = 5000;
    cr_assert_eq(zc__rendezvous(&o, blob, sizeof blob), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "no-such-host.invalid"), "%s", zc_last_error());
    t_assert_no_leaks();
}

Test(bootstrap, rendezvous_root_names_missing_ranks)
{
    int port = t_free_port_pair();
    cr_assert_gt(port, 0);
    char blob[16] = {0};
    zc_rdv_opts o = {.addr = "127.0.0.1", .port = port, .rank = 0, .world = 3,
                     .timeout_s = 0.5};
    cr_assert_eq(zc__rendezvous(&o, blob, sizeof blob), ZC_ERR_COMM);
    cr_assert(strstr(zc_last_error(), "2 of 2 ranks missing (1,2)"), "%s", zc_last_error());
    t_assert_no_leaks();
}

Test(bootstrap, rendezvous_peer_reports_refused_address)
{
    int port = t_free_port_pair(); /* nobody listens there */
    cr_assert_gt(port, 0);
    char blob[16];
    zc_rdv_opts o = {.addr = "127.0.0.1", .port = port, .rank = 1, .world = 2,
                     .timeout_s = 0.5};
    cr_assert_eq(zc__rendezvous(&o, blob, sizeof blob), ZC_ERR_COMM);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1 port %d", port);
    cr_assert(strstr(zc_last_error(), want), "%s", zc_last_error());
    cr_assert(strstr(zc_last_error(), "refused"), "%s", zc_last_error());
    t_assert_no_leaks();
}

/* ---- the rendezvous across processes ------------------------------------- */

static const char *helper(void)
{
    const char *h = getenv("ZC_RDV_HELPER");
    cr_assert(h && *h, "ZC_RDV_HELPER is not set: run this test through meson test");
    return h;
}

static void run_world(int world, int root_last, unsigned seed)
{
    t_rank_proc p[T_MAX_RANKS];
    int port = t_free_port_pair();
    cr_assert_gt(port, 1);
    char arg[32];
    snprintf(arg, sizeof arg, "%u", seed);
    static const char *const extra[] = {"ZC_BOOTSTRAP_TIMEOUT=20", NULL};
    /* MASTER_PORT is the launcher's; zeroc listens on MASTER_PORT+1. */
    for (int i = 0; i < world; i++) {
        int r = root_last ? world - 1 - i : i;
        cr_assert_eq(t_spawn_rank(&p[r], helper(), arg, r, world, port - 1, extra), 0);
        if (root_last && r != 0) {
            struct timespec ts = {0, 50 * 1000 * 1000}; /* peers must retry */
            nanosleep(&ts, NULL);
        }
    }
    int hung = t_wait_ranks(p, world, 40);
    for (int r = 0; r < world; r++) {
        const char *err = t_rank_stderr(&p[r]);
        cr_assert_eq(hung, 0, "world %d hung", world);
        cr_assert_eq(p[r].status, 0, "world %d rank %d exited %d: %s", world, r, p[r].status, err);
    }
}

Test(bootstrap, rendezvous_processes_w1_to_w4, .timeout = 120)
{
    unsigned seed = (unsigned)t_seed("rendezvous_processes");
    for (int w = 1; w <= 4; w++)
        run_world(w, 0, seed + (unsigned)w);
}

Test(bootstrap, rendezvous_root_starting_last, .timeout = 60)
{
    run_world(4, 1, (unsigned)t_seed("rendezvous_root_last"));
}

Test(bootstrap, rendezvous_world_size_mismatch_fails_both_sides, .timeout = 60)
{
    t_rank_proc p[2];
    int port = t_free_port_pair();
    cr_assert_gt(port, 1);
    static const char *const extra[] = {"ZC_BOOTSTRAP_TIMEOUT=10", NULL};
    cr_assert_eq(t_spawn_rank(&p[0], helper(), "1", 0, 2, port - 1, extra), 0);
    cr_assert_eq(t_spawn_rank(&p[1], helper(), "1", 1, 3, port - 1, extra), 0);
    cr_assert_eq(t_wait_ranks(p, 2, 30), 0);
    const char *e0 = t_rank_stderr(&p[0]);
    cr_assert_eq(p[0].status, 2, "rank 0 exit %d", p[0].status);
    cr_assert(strstr(e0, "WORLD_SIZE=3 but rank 0 has 2"), "%s", e0);
    const char *e1 = t_rank_stderr(&p[1]);
    cr_assert_eq(p[1].status, 2, "rank 1 exit %d", p[1].status);
    cr_assert(strstr(e1, "WORLD_SIZE differs"), "%s", e1);
}

Test(bootstrap, rendezvous_missing_rank_times_out_not_hangs, .timeout = 60)
{
    t_rank_proc p[2];
    int port = t_free_port_pair();
    cr_assert_gt(port, 1);
    static const char *const extra[] = {"ZC_BOOTSTRAP_TIMEOUT=1", NULL};
    /* World of 3, rank 2 never starts. */
    cr_assert_eq(t_spawn_rank(&p[0], helper(), "7", 0, 3, port - 1, extra), 0);
    cr_assert_eq(t_spawn_rank(&p[1], helper(), "7", 1, 3, port - 1, extra), 0);
    cr_assert_eq(t_wait_ranks(p, 2, 20), 0, "the rendezvous hung instead of timing out");
    const char *e0 = t_rank_stderr(&p[0]);
    cr_assert_eq(p[0].status, 2);
    cr_assert(strstr(e0, "missing (2)"), "%s", e0);
    const char *e1 = t_rank_stderr(&p[1]);
    cr_assert_eq(p[1].status, 2, "rank 1 exit %d: %s", p[1].status, e1);
}
