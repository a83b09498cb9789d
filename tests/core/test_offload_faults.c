/* Faults in optimizer-state I/O (offload_optimizer "nvme"), injected at every
 * swap position of a 3-step run, on one rank only, compared with the
 * fault-free run:
 *   - EIO on one request (transient): retried, every rank finishes with
 *     master parameters bitwise equal to the fault-free run;
 *   - ENOSPC on one write (persistent): zc_step fails with ZC_ERR_IO on every
 *     rank in the same step, every engine is broken with the same message
 *     (naming the failing rank, the chunk and the file), and no rank returns
 *     ZC_OK with different parameters; no hang;
 *   - a pinned allocation failure (the allocator countdown) at build fails
 *     zc_engine_build with ZC_ERR_NO_MEMORY and leaves nothing behind.
 * Positions are counted by the store from the moment the faults are set
 * (after build and load), so K = 1..(requests of 3 steps) covers every read
 * and write of the steps (with accumulation, the gradient's too). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "helpers.h"
#include "offload/offload.h"
#include "t_engine.h"

#define STEPS 3
#define WORLD 2   /* the store-fault sweeps */
#define MAXW 4    /* the ZC_FAULTS sweep (issue 18: world 4) */

typedef struct fault_case {
    int fault_rank;          /* -1: none */
    bool enospc;             /* else eio */
    int64_t k;               /* position from the moment faults are set */
} fault_case;

typedef struct frun {
    t_run run;
    fault_case fc;
    char dirjson[96];
    /* per rank */
    int world;
    zc_status step_rc[MAXW];
    int failed_step[MAXW];
    char first_failure[MAXW][512];
    char msg[MAXW][1024];
    int64_t requests[MAXW], writes[MAXW]; /* during the steps */
    int64_t io_after_open[MAXW], io_total[MAXW]; /* ZC_FAULTS io events seen */
} frun;

typedef struct farg {
    frun *f;
    zc_comm *comm;
    int rank;
} farg;

static void *rank_main(void *p)
{
    farg *a = p;
    frun *f = a->f;
    t_ctx x;
    f->failed_step[a->rank] = -1;
    if (t_ctx_open(&x, &f->run, a->rank, a->comm) != ZC_OK)
        goto out;
    f->io_after_open[a->rank] = x.eng->faults.seen[ZC_FAULT_IO];
    zc_opt_home *h = zc__opt_offload_home(x.eng);
    zc_opt_nvme_info info0;
    zc__opt_home_nvme_info(h, &info0);
    if (f->fc.fault_rank == a->rank) {
        zc_nvme_faults nf = {0};
        if (f->fc.enospc)
            nf.enospc_write_at = info0.write_requests + f->fc.k;
        else
            nf.eio_at = info0.requests + f->fc.k;
        zc__opt_home_nvme_set_faults(h, &nf);
    }
    for (int s = 0; s < STEPS; s++) {
        zc_step_info si;
        /* t_train_step records the error text in run.err; keep the status. */
        zc_status rc = t_train_step(&x, s, &si);
        if (rc != ZC_OK) {
            f->step_rc[a->rank] = rc;
            f->failed_step[a->rank] = s;
            snprintf(f->msg[a->rank], sizeof f->msg[a->rank], "%s", zc_last_error());
            /* The engine now refuses work and names the first failure. */
            zc_status again = zc_step(x.eng, NULL);
            const char *m = strstr(zc_last_error(), "first failure: ");
            snprintf(f->first_failure[a->rank], sizeof f->first_failure[a->rank], "%d %s",
                     (int)again, m ? m : zc_last_error());
            goto out;
        }
    }
    zc_opt_nvme_info info1;
    zc__opt_home_nvme_info(h, &info1);
    f->requests[a->rank] = info1.requests - info0.requests;
    f->io_total[a->rank] = x.eng->faults.seen[ZC_FAULT_IO];
    f->writes[a->rank] = info1.write_requests - info0.write_requests;
    t_gather(&x, f->run.master);
out:
    t_ctx_close(&x);
    return NULL;
}

static void run_world(frun *f, int world, int stage, int accum, const char *dirjson,
                      fault_case fc)
{
    f->world = world;
    t_run_init(&f->run, stage, world, ZC_DTYPE_BF16);
    f->run.accum = accum;
    f->run.steps = STEPS;
    f->run.offload = "nvme";
    f->run.nvme_path_json = dirjson;
    f->run.pipeline = true;
    f->run.buffer_count = 12;
    f->fc = fc;
    f->run.master = calloc((size_t)t_total_numel(), sizeof(float));
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    zc_comm *comms[MAXW];
    cr_assert_eq(zc_comm_local_world(world, comms), ZC_OK);
    pthread_t th[MAXW];
    farg args[MAXW];
    for (int r = 0; r < world; r++) {
        args[r] = (farg){f, comms[r], r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(comms[r]);
}

static void run_faults(frun *f, int stage, int accum, const char *dirjson, fault_case fc)
{
    run_world(f, WORLD, stage, accum, dirjson, fc);
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void sweep(int stage, int accum)
{
    char dir[64], json[96];
    snprintf(dir, sizeof dir, "zc-offload-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);

    frun *ref = calloc(1, sizeof *ref);
    run_faults(ref, stage, accum, json, (fault_case){.fault_rank = -1});
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    cr_assert_gt(ref->requests[0], 0);
    const int64_t n = t_total_numel();

    int broken_runs = 0, clean_runs = 0;
    for (int fr = 0; fr < WORLD; fr++) {
        /* EIO at every request of the three steps: retried, same result. */
        for (int64_t k = 1; k <= ref->requests[fr]; k++) {
            frun *f = calloc(1, sizeof *f);
            run_faults(f, stage, accum, json, (fault_case){fr, false, k});
            cr_assert_str_empty(t_run_error(&f->run), "eio at request %lld on rank %d: %s",
                                (long long)k, fr, t_run_error(&f->run));
            cr_assert(!memcmp(f->run.master, ref->run.master, (size_t)n * sizeof(float)),
                      "eio at request %lld on rank %d changed the result", (long long)k, fr);
            clean_runs++;
            free(f->run.master);
            free(f);
            cr_assert_eq(entries(dir), 0);
        }
        /* ENOSPC at every write of the three steps: every rank fails in the
         * same step with the same message; nobody finishes. */
        for (int64_t k = 1; k <= ref->writes[fr]; k++) {
            frun *f = calloc(1, sizeof *f);
            run_faults(f, stage, accum, json, (fault_case){fr, true, k});
            for (int r = 0; r < WORLD; r++) {
                cr_assert_eq(f->step_rc[r], ZC_ERR_IO, "enospc at write %lld on rank %d: rank "
                             "%d returned %d (%s)", (long long)k, fr, r, (int)f->step_rc[r],
                             f->run.err[r]);
                cr_assert_eq(f->failed_step[r], f->failed_step[0]);
                cr_assert_str_eq(f->first_failure[r], f->first_failure[0]);
                cr_assert(strstr(f->msg[r], "ENOSPC") && strstr(f->msg[r], "chunk") &&
                              strstr(f->msg[r], ".swp") && strstr(f->msg[r], "offset"),
                          "message must name the error, chunk, file and offset: %s", f->msg[r]);
            }
            char who[32];
            snprintf(who, sizeof who, "on rank %d of", fr);
            cr_assert(strstr(f->first_failure[0], who), "%s", f->first_failure[0]);
            /* A broken engine refuses work with the status that broke it. */
            cr_assert_eq(atoi(f->first_failure[0]), (int)ZC_ERR_IO, "%s",
                         f->first_failure[0]);
            broken_runs++;
            free(f->run.master);
            free(f);
            cr_assert_eq(entries(dir), 0);
        }
    }
    cr_assert_gt(clean_runs, 0);
    cr_assert_gt(broken_runs, 0);
    free(ref->run.master);
    free(ref);
    rmdir(dir);
    t_assert_no_leaks();
}

Test(offload_faults, every_position_stage2) { sweep(2, 1); }
Test(offload_faults, every_position_stage3) { sweep(3, 1); }
/* With accumulation the gradient shard is swapped too: its reads and writes
 * during backward are positions as well, and their failures surface at the
 * step, on every rank. */
Test(offload_faults, every_position_stage2_accum2) { sweep(2, 2); }

/* Every pinned allocation of the build, failed in turn (world 1, so the
 * countdown cannot split ranks): ZC_ERR_NO_MEMORY, nothing left behind. */
Test(offload_faults, pinned_allocation_at_build)
{
    char dir[64], json[96];
    snprintf(dir, sizeof dir, "zc-offload-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    const char *devs[2] = {"cpu", "nvme"};
    for (int d = 0; d < 2; d++) {
        int failures = 0;
        for (int64_t k = 1;; k++) {
            t_run r;
            t_run_init(&r, 2, 1, ZC_DTYPE_F32);
            r.steps = 2;
            r.offload = devs[d];
            r.nvme_path_json = json;
            zc__mem_fail_after(ZC_MEMKIND_PINNED, k);
            bool ok = t_engine_run(&r);
            zc__mem_fail_after(ZC_MEMKIND_PINNED, 0);
            free(r.master);
            cr_assert_eq(entries(dir), 0);
            if (ok)
                break;
            cr_assert(strstr(t_run_error(&r), "zc_engine_build") &&
                          strstr(t_run_error(&r), "out of memory"),
                      "%s, pinned allocation %lld: %s", devs[d], (long long)k, t_run_error(&r));
            failures++;
        }
        cr_assert_gt(failures, 0, "%s made no pinned allocation", devs[d]);
    }
    rmdir(dir);
    t_assert_no_leaks();
}

/* ZC_FAULTS io:RANK:K (issue 18), world 4, stages 2 and 3: for every K of
 * every rank's optimizer-state reads and writes in the three steps, no hang,
 * and either every rank is broken with the same message or every rank ends
 * with the fault-free parameters - never ZC_OK with other parameters. (K
 * during zc_param_load, which is not collective, fails that call on that
 * rank alone: the caller's to handle, so the sweep starts after it.) */
static void zc_faults_sweep(int stage)
{
    char dir[64], json[96], spec[64];
    snprintf(dir, sizeof dir, "zc-offload-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    unsetenv("ZC_FAULTS");
    frun *ref = calloc(1, sizeof *ref);
    run_world(ref, MAXW, stage, 1, json, (fault_case){.fault_rank = -1});
    cr_assert_str_empty(t_run_error(&ref->run), "%s", t_run_error(&ref->run));
    const int64_t n = t_total_numel();
    int broken = 0;
    for (int fr = 0; fr < MAXW; fr++) {
        cr_assert_gt(ref->io_total[fr], ref->io_after_open[fr], "rank %d did no step I/O", fr);
        for (int64_t k = ref->io_after_open[fr] + 1; k <= ref->io_total[fr]; k++) {
            snprintf(spec, sizeof spec, "io:%d:%lld", fr, (long long)k);
            setenv("ZC_FAULTS", spec, 1);
            frun *f = calloc(1, sizeof *f);
            run_world(f, MAXW, stage, 1, json, (fault_case){.fault_rank = -1});
            unsetenv("ZC_FAULTS");
            bool all_ok = true, all_broken = true;
            for (int r = 0; r < MAXW; r++) {
                all_ok &= f->step_rc[r] == ZC_OK && !f->run.err[r][0];
                all_broken &= f->step_rc[r] != ZC_OK;
            }
            cr_assert(all_ok || all_broken, "%s: ranks split: %s", spec, t_run_error(&f->run));
            if (all_ok) {
                cr_assert(!memcmp(f->run.master, ref->run.master, (size_t)n * sizeof(float)),
                          "%s: ZC_OK with other parameters", spec);
            } else {
                broken++;
                for (int r = 0; r < MAXW; r++) {
                    cr_assert_eq(f->step_rc[r], ZC_ERR_IO, "%s rank %d: %s", spec, r, f->msg[r]);
                    cr_assert_eq(f->failed_step[r], f->failed_step[0]);
                    cr_assert_str_eq(f->first_failure[r], f->first_failure[0]);
                    cr_assert(strstr(f->msg[r], "ZC_FAULTS") && strstr(f->msg[r], "chunk"), "%s",
                              f->msg[r]);
                }
            }
            free(f->run.master);
            free(f);
            cr_assert_eq(entries(dir), 0);
        }
    }
    cr_assert_gt(broken, 0);
    free(ref->run.master);
    free(ref);
    rmdir(dir);
    t_assert_no_leaks();
}

Test(offload_faults, zc_faults_io_every_k_stage2_world4) { zc_faults_sweep(2); }
Test(offload_faults, zc_faults_io_every_k_stage3_world4) { zc_faults_sweep(3); }

/* An io item with no optimizer-state I/O to fire on is refused at create. */
Test(offload_faults, zc_faults_io_without_nvme_is_refused)
{
    setenv("ZC_FAULTS", "io:0:1", 1);
    t_run r;
    t_run_init(&r, 2, 1, ZC_DTYPE_F32);
    r.steps = 1;
    r.offload = "cpu";
    cr_assert(!t_engine_run(&r));
    cr_assert(strstr(t_run_error(&r), "ZC_FAULTS") && strstr(t_run_error(&r), "nvme"), "%s",
              t_run_error(&r));
    unsetenv("ZC_FAULTS");
    free(r.master);
    t_assert_no_leaks();
}
