/* Faults in parameter-shard I/O (stage 3, offload_param "nvme"), injected at
 * every position of a short layer-wise run, on one rank only, with prefetch
 * off and on, compared with the fault-free run of the same configuration:
 *   - EIO on one store request (transient): retried, every rank finishes
 *     with master parameters bitwise equal to the fault-free run;
 *   - ENOSPC on one shard write (persistent): every rank fails in the same
 *     step with ZC_ERR_IO, every engine is broken with the same message
 *     naming the failing rank, the chunk, the file and the offset;
 *   - ZC_FAULTS io:RANK:K (a read or write that fails, not retried): either
 *     every rank is broken with the same message naming the chunk, or (never
 *     here) every rank ends with the fault-free parameters - never a split,
 *     never a hang (the local communicator's timeout would fail the run);
 *   - the allocator: the steps allocate nothing (an alloc item has nothing
 *     to fire on), and each pinned allocation of the build failing fails
 *     zc_engine_build with ZC_ERR_NO_MEMORY, leaving no swap file.
 * Positions are counted from the moment the faults are set (after build and
 * zc_param_load), so they cover every read and write of the steps: the
 * gathers' reads (on demand or started ahead), the optimizer's writes, and
 * the write of the last shard zc_param_load filled, which goes home at the
 * first acquire. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "core/param_home.h"
#include "helpers.h"
#include "offload/offload.h"
#include "t_engine.h"

#define STEPS 3
#define W 2

typedef struct fault_case {
    int rank;       /* -1: none */
    bool enospc;    /* else eio */
    int64_t k;      /* store request (eio) or write request (enospc) after open */
} fault_case;

typedef struct frun {
    t_run run;
    fault_case fc;
    zc_status step_rc[W];
    int failed_step[W];
    char first_failure[W][512];
    char msg[W][1024];
    int64_t requests[W], writes[W];          /* store requests during the steps */
    int64_t io_after_open[W], io_total[W];   /* ZC_FAULTS io events seen */
    int64_t alloc_after_open[W], alloc_total[W]; /* ZC_FAULTS alloc events seen */
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
    f->alloc_after_open[a->rank] = x.eng->faults.seen[ZC_FAULT_ALLOC];
    zc_param_home_io io0;
    zc__param_io(x.eng, &io0);
    if (f->fc.rank == a->rank) {
        zc_nvme_faults nf = {0};
        if (f->fc.enospc)
            nf.enospc_write_at = io0.write_requests + f->fc.k;
        else
            nf.eio_at = io0.requests + f->fc.k;
        zc__param_home_nvme_set_faults(x.eng->phome, &nf);
    }
    for (int s = 0; s < STEPS; s++) {
        zc_status rc = t_train_step(&x, s, NULL);
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
    zc_param_home_io io1;
    zc__param_io(x.eng, &io1);
    f->requests[a->rank] = io1.requests - io0.requests;
    f->writes[a->rank] = io1.write_requests - io0.write_requests;
    f->io_total[a->rank] = x.eng->faults.seen[ZC_FAULT_IO];
    f->alloc_total[a->rank] = x.eng->faults.seen[ZC_FAULT_ALLOC];
    t_gather(&x, f->run.master);
out:
    t_ctx_close(&x);
    return NULL;
}

static char dir[64], json[96];

static void setup(void)
{
    snprintf(dir, sizeof dir, "zc-poff-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    unsetenv("ZC_FAULTS");
}

static void teardown(void)
{
    unsetenv("ZC_FAULTS");
    cr_assert_eq(rmdir(dir), 0, "swap files left in %s", dir);
}

static int entries(void)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static frun *run(bool prefetch, const char *offload_opt, fault_case fc)
{
    frun *f = calloc(1, sizeof *f);
    t_run_init(&f->run, 3, W, ZC_DTYPE_BF16);
    f->run.steps = STEPS;
    f->run.layerwise = true;
    f->run.prefetch = prefetch ? 1 << 20 : 0;
    f->run.reuse = 0;
    f->run.offload_param = "nvme";
    f->run.param_nvme_path_json = json;
    f->run.param_buffer_count = 4;
    if (offload_opt) {
        f->run.offload = offload_opt;
        f->run.nvme_path_json = json;
        f->run.buffer_count = 4;
    }
    f->fc = fc;
    f->run.master = calloc((size_t)t_total_numel(), sizeof(float));
    zc_comm *comms[W];
    cr_assert_eq(zc_comm_local_world(W, comms), ZC_OK);
    pthread_t th[W];
    farg args[W];
    for (int r = 0; r < W; r++) {
        args[r] = (farg){f, comms[r], r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++)
        zc_comm_destroy(comms[r]);
    cr_assert_eq(entries(), 0, "swap files left behind");
    return f;
}

static void free_run(frun *f)
{
    free(f->run.master);
    free(f);
}

/* Every rank failed in the same step with the same status, and the broken
 * engines refuse work with status `want` naming the same first failure; each
 * message contains every needle. (A failed zc_param_acquire returns NULL,
 * which the harness reports as ZC_ERR_INTERNAL: the engine's own status is
 * the one it refuses further calls with.) */
static void assert_broken_alike(const frun *f, zc_status want, const char *what,
                                const char *const *needles)
{
    for (int r = 0; r < W; r++) {
        cr_assert_neq(f->step_rc[r], ZC_OK, "%s: rank %d finished", what, r);
        cr_assert_eq(f->step_rc[r], f->step_rc[0], "%s: rank %d returned %d (%s)", what, r,
                     (int)f->step_rc[r], f->msg[r]);
        cr_assert_eq(f->failed_step[r], f->failed_step[0], "%s: ranks failed in different "
                     "steps", what);
        cr_assert_str_eq(f->first_failure[r], f->first_failure[0], "%s", what);
        cr_assert_eq(atoi(f->first_failure[r]), (int)want, "%s: %s", what,
                     f->first_failure[r]);
        for (const char *const *n = needles; *n; n++)
            cr_assert(strstr(f->msg[r], *n), "%s: the message must name '%s': %s", what, *n,
                      f->msg[r]);
    }
}

static void store_sweep(bool prefetch)
{
    frun *ref = run(prefetch, NULL, (fault_case){.rank = -1});
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    int clean = 0, broken = 0;
    for (int fr = 0; fr < W; fr++) {
        /* 6 chunks written once a step, and the write of the last chunk
         * zc_param_load filled, deferred to the first acquire (where its
         * outcome is agreed), so it is a position too; the rest are the
         * gathers' reads. */
        cr_assert_gt(ref->requests[fr], ref->writes[fr], "rank %d: %lld requests", fr,
                     (long long)ref->requests[fr]);
        cr_assert_eq(ref->writes[fr], 6 * STEPS + 1, "rank %d: %lld writes", fr,
                     (long long)ref->writes[fr]);
        for (int64_t k = 1; k <= ref->requests[fr]; k++) {
            frun *f = run(prefetch, NULL, (fault_case){fr, false, k});
            cr_assert_str_empty(t_run_error(&f->run), "eio at request %lld of rank %d: %s",
                                (long long)k, fr, t_run_error(&f->run));
            cr_assert(!memcmp(f->run.master, ref->run.master, bytes),
                      "eio at request %lld of rank %d changed the result", (long long)k, fr);
            clean++;
            free_run(f);
        }
        char who[32];
        snprintf(who, sizeof who, "on rank %d of", fr);
        for (int64_t k = 1; k <= ref->writes[fr]; k++) {
            frun *f = run(prefetch, NULL, (fault_case){fr, true, k});
            char what[64];
            snprintf(what, sizeof what, "enospc at write %lld of rank %d", (long long)k, fr);
            const char *needles[] = {who, "ENOSPC", "chunk", "params.swp", "offset", NULL};
            assert_broken_alike(f, ZC_ERR_IO, what, needles);
            broken++;
            free_run(f);
        }
    }
    cr_assert_gt(clean, 0);
    cr_assert_gt(broken, 0);
    free_run(ref);
    t_assert_no_leaks();
}

Test(param_offload_faults, store_faults_every_position_no_prefetch, .init = setup,
     .fini = teardown)
{
    store_sweep(false);
}

Test(param_offload_faults, store_faults_every_position_prefetch, .init = setup,
     .fini = teardown)
{
    store_sweep(true);
}

/* ZC_FAULTS io:RANK:K at every read and write of the steps; with the
 * optimizer's state on NVMe too, its I/O counts in the same sequence. */
static void zc_faults_sweep(bool prefetch, const char *offload_opt)
{
    frun *ref = run(prefetch, offload_opt, (fault_case){.rank = -1});
    cr_assert_str_empty(t_run_error(&ref->run), "%s", t_run_error(&ref->run));
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    int broken = 0;
    for (int fr = 0; fr < W; fr++) {
        cr_assert_gt(ref->io_total[fr], ref->io_after_open[fr], "rank %d did no step I/O", fr);
        for (int64_t k = ref->io_after_open[fr] + 1; k <= ref->io_total[fr]; k++) {
            char spec[64];
            snprintf(spec, sizeof spec, "io:%d:%lld", fr, (long long)k);
            setenv("ZC_FAULTS", spec, 1);
            frun *f = run(prefetch, offload_opt, (fault_case){.rank = -1});
            unsetenv("ZC_FAULTS");
            bool all_ok = true, all_broken = true;
            for (int r = 0; r < W; r++) {
                all_ok &= f->step_rc[r] == ZC_OK && !f->run.err[r][0];
                all_broken &= f->step_rc[r] != ZC_OK;
            }
            cr_assert(all_ok || all_broken, "%s: ranks split: %s", spec, t_run_error(&f->run));
            if (all_ok) {
                cr_assert(!memcmp(f->run.master, ref->run.master, bytes),
                          "%s: ZC_OK with other parameters", spec);
            } else {
                char who[32];
                snprintf(who, sizeof who, "on rank %d of", fr);
                const char *needles[] = {who, "ZC_FAULTS", "chunk", NULL};
                assert_broken_alike(f, ZC_ERR_IO, spec, needles);
                broken++;
            }
            free_run(f);
        }
    }
    cr_assert_gt(broken, 0);
    free_run(ref);
    t_assert_no_leaks();
}

Test(param_offload_faults, zc_faults_io_every_k_no_prefetch, .init = setup, .fini = teardown)
{
    zc_faults_sweep(false, NULL);
}

Test(param_offload_faults, zc_faults_io_every_k_prefetch, .init = setup, .fini = teardown)
{
    zc_faults_sweep(true, NULL);
}

Test(param_offload_faults, zc_faults_io_every_k_with_optimizer_nvme, .init = setup,
     .fini = teardown)
{
    zc_faults_sweep(true, "nvme");
}

/* An io item is accepted for parameter offload alone (it has I/O to fire
 * on) and still refused where nothing is swapped. */
Test(param_offload_faults, zc_faults_io_accepted_with_param_nvme, .init = setup,
     .fini = teardown)
{
    setenv("ZC_FAULTS", "io:0:1000000", 1);
    frun *f = run(false, NULL, (fault_case){.rank = -1});
    unsetenv("ZC_FAULTS");
    cr_assert_str_empty(t_run_error(&f->run), "%s", t_run_error(&f->run));
    free_run(f);
    t_assert_no_leaks();
}

/* The steps allocate nothing: the homes take their pinned memory at build
 * and the layer-wise loop stays within the reserved gather buffers. So an
 * alloc:RANK:K item has nothing to fire on and the run ends like the
 * fault-free one. */
Test(param_offload_faults, no_allocation_after_build, .init = setup, .fini = teardown)
{
    frun *ref = run(true, NULL, (fault_case){.rank = -1});
    cr_assert_str_empty(t_run_error(&ref->run), "%s", t_run_error(&ref->run));
    for (int r = 0; r < W; r++)
        cr_assert_eq(ref->alloc_total[r], ref->alloc_after_open[r], "rank %d allocated %lld "
                     "times during the steps", r,
                     (long long)(ref->alloc_total[r] - ref->alloc_after_open[r]));
    setenv("ZC_FAULTS", "alloc:1:1", 1);
    frun *f = run(true, NULL, (fault_case){.rank = -1});
    unsetenv("ZC_FAULTS");
    cr_assert_str_empty(t_run_error(&f->run), "%s", t_run_error(&f->run));
    cr_assert(!memcmp(f->run.master, ref->run.master, (size_t)t_total_numel() * sizeof(float)));
    free_run(f);
    free_run(ref);
    t_assert_no_leaks();
}

/* Every pinned allocation of the build with offload_param cpu and nvme,
 * failed in turn (world 1, so the countdown cannot split ranks):
 * ZC_ERR_NO_MEMORY from zc_engine_build, no swap file left behind. */
Test(param_offload_faults, pinned_allocation_at_build, .init = setup, .fini = teardown)
{
    const char *devs[2] = {"cpu", "nvme"};
    for (int d = 0; d < 2; d++) {
        int failures = 0;
        for (int64_t k = 1;; k++) {
            t_run r;
            t_run_init(&r, 3, 1, ZC_DTYPE_BF16);
            r.steps = 2;
            r.layerwise = true;
            r.offload_param = devs[d];
            r.param_nvme_path_json = json;
            zc__mem_fail_after(ZC_MEMKIND_PINNED, k);
            bool ok = t_engine_run(&r);
            zc__mem_fail_after(ZC_MEMKIND_PINNED, 0);
            free(r.master);
            cr_assert_eq(entries(), 0);
            if (ok)
                break;
            cr_assert(strstr(t_run_error(&r), "zc_engine_build") &&
                          strstr(t_run_error(&r), "out of memory"),
                      "%s, pinned allocation %lld: %s", devs[d], (long long)k, t_run_error(&r));
            failures++;
        }
        cr_assert_gt(failures, 0, "%s made no pinned allocation", devs[d]);
    }
    t_assert_no_leaks();
}
