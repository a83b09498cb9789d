/* Which GPU a launched process uses (zc__device_pick_from_env): one case per
 * launcher's variables, the precedence when launchers nest, the per-task
 * CUDA_VISIBLE_DEVICES case, the errors, and agreement with the launcher the
 * bootstrap reads (so the NCCL rank and the device backend never pick
 * different GPUs). Pure host logic: the visible device count is a parameter.
 * Criterion runs each test in its own process, so setenv stays local. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "comm/bootstrap.h"
#include "device/device.h"
#include "helpers.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", NULL};

/* The test runner may itself run under a launcher: start from nothing. */
static void clean_env(void)
{
    for (int i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
}

TestSuite(device_select, .init = clean_env);

static void set(const char *k, const char *v) { setenv(k, v, 1); }

/* Picks with `visible` devices, asserting success, and checks that `why`
 * names the variable that decided. */
static int pick(int visible, const char *expect_var)
{
    int idx = -7;
    char why[256];
    cr_assert_eq(zc__device_pick_from_env(visible, &idx, why, sizeof why), ZC_OK, "%s",
                 zc_last_error());
    if (expect_var)
        cr_assert(strstr(why, expect_var), "why '%s' does not name %s", why, expect_var);
    return idx;
}

Test(device_select, no_launcher_is_device_0)
{
    cr_assert_eq(pick(1, NULL), 0);
    cr_assert_eq(pick(8, NULL), 0);
}

Test(device_select, torchrun_and_deepspeed_local_rank)
{
    set("RANK", "11");
    set("WORLD_SIZE", "16");
    set("LOCAL_RANK", "3");
    set("LOCAL_WORLD_SIZE", "8");
    cr_assert_eq(pick(8, "LOCAL_RANK"), 3);
}

Test(device_select, srun_localid)
{
    set("SLURM_PROCID", "6");
    set("SLURM_NTASKS", "8");
    set("SLURM_LOCALID", "2");
    cr_assert_eq(pick(4, "SLURM_LOCALID"), 2);
}

/* srun --gpus-per-task=1: Slurm exports a one-device CUDA_VISIBLE_DEVICES per
 * task; the local id still counts the node's tasks. */
Test(device_select, srun_gpus_per_task_one_visible)
{
    set("SLURM_PROCID", "3");
    set("SLURM_NTASKS", "4");
    set("SLURM_LOCALID", "3");
    set("CUDA_VISIBLE_DEVICES", "3");
    cr_assert_eq(pick(1, "SLURM_LOCALID"), 0);
}

/* Two devices per task (--gpus-per-task=2): local ids 0..3 take the task's
 * two devices in turn. */
Test(device_select, per_task_subset_takes_devices_in_turn)
{
    set("SLURM_LOCALID", "3");
    set("CUDA_VISIBLE_DEVICES", "6,7");
    cr_assert_eq(pick(2, "CUDA_VISIBLE_DEVICES"), 1);
    set("SLURM_LOCALID", "2");
    cr_assert_eq(pick(2, NULL), 0);
}

Test(device_select, openmpi_local_rank)
{
    set("OMPI_COMM_WORLD_RANK", "5");
    set("OMPI_COMM_WORLD_SIZE", "8");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    cr_assert_eq(pick(4, "OMPI_COMM_WORLD_LOCAL_RANK"), 1);
}

/* mpirun inside an sbatch allocation: every process inherits the batch
 * step's SLURM_LOCALID=0; Open MPI's own variable must win. */
Test(device_select, mpirun_inside_slurm_allocation)
{
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "8");
    set("SLURM_LOCALID", "0");
    set("OMPI_COMM_WORLD_RANK", "3");
    set("OMPI_COMM_WORLD_SIZE", "8");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    cr_assert_eq(pick(4, "OMPI_COMM_WORLD_LOCAL_RANK"), 3);
}

Test(device_select, mpich_hydra_pmi)
{
    set("PMI_RANK", "9");
    set("PMI_SIZE", "16");
    set("MPI_LOCALRANKID", "5");
    set("MPI_LOCALNRANKS", "8");
    cr_assert_eq(pick(8, "MPI_LOCALRANKID"), 5);
}

Test(device_select, mvapich2)
{
    set("MV2_COMM_WORLD_RANK", "2");
    set("MV2_COMM_WORLD_SIZE", "4");
    set("MV2_COMM_WORLD_LOCAL_RANK", "2");
    cr_assert_eq(pick(4, "MV2_COMM_WORLD_LOCAL_RANK"), 2);
}

/* torchrun started by srun (one agent per node): the agent's SLURM_LOCALID
 * is 0 for every worker; LOCAL_RANK is the worker's. */
Test(device_select, torchrun_under_srun)
{
    set("SLURM_PROCID", "1");
    set("SLURM_NTASKS", "2");
    set("SLURM_LOCALID", "0");
    set("RANK", "6");
    set("WORLD_SIZE", "8");
    set("LOCAL_RANK", "2");
    cr_assert_eq(pick(4, "LOCAL_RANK"), 2);
}

/* More processes than GPUs with every GPU visible: wrapping would put two
 * ranks on one GPU (NCCL refuses it at init); the error says what to do. */
Test(device_select, more_processes_than_gpus_is_an_error)
{
    set("LOCAL_RANK", "4");
    int idx = 0;
    cr_assert_eq(zc__device_pick_from_env(4, &idx, NULL, 0), ZC_ERR_CONFIG);
    cr_assert_eq(idx, -1);
    const char *m = zc_last_error();
    cr_assert(strstr(m, "LOCAL_RANK=4") && strstr(m, "4 CUDA devices") &&
                  strstr(m, "CUDA_VISIBLE_DEVICES"),
              "%s", m);
    clean_env();
    set("SLURM_LOCALID", "1");
    cr_assert_eq(zc__device_pick_from_env(1, &idx, NULL, 0), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "SLURM_LOCALID=1"), "%s", zc_last_error());
}

Test(device_select, malformed_and_no_device)
{
    int idx = 0;
    static const char *const bad[] = {"x", "-1", "1.5", "", "99999999999", NULL};
    for (int i = 0; bad[i]; i++) {
        clean_env();
        set("OMPI_COMM_WORLD_LOCAL_RANK", bad[i]);
        zc_status rc = zc__device_pick_from_env(4, &idx, NULL, 0);
        if (!*bad[i]) {
            /* An empty variable counts as unset. */
            cr_assert_eq(rc, ZC_OK);
            cr_assert_eq(idx, 0);
            continue;
        }
        cr_assert_eq(rc, ZC_ERR_CONFIG, "'%s' accepted", bad[i]);
        cr_assert(strstr(zc_last_error(), "OMPI_COMM_WORLD_LOCAL_RANK"), "%s", zc_last_error());
    }
    clean_env();
    cr_assert_eq(zc__device_pick_from_env(0, &idx, NULL, 0), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(zc__device_pick_from_env(4, NULL, NULL, 0), ZC_ERR_INVALID_ARG);
}

/* For every launcher, the local rank the bootstrap reads (the NCCL rank's
 * local index) is the device the pick returns when there are enough GPUs:
 * the two read the same variable. Nested launchers included. */
Test(device_select, agrees_with_the_bootstrap_launcher)
{
    static const struct {
        const char *kv[12];
        int local;
    } cases[] = {
        {{"RANK", "1", "WORLD_SIZE", "4", "LOCAL_RANK", "1", NULL}, 1},
        {{"OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "8",
          "OMPI_COMM_WORLD_LOCAL_RANK", "2", "SLURM_PROCID", "0", "SLURM_NTASKS", "8",
          "SLURM_LOCALID", "0"}, 2},
        {{"PMI_RANK", "3", "PMI_SIZE", "4", "MPI_LOCALRANKID", "3", "SLURM_PROCID", "0",
          "SLURM_NTASKS", "4", "SLURM_LOCALID", "0"}, 3},
        {{"MV2_COMM_WORLD_RANK", "1", "MV2_COMM_WORLD_SIZE", "2", "MV2_COMM_WORLD_LOCAL_RANK",
          "1", NULL}, 1},
        {{"SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1", NULL}, 1},
        {{"RANK", "2", "WORLD_SIZE", "4", "LOCAL_RANK", "2", "SLURM_PROCID", "0",
          "SLURM_NTASKS", "1", "SLURM_LOCALID", "0"}, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        clean_env();
        for (int i = 0; i < 12 && cases[c].kv[i]; i += 2)
            set(cases[c].kv[i], cases[c].kv[i + 1]);
        zc_launch_env env;
        cr_assert_eq(zc__launch_env_read(&env, false), ZC_OK, "case %zu: %s", c,
                     zc_last_error());
        int idx = -1;
        cr_assert_eq(zc__device_pick_from_env(8, &idx, NULL, 0), ZC_OK, "case %zu: %s", c,
                     zc_last_error());
        cr_assert_eq(env.local_rank, cases[c].local, "case %zu (%s): bootstrap local rank %d",
                     c, env.launcher, env.local_rank);
        cr_assert_eq(idx, cases[c].local, "case %zu (%s): device %d", c, env.launcher, idx);
    }
    t_assert_no_leaks();
}

/* The public resolver of device_index (zc_cuda_device_index): argument
 * checks first, then, on a machine without a usable CUDA device (or a build
 * without CUDA), ZC_ERR_UNSUPPORTED and -1, whatever the launcher says. */
Test(device_select, public_resolver_without_a_device)
{
    cr_assert_eq(zc_cuda_device_index(0, NULL), ZC_ERR_INVALID_ARG);
    int ord = 7;
    cr_assert_eq(zc_cuda_device_index(-2, &ord), ZC_ERR_INVALID_ARG);
    cr_assert_eq(ord, -1);
    if (zc__device_cuda_count() > 0)
        cr_skip_test("a CUDA device is visible: tests/gpu covers the resolver there");
    setenv("LOCAL_RANK", "1", 1);
    ord = 7;
    cr_assert_eq(zc_cuda_device_index(-1, &ord), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(ord, -1);
    cr_assert(strstr(zc_last_error(), "zc_cuda_device_index"), "%s", zc_last_error());
    cr_assert_eq(zc_cuda_device_index(0, &ord), ZC_ERR_UNSUPPORTED);
}
