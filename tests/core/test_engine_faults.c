/* Allocation failure at every point of an engine's life: create, registration,
 * build, load, and two accumulation windows of acquire / grad_buffer /
 * grad_ready / step (stage 3 gathers on acquire and allocates transient
 * gradient buffers), then the gather of the master weights.
 *
 * For each stage and each k, the k-th host allocation fails. A call that fails
 * must report ZC_ERR_NO_MEMORY and change nothing observable: the test turns
 * injection off and repeats the call, and at the end the master weights and
 * the step statistics (comm bytes, gathers, steps) must equal those of a run
 * without injection, bit for bit. A failed build leaves an engine that can
 * only be destroyed. Every run ends with no allocation left. World 1, so the
 * process-wide countdown is consumed by one thread deterministically. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/alloc.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define NP 5
static const int64_t shapes[NP][2] = {{300, 1}, {7, 9}, {5000, 1}, {40, 1}, {130, 1}};
static const int ndims[NP] = {1, 2, 1, 1, 1};
static const int in_group1[NP] = {0, 1, 0, 0, 1};
static const bool boundary_before[NP] = {false, false, true, true, false};
/* Parameter 3 never gets a gradient buffer (its gradient is zero), so its
 * chunk's transient buffer is first allocated by zc_grad_ready. */
#define NO_GRAD 3
#define STEPS 2
#define ACCUM 2

static int64_t numel(int i) { return shapes[i][0] * shapes[i][1]; }

typedef struct outcome {
    float master[NP][5000];
    zc_stats stats;
    zc_stats step_stats[STEPS]; /* after each zc_step */
    double loss_scale_before_build;
} outcome;

typedef struct run_state {
    bool hit;      /* the injected failure was reported by some call */
    bool build_failed;
} run_state;

/* The first failure disables injection; the repeated call must then work. */
static void note_failure(run_state *st, zc_status rc, const char *what)
{
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "%s failed with %s: %s", what, zc_status_str(rc),
                 zc_last_error());
    cr_assert_not(st->hit, "%s failed a second time: %s", what, zc_last_error());
    st->hit = true;
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
}

#define TRY(st, call)                                            \
    do {                                                         \
        zc_status rc_ = (call);                                  \
        if (rc_ != ZC_OK) {                                      \
            note_failure(st, rc_, #call);                        \
            rc_ = (call);                                        \
            cr_assert_eq(rc_, ZC_OK, "%s on repeat: %s", #call,  \
                         zc_last_error());                       \
        }                                                        \
    } while (0)

#define TRY_PTR(st, var, call)                                        \
    do {                                                              \
        var = (call);                                                 \
        if (!var) {                                                   \
            note_failure(st, ZC_ERR_NO_MEMORY, #call);                \
            var = (call);                                             \
            cr_assert_not_null(var, "%s on repeat: %s", #call,        \
                               zc_last_error());                      \
        }                                                             \
    } while (0)

static float grad_value(int step, int micro, int i, int64_t j)
{
    return 0.01f * (float)((j * 7 + i * 13 + step * 5 + micro * 3) % 17) - 0.08f;
}

static void write_grad(void *buf, zc_dtype dt, int step, int micro, int i)
{
    for (int64_t j = 0; j < numel(i); j++) {
        float g = grad_value(step, micro, i, j);
        if (dt == ZC_DTYPE_F32) {
            ((float *)buf)[j] = g;
        } else {
            uint32_t u;
            memcpy(&u, &g, 4);
            ((uint16_t *)buf)[j] = (uint16_t)(u >> 16); /* bf16, truncated: exact enough */
        }
    }
}

/* Runs the whole life of one engine with the k-th host allocation failing
 * (k = 0: no injection). Returns false when build failed (already checked). */
static bool run_once(int stage, zc_dtype dt, int64_t k, outcome *out, run_state *st)
{
    zc_comm *comm = NULL;
    zc_config *cfg = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", stage), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", ACCUM), ZC_OK);
    cr_assert_eq(zc_config_set_double(cfg, "optimizer.params.lr", 1e-2), ZC_OK);
    cr_assert_eq(zc_config_set_double(cfg, "optimizer.params.weight_decay", 0.01), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   0), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size", 4096),
                 ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 2048;
    eo.param_dtype = dt;

    memset(st, 0, sizeof *st);
    zc__mem_fail_after(ZC_MEMKIND_HOST, k);

    zc_engine *e = NULL;
    TRY(st, zc_engine_create(&e, cfg, comm, &eo));
    out->loss_scale_before_build = zc_loss_scale(e);
    int g1 = -1;
    TRY(st, zc_group_add(e, 0.0, 0.5, &g1));
    zc_param *p[NP];
    for (int i = 0; i < NP; i++) {
        if (boundary_before[i])
            TRY(st, zc_chunk_boundary(e));
        char name[8] = {'p', (char)('0' + i), 0};
        TRY_PTR(st, p[i], zc_param_add(e, name, shapes[i], ndims[i], in_group1[i] ? g1 : 0));
    }
    zc_status rc = zc_engine_build(e);
    if (rc != ZC_OK) {
        cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "k %lld: build: %s", (long long)k, zc_last_error());
        zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
        cr_assert_null(zc_param_acquire(e, p[0], NULL));
        cr_assert_eq(zc_step(e, NULL), ZC_ERR_INVALID_STATE);
        st->build_failed = true;
        goto out;
    }
    static float init[5000];
    for (int i = 0; i < NP; i++) {
        for (int64_t j = 0; j < numel(i); j++)
            init[j] = 0.001f * (float)((j * 31 + i * 7) % 101) - 0.05f;
        TRY(st, zc_param_load(e, p[i], init));
    }

    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < ACCUM; m++) {
            /* Forward, with a nested acquire of p0 and p1 of the same chunk. */
            void *w;
            TRY_PTR(st, w, zc_param_acquire(e, p[0], NULL));
            TRY_PTR(st, w, zc_param_acquire(e, p[0], NULL));
            for (int i = 1; i < NP; i++)
                TRY_PTR(st, w, zc_param_acquire(e, p[i], NULL));
            for (int i = 0; i < NP; i++)
                TRY(st, zc_param_release(e, p[i], NULL));
            TRY(st, zc_param_release(e, p[0], NULL));
            /* Backward in reverse order. */
            for (int i = NP - 1; i >= 0; i--) {
                TRY_PTR(st, w, zc_param_acquire(e, p[i], NULL));
                if (i != NO_GRAD) {
                    void *g;
                    TRY_PTR(st, g, zc_grad_buffer(e, p[i]));
                    write_grad(g, dt, s, m, i);
                }
                TRY(st, zc_grad_ready(e, p[i]));
                TRY(st, zc_param_release(e, p[i], NULL));
            }
            if (m + 1 < ACCUM)
                TRY(st, zc_micro_step_end(e));
        }
        zc_step_info info;
        TRY(st, zc_step(e, &info));
        cr_assert_not(info.skipped);
        /* A second zc_step without a new window is refused and changes
         * nothing (the comparison with the clean run checks that); it
         * allocates nothing, so the injection countdown is untouched. */
        cr_assert_eq(zc_step(e, &info), ZC_ERR_INVALID_STATE);
        cr_assert(strstr(zc_last_error(), "zc_step"), "%s", zc_last_error());
        out->step_stats[s] = (zc_stats){.size = sizeof(zc_stats)};
        TRY(st, zc_engine_stats(e, &out->step_stats[s]));
    }
    for (int i = 0; i < NP; i++)
        TRY(st, zc_param_gather_master(e, p[i], out->master[i]));
    out->stats = (zc_stats){.size = sizeof(zc_stats)};
    TRY(st, zc_engine_stats(e, &out->stats));
out:
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
    return !st->build_failed;
}

static void check_stage(int stage, zc_dtype dt)
{
    static outcome clean, got;
    run_state st;
    memset(&clean, 0, sizeof clean);
    cr_assert(run_once(stage, dt, 0, &clean, &st));
    cr_assert_not(st.hit);
    int64_t k = 1;
    for (;; k++) {
        memset(&got, 0, sizeof got);
        bool built = run_once(stage, dt, k, &got, &st);
        if (!built)
            continue;
        if (!st.hit)
            break; /* k is past the last allocation of the run */
        cr_assert_eq(got.loss_scale_before_build, clean.loss_scale_before_build);
        for (int i = 0; i < NP; i++)
            cr_assert(memcmp(got.master[i], clean.master[i], (size_t)numel(i) * sizeof(float)) ==
                          0,
                      "stage %d k %lld: parameter p%d differs from the clean run", stage,
                      (long long)k, i);
        for (int s = 0; s < STEPS; s++) {
            const zc_stats *a = &got.step_stats[s], *b = &clean.step_stats[s];
            for (int c = 0; c < ZC_COLL__COUNT; c++)
                cr_assert_eq(a->comm_bytes_last_step[c], b->comm_bytes_last_step[c],
                             "stage %d k %lld step %d: comm bytes of kind %d: %lld, clean run "
                             "%lld",
                             stage, (long long)k, s, c, (long long)a->comm_bytes_last_step[c],
                             (long long)b->comm_bytes_last_step[c]);
            cr_assert_eq(a->gathers_last_step, b->gathers_last_step,
                         "stage %d k %lld step %d: %lld gathers, clean run %lld", stage,
                         (long long)k, s, (long long)a->gathers_last_step,
                         (long long)b->gathers_last_step);
            cr_assert_eq(a->max_live_elems_last_step, b->max_live_elems_last_step,
                         "stage %d k %lld step %d: %lld live elements at most, clean run %lld",
                         stage, (long long)k, s, (long long)a->max_live_elems_last_step,
                         (long long)b->max_live_elems_last_step);
        }
        cr_assert_eq(got.stats.trace_invalidations, clean.stats.trace_invalidations);
        cr_assert_eq(got.stats.steps, clean.stats.steps);
        cr_assert_eq(got.stats.skipped_steps, clean.stats.skipped_steps);
    }
    /* Stage 3 reserves its gather buffers and its trace at build
     * (core/engine/reserve.c), so nothing after build allocates in any stage
     * (tests/core/test_fault_sweep.c); its extra allocations are build's. */
    cr_assert_gt(k, stage == 3 ? 50 : 30, "stage %d: the run made only %lld host allocations", stage,
                 (long long)k);
}

Test(engine_faults, every_allocation_stage0) { check_stage(0, ZC_DTYPE_BF16); }
Test(engine_faults, every_allocation_stage1) { check_stage(1, ZC_DTYPE_BF16); }
Test(engine_faults, every_allocation_stage2) { check_stage(2, ZC_DTYPE_BF16); }
Test(engine_faults, every_allocation_stage3) { check_stage(3, ZC_DTYPE_BF16); }
Test(engine_faults, every_allocation_stage3_fp32) { check_stage(3, ZC_DTYPE_F32); }
