/* zc_checkpoint_load at stage 3 with offload_param "nvme": a swap-file write
 * that fails on one rank while the load writes the parameter shards home.
 *
 * That I/O is rank-local and sits between the load's collectives, so its
 * outcome must be agreed before the all-gathers that follow: a rank that
 * failed and stopped while the other went on would show here as a load that
 * worked on one rank, a communicator mismatch or a timeout
 * (ZC_COMM_TIMEOUT), and as messages that differ between the ranks. Each
 * failure must end with the same ZC_ERR_IO on both ranks, naming the failed
 * rank and the cause, and both engines broken (the optimizer state was
 * already overwritten).
 *
 * At every position the load reaches (counted by a load without faults),
 * on each rank in turn:
 * - ZC_FAULTS io:RANK:K: the K-th swap-file read or write fails when it is
 *   issued (found by the call that issues it, inside the read pass);
 * - the parameter home's store completing a write with ENOSPC
 *   (zc__param_home_nvme_set_faults): found when the request is reaped,
 *   which for the last shards is only when the load flushes them;
 * - and, for contrast, a one-off EIO at any request, which the home submits
 *   again: the load goes through and the run is bitwise the clean one's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_phase.h"
#include "core/engine.h"
#include "offload/homes.h"
#include "helpers.h"
#include "offload/offload.h"

#define W 2
#define STEPS 3

/* Both ranks fail alike, naming the failed rank and `needle`; both engines
 * are broken. */
static void assert_agreed_failure(const ck_phase *tried, const char *spec, int failed_rank,
                                  zc_status want, const char *needle)
{
    char who[32];
    snprintf(who, sizeof who, "failed on rank %d of %d", failed_rank, W);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(tried->load_rc[r], want, "%s, rank %d: %s", spec, r, tried->load_msg[r]);
        cr_assert_not_null(strstr(tried->load_msg[r], who), "%s, rank %d: '%s'", spec, r,
                           tried->load_msg[r]);
        cr_assert_not_null(strstr(tried->load_msg[r], needle), "%s, rank %d: '%s'", spec, r,
                           tried->load_msg[r]);
        cr_assert(tried->broken[r], "%s, rank %d: the engine is not broken", spec, r);
        cr_assert_eq(tried->after_rc[r], want, "%s, rank %d: %s", spec, r, tried->after_msg[r]);
    }
    cr_assert_str_eq(tried->load_msg[0], tried->load_msg[1], "%s", spec);
}

static void configure(t_run *run, const char *swap_json)
{
    t_run_init(run, 3, W, ZC_DTYPE_BF16);
    run->offload_param = "nvme";
    run->param_nvme_path_json = swap_json;
}

/* A checkpoint saved after STEPS steps, and the swap directory every run of
 * the test uses. */
typedef struct fixture {
    char *swap;
    char swap_json[600];
    ck_saved saved;
} fixture;

static void fixture_open(fixture *f)
{
    f->swap = ck_tmpdir();
    cr_assert(f->swap);
    snprintf(f->swap_json, sizeof f->swap_json, "\"%s\"", f->swap);
    t_run run;
    configure(&run, f->swap_json);
    cr_assert(ck_saved_make(&f->saved, &run, STEPS, "t"), "%s",
              ck_phase_error(&f->saved.phase));
}

static void fixture_close(fixture *f)
{
    ck_saved_free(&f->saved);
    ck_rm_tree(f->swap);
    free(f->swap);
}

/* Fresh engines load the checkpoint, then train one step; run is the
 * phase's configuration (the caller keeps both). */
static bool load_phase(const fixture *f, t_run *run, ck_phase *ph,
                       void (*hook)(t_ctx *, int, int, void *), void *hook_arg)
{
    configure(run, f->swap_json);
    *ph = (ck_phase){.run = run, .load_dir = f->saved.dir, .first = STEPS, .n = 1, .hook = hook,
                     .hook_arg = hook_arg};
    return ck_phase_run(ph);
}

Test(ckpt_load_faults, every_swap_event_of_the_load_on_each_rank)
{
    fixture f;
    fixture_open(&f);
    /* Without faults: the load works, and how many swap-file events it makes
     * on each rank. */
    t_run run;
    ck_phase clean;
    cr_assert(load_phase(&f, &run, &clean, NULL, NULL), "%s", ck_phase_error(&clean));
    int cases = 0;
    for (int r = 0; r < W; r++) {
        cr_assert_eq(clean.load_rc[r], ZC_OK, "rank %d: %s", r, clean.load_msg[r]);
        cr_assert_gt(clean.io_after_load[r], clean.io_after_open[r],
                     "rank %d: the load wrote no parameter shard home", r);
    }

    for (int fr = 0; fr < W; fr++) {
        for (int64_t k = clean.io_after_open[fr] + 1; k <= clean.io_after_load[fr]; k++) {
            char spec[64];
            snprintf(spec, sizeof spec, "io:%d:%lld", fr, (long long)k);
            setenv("ZC_FAULTS", spec, 1);
            t_run frun;
            ck_phase tried;
            const bool ran = load_phase(&f, &frun, &tried, NULL, NULL);
            unsetenv("ZC_FAULTS");
            cr_assert(ran, "%s: %s", spec, ck_phase_error(&tried));
            assert_agreed_failure(&tried, spec, fr, ZC_ERR_IO, "ZC_FAULTS");
            free(tried.master);
            cases++;
        }
    }
    cr_assert_gt(cases, 0);
    free(clean.master);
    fixture_close(&f);
    t_assert_no_leaks();
}

/* The store's request counters of each rank's parameter home, after open
 * and after the load; with `fault` set, that rank's store is armed after
 * open, positions counted from there. */
typedef struct store_probe {
    zc_param_home_io open[W], load[W];
    int fault_rank;
    zc_nvme_faults fault;
} store_probe;

static void probe_hook(t_ctx *x, int rank, int when, void *arg)
{
    store_probe *p = arg;
    zc_param_home_io *io = when == CK_AFTER_OPEN ? &p->open[rank] : &p->load[rank];
    zc__param_io(x->eng, io);
    if (when == CK_AFTER_OPEN && rank == p->fault_rank) {
        zc_nvme_faults f = p->fault;
        if (f.eio_at)
            f.eio_at += io->requests;
        if (f.enospc_write_at)
            f.enospc_write_at += io->write_requests;
        zc__param_home_nvme_set_faults(x->eng->phome, &f);
    }
}

Test(ckpt_load_faults, store_errors_at_every_request_of_the_load_on_each_rank, .timeout = 600)
{
    fixture f;
    fixture_open(&f);
    t_run run;
    store_probe clean_probe = {.fault_rank = -1};
    ck_phase clean;
    cr_assert(load_phase(&f, &run, &clean, probe_hook, &clean_probe), "%s",
              ck_phase_error(&clean));
    int cases = 0;
    for (int fr = 0; fr < W; fr++) {
        cr_assert_eq(clean.load_rc[fr], ZC_OK, "rank %d: %s", fr, clean.load_msg[fr]);
        const int64_t requests = clean_probe.load[fr].requests - clean_probe.open[fr].requests;
        const int64_t writes =
            clean_probe.load[fr].write_requests - clean_probe.open[fr].write_requests;
        cr_assert_gt(writes, 0, "rank %d: the load wrote no parameter shard home", fr);
        for (int enospc = 0; enospc < 2; enospc++) {
            for (int64_t k = 1; k <= (enospc ? writes : requests); k++) {
                char spec[64];
                snprintf(spec, sizeof spec, "rank %d, %s at request %lld", fr,
                         enospc ? "ENOSPC" : "EIO", (long long)k);
                store_probe probe = {.fault_rank = fr};
                if (enospc)
                    probe.fault.enospc_write_at = k;
                else
                    probe.fault.eio_at = k;
                t_run frun;
                ck_phase tried;
                cr_assert(load_phase(&f, &frun, &tried, probe_hook, &probe), "%s: %s", spec,
                          ck_phase_error(&tried));
                if (enospc) {
                    assert_agreed_failure(&tried, spec, fr, ZC_ERR_IO, "No space left on device");
                } else {
                    /* A one-off EIO is submitted again: the load goes through,
                     * and training after it is bitwise the clean run's. */
                    for (int r = 0; r < W; r++)
                        cr_assert_eq(tried.load_rc[r], ZC_OK, "%s, rank %d: %s", spec, r,
                                     tried.load_msg[r]);
                    cr_assert(memcmp(tried.master, clean.master,
                                     (size_t)t_total_numel() * sizeof(float)) == 0,
                              "%s: the retried load trained differently", spec);
                }
                free(tried.master);
                cases++;
            }
        }
    }
    cr_assert_gt(cases, 0);
    free(clean.master);
    fixture_close(&f);
    t_assert_no_leaks();
}
