/* Offload test harness on top of t_engine.h: temporary swap directories,
 * and fault-injection runs over the optimizer-state and parameter stores -
 * one run with a fault armed on one rank, and the sweeps that arm it at
 * every position of a short run on every rank in turn (store EIO/ENOSPC,
 * ZC_FAULTS io:RANK:K, each pinned allocation of the build). Assertions are
 * Criterion's: call from the test's own thread. */
#ifndef ZC_TESTS_T_OFFLOAD_H
#define ZC_TESTS_T_OFFLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "t_engine.h"

/* ---- swap directories ------------------------------------------------- */

/* A fresh directory under the test's working directory (the build
 * directory: a real filesystem, so O_DIRECT is exercised where it can be),
 * and its path as the JSON string an nvme_path takes. */
typedef struct t_swapdir {
    char path[64];
    char json[96];
} t_swapdir;

/* Creates prefix-XXXXXX (prefix at most 40 characters); asserts success. */
void t_swapdir_make(t_swapdir *d, const char *prefix);
/* Removes the directory; asserts that it was empty (every run removes its
 * swap files). */
void t_swapdir_remove(const t_swapdir *d);
/* The entries of dir other than . and ..; asserts that it can be read. */
int t_dir_entries(const char *dir);

/* ---- one fault-injection run ------------------------------------------ */

/* The store a t_fault is armed in, and whose requests a t_frun counts:
 * the optimizer state's (offload_optimizer "nvme") or the parameter
 * shards' (offload_param "nvme"). */
typedef enum { T_STORE_OPTIMIZER, T_STORE_PARAM } t_store;

typedef struct t_fault {
    int rank;     /* the rank it is armed on; -1: none */
    bool enospc;  /* the k-th write request fails with ENOSPC (persistent);
                     else the k-th request with EIO (transient: retried) */
    int64_t k;    /* counted from the moment the fault is armed: after the
                     build and zc_param_load, so 1.. covers the steps' I/O */
} t_fault;

#define T_NO_FAULT ((t_fault){.rank = -1})

/* What every run of a sweep shares. */
typedef struct t_fault_setup {
    t_run cfg;           /* the configuration (t_run_init'ed, outputs unset) */
    t_store store;       /* where a t_fault is armed and what is counted */
    const char *swapdir; /* asserted empty after every run (NULL: not checked) */
} t_fault_setup;

/* One run's outcome, per rank. A rank stops at its first failed step. */
typedef struct t_frun {
    t_run run;                               /* master: rank 0's gather, made
                                                when every step succeeded */
    zc_status step_rc[T_MAX_WORLD];          /* the failed step's status, else ZC_OK */
    int failed_step[T_MAX_WORLD];            /* -1: none */
    char msg[T_MAX_WORLD][1024];             /* zc_last_error() after it */
    char first_failure[T_MAX_WORLD][512];    /* the next zc_step's status and its
                                                "first failure: ..." text */
    int64_t requests[T_MAX_WORLD], writes[T_MAX_WORLD]; /* the store's requests and
                                                write requests during the steps */
    int64_t io_after_open[T_MAX_WORLD], io_total[T_MAX_WORLD]; /* ZC_FAULTS io events
                                                seen by then and in all */
    int64_t alloc_after_open[T_MAX_WORLD], alloc_total[T_MAX_WORLD]; /* alloc events */
    int live_entries[T_MAX_WORLD];           /* entries under the swap directory
                                                after the rank's steps, its engine
                                                still open (swap files have no
                                                name: 0), -1 when not looked */
} t_frun;

/* Opens every rank's engine for a copy of s->cfg, arms f, trains
 * s->cfg.steps steps and records each rank's outcome. Asserts that the
 * communicator was made and that s->swapdir is empty afterwards, and also
 * while the engines were still open after the steps, failed or not (what a
 * killed process would leave). Free with t_frun_free. */
t_frun *t_frun_run(const t_fault_setup *s, t_fault f);
void t_frun_free(t_frun *f);

/* Asserts that every rank of f failed in the same step with the same status
 * (step_want, unless ZC_OK), that every broken engine refuses further work
 * with engine_want naming the same first failure, which names rank
 * fault_rank ("on rank R of"), and that each rank's message contains "on
 * rank R of" and every needle (a NULL-terminated list). */
void t_assert_broken_alike(const t_frun *f, int fault_rank, zc_status step_want,
                           zc_status engine_want, const char *what,
                           const char *const *needles);

/* ---- sweeps ----------------------------------------------------------- */

/* With ref the fault-free run of s, on each rank in turn:
 *   - EIO at every store request of the steps: retried, every rank
 *     finishes with ref's master bitwise;
 *   - ENOSPC at every write request of the steps: t_assert_broken_alike with
 *     step_want and ZC_ERR_IO, the messages naming "ENOSPC", "chunk", file
 *     (the swap file's name or a part of it) and "offset".
 * Asserts that at least one run of each kind was made. */
void t_store_fault_sweep(const t_fault_setup *s, const t_frun *ref, zc_status step_want,
                         const char *file);

/* With ref the fault-free run of s (made with ZC_FAULTS unset), on each rank
 * in turn, ZC_FAULTS io:RANK:K at every K of the steps' reads and writes:
 * no hang, and either every rank ends with ref's master bitwise or every
 * rank is broken alike (t_assert_broken_alike with step_want and ZC_ERR_IO,
 * the messages naming "ZC_FAULTS" and "chunk") - never a split. Asserts
 * that every rank did I/O in the steps and that at least one run broke.
 * Leaves ZC_FAULTS unset. */
void t_zc_faults_io_sweep(const t_fault_setup *s, const t_frun *ref, zc_status step_want);

/* Fails each pinned allocation of a run of cfg in turn (cfg->world must be
 * 1: the countdown is the process's, and would split ranks), until a run
 * succeeds: each failure must come from zc_engine_build and say "out of
 * memory", and swapdir (NULL: not checked) must be empty after every run.
 * Returns the number of runs that failed. */
int t_pinned_build_sweep(const t_run *cfg, const char *swapdir, const char *what);

#endif
