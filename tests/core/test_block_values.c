/* zc_block_load and zc_block_gather_master against the per-parameter calls.
 *
 *   - equal: the harness's model (t_engine.h) trained 3 steps with its
 *     initial values loaded and its master gathered through blocks - one
 *     block over every parameter (crossing chunks) or one per layer span -
 *     ends with the same master, bitwise, as the run that loads and gathers
 *     one parameter at a time, at every stage, W 1-3, fp32 and bf16, with
 *     the optimizer state offloaded (cpu, nvme) and, at stage 3, the
 *     parameters (cpu, nvme);
 *   - exact: gathered right after the block load (no step), the master is
 *     the loaded fp32 values themselves, element for element;
 *   - bad input (wrong count, NULL array, a foreign or bad block, inside an
 *     accumulation window) fails with the right status before anything is
 *     loaded or any collective is made: the master is unchanged;
 *   - failure agreement: an NVMe read failing on one rank inside
 *     zc_block_gather_master fails it on every rank with the same status and
 *     message, naming that rank, and breaks every engine. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

typedef struct variant {
    const char *offload;       /* offload_optimizer device or NULL */
    const char *offload_param; /* offload_param device (stage 3) or NULL */
} variant;

static void setup(t_run *r, int stage, int world, zc_dtype dt, const variant *v,
                  const t_swapdir *dir)
{
    t_run_init(r, stage, world, dt);
    r->steps = 3;
    r->offload = v->offload;
    if (v->offload && !strcmp(v->offload, "nvme"))
        r->nvme_path_json = dir->json;
    r->offload_param = v->offload_param;
    if (v->offload_param && !strcmp(v->offload_param, "nvme"))
        r->param_nvme_path_json = dir->json;
}

/* The per-parameter run against the block runs (all parameters in one
 * block; per layer span), same configuration. */
static void compare(int stage, int world, zc_dtype dt, const variant *v)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-block-values");
    t_run ref;
    setup(&ref, stage, world, dt, v, &dir);
    cr_assert(t_engine_run(&ref), "per-parameter run: %s", t_run_error(&ref));
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    for (int mode = 0; mode < 2; mode++) {
        t_run r;
        setup(&r, stage, world, dt, v, &dir);
        r.block_values = true;
        if (mode == 1) {
            r.layerwise = true;
            r.layer_boundaries = true;
            r.blocks = T_BLOCK_SPAN;
        }
        cr_assert(t_engine_run(&r), "block run (%s): %s", mode ? "spans" : "one block",
                  t_run_error(&r));
        cr_assert(memcmp(r.master, ref.master, bytes) == 0,
                  "stage %d W %d %s offload %s/%s, %s: the block calls' master differs from "
                  "the per-parameter calls'",
                  stage, world, zc_dtype_name(dt), v->offload ? v->offload : "-",
                  v->offload_param ? v->offload_param : "-", mode ? "spans" : "one block");
        free(r.master);
    }
    free(ref.master);
    t_swapdir_remove(&dir);
}

static const variant k_plain = {NULL, NULL};
static const variant k_opt_cpu = {"cpu", NULL};
static const variant k_opt_nvme = {"nvme", NULL};
static const variant k_par_cpu = {NULL, "cpu"};
static const variant k_par_nvme = {"nvme", "nvme"};

Test(block_values, equal_every_stage_and_world)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 3; world++) {
            compare(stage, world, ZC_DTYPE_F32, &k_plain);
            compare(stage, world, ZC_DTYPE_BF16, &k_plain);
        }
    t_assert_no_leaks();
}

Test(block_values, equal_with_optimizer_offload)
{
    for (int stage = 1; stage <= 3; stage++) {
        compare(stage, 2, ZC_DTYPE_BF16, &k_opt_cpu);
        compare(stage, 2, ZC_DTYPE_BF16, &k_opt_nvme);
    }
    t_assert_no_leaks();
}

Test(block_values, equal_with_param_offload)
{
    for (int world = 1; world <= 3; world++) {
        compare(3, world, ZC_DTYPE_BF16, &k_par_cpu);
        compare(3, world, ZC_DTYPE_BF16, &k_par_nvme);
    }
    t_assert_no_leaks();
}

/* ---- exact values, bad input, failure agreement -------------------------- */

typedef struct probe {
    int stage;
    bool nvme;
    t_swapdir dir;
    float *vals;                 /* the model's values, registration order */
    float *got[T_MAX_WORLD];     /* gathered after the load */
    float *after[T_MAX_WORLD];   /* gathered after the refused calls */
    zc_status bad_rc[T_MAX_WORLD][5];
    zc_status fail_rc[T_MAX_WORLD], next_rc[T_MAX_WORLD];
    char fail_msg[T_MAX_WORLD][1024];
    char err[T_MAX_WORLD][512];
} probe;

#define W 2
#define PTRY(call)                                                                        \
    do {                                                                                  \
        zc_status rc_ = (call);                                                           \
        if (rc_ != ZC_OK) {                                                               \
            snprintf(pr->err[rank], sizeof pr->err[rank], "%s: %s", #call, zc_last_error()); \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)

static void probe_rank(void *arg, zc_comm *comm, int rank)
{
    probe *pr = arg;
    const size_t n = (size_t)t_total_numel();
    t_run run;
    t_run_init(&run, pr->stage, W, ZC_DTYPE_BF16);
    if (pr->nvme)
        run.offload = "nvme", run.nvme_path_json = pr->dir.json;
    t_ctx x;
    zc_block *all = NULL;
    if (t_ctx_open(&x, &run, rank, comm) != ZC_OK) {
        snprintf(pr->err[rank], sizeof pr->err[rank], "open: %s", run.err[rank]);
        return;
    }
    PTRY(zc_block_create(x.eng, x.p, T_NPARAMS, &all));
    PTRY(zc_block_load(x.eng, all, pr->vals, n));
    PTRY(zc_block_gather_master(x.eng, all, pr->got[rank], n));

    /* Refused before anything: a wrong count, a NULL array, a bad block. */
    float *junk = calloc(n + 1, sizeof(float));
    for (size_t i = 0; i <= n; i++)
        junk[i] = 7.0f;
    pr->bad_rc[rank][0] = zc_block_load(x.eng, all, junk, n - 1);
    pr->bad_rc[rank][1] = zc_block_load(x.eng, all, NULL, n);
    pr->bad_rc[rank][2] = zc_block_gather_master(x.eng, all, junk, n + 1);
    pr->bad_rc[rank][3] = zc_block_load(x.eng, (zc_block *)junk, junk, n);
    /* Inside an accumulation window (a gradient handed back). */
    PTRY(t_forward(&x, NULL));
    PTRY(t_backward_one(&x, 0, 0, T_NPARAMS - 1));
    pr->bad_rc[rank][4] = zc_block_load(x.eng, all, junk, n);
    free(junk);
    PTRY(t_backward(&x, 0, 0, T_NPARAMS - 1));
    /* Stage 0 has no collective in the gather and so nothing to agree. */
    zc_step_info info;
    PTRY(zc_step(x.eng, &info));
    PTRY(zc_block_gather_master(x.eng, all, pr->after[rank], n));
    if (pr->nvme) {
        /* The next swap-file I/O on rank 1 fails: the master read of the
         * gather's first chunk. */
        if (rank == 1) {
            x.eng->faults.n = 1;
            x.eng->faults.kind[0] = ZC_FAULT_IO;
            x.eng->faults.at[0] = x.eng->faults.seen[ZC_FAULT_IO] + 1;
        }
        float *sink = calloc(n, sizeof(float));
        pr->fail_rc[rank] = zc_block_gather_master(x.eng, all, sink, n);
        snprintf(pr->fail_msg[rank], sizeof pr->fail_msg[rank], "%s", zc_last_error());
        pr->next_rc[rank] = zc_block_gather_master(x.eng, all, sink, n);
        free(sink);
    }
out:
    zc_block_destroy(all);
    t_ctx_close(&x);
}

static void run_probe(int stage, bool nvme)
{
    probe *pr = calloc(1, sizeof *pr);
    pr->stage = stage;
    pr->nvme = nvme;
    t_swapdir_make(&pr->dir, "zc-block-probe");
    const size_t n = (size_t)t_total_numel();
    pr->vals = malloc(n * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < T_NPARAMS; i++)
        for (int64_t k = 0; k < t_numel[i]; k++)
            pr->vals[at++] = 0.25f - t_init_value(i, k) * 1.5f; /* not the harness's load */
    for (int r = 0; r < W; r++) {
        pr->got[r] = calloc(n, sizeof(float));
        pr->after[r] = calloc(n, sizeof(float));
    }
    char err[512];
    cr_assert(t_on_ranks(W, probe_rank, pr, err, sizeof err), "%s", err);
    for (int r = 0; r < W; r++) {
        cr_assert_str_empty(pr->err[r], "stage %d rank %d: %s", stage, r, pr->err[r]);
        for (size_t i = 0; i < n; i++)
            cr_assert(pr->got[r][i] == pr->vals[i],
                      "stage %d rank %d: element %zu gathered %.9g after loading %.9g", stage,
                      r, i, (double)pr->got[r][i], (double)pr->vals[i]);
        const zc_status want[5] = {ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_ARG,
                                   ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_STATE};
        for (int c = 0; c < 5; c++)
            cr_assert_eq(pr->bad_rc[r][c], want[c], "stage %d rank %d: refused call %d: %s",
                         stage, r, c, zc_status_str(pr->bad_rc[r][c]));
        /* None of the refused loads took: one step from the loaded values
         * moves each element by at most about lr (1e-2), far from 7. */
        for (size_t i = 0; i < n; i++)
            cr_assert(pr->after[r][i] - pr->vals[i] < 0.1f &&
                          pr->vals[i] - pr->after[r][i] < 0.1f,
                      "stage %d rank %d: element %zu is %.9g after the refused loads (loaded "
                      "%.9g)",
                      stage, r, i, (double)pr->after[r][i], (double)pr->vals[i]);
        cr_assert_eq(memcmp(pr->after[r], pr->after[0], n * sizeof(float)), 0,
                     "stage %d: ranks 0 and %d gathered different masters", stage, r);
        if (nvme) {
            cr_assert_eq(pr->fail_rc[r], ZC_ERR_IO, "stage %d rank %d: %s (%s)", stage, r,
                         zc_status_str(pr->fail_rc[r]), pr->fail_msg[r]);
            cr_assert_str_eq(pr->fail_msg[r], pr->fail_msg[0]);
            cr_assert(strstr(pr->fail_msg[r], "failed on rank 1 of 2"), "%s", pr->fail_msg[r]);
            cr_assert(strstr(pr->fail_msg[r], "zc_block_gather_master"), "%s",
                      pr->fail_msg[r]);
            cr_assert_eq(pr->next_rc[r], ZC_ERR_IO, "stage %d rank %d: not broken: %s", stage,
                         r, zc_status_str(pr->next_rc[r]));
        }
    }
    for (int r = 0; r < W; r++) {
        free(pr->got[r]);
        free(pr->after[r]);
    }
    free(pr->vals);
    t_swapdir_remove(&pr->dir);
    free(pr);
}

Test(block_values, exact_refusals_and_agreement)
{
    for (int stage = 0; stage <= 3; stage++)
        run_probe(stage, false);
    for (int stage = 1; stage <= 3; stage++)
        run_probe(stage, true);
    t_assert_no_leaks();
}
