/* zc_comm_init_env's choice of backend (ZC_COMM), the NCCL id's path
 * (ZC_BOOTSTRAP) and ZC_COMM_TIMEOUT: strict parsing and the errors that
 * name what to do. In process, with setenv (Criterion runs each test in its
 * own process); nothing here starts MPI, whose multi-process behaviour
 * tests/comm/check_mpi.py covers under mpirun. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "zc_build_config.h"

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "helpers.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "NCCL_COMM_ID", "ZC_BOOTSTRAP", "ZC_COMM", "ZC_COMM_TIMEOUT",
    NULL};

static void clean_env(void)
{
    for (int i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
}

static void set(const char *k, const char *v) { setenv(k, v, 1); }

TestSuite(select, .init = clean_env);

Test(select, unknown_backend_is_refused_by_name)
{
    static const char *const bad[] = {"MPI", "mpi ", "openmpi", "loc", "nccl2", "1"};
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_comm *c = (zc_comm *)1;
        set("ZC_COMM", bad[i]);
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "ZC_COMM='%s'", bad[i]);
        cr_assert_null(c);
        cr_assert(strstr(zc_last_error(), "ZC_COMM='") &&
                  strstr(zc_last_error(), "'local', 'mpi' or 'nccl'"), "%s", zc_last_error());
    }
    t_assert_no_leaks();
}

Test(select, local_is_one_rank_of_one_process)
{
    zc_comm *c = NULL;
    set("ZC_COMM", "local");
    /* No launcher at all: a world of one. */
    cr_assert_eq(zc_comm_init_env(&c), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(c->ops->name, "local");
    cr_assert_eq(zc_comm_rank(c), 0);
    cr_assert_eq(zc_comm_world(c), 1);
    zc_comm_destroy(c);
    /* A launcher that started two processes: local cannot join them. */
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    set("LOCAL_RANK", "1");
    c = (zc_comm *)1;
    cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG);
    cr_assert_null(c);
    cr_assert(strstr(zc_last_error(), "rank 1 of 2"), "%s", zc_last_error());
    /* A malformed launcher variable is still its own error. */
    set("WORLD_SIZE", "2x");
    cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "WORLD_SIZE='2x'"), "%s", zc_last_error());
    t_assert_no_leaks();
}

Test(select, backend_not_built_says_so)
{
    zc_comm *c = (zc_comm *)1;
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    if (!ZC_HAVE_MPI) {
        set("ZC_COMM", "mpi");
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_UNSUPPORTED);
        cr_assert(strstr(zc_last_error(), "without MPI"), "%s", zc_last_error());
        cr_assert_null(c);
        set("ZC_BOOTSTRAP", "mpi");
        zc_boot_mode m;
        cr_assert_eq(zc__bootstrap_mode(NULL, &m), ZC_ERR_UNSUPPORTED);
    }
    if (!ZC_HAVE_NCCL) {
        set("ZC_COMM", "nccl");
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_UNSUPPORTED);
        cr_assert(strstr(zc_last_error(), "without NCCL"), "%s", zc_last_error());
        cr_assert_null(c);
    }
    if (ZC_HAVE_MPI && ZC_HAVE_NCCL)
        cr_skip_test("this build has both MPI and NCCL");
    t_assert_no_leaks();
}

Test(select, nccl_id_path)
{
    zc_boot_mode m;
    zc_launch_env ompi = {.rank = 0, .world = 2, .launcher = "openmpi"};
    zc_launch_env torch = {.rank = 0, .world = 2, .launcher = "torchrun/deepspeed"};
    /* Unset: NCCL_COMM_ID wins; mpirun without MASTER_ADDR uses MPI when
     * built; torchrun always the rendezvous. */
    cr_assert_eq(zc__bootstrap_mode(&torch, &m), ZC_OK);
    cr_assert_eq(m, ZC_BOOT_RENDEZVOUS);
    cr_assert_eq(zc__bootstrap_mode(&ompi, &m), ZC_OK);
    cr_assert_eq(m, ZC_HAVE_MPI ? ZC_BOOT_MPI : ZC_BOOT_RENDEZVOUS);
    set("MASTER_ADDR", "node0");
    cr_assert_eq(zc__bootstrap_mode(&ompi, &m), ZC_OK);
    cr_assert_eq(m, ZC_BOOT_RENDEZVOUS);
    set("NCCL_COMM_ID", "node0:4000");
    cr_assert_eq(zc__bootstrap_mode(&ompi, &m), ZC_OK);
    cr_assert_eq(m, ZC_BOOT_NCCL_COMM_ID);
    /* Forced, exact names only. */
    set("ZC_BOOTSTRAP", "rendezvous");
    cr_assert_eq(zc__bootstrap_mode(&ompi, &m), ZC_OK);
    cr_assert_eq(m, ZC_BOOT_RENDEZVOUS);
    set("ZC_BOOTSTRAP", "tcp");
    cr_assert_eq(zc__bootstrap_mode(&ompi, &m), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "ZC_BOOTSTRAP='tcp'"), "%s", zc_last_error());
    if (ZC_HAVE_MPI) {
        set("ZC_BOOTSTRAP", "mpi");
        cr_assert_eq(zc__bootstrap_mode(&torch, &m), ZC_OK);
        cr_assert_eq(m, ZC_BOOT_MPI);
    }
    t_assert_no_leaks();
}

#if ZC_HAVE_MPI
Test(select, comm_timeout_is_parsed_strictly)
{
    double t = 0;
    cr_assert_eq(zc__comm_timeout_env(&t), ZC_OK);
    cr_assert_eq(t, 600.0);
    set("ZC_COMM_TIMEOUT", "2.5");
    cr_assert_eq(zc__comm_timeout_env(&t), ZC_OK);
    cr_assert_eq(t, 2.5);
    static const char *const bad[] = {"0", "-1", "2s", " ", "inf", "nan", "1e999", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set("ZC_COMM_TIMEOUT", bad[i]);
        cr_assert_eq(zc__comm_timeout_env(&t), ZC_ERR_CONFIG, "ZC_COMM_TIMEOUT='%s'", bad[i]);
        cr_assert(strstr(zc_last_error(), "ZC_COMM_TIMEOUT="), "%s", zc_last_error());
    }
    t_assert_no_leaks();
}
#endif
