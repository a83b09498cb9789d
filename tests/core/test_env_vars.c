/* Every environment variable zeroc reads, given hostile values at the public
 * call that reads it: junk, NaN, infinities, negatives, huge numbers, blanks,
 * hex, and a value of 5000 bytes. Each must fail that call with
 * ZC_ERR_CONFIG and a message naming the variable, its value and what is
 * accepted - never be ignored, never hang (ZC_COMM_TIMEOUT=inf used to let
 * two thread ranks wait forever; nan, -1 and junk silently meant 600 s).
 *
 * Where the error is reported (docs in include/zeroc/zeroc.h):
 *   ZC_LOG, ZC_LOG_RANKS, ZC_LOG_SUBSYS  zc_config_create, zc_config_load*,
 *       zc_comm_local_world, zc_comm_init_env, zc_engine_create (a log line
 *       has no status to fail with)
 *   ZC_COMM_TIMEOUT       zc_comm_local_world, zc_comm_init_env
 *   ZC_COMM, ZC_BOOTSTRAP, ZC_BOOTSTRAP_TIMEOUT, launcher variables
 *                         zc_comm_init_env (whichever backend it picks)
 *   ZC_CPU_THREADS, ZC_CPU_ISA, ZC_DEBUG, ZC_FAULTS   zc_engine_create
 *   ZC_TRACE, ZC_TRACE_STEPS                          zc_engine_build
 * Criterion runs each test in a process of its own, so setenv stays local. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "base/log.h"
#include "comm/comm.h"
#include "device/device.h"
#include "helpers.h"
#include "offload/offload.h"
#include "optim/adam_isa.h"
#include "zeroc/zeroc.h"

/* Values no variable of zeroc accepts (empty is "unset" by design and is
 * tested as such below). */
static const char *const hostile[] = {
    "abc", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-1", "-0.5", "1e30", "1e999",
    "99999999999999999999", "-99999999999999999999", " 1", "1 ", "\t", "1x", "0x10", "+-1",
    "\x1b[31m", "\xff\xfe",
};
static char long_value[5001];

static const char *hostile_at(size_t i)
{
    if (i < sizeof hostile / sizeof hostile[0])
        return hostile[i];
    memset(long_value, '7', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    return long_value;
}
#define N_HOSTILE (sizeof hostile / sizeof hostile[0] + 1)

/* The message names the variable with its value (as shown: quoted, at most
 * 64 bytes, non-printable bytes escaped) and says what is wanted. */
static void assert_names(const char *var, const char *value, const char *want)
{
    const char *m = zc_last_error();
    char head[128];
    snprintf(head, sizeof head, "%s='", var);
    cr_assert(strstr(m, head), "%s='%s': message '%s' does not name it", var, value, m);
    bool printable = strlen(value) < 40;
    for (const char *p = value; *p; p++)
        printable = printable && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f &&
                    *p != '\\';
    if (printable) {
        char quoted[160];
        snprintf(quoted, sizeof quoted, "%s='%s'", var, value);
        cr_assert(strstr(m, quoted), "message '%s' does not repeat '%s'", m, quoted);
    }
    cr_assert(strstr(m, want), "%s='%s': message '%s' does not say '%s'", var, value, m, want);
    cr_assert_lt(strlen(m), 1000u, "the value floods the message");
    for (const char *p = m; *p; p++)
        cr_assert((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                  "%s: byte %#x reaches the message", var, (unsigned char)*p);
}

/* ---- ZC_COMM_TIMEOUT ----------------------------------------------------- */

Test(env_vars, comm_timeout_is_refused_at_creation_on_the_local_backend)
{
    static const char *const also[] = {"0", "0.0001", "1e-9", "604801", "1e6"};
    for (size_t i = 0; i < N_HOSTILE + 5; i++) {
        const char *v = i < N_HOSTILE ? hostile_at(i) : also[i - N_HOSTILE];
        setenv("ZC_COMM_TIMEOUT", v, 1);
        zc_comm *comms[2] = {(zc_comm *)1, (zc_comm *)1};
        cr_assert_eq(zc_comm_local_world(2, comms), ZC_ERR_CONFIG, "ZC_COMM_TIMEOUT='%s'", v);
        assert_names("ZC_COMM_TIMEOUT", v, "want a finite number of seconds in [0.001, 604800]");
        /* Through the launcher path too (ZC_COMM=local: a world of one). */
        setenv("ZC_COMM", "local", 1);
        zc_comm *c = (zc_comm *)1;
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "ZC_COMM_TIMEOUT='%s'", v);
        cr_assert_null(c);
        assert_names("ZC_COMM_TIMEOUT", v, "[0.001, 604800]");
        unsetenv("ZC_COMM");
    }
    unsetenv("ZC_COMM_TIMEOUT");
    t_assert_no_leaks();
}

typedef struct barrier_arg {
    zc_comm *comms[2];
    zc_status rc[2];
} barrier_arg;

static void barrier_rank(int rank, void *p)
{
    barrier_arg *a = p;
    a->rc[rank] = zc__barrier(a->comms[rank]);
}

/* The top of the range waits like any other value (its deadline is a sum,
 * not a wrapped time in the past), and a short one ends the wait. */
Test(env_vars, comm_timeout_range_ends_work, .timeout = 60)
{
    setenv("ZC_COMM_TIMEOUT", "604800", 1);
    barrier_arg a = {0};
    cr_assert_eq(zc_comm_local_world(2, a.comms), ZC_OK, "%s", zc_last_error());
    t_run_ranks(2, barrier_rank, &a);
    cr_assert_eq(a.rc[0], ZC_OK, "%s", zc_last_error());
    cr_assert_eq(a.rc[1], ZC_OK);
    zc_comm_destroy(a.comms[0]);
    zc_comm_destroy(a.comms[1]);

    setenv("ZC_COMM_TIMEOUT", "0.05", 1);
    cr_assert_eq(zc_comm_local_world(2, a.comms), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__barrier(a.comms[0]), ZC_ERR_COMM, "rank 1 never came: a timeout");
    cr_assert(strstr(zc_last_error(), "timed out after 0.05 s"), "%s", zc_last_error());
    zc_comm_destroy(a.comms[0]);
    zc_comm_destroy(a.comms[1]);
    unsetenv("ZC_COMM_TIMEOUT");
    t_assert_no_leaks();
}

/* ---- logging ------------------------------------------------------------- */

static void log_var_refused(const char *var, const char *v, const char *want)
{
    /* A configuration and a communicator made before the value is set, so
     * the engine's own check is reached. */
    zc__log_env_reset();
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK, "%s", zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK, "%s", zc_last_error());

    setenv(var, v, 1);
    zc__log_env_reset();
    zc_config *c2 = (zc_config *)1;
    cr_assert_eq(zc_config_create(&c2), ZC_ERR_CONFIG, "%s='%s'", var, v);
    cr_assert_null(c2);
    assert_names(var, v, want);
    c2 = (zc_config *)1;
    cr_assert_eq(zc_config_load_string(&c2, "{}", "t", 0), ZC_ERR_CONFIG, "%s='%s'", var, v);
    cr_assert_null(c2);
    zc_comm *c3[1] = {(zc_comm *)1};
    cr_assert_eq(zc_comm_local_world(1, c3), ZC_ERR_CONFIG, "%s='%s'", var, v);
    assert_names(var, v, want);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = (zc_engine *)1;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_ERR_CONFIG, "%s='%s'", var, v);
    cr_assert_null(e);
    assert_names(var, v, want);
    unsetenv(var);
    zc__log_env_reset();
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}

Test(env_vars, logging_variables_fail_the_first_calls)
{
    static const char *const level_also[] = {"verbose", "3", "info,debug", "warn "};
    for (size_t i = 0; i < N_HOSTILE + 4; i++) {
        const char *v = i < N_HOSTILE ? hostile_at(i) : level_also[i - N_HOSTILE];
        log_var_refused("ZC_LOG", v, "'off', 'error', 'warn', 'info', 'debug', 'trace'");
    }
    static const char *const ranks_also[] = {"1", "none", "ALL", "0,1", "all "};
    for (size_t i = 0; i < N_HOSTILE + 5; i++) {
        const char *v = i < N_HOSTILE ? hostile_at(i) : ranks_also[i - N_HOSTILE];
        log_var_refused("ZC_LOG_RANKS", v, "want '0' or 'all'");
    }
    static const char *const subsys_also[] = {"core,", ",core", "core,,zero3", "nvme", "CORE",
                                              "core zero3", "zero3,bogus"};
    for (size_t i = 0; i < N_HOSTILE + 7; i++) {
        const char *v = i < N_HOSTILE ? hostile_at(i) : subsys_also[i - N_HOSTILE];
        log_var_refused("ZC_LOG_SUBSYS", v,
                        "each one of ckpt, comm, config, core, device, load, offload, optim, zero3");
    }
    t_assert_no_leaks();
}

Test(env_vars, logging_variables_that_are_good_take_effect)
{
    static const struct {
        const char *v;
        zc_log_level on, off;
    } levels[] = {{"info", ZC_LOG_INFO, ZC_LOG_DEBUG}, {"INFO", ZC_LOG_INFO, ZC_LOG_DEBUG},
                  {"warning", ZC_LOG_WARN, ZC_LOG_INFO}, {"trace", ZC_LOG_TRACE, ZC_LOG_TRACE + 1},
                  {"off", ZC_LOG_OFF, ZC_LOG_ERROR}, {"", ZC_LOG_WARN, ZC_LOG_INFO}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        setenv("ZC_LOG", levels[i].v, 1);
        zc__log_env_reset();
        cr_assert_eq(zc__log_env_check(), ZC_OK, "ZC_LOG='%s': %s", levels[i].v, zc_last_error());
        cr_assert(zc__log_enabled(levels[i].on), "ZC_LOG='%s'", levels[i].v);
        cr_assert(!zc__log_enabled(levels[i].off), "ZC_LOG='%s'", levels[i].v);
    }
    unsetenv("ZC_LOG");
    setenv("ZC_LOG_RANKS", "all", 1);
    setenv("ZC_LOG_SUBSYS", "core,zero3", 1);
    zc__log_env_reset();
    cr_assert_eq(zc__log_env_check(), ZC_OK, "%s", zc_last_error());
    /* A malformed value read by a log line (not by a check) leaves the
     * thread's last error as it was: logging runs inside other calls. */
    setenv("ZC_LOG", "bogus", 1);
    zc__log_env_reset();
    (void)ZC_ERR(ZC_ERR_IO, "the caller's own error");
    ZC_LOGW("core", "a line that reads the variables");
    cr_assert(strstr(zc_last_error(), "the caller's own error"), "%s", zc_last_error());
    cr_assert_eq(zc__log_env_check(), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "ZC_LOG='bogus'"), "%s", zc_last_error());
    unsetenv("ZC_LOG");
    zc__log_env_reset();
}

/* ---- engine-level variables ---------------------------------------------- */

static void engine_var_refused(const char *var, const char *v, zc_status want_rc,
                               const char *want)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK, "%s", zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK, "%s", zc_last_error());
    setenv(var, v, 1);
    zc__adam_variant_reset();
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = (zc_engine *)1;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), want_rc, "%s='%s': %s", var, v,
                 zc_last_error());
    cr_assert_null(e);
    assert_names(var, v, want);
    unsetenv(var);
    zc__adam_variant_reset();
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}

Test(env_vars, engine_variables_fail_zc_engine_create)
{
    for (size_t i = 0; i < N_HOSTILE; i++) {
        const char *v = hostile_at(i);
        engine_var_refused("ZC_CPU_THREADS", v, ZC_ERR_CONFIG, "want a whole number in [1, 256]");
        engine_var_refused("ZC_CPU_ISA", v, ZC_ERR_CONFIG,
                           "want one of the host Adam variants 'scalar', 'avx2'");
        engine_var_refused("ZC_DEBUG", v, ZC_ERR_CONFIG, "want 0 (off, the default) or 1");
        engine_var_refused("ZC_FAULTS", v, ZC_ERR_CONFIG, "KIND:RANK:K");
    }
    static const char *const threads_also[] = {"0", "257", "1.5", "2e2"};
    for (size_t i = 0; i < 4; i++)
        engine_var_refused("ZC_CPU_THREADS", threads_also[i], ZC_ERR_CONFIG,
                           "want a whole number in [1, 256]");
    static const char *const isa_also[] = {"AVX2", "sse9", "avx2 "};
    for (size_t i = 0; i < 3; i++)
        engine_var_refused("ZC_CPU_ISA", isa_also[i], ZC_ERR_CONFIG, "want one of");
    static const char *const debug_also[] = {"2", "true", "yes", "01"};
    for (size_t i = 0; i < 4; i++)
        engine_var_refused("ZC_DEBUG", debug_also[i], ZC_ERR_CONFIG, "want 0");
    engine_var_refused("ZC_FAULTS", "alloc:1:1", ZC_ERR_CONFIG, "is not an integer in [0, 0]");
    engine_var_refused("ZC_FAULTS", "alloc:0:1e30", ZC_ERR_CONFIG, "K '1e30'");
    /* A variant this CPU or build cannot run is refused at create too, not
     * at the first step. */
    for (int i = 0; i < zc__adam_variant_count(); i++)
        if (!zc__adam_variant_usable(i, NULL))
            engine_var_refused("ZC_CPU_ISA", zc__adam_variant(i)->name, ZC_ERR_UNSUPPORTED,
                               "cannot run");
    t_assert_no_leaks();
}

/* The timeline's variables are read by zc_engine_build (which creates its
 * file): a malformed window, or a path with control bytes, fails the build,
 * naming the variable and its value, and leaves no file. */
static void build_var_refused(const char *var, const char *v, const char *want)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK, "%s", zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK, "%s", zc_last_error());
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    cr_assert_not_null(zc_param_add(e, "w", (int64_t[]){64}, 1, 0));
    setenv(var, v, 1);
    cr_assert_eq(zc_engine_build(e), ZC_ERR_CONFIG, "%s='%s': %s", var, v, zc_last_error());
    assert_names(var, v, want);
    unsetenv(var);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}

Test(env_vars, trace_variables_fail_zc_engine_build)
{
    for (size_t i = 0; i < N_HOSTILE; i++)
        build_var_refused("ZC_TRACE_STEPS", hostile_at(i), "want a window of optimizer steps");
    static const char *const steps_also[] = {"0", "0-3", "4-2", "3-", "-3", "1-2-3", "1,2",
                                             "9007199254740993"};
    for (size_t i = 0; i < sizeof steps_also / sizeof steps_also[0]; i++)
        build_var_refused("ZC_TRACE_STEPS", steps_also[i], "1 <= A <= B <= 2^53");
    build_var_refused("ZC_TRACE", "a\x1b[31mb.json", "no control characters");
    build_var_refused("ZC_TRACE", "t\tx.json", "no control characters");
    t_assert_no_leaks();
}

/* Good values are taken: the engine is made. */
Test(env_vars, engine_variables_that_are_good_are_taken)
{
    setenv("ZC_CPU_THREADS", "2", 1);
    setenv("ZC_CPU_ISA", "scalar", 1);
    setenv("ZC_DEBUG", "0", 1);
    setenv("ZC_FAULTS", "", 1); /* empty: unset */
    zc__adam_variant_reset();
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* ---- zc_comm_init_env: its own switches and the launchers' variables ------ */

static const char *const launch_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "NCCL_COMM_ID", "ZC_BOOTSTRAP", "ZC_BOOTSTRAP_TIMEOUT",
    "ZC_COMM", "ZC_COMM_TIMEOUT", NULL};

static void clean_launch_env(void)
{
    for (int i = 0; launch_vars[i]; i++)
        unsetenv(launch_vars[i]);
}

/* A launcher's job of one process, every variable set: it joins (ZC_COMM
 * =local takes a world of one). */
typedef struct launcher {
    const char *vars[12];
} launcher;

static const launcher launchers[] = {
    {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "1", "MASTER_ADDR",
      "127.0.0.1", "MASTER_PORT", "29500"}},
    {{"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "OMPI_COMM_WORLD_LOCAL_RANK", "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
    {{"PMI_RANK", "0", "PMI_SIZE", "1", "MPI_LOCALRANKID", "0", "MPI_LOCALNRANKS", "1"}},
    {{"MV2_COMM_WORLD_RANK", "0", "MV2_COMM_WORLD_SIZE", "1", "MV2_COMM_WORLD_LOCAL_RANK", "0",
      "MV2_COMM_WORLD_LOCAL_SIZE", "1"}},
    {{"SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE",
      "1"}},
};

static void set_launcher(const launcher *L)
{
    clean_launch_env();
    setenv("ZC_COMM", "local", 1);
    for (int i = 0; i < 12 && L->vars[i]; i += 2)
        setenv(L->vars[i], L->vars[i + 1], 1);
}

Test(env_vars, launcher_variables_fail_zc_comm_init_env, .init = clean_launch_env)
{
    for (size_t l = 0; l < sizeof launchers / sizeof launchers[0]; l++) {
        set_launcher(&launchers[l]);
        zc_comm *c = NULL;
        cr_assert_eq(zc_comm_init_env(&c), ZC_OK, "launcher %zu: %s", l, zc_last_error());
        zc_comm_destroy(c);
        for (int k = 0; k < 12 && launchers[l].vars[k]; k += 2) {
            const char *var = launchers[l].vars[k];
            if (!strcmp(var, "MASTER_ADDR"))
                continue; /* below: a host name is not a number */
            for (size_t i = 0; i < N_HOSTILE; i++) {
                const char *v = hostile_at(i);
                set_launcher(&launchers[l]);
                setenv(var, v, 1);
                c = (zc_comm *)1;
                cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "%s='%s'", var, v);
                cr_assert_null(c);
                assert_names(var, v, "want a whole number in [");
            }
        }
    }
    /* MASTER_ADDR: blanks, control bytes and over-long names. */
    static const char *const addrs[] = {" host", "host name", "host\n", "\x1b[31m", "\t"};
    for (size_t i = 0; i < sizeof addrs / sizeof addrs[0] + 1; i++) {
        char big[400];
        memset(big, 'h', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        const char *v = i < sizeof addrs / sizeof addrs[0] ? addrs[i] : big;
        set_launcher(&launchers[0]);
        setenv("MASTER_ADDR", v, 1);
        zc_comm *c = (zc_comm *)1;
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "MASTER_ADDR='%s'", v);
        cr_assert_null(c);
        assert_names("MASTER_ADDR", v, "printable characters without blanks");
    }
    clean_launch_env();
    t_assert_no_leaks();
}

/* The switches of zc_comm_init_env are checked whichever backend it picks:
 * ZC_BOOTSTRAP and ZC_BOOTSTRAP_TIMEOUT matter only to NCCL, yet a bad one
 * is refused under ZC_COMM=local too rather than ignored. */
Test(env_vars, comm_switches_fail_zc_comm_init_env, .init = clean_launch_env)
{
    for (size_t i = 0; i < N_HOSTILE + 3; i++) {
        static const char *const also[] = {"0", "604801", "1e-9"};
        const char *v = i < N_HOSTILE ? hostile_at(i) : also[i - N_HOSTILE];
        set_launcher(&launchers[0]);
        setenv("ZC_BOOTSTRAP_TIMEOUT", v, 1);
        zc_comm *c = (zc_comm *)1;
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "ZC_BOOTSTRAP_TIMEOUT='%s'", v);
        cr_assert_null(c);
        assert_names("ZC_BOOTSTRAP_TIMEOUT", v, "[0.001, 604800]");
        if (i >= N_HOSTILE)
            continue;
        set_launcher(&launchers[0]);
        setenv("ZC_BOOTSTRAP", v, 1);
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "ZC_BOOTSTRAP='%s'", v);
        assert_names("ZC_BOOTSTRAP", v, "want 'rendezvous', 'nccl_comm_id' or 'mpi'");
        set_launcher(&launchers[0]);
        setenv("ZC_COMM", v, 1);
        cr_assert_eq(zc_comm_init_env(&c), ZC_ERR_CONFIG, "ZC_COMM='%s'", v);
        assert_names("ZC_COMM", v, "want 'local', 'mpi' or 'nccl'");
    }
    clean_launch_env();
    t_assert_no_leaks();
}

/* The GPU pick reads the launcher's local rank with the same reader. */
Test(env_vars, device_pick_reads_the_local_rank_strictly, .init = clean_launch_env)
{
    static const char *const vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                       "SLURM_LOCALID"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
        for (size_t i = 0; i < N_HOSTILE; i++) {
            const char *v = hostile_at(i);
            clean_launch_env();
            setenv(vars[k], v, 1);
            int idx = 5;
            char why[128];
            cr_assert_eq(zc__device_pick_from_env(2, &idx, why, sizeof why), ZC_ERR_CONFIG,
                         "%s='%s'", vars[k], v);
            cr_assert_eq(idx, -1);
            assert_names(vars[k], v, "want a whole number in [0, ");
        }
    clean_launch_env();
}

/* The NVMe store's fault switch (its own tests' ZC_NVME_FAULTS): whole items
 * and whole counts. */
Test(env_vars, nvme_fault_switch_is_strict)
{
    static const char *const bad[] = {"eio= 1", "eio=1,", ",eio=1", "eio=1,,short=2", "eio=-1",
                                      "eio=1e3", "eio=nan", "eio=inf", "eio=99999999999999999999",
                                      "eio=0x10", "eio", "nodirect=1", "EIO=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_nvme_faults f;
        cr_assert_eq(zc__nvme_parse_faults(bad[i], &f), ZC_ERR_INVALID_ARG, "'%s'", bad[i]);
        cr_assert(strstr(zc_last_error(), "ZC_NVME_FAULTS"), "%s", zc_last_error());
    }
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    zc_nvme_faults f;
    cr_assert_eq(zc__nvme_parse_faults(big, &f), ZC_ERR_INVALID_ARG, "a value past 255 bytes");
    cr_assert_eq(zc__nvme_parse_faults("eio=3,nodirect", &f), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(f.eio_at, 3);
    cr_assert(f.refuse_direct);
}
