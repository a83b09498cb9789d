/* Offload test harness (t_offload.h). */
#include "t_offload.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "offload/homes.h"
#include "offload/offload.h"

void t_swapdir_make(t_swapdir *d, const char *prefix)
{
    cr_assert_leq(strlen(prefix), 40, "swap directory prefix %s", prefix);
    snprintf(d->path, sizeof d->path, "%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(d->path), "mkdtemp %s", d->path);
    snprintf(d->json, sizeof d->json, "\"%s\"", d->path);
}

void t_swapdir_remove(const t_swapdir *d)
{
    cr_assert_eq(rmdir(d->path), 0, "swap files left in %s", d->path);
}

int t_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* t_dir_entries for rank threads (no Criterion assertion off the test's
 * thread): 1000 when the directory cannot be read. */
static int entries_quiet(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 1000;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* ---- the store seam: where a fault is armed, what is counted ---------- */

/* The store's request and write-request numbers so far (zeros where the
 * engine has no such store). */
static void store_counts(zc_engine *e, t_store store, int64_t *requests, int64_t *writes)
{
    *requests = *writes = 0;
    if (store == T_STORE_PARAM) {
        zc_param_home_io io;
        zc__param_io(e, &io);
        *requests = io.requests;
        *writes = io.write_requests;
        return;
    }
    zc_opt_home *h = zc__opt_offload_home(e);
    if (!h)
        return;
    zc_opt_nvme_info info;
    zc__opt_home_nvme_info(h, &info);
    *requests = info.requests;
    *writes = info.write_requests;
}

static void store_set_faults(zc_engine *e, t_store store, const zc_nvme_faults *nf)
{
    if (store == T_STORE_PARAM) {
        zc__param_home_nvme_set_faults(e->phome, nf);
        return;
    }
    zc_opt_home *h = zc__opt_offload_home(e);
    cr_assert_not_null(h, "a store fault with no optimizer offload home");
    zc__opt_home_nvme_set_faults(h, nf);
}

/* ---- one run ---------------------------------------------------------- */

typedef struct frun_job {
    t_frun *f;
    t_store store;
    t_fault fault;
    const char *swapdir;
} frun_job;

static void frun_rank(void *arg, zc_comm *comm, int rank)
{
    frun_job *j = arg;
    t_frun *f = j->f;
    t_ctx x;
    f->failed_step[rank] = -1;
    f->live_entries[rank] = -1;
    if (t_ctx_open(&x, &f->run, rank, comm) != ZC_OK)
        goto out;
    f->io_after_open[rank] = x.eng->faults.seen[ZC_FAULT_IO];
    f->alloc_after_open[rank] = x.eng->faults.seen[ZC_FAULT_ALLOC];
    int64_t requests0, writes0;
    store_counts(x.eng, j->store, &requests0, &writes0);
    if (j->fault.rank == rank) {
        zc_nvme_faults nf = {0};
        if (j->fault.enospc)
            nf.enospc_write_at = writes0 + j->fault.k;
        else
            nf.eio_at = requests0 + j->fault.k;
        store_set_faults(x.eng, j->store, &nf);
    }
    for (int s = 0; s < f->run.steps; s++) {
        zc_step_info si;
        /* t_train_step records the error text in run.err; keep the status. */
        zc_status rc = t_train_step(&x, s, &si);
        if (rc != ZC_OK) {
            f->step_rc[rank] = rc;
            f->failed_step[rank] = s;
            snprintf(f->msg[rank], sizeof f->msg[rank], "%s", zc_last_error());
            /* The engine now refuses work and names the first failure. */
            zc_status again = zc_step(x.eng, NULL);
            const char *m = strstr(zc_last_error(), "first failure: ");
            snprintf(f->first_failure[rank], sizeof f->first_failure[rank], "%d %s", (int)again,
                     m ? m : zc_last_error());
            goto look;
        }
    }
    int64_t requests1, writes1;
    store_counts(x.eng, j->store, &requests1, &writes1);
    f->requests[rank] = requests1 - requests0;
    f->writes[rank] = writes1 - writes0;
    f->io_total[rank] = x.eng->faults.seen[ZC_FAULT_IO];
    f->alloc_total[rank] = x.eng->faults.seen[ZC_FAULT_ALLOC];
    t_gather(&x, f->run.master);
look:
    /* Every rank built (the build agrees across ranks) before any step. */
    if (j->swapdir)
        f->live_entries[rank] = entries_quiet(j->swapdir);
out:
    t_ctx_close(&x);
}

t_frun *t_frun_run(const t_fault_setup *s, t_fault fault)
{
    t_frun *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    f->run = s->cfg;
    f->run.master = calloc((size_t)t_total_numel(), sizeof(float));
    cr_assert_not_null(f->run.master);
    frun_job j = {f, s->store, fault, s->swapdir};
    char err[512];
    cr_assert(t_on_ranks(f->run.world, frun_rank, &j, err, sizeof err), "%s", err);
    for (int r = 0; s->swapdir && r < f->run.world; r++)
        cr_assert_leq(f->live_entries[r], 0, "rank %d: %d entries in %s with the engines open: a "
                      "killed process would leave them", r, f->live_entries[r], s->swapdir);
    if (s->swapdir)
        cr_assert_eq(t_dir_entries(s->swapdir), 0, "swap files left in %s", s->swapdir);
    return f;
}

void t_frun_free(t_frun *f)
{
    if (!f)
        return;
    free(f->run.master);
    free(f);
}

void t_assert_broken_alike(const t_frun *f, int fault_rank, zc_status step_want,
                           zc_status engine_want, const char *what,
                           const char *const *needles)
{
    char who[32];
    snprintf(who, sizeof who, "on rank %d of", fault_rank);
    for (int r = 0; r < f->run.world; r++) {
        cr_assert_neq(f->step_rc[r], ZC_OK, "%s: rank %d finished", what, r);
        /* A failed zc_param_acquire returns NULL, which the harness reports
         * as ZC_ERR_INTERNAL: where that can happen (step_want ZC_OK) the
         * engine's own status is the one it refuses further calls with. */
        if (step_want != ZC_OK)
            cr_assert_eq(f->step_rc[r], step_want, "%s: rank %d returned %d (%s)", what, r,
                         (int)f->step_rc[r], f->msg[r]);
        cr_assert_eq(f->step_rc[r], f->step_rc[0], "%s: rank %d returned %d (%s)", what, r,
                     (int)f->step_rc[r], f->msg[r]);
        cr_assert_eq(f->failed_step[r], f->failed_step[0],
                     "%s: ranks failed in different steps", what);
        cr_assert_str_eq(f->first_failure[r], f->first_failure[0], "%s", what);
        cr_assert_eq(atoi(f->first_failure[r]), (int)engine_want, "%s: %s", what,
                     f->first_failure[r]);
        cr_assert(strstr(f->first_failure[r], who), "%s: the first failure must name '%s': %s",
                  what, who, f->first_failure[r]);
        cr_assert(strstr(f->msg[r], who), "%s: the message must name '%s': %s", what, who,
                  f->msg[r]);
        for (const char *const *n = needles; *n; n++)
            cr_assert(strstr(f->msg[r], *n), "%s: the message must name '%s': %s", what, *n,
                      f->msg[r]);
    }
}

/* ---- sweeps ----------------------------------------------------------- */

void t_store_fault_sweep(const t_fault_setup *s, const t_frun *ref, zc_status step_want,
                         const char *file)
{
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    int clean = 0, broken = 0;
    for (int fr = 0; fr < s->cfg.world; fr++) {
        for (int64_t k = 1; k <= ref->requests[fr]; k++) {
            t_frun *f = t_frun_run(s, (t_fault){fr, false, k});
            cr_assert_str_empty(t_run_error(&f->run), "eio at request %lld of rank %d: %s",
                                (long long)k, fr, t_run_error(&f->run));
            cr_assert(!memcmp(f->run.master, ref->run.master, bytes),
                      "eio at request %lld of rank %d changed the result", (long long)k, fr);
            clean++;
            t_frun_free(f);
        }
        for (int64_t k = 1; k <= ref->writes[fr]; k++) {
            t_frun *f = t_frun_run(s, (t_fault){fr, true, k});
            char what[64];
            snprintf(what, sizeof what, "enospc at write %lld of rank %d", (long long)k, fr);
            const char *needles[] = {"ENOSPC", "chunk", file, "offset", NULL};
            t_assert_broken_alike(f, fr, step_want, ZC_ERR_IO, what, needles);
            broken++;
            t_frun_free(f);
        }
    }
    cr_assert_gt(clean, 0);
    cr_assert_gt(broken, 0);
}

void t_zc_faults_io_sweep(const t_fault_setup *s, const t_frun *ref, zc_status step_want)
{
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    const int world = s->cfg.world;
    int broken = 0;
    for (int fr = 0; fr < world; fr++) {
        cr_assert_gt(ref->io_total[fr], ref->io_after_open[fr], "rank %d did no step I/O", fr);
        for (int64_t k = ref->io_after_open[fr] + 1; k <= ref->io_total[fr]; k++) {
            char spec[64];
            snprintf(spec, sizeof spec, "io:%d:%lld", fr, (long long)k);
            setenv("ZC_FAULTS", spec, 1);
            t_frun *f = t_frun_run(s, T_NO_FAULT);
            unsetenv("ZC_FAULTS");
            bool all_ok = true, all_broken = true;
            for (int r = 0; r < world; r++) {
                all_ok &= f->step_rc[r] == ZC_OK && !f->run.err[r][0];
                all_broken &= f->step_rc[r] != ZC_OK;
            }
            cr_assert(all_ok || all_broken, "%s: ranks split: %s", spec, t_run_error(&f->run));
            if (all_ok) {
                cr_assert(!memcmp(f->run.master, ref->run.master, bytes),
                          "%s: ZC_OK with other parameters", spec);
            } else {
                const char *needles[] = {"ZC_FAULTS", "chunk", NULL};
                t_assert_broken_alike(f, fr, step_want, ZC_ERR_IO, spec, needles);
                broken++;
            }
            t_frun_free(f);
        }
    }
    cr_assert_gt(broken, 0);
}

int t_pinned_build_sweep(const t_run *cfg, const char *swapdir, const char *what)
{
    cr_assert_eq(cfg->world, 1, "%s: the pinned countdown needs world 1", what);
    int failures = 0;
    for (int64_t k = 1;; k++) {
        t_run r = *cfg;
        zc__mem_fail_after(ZC_MEMKIND_PINNED, k);
        bool ok = t_engine_run(&r);
        zc__mem_fail_after(ZC_MEMKIND_PINNED, 0);
        free(r.master);
        if (swapdir)
            cr_assert_eq(t_dir_entries(swapdir), 0, "%s, pinned allocation %lld: swap files "
                         "left in %s", what, (long long)k, swapdir);
        if (ok)
            break;
        cr_assert(strstr(t_run_error(&r), "zc_engine_build") &&
                      strstr(t_run_error(&r), "out of memory"),
                  "%s, pinned allocation %lld: %s", what, (long long)k, t_run_error(&r));
        failures++;
    }
    return failures;
}
