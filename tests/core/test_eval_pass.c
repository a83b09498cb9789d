/* Evaluation passes (zc_pass_begin(ZC_PASS_EVAL) / zc_pass_end): a
 * forward-only pass inserted at every position of the loop - before the
 * first step, between steps, between a micro-step's forward and backward,
 * between micro-steps and after the last step - changes nothing of the
 * training: the fp32 master, grad norms, skips and loss scales are those of
 * the same run without it, bitwise, at stages 0-3, worlds 1-4, with the
 * parameters on the device, offloaded to pinned memory or to NVMe. The
 * passes read the values the training has (stage 3's gathers the same sums
 * as stage 2's resident parameters), log no WARN line and invalidate no trace; stage 3
 * prefetches along the passes' own trace (the hits are counted exactly),
 * the step figures leave the passes out, and so do the step timers. Misuse
 * is refused, naming the call, and changes nothing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

#define STEPS 8

static int warn_lines;
static char first_warn[512];

static void warn_sink(zc_log_level level, const char *subsys, int rank, const char *line,
                      void *user)
{
    (void)rank;
    (void)user;
    if (level != ZC_LOG_WARN)
        return;
    if (__atomic_fetch_add(&warn_lines, 1, __ATOMIC_RELAXED) == 0)
        snprintf(first_warn, sizeof first_warn, "[%s] %s", subsys, line);
}

static void count_warnings(void)
{
    warn_lines = 0;
    first_warn[0] = 0;
    zc_log_set_sink(warn_sink, NULL);
}

static void init(t_run *r, int stage, int world, zc_dtype dt)
{
    t_run_init(r, stage, world, dt);
    r->steps = STEPS;
    r->accum = 2;
}

/* Asserts that every rank of an evaluated run read what resident
 * parameters hold (ref0: the run of stage 0 - or 2, when the run's stage is
 * 2 or 3 - with the same passes: stages 0-1 and 2-3 divide an accumulation
 * window's gradient at different points, so the two pairs agree within
 * rounding only), ran every pass, and invalidated no trace. */
static void assert_passes(const t_run *r, const t_run *ref0, int64_t passes, const char *what)
{
    for (int k = 0; k < r->world; k++) {
        cr_assert_eq(r->evals_run[k], passes, "%s rank %d: %lld passes", what, k,
                     (long long)r->evals_run[k]);
        cr_assert_eq(r->pass_stats[k].evals, passes, "%s rank %d: pass stats say %lld", what,
                     k, (long long)r->pass_stats[k].evals);
        cr_assert(r->eval_sum[k] == ref0->eval_sum[k], "%s rank %d: the passes read %.17g, "
                  "stage %d %.17g", what, k, r->eval_sum[k], ref0->stage, ref0->eval_sum[k]);
        cr_assert_eq(r->stats[k].trace_invalidations, 0, "%s rank %d: %lld invalidations", what,
                     k, (long long)r->stats[k].trace_invalidations);
    }
}

/* Passes per run with T_EVAL_ALL: one before each step, two per step inside
 * it (mid micro-step, twice with accumulation 2), one between its two
 * micro-steps, and one after the last step. */
static int64_t all_passes(const t_run *r)
{
    return (int64_t)r->steps * (1 + r->accum + (r->accum - 1)) + 1;
}

static void every_position(zc_dtype dt)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-eval-test");
    count_warnings();
    for (int world = 1; world <= 4; world++) {
        t_run *ref[4], *ev[4] = {0};
        for (int stage = 0; stage <= 3; stage++) {
            t_run cfg;
            init(&cfg, stage, world, dt);
            ref[stage] = t_run_trained(&cfg);
            cfg.eval_at = T_EVAL_ALL;
            cfg.eval_batches = 2;
            t_run *r = t_run_trained(&cfg);
            char what[96];
            snprintf(what, sizeof what, "%s world %d stage %d with evaluation passes",
                     zc_dtype_name(dt), world, stage);
            t_assert_same_training(r, ref[stage], what);
            ev[stage] = r;
            assert_passes(r, ev[stage < 2 ? 0 : 2], all_passes(r), what);
        }
        /* Stage 3 with the shards offloaded, through the schedules: layer
         * by layer through blocks or one parameter at a time, prefetch and
         * reuse on or off. */
        const char *homes[2] = {"cpu", "nvme"};
        for (int h = 0; h < 2; h++) {
            t_run cfg;
            init(&cfg, 3, world, dt);
            cfg.offload_param = homes[h];
            cfg.param_nvme_path_json = h ? dir.json : NULL;
            cfg.eval_at = T_EVAL_ALL;
            cfg.eval_batches = 2;
            cfg.prefetch = (world + h) % 2 ? 1 << 20 : 0;
            cfg.reuse = (world / 2 + h) % 2 ? 1 << 20 : 0;
            cfg.layerwise = true;
            cfg.blocks = (world + h) % 2 ? T_BLOCK_LIST : T_BLOCK_NONE;
            t_run *r = t_run_trained(&cfg);
            char what[160];
            snprintf(what, sizeof what, "%s world %d stage 3 param %s prefetch %lld reuse %lld%s "
                     "with evaluation passes", zc_dtype_name(dt), world, homes[h],
                     (long long)cfg.prefetch, (long long)cfg.reuse,
                     cfg.blocks ? " blocks" : "");
            t_assert_same_training(r, ref[3], what);
            assert_passes(r, ev[2], all_passes(r), what);
            for (int k = 0; k < world; k++) {
                const zc_pass_stats *ps = &r->pass_stats[k];
                if (h)
                    cr_assert_gt(ps->param_reads, 0, "%s rank %d: no shard read in the last "
                                 "pass", what, k);
                if (cfg.prefetch > 0)
                    cr_assert_gt(ps->prefetch_hits, 0, "%s rank %d: no prefetch hit in the last "
                                 "pass (%lld misses)", what, k, (long long)ps->prefetch_misses);
                else if (cfg.reuse == 0) /* (a chunk kept for reuse is a hit too) */
                    cr_assert_eq(ps->prefetch_hits, 0, "%s rank %d", what, k);
            }
            t_run_free(r);
            cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s", dir.path);
        }
        for (int stage = 0; stage <= 3; stage++) {
            t_run_free(ref[stage]);
            t_run_free(ev[stage]);
        }
    }
    zc_log_set_sink(NULL, NULL);
    cr_assert_eq(warn_lines, 0, "%d WARN lines, the first: %s", warn_lines, first_warn);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(eval_pass, every_position_fp32) { every_position(ZC_DTYPE_F32); }
Test(eval_pass, every_position_bf16) { every_position(ZC_DTYPE_BF16); }
Test(eval_pass, every_position_fp16) { every_position(ZC_DTYPE_F16); }

/* Stage 3, layer by layer (one activation per chunk: 6 per forward), two
 * forwards per pass, prefetch large enough for the model, reuse 0. The
 * first pass records its trace and gathers all 12 activations on demand;
 * every later pass starts with nothing gathered (the first activation
 * misses) and finds each of the 11 others gathered ahead. Between steps
 * only, the passes change none of the step figures either. */
Test(eval_pass, stage3_prefetches_along_the_pass_trace)
{
    const int W = 2;
    count_warnings();
    t_run cfg;
    init(&cfg, 3, W, ZC_DTYPE_BF16);
    cfg.layerwise = true;
    cfg.prefetch = 1 << 20;
    cfg.reuse = 0;
    t_run *ref = t_run_trained(&cfg);
    cfg.eval_at = T_EVAL_BEFORE_STEP | T_EVAL_AFTER;
    cfg.eval_batches = 2;
    t_run *r = t_run_trained(&cfg);
    zc_log_set_sink(NULL, NULL);
    t_assert_same_training(r, ref, "passes between steps");
    const int64_t acts = 2 * T_NLAYERS;
    for (int k = 0; k < W; k++) {
        const zc_pass_stats *ps = &r->pass_stats[k];
        cr_assert_eq(ps->evals, STEPS + 1);
        cr_assert_eq(ps->prefetch_misses, 1, "rank %d: %lld misses", k,
                     (long long)ps->prefetch_misses);
        cr_assert_eq(ps->prefetch_hits, acts - 1, "rank %d: %lld hits", k,
                     (long long)ps->prefetch_hits);
        /* Each activation gathers its chunk once (on demand or ahead). */
        cr_assert_eq(ps->gathers, acts, "rank %d: %lld gathers", k, (long long)ps->gathers);
        cr_assert_gt(ps->all_gather_bytes, 0);
        cr_assert_gt(ps->max_live_elems, 0);
        cr_assert_eq(r->stats[k].trace_invalidations, 0);
    }
    for (int s = 0; s < STEPS; s++) {
        const zc_stats *a = &r->step_stats[s], *b = &ref->step_stats[s];
        cr_assert_eq(a->gathers_last_step, b->gathers_last_step, "step %d: %lld gathers, "
                     "without passes %lld", s, (long long)a->gathers_last_step,
                     (long long)b->gathers_last_step);
        cr_assert_eq(a->max_live_elems_last_step, b->max_live_elems_last_step, "step %d", s);
        for (int c = 0; c < ZC_COLL__COUNT; c++)
            cr_assert_eq(a->comm_bytes_last_step[c], b->comm_bytes_last_step[c],
                         "step %d collective %d", s, c);
    }
    cr_assert_eq(warn_lines, 0, "%d WARN lines, the first: %s", warn_lines, first_warn);
    t_run_free(ref);
    t_run_free(r);
    t_assert_no_leaks();
}

/* A pass longer than the trace holds: 20 forwards of 6 activations, where
 * the harness's trace holds 4 x 8 parameters x 2 micro-steps = 64. The
 * record repeats with period 6, so prefetch goes on past it: every
 * activation of a later pass but its first is a hit. */
Test(eval_pass, long_passes_prefetch_past_the_record)
{
    count_warnings();
    t_run cfg;
    init(&cfg, 3, 2, ZC_DTYPE_BF16);
    cfg.layerwise = true;
    cfg.prefetch = 1 << 20;
    t_run *ref = t_run_trained(&cfg);
    cfg.eval_at = T_EVAL_BEFORE_STEP | T_EVAL_BETWEEN_MICRO;
    cfg.eval_batches = 20;
    t_run *r = t_run_trained(&cfg);
    zc_log_set_sink(NULL, NULL);
    t_assert_same_training(r, ref, "passes of 20 forwards");
    for (int k = 0; k < 2; k++) {
        const zc_pass_stats *ps = &r->pass_stats[k];
        cr_assert_eq(ps->evals, 2 * STEPS);
        cr_assert_eq(ps->prefetch_misses, 1, "rank %d: %lld misses", k,
                     (long long)ps->prefetch_misses);
        cr_assert_eq(ps->prefetch_hits, 20 * T_NLAYERS - 1, "rank %d: %lld hits", k,
                     (long long)ps->prefetch_hits);
        cr_assert_eq(r->stats[k].trace_invalidations, 0);
    }
    cr_assert_eq(warn_lines, 0, "%d WARN lines, the first: %s", warn_lines, first_warn);
    t_run_free(ref);
    t_run_free(r);
    t_assert_no_leaks();
}

/* A pass that is a prefix of the recorded one (fewer batches) or goes on
 * past it (more) is not an order change: passes of 1, 3 and 2 forwards in
 * turn log nothing and invalidate nothing. */
static void varying_batches(t_ctx *x, int step, void *arg)
{
    (void)arg;
    static const int batches[3] = {1, 3, 2};
    t_run *run = x->run;
    const int keep = run->eval_batches;
    run->eval_batches = batches[step % 3];
    (void)t_eval_pass(x);
    run->eval_batches = keep;
}

Test(eval_pass, shorter_and_longer_passes_change_no_order)
{
    count_warnings();
    t_run cfg;
    init(&cfg, 3, 2, ZC_DTYPE_F32);
    cfg.layerwise = true;
    cfg.prefetch = 1 << 20;
    t_run *ref = t_run_trained(&cfg);
    cfg.after_step = varying_batches;
    t_run *r = t_run_trained(&cfg);
    zc_log_set_sink(NULL, NULL);
    t_assert_same_training(r, ref, "passes of 1, 3 and 2 forwards");
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(r->evals_run[k], STEPS);
        cr_assert_eq(r->stats[k].trace_invalidations, 0);
        /* The last pass (step 7: 3 forwards) followed a record of 3. */
        cr_assert_eq(r->pass_stats[k].prefetch_misses, 1);
        cr_assert_eq(r->pass_stats[k].prefetch_hits, 3 * T_NLAYERS - 1);
    }
    cr_assert_eq(warn_lines, 0, "%d WARN lines, the first: %s", warn_lines, first_warn);
    t_run_free(ref);
    t_run_free(r);
    t_assert_no_leaks();
}

/* ---- misuse ---------------------------------------------------------------- */

typedef struct misuse {
    int bad[T_MAX_WORLD];
    char why[T_MAX_WORLD][512];
} misuse;

static void expect(misuse *m, int rank, bool ok, const char *what)
{
    if (!ok && m->bad[rank]++ == 0)
        snprintf(m->why[rank], sizeof m->why[rank], "%s (last error: %s)", what,
                 zc_last_error());
}

/* The call failed with status want and a message holding both words. */
static bool refused(zc_status rc, zc_status want, const char *w1, const char *w2)
{
    const char *msg = zc_last_error();
    return rc == want && strstr(msg, w1) && (!w2 || strstr(msg, w2));
}

/* After step 2, on every rank: every misuse, each refused with nothing
 * changed, inside and around one evaluation pass. */
static void misuse_hook(t_ctx *x, int step, void *arg)
{
    if (step != 2)
        return;
    misuse *m = arg;
    const int r = x->rank;
    zc_engine *e = x->eng;
    expect(m, r, refused(zc_pass_end(e), ZC_ERR_INVALID_STATE, "zc_pass_end", "no evaluation"),
           "zc_pass_end without a pass");
    expect(m, r, refused(zc_pass_begin(e, ZC_PASS_TRAIN), ZC_ERR_INVALID_ARG, "zc_pass_begin",
                         "ZC_PASS_TRAIN"), "zc_pass_begin(ZC_PASS_TRAIN)");
    expect(m, r, refused(zc_pass_begin(e, (zc_pass_kind)7), ZC_ERR_INVALID_ARG, "zc_pass_begin",
                         "unknown"), "zc_pass_begin(7)");
    if (x->run->stage == 0) {
        /* (At stage 3 this acquire, outside any pass, would land in the
         * training's trace and change its order.) */
        expect(m, r, zc_param_acquire(e, x->p[0], NULL) != NULL, "acquire p0");
        expect(m, r, refused(zc_pass_begin(e, ZC_PASS_EVAL), ZC_ERR_INVALID_STATE,
                             "zc_pass_begin", "'p0'"), "zc_pass_begin with p0 acquired");
        expect(m, r, zc_pass_current(e) == ZC_PASS_TRAIN, "no pass after the refused begin");
        expect(m, r, zc_param_release(e, x->p[0], NULL) == ZC_OK, "release p0");
    }

    expect(m, r, zc_pass_begin(e, ZC_PASS_EVAL) == ZC_OK, "zc_pass_begin");
    expect(m, r, zc_pass_current(e) == ZC_PASS_EVAL, "zc_pass_current inside the pass");
    expect(m, r, refused(zc_pass_begin(e, ZC_PASS_EVAL), ZC_ERR_INVALID_STATE, "zc_pass_begin",
                         "already open"), "nested zc_pass_begin");
    zc_step_info info;
    expect(m, r, refused(zc_step(e, &info), ZC_ERR_INVALID_STATE, "zc_step", "evaluation pass"),
           "zc_step inside the pass");
    expect(m, r, refused(zc_micro_step_end(e), ZC_ERR_INVALID_STATE, "zc_micro_step_end",
                         "evaluation pass"), "zc_micro_step_end inside the pass");
    expect(m, r, zc_param_acquire(e, x->p[1], NULL) != NULL, "acquire p1 inside the pass");
    expect(m, r, zc_grad_buffer(e, x->p[1]) == NULL &&
                     refused(ZC_ERR_INVALID_STATE, ZC_ERR_INVALID_STATE, "zc_grad_buffer",
                             "evaluation pass"), "zc_grad_buffer inside the pass");
    expect(m, r, refused(zc_grad_ready(e, x->p[1]), ZC_ERR_INVALID_STATE, "zc_grad_ready",
                         "evaluation pass"), "zc_grad_ready inside the pass");
    expect(m, r, refused(zc_pass_end(e), ZC_ERR_INVALID_STATE, "zc_pass_end", "'p1'"),
           "zc_pass_end with p1 acquired");
    expect(m, r, zc_pass_current(e) == ZC_PASS_EVAL, "the pass stays open");
    expect(m, r, zc_param_release(e, x->p[1], NULL) == ZC_OK, "release p1");
    zc_block *b = NULL;
    expect(m, r, zc_block_create(e, &x->p[5], 3, &b) == ZC_OK, "zc_block_create");
    void *bufs[3];
    float *fbufs[3];
    expect(m, r, refused(zc_block_grad_buffers(e, b, bufs), ZC_ERR_INVALID_STATE,
                         "zc_block_grad_buffers", "evaluation pass"),
           "zc_block_grad_buffers inside the pass");
    expect(m, r, refused(zc_block_grad_buffers_f32(e, b, fbufs), ZC_ERR_INVALID_STATE,
                         "zc_block_grad_buffers_f32", "evaluation pass"),
           "zc_block_grad_buffers_f32 inside the pass");
    expect(m, r, refused(zc_block_grad_ready(e, b), ZC_ERR_INVALID_STATE, "zc_block_grad_ready",
                         "evaluation pass"), "zc_block_grad_ready inside the pass");
    float vb[4000 + 129 + 1] = {0};
    expect(m, r, refused(zc_block_load(e, b, vb, 129 + 4000 + 1), ZC_ERR_INVALID_STATE,
                         "zc_block_load", "evaluation pass"), "zc_block_load inside the pass");
    zc_block_destroy(b);
    float v[300] = {0};
    expect(m, r, refused(zc_param_load(e, x->p[0], v), ZC_ERR_INVALID_STATE, "zc_param_load",
                         "evaluation pass"), "zc_param_load inside the pass");
    expect(m, r, refused(zc_checkpoint_load(e, "/nonexistent", NULL), ZC_ERR_INVALID_STATE,
                         "zc_checkpoint_load", "evaluation pass"),
           "zc_checkpoint_load inside the pass");
    expect(m, r, zc_pass_end(e) == ZC_OK, "zc_pass_end");
    expect(m, r, zc_pass_current(e) == ZC_PASS_TRAIN, "zc_pass_current after the pass");
    expect(m, r, zc_pass_current(NULL) == ZC_PASS_TRAIN, "zc_pass_current(NULL)");
    zc_pass_stats ps = {.size = sizeof ps - 1};
    expect(m, r, refused(zc_engine_pass_stats(e, &ps), ZC_ERR_INVALID_ARG,
                         "zc_engine_pass_stats", "size"), "a short zc_pass_stats");
    expect(m, r, refused(zc_engine_pass_stats(e, NULL), ZC_ERR_INVALID_ARG,
                         "zc_engine_pass_stats", NULL), "a NULL zc_pass_stats");
}

static void misuse_at(int stage)
{
    const int W = 2;
    count_warnings();
    t_run cfg;
    init(&cfg, stage, W, ZC_DTYPE_BF16);
    t_run *ref = t_run_trained(&cfg);
    misuse *m = calloc(1, sizeof *m);
    cfg.after_step = misuse_hook;
    cfg.hook_arg = m;
    t_run *r = t_run_trained(&cfg);
    zc_log_set_sink(NULL, NULL);
    for (int k = 0; k < W; k++) {
        cr_assert_eq(m->bad[k], 0, "stage %d rank %d: %d checks failed, the first: %s", stage, k,
                     m->bad[k], m->why[k]);
        cr_assert_eq(r->pass_stats[k].evals, 1);
        cr_assert_eq(r->stats[k].trace_invalidations, 0);
    }
    char what[64];
    snprintf(what, sizeof what, "stage %d after refused misuse", stage);
    t_assert_same_training(r, ref, what);
    cr_assert_eq(warn_lines, 0, "%d WARN lines, the first: %s", warn_lines, first_warn);
    free(m);
    t_run_free(ref);
    t_run_free(r);
    t_assert_no_leaks();
}

Test(eval_pass, misuse_refused_stage0) { misuse_at(0); }
Test(eval_pass, misuse_refused_stage3) { misuse_at(3); }

/* ---- timers ---------------------------------------------------------------- */

typedef struct timed {
    double last_total[STEPS];
    double entered[STEPS], left[STEPS]; /* the hook's start and end, after step s */
} timed;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After each step: note its timed window, then a pass that takes 0.3 s. */
static void slow_pass(t_ctx *x, int step, void *arg)
{
    timed *t = arg;
    zc_timers tm = {.size = sizeof tm};
    if (x->rank == 0)
        t->entered[step] = mono_s();
    if (x->rank == 0 && zc_engine_timers(x->eng, &tm) == ZC_OK)
        t->last_total[step] = tm.last_total;
    if (zc_pass_begin(x->eng, ZC_PASS_EVAL) != ZC_OK)
        return;
    for (int i = 0; i < T_NPARAMS; i++)
        if (zc_param_acquire(x->eng, x->p[i], NULL))
            zc_param_release(x->eng, x->p[i], NULL);
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    zc_pass_end(x->eng);
    if (x->rank == 0)
        t->left[step] = mono_s();
}

/* Without the mark, the pass's acquires would open the next step's window
 * and its 0.3 s would count as that step's forward. Held by the clock's
 * order, not by a duration: step s's calls all lie between the end of the
 * hook after step s-1 (the pass included) and the start of the hook after
 * step s, so its timed window, measured on the same monotonic clock, fits
 * in that interval however long the step itself takes; with the pass in
 * it, the window would begin before the interval does. */
Test(eval_pass, step_timers_leave_the_pass_out)
{
    t_run cfg;
    init(&cfg, 3, 1, ZC_DTYPE_F32);
    cfg.steps = 4;
    cfg.wall_clock_breakdown = true;
    timed *t = calloc(1, sizeof *t);
    cfg.after_step = slow_pass;
    cfg.hook_arg = t;
    t_run *r = t_run_trained(&cfg);
    for (int s = 1; s < cfg.steps; s++) {
        const double span = t->entered[s] - t->left[s - 1];
        cr_assert_gt(t->last_total[s], 0.0, "step %d was not timed", s);
        cr_assert_leq(t->last_total[s], span, "step %d: %.6f s timed, %.6f s between the pass's "
                      "end and the step's end: the pass was included", s, t->last_total[s],
                      span);
    }
    free(t);
    t_run_free(r);
    t_assert_no_leaks();
}
