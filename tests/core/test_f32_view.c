/* fp32 views (zc_block_view_f32, zc_block_grad_buffers_f32): a float loop
 * over bf16/fp16 parameters trains bitwise the same as the same loop written
 * against the 16-bit buffers, widening and narrowing by itself - with
 * conversions written here independently of the library (fp16 through the
 * compiler's _Float16, bf16 by rounding the scaled significand with
 * nearbyint) - at stages 0-3 and world sizes 1 and 3; fp32 views are the
 * parameters themselves; a view held across zc_step sees the update; misuse
 * fails with a clear error and changes nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* ---- independent conversions ------------------------------------------- */

static float ref_widen(const void *p, zc_dtype dt, size_t i)
{
    const uint16_t h = ((const uint16_t *)p)[i];
    if (dt == ZC_DTYPE_F16) {
        __extension__ _Float16 v;
        memcpy(&v, &h, 2);
        return (float)v;
    }
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16: 8 significant bits. Rounds x to a multiple of its quantum
 * 2^(e - 7) in double (exact), ties to even by nearbyint's default mode;
 * a result of 2^128 becomes inf when cast to float, as it must. */
static uint16_t ref_bf16(float x)
{
    if (isnan(x))
        return 0x7fc0;
    if (x == 0.0f || isinf(x)) {
        uint32_t u;
        memcpy(&u, &x, 4);
        return (uint16_t)(u >> 16);
    }
    int e = ilogbf(x);
    if (e < -126)
        e = -126; /* subnormal: the quantum stays that of the smallest normal */
    const double q = ldexp(1.0, e - 7);
    const float r = (float)(nearbyint((double)x / q) * q);
    uint32_t u;
    memcpy(&u, &r, 4);
    return (uint16_t)(u >> 16);
}

static void ref_narrow(void *p, zc_dtype dt, size_t i, float v)
{
    uint16_t h;
    if (dt == ZC_DTYPE_F16) {
        __extension__ _Float16 f = (_Float16)v;
        memcpy(&h, &f, 2);
    } else {
        h = ref_bf16(v);
    }
    ((uint16_t *)p)[i] = h;
}

/* ---- the model and the two loops --------------------------------------- */

/* Three blocks, each one chunk (a boundary before each, a bucket that holds
 * it), with parameters of uneven sizes. */
#define NB 3
#define NP 5
static const int64_t numel[NP] = {300, 77, 1000, 5, 130};
static const int block_begin[NB + 1] = {0, 2, 4, 5};
#define MAXN 1000

typedef struct run {
    int stage, world, steps;
    zc_dtype dt;
    bool views;             /* the float loop through the views, else the reference */
    float *master;          /* gathered by rank 0 */
    double norms[8];
    int skipped;
    char err[4][512];
} run;

#define TRY(r, rank, call)                                                                  \
    do {                                                                                    \
        zc_status rc_ = (call);                                                             \
        if (rc_ != ZC_OK) {                                                                 \
            snprintf((r)->err[rank], sizeof (r)->err[rank], "rank %d: %s: %s", rank, #call, \
                     zc_last_error());                                                      \
            goto out;                                                                       \
        }                                                                                   \
    } while (0)

static zc_comm *comms[4];

static zc_status open_engine(int stage, zc_dtype dt, int rank, int view_chunks, zc_engine **eng,
                             zc_param **P, zc_block **B)
{
    zc_config *cfg = NULL;
    zc_status rc = zc_config_create(&cfg);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage", stage);
    if (rc == ZC_OK)
        rc = zc_config_set_double(cfg, "optimizer.params.lr", 1e-2);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold", 0);
    if (rc == ZC_OK && dt == ZC_DTYPE_BF16)
        rc = zc_config_set_bool(cfg, "bf16.enabled", true);
    if (rc == ZC_OK && dt == ZC_DTYPE_F16)
        rc = zc_config_set_bool(cfg, "fp16.enabled", true);
    if (rc == ZC_OK && dt == ZC_DTYPE_F16)
        rc = zc_config_set_int(cfg, "fp16.initial_scale_power", 8);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 2048;
    eo.f32_view_chunks = view_chunks;
    if (rc == ZC_OK)
        rc = zc_engine_create(eng, cfg, comms[rank], &eo);
    zc_config_destroy(cfg);
    for (int l = 0; l < NB && rc == ZC_OK; l++) {
        rc = zc_chunk_boundary(*eng);
        for (int i = block_begin[l]; i < block_begin[l + 1] && rc == ZC_OK; i++) {
            char name[16];
            snprintf(name, sizeof name, "w%d", i);
            P[i] = zc_param_add(*eng, name, &numel[i], 1, 0);
            if (!P[i])
                rc = ZC_ERR_INVALID_ARG;
        }
    }
    if (rc == ZC_OK)
        rc = zc_engine_build(*eng);
    float init[MAXN];
    for (int i = 0; i < NP && rc == ZC_OK; i++) {
        for (int64_t k = 0; k < numel[i]; k++)
            init[k] = 0.5f * (float)t_noise(0x1e17, 0, 0, 0, i, k);
        rc = zc_param_load(*eng, P[i], init);
    }
    for (int l = 0; l < NB && rc == ZC_OK; l++)
        rc = zc_block_span(*eng, P[block_begin[l]], &B[l]);
    return rc;
}

/* The gradient of parameter i at element k, from its value w: two
 * contributions summed in float (as a backward pass accumulates), scaled by
 * the loss scale. Enough arithmetic that the narrowing has to round. */
static float grad_of(int rank, int step, int i, int64_t k, float w, float scale)
{
    float g = 0.05f * w + (float)t_noise(0x9a3d, rank, step, 0, i, k);
    g += 0.3f * w * w - (float)t_noise(0x51c1, rank, step, 0, i, k) / 3.0f;
    return g * scale;
}

static void rank_main(int rank, void *arg)
{
    run *r = arg;
    zc_engine *eng = NULL;
    zc_param *P[NP] = {0};
    zc_block *B[NB] = {0};
    float scratch[MAXN];
    TRY(r, rank, open_engine(r->stage, r->dt, rank, r->views ? 2 : 0, &eng, P, B));
    for (int s = 0; s < r->steps; s++) {
        /* Forward: every block acquired and read once (stage 3 gathers). */
        for (int l = 0; l < NB; l++) {
            TRY(r, rank, zc_block_acquire(eng, B[l], NULL, NULL));
            TRY(r, rank, zc_block_release(eng, B[l], NULL));
        }
        const float scale = (float)zc_loss_scale(eng);
        for (int l = NB - 1; l >= 0; l--) {
            const int a = block_begin[l], n = block_begin[l + 1] - a;
            void *w16[NP], *g16[NP];
            TRY(r, rank, zc_block_acquire(eng, B[l], NULL, w16));
            if (r->views) {
                float *w[NP], *g[NP];
                TRY(r, rank, zc_block_view_f32(eng, B[l], w));
                TRY(r, rank, zc_block_grad_buffers_f32(eng, B[l], g));
                for (int j = 0; j < n; j++)
                    for (int64_t k = 0; k < numel[a + j]; k++)
                        g[j][k] = grad_of(rank, s, a + j, k, w[j][k], scale);
            } else {
                TRY(r, rank, zc_block_grad_buffers(eng, B[l], g16));
                for (int j = 0; j < n; j++) {
                    for (int64_t k = 0; k < numel[a + j]; k++)
                        scratch[k] = grad_of(rank, s, a + j, k,
                                             ref_widen(w16[j], r->dt, (size_t)k), scale);
                    for (int64_t k = 0; k < numel[a + j]; k++)
                        ref_narrow(g16[j], r->dt, (size_t)k, scratch[k]);
                }
            }
            TRY(r, rank, zc_block_grad_ready(eng, B[l]));
            TRY(r, rank, zc_block_release(eng, B[l], NULL));
        }
        zc_step_info info;
        TRY(r, rank, zc_step(eng, &info));
        if (rank == 0 && s < 8) {
            r->norms[s] = info.grad_norm;
            r->skipped += info.skipped;
        }
    }
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        TRY(r, rank, zc_param_gather_master(eng, P[i], rank == 0 ? r->master + off : scratch));
        off += numel[i];
    }
out:
    for (int l = 0; l < NB; l++)
        zc_block_destroy(B[l]);
    zc_engine_destroy(eng);
}

static int64_t total(void)
{
    int64_t n = 0;
    for (int i = 0; i < NP; i++)
        n += numel[i];
    return n;
}

static void train(run *r)
{
    r->master = calloc((size_t)total(), sizeof(float));
    cr_assert_eq(zc_comm_local_world(r->world, comms), ZC_OK);
    t_run_ranks(r->world, rank_main, r);
    for (int i = 0; i < r->world; i++)
        zc_comm_destroy(comms[i]);
    for (int i = 0; i < r->world; i++)
        cr_assert_eq(r->err[i][0], 0, "stage %d %s views %d: %s", r->stage, zc_dtype_name(r->dt),
                     r->views, r->err[i]);
}

static void compare(zc_dtype dt)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 3; world += 2) {
            run ref = {.stage = stage, .world = world, .steps = 6, .dt = dt};
            run view = ref;
            view.views = true;
            train(&ref);
            train(&view);
            cr_assert(memcmp(ref.master, view.master, (size_t)total() * sizeof(float)) == 0,
                      "stage %d W %d %s: the float loop through the views differs from the "
                      "16-bit loop",
                      stage, world, zc_dtype_name(dt));
            for (int s = 0; s < ref.steps; s++)
                cr_assert_eq(ref.norms[s], view.norms[s], "stage %d W %d step %d norm", stage,
                             world, s);
            /* It trained: some step was applied with a real gradient. */
            cr_assert_lt(view.skipped, view.steps);
            cr_assert_gt(view.norms[view.steps - 1], 0.0);
            free(ref.master);
            free(view.master);
        }
    t_assert_no_leaks();
}

Test(f32_view, bf16_float_loop_equals_16bit_loop)
{
    compare(ZC_DTYPE_BF16);
}

Test(f32_view, fp16_float_loop_equals_16bit_loop)
{
    compare(ZC_DTYPE_F16);
}

/* The independent narrowing agrees with known values (so the comparison
 * above is against a correct reference, not only a consistent one). */
Test(f32_view, reference_rounding)
{
    uint16_t h[1];
    ref_narrow(h, ZC_DTYPE_BF16, 0, 1.0f + 0x1p-8f); /* tie: to even (1.0) */
    cr_assert_eq(h[0], 0x3f80);
    ref_narrow(h, ZC_DTYPE_BF16, 0, 1.0f + 3 * 0x1p-8f); /* tie: to even (1 + 2^-6) */
    cr_assert_eq(h[0], 0x3f82);
    ref_narrow(h, ZC_DTYPE_BF16, 0, 1.0f + 0x1p-8f + 0x1p-20f); /* above the tie */
    cr_assert_eq(h[0], 0x3f81);
    ref_narrow(h, ZC_DTYPE_F16, 0, 1.0f + 0x1p-11f); /* tie: to even */
    cr_assert_eq(h[0], 0x3c00);
    ref_narrow(h, ZC_DTYPE_F16, 0, 65520.0f); /* rounds to infinity */
    cr_assert_eq(h[0], 0x7c00);
    cr_assert_eq(ref_widen((uint16_t[]){0x3c01}, ZC_DTYPE_F16, 0), 1.0f + 0x1p-10f);
    cr_assert_eq(ref_widen((uint16_t[]){0xc000}, ZC_DTYPE_BF16, 0), -2.0f);
}

/* ---- one engine on the test's thread ----------------------------------- */

typedef struct one {
    zc_engine *eng;
    zc_param *P[NP];
    zc_block *B[NB];
} one;

static void open_one(one *o, int stage, zc_dtype dt, int view_chunks)
{
    memset(o, 0, sizeof *o);
    cr_assert_eq(zc_comm_local_world(1, comms), ZC_OK);
    cr_assert_eq(open_engine(stage, dt, 0, view_chunks, &o->eng, o->P, o->B), ZC_OK, "%s",
                 zc_last_error());
}

static void close_one(one *o)
{
    for (int l = 0; l < NB; l++)
        zc_block_destroy(o->B[l]);
    zc_engine_destroy(o->eng);
    zc_comm_destroy(comms[0]);
    t_assert_no_leaks();
}

Test(f32_view, fp32_views_are_the_parameters)
{
    for (int stage = 0; stage <= 3; stage++) {
        one o;
        open_one(&o, stage, ZC_DTYPE_F32, 0); /* fp32 needs no slots */
        void *w[2], *g[2];
        float *fw[2], *fg[2];
        cr_assert_eq(zc_block_acquire(o.eng, o.B[0], NULL, w), ZC_OK);
        cr_assert_eq(zc_block_view_f32(o.eng, o.B[0], fw), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_block_grad_buffers_f32(o.eng, o.B[0], fg), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_block_grad_buffers(o.eng, o.B[0], g), ZC_OK);
        for (int j = 0; j < 2; j++) {
            cr_assert_eq((void *)fw[j], w[j], "stage %d", stage);
            cr_assert_eq((void *)fg[j], g[j], "stage %d", stage);
        }
        cr_assert_eq(zc_block_release(o.eng, o.B[0], NULL), ZC_OK);
        close_one(&o);
    }
}

/* A view widens the acquired values exactly; a block held across zc_step
 * sees the update in its view; release returns the slot. */
Test(f32_view, view_follows_the_step)
{
    for (int stage = 0; stage <= 3; stage++) {
        one o;
        open_one(&o, stage, ZC_DTYPE_BF16, 2);
        void *w[2];
        float *v[2];
        cr_assert_eq(zc_block_acquire(o.eng, o.B[0], NULL, w), ZC_OK);
        cr_assert_eq(zc_block_view_f32(o.eng, o.B[0], v), ZC_OK, "%s", zc_last_error());
        float before = v[0][7];
        cr_assert_eq(before, ref_widen(w[0], ZC_DTYPE_BF16, 7));
        for (int l = NB - 1; l >= 0; l--) {
            void *g[2];
            if (l)
                cr_assert_eq(zc_block_acquire(o.eng, o.B[l], NULL, NULL), ZC_OK);
            cr_assert_eq(zc_block_grad_buffers(o.eng, o.B[l], g), ZC_OK, "%s", zc_last_error());
            for (int j = 0; j < block_begin[l + 1] - block_begin[l]; j++)
                for (int64_t k = 0; k < numel[block_begin[l] + j]; k++)
                    ref_narrow(g[j], ZC_DTYPE_BF16, (size_t)k, 1.0f);
            cr_assert_eq(zc_block_grad_ready(o.eng, o.B[l]), ZC_OK);
            if (l)
                cr_assert_eq(zc_block_release(o.eng, o.B[l], NULL), ZC_OK);
        }
        cr_assert_eq(zc_step(o.eng, NULL), ZC_OK, "%s", zc_last_error());
        /* The acquired pointer of a held block stays valid (stage 3
         * refreshes it in place) and the view follows it. */
        for (int j = 0; j < 2; j++)
            for (int64_t k = 0; k < numel[j]; k++)
                cr_assert_eq(v[j][k], ref_widen(w[j], ZC_DTYPE_BF16, (size_t)k),
                             "stage %d param %d elem %lld", stage, j, (long long)k);
        cr_assert_neq(v[0][7], before, "stage %d: the step did not move the parameter", stage);
        zc_stats st = {.size = sizeof st};
        cr_assert_eq(zc_engine_stats(o.eng, &st), ZC_OK);
        const int64_t in_use = st.bytes[ZC_MEM_BUFFERS];
        cr_assert_eq(zc_block_release(o.eng, o.B[0], NULL), ZC_OK);
        cr_assert_eq(zc_engine_stats(o.eng, &st), ZC_OK);
        cr_assert_lt(st.bytes[ZC_MEM_BUFFERS], in_use, "stage %d: the slot was not returned",
                     stage);
        close_one(&o);
    }
}

Test(f32_view, slots_cost_what_the_header_says)
{
    one a, b;
    open_one(&a, 2, ZC_DTYPE_BF16, 0);
    zc_stats s0 = {.size = sizeof s0}, s2 = {.size = sizeof s2};
    cr_assert_eq(zc_engine_stats(a.eng, &s0), ZC_OK);
    close_one(&a);
    open_one(&b, 2, ZC_DTYPE_BF16, 2);
    cr_assert_eq(zc_engine_stats(b.eng, &s2), ZC_OK);
    /* Largest padded chunk: 1024 elements (w2 + w3 = 1005, padded to 64). */
    const int64_t want = 2 * 2 * 4 * 1024;
    const int64_t got = s2.bytes[ZC_MEM_RESERVED] - s0.bytes[ZC_MEM_RESERVED];
    cr_assert(got >= want && got <= want + 2 * 256, "reserved %lld more, want %lld", (long long)got,
              (long long)want);
    close_one(&b);
}

Test(f32_view, misuse_is_refused_and_changes_nothing)
{
    one o;
    open_one(&o, 3, ZC_DTYPE_BF16, 1);
    float *v[2], *g[2];
    /* Not acquired. */
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[1], v), ZC_ERR_INVALID_STATE);
    cr_assert_not_null(strstr(zc_last_error(), "('w2') is not acquired"), "%s", zc_last_error());
    /* One slot: a second chunk's view is refused, the first stays. */
    cr_assert_eq(zc_block_acquire(o.eng, o.B[0], NULL, NULL), ZC_OK);
    cr_assert_eq(zc_block_acquire(o.eng, o.B[1], NULL, NULL), ZC_OK);
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[0], v), ZC_OK);
    const float keep = v[0][3];
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[1], v + 0), ZC_ERR_NO_MEMORY);
    cr_assert_not_null(strstr(zc_last_error(), "f32_view_chunks"), "%s", zc_last_error());
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[0], v), ZC_OK);
    cr_assert_eq(v[0][3], keep);
    /* Releasing block 0 frees its slot for block 1. */
    cr_assert_eq(zc_block_release(o.eng, o.B[0], NULL), ZC_OK);
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[1], v), ZC_OK, "%s", zc_last_error());
    /* Gradient views: ready twice is refused before anything is taken. */
    cr_assert_eq(zc_block_grad_buffers_f32(o.eng, o.B[1], g), ZC_OK, "%s", zc_last_error());
    g[0][0] = 1.5f;
    cr_assert_eq(zc_block_grad_ready(o.eng, o.B[1]), ZC_OK);
    cr_assert_eq(zc_block_grad_buffers_f32(o.eng, o.B[1], g), ZC_ERR_INVALID_STATE);
    cr_assert_eq(zc_block_release(o.eng, o.B[1], NULL), ZC_OK);
    /* Bad arguments. */
    cr_assert_eq(zc_block_view_f32(o.eng, NULL, v), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[0], NULL), ZC_ERR_INVALID_ARG);
    close_one(&o);

    /* No slots reserved: the message says which option to set. */
    open_one(&o, 1, ZC_DTYPE_F16, 0);
    cr_assert_eq(zc_block_acquire(o.eng, o.B[2], NULL, NULL), ZC_OK);
    cr_assert_eq(zc_block_view_f32(o.eng, o.B[2], v), ZC_ERR_NO_MEMORY);
    cr_assert_not_null(strstr(zc_last_error(), "zc_engine_options.f32_view_chunks"), "%s",
                       zc_last_error());
    cr_assert_eq(zc_block_grad_buffers_f32(o.eng, o.B[2], g), ZC_ERR_NO_MEMORY);
    /* Nothing was taken: the 16-bit buffers are still to be had and the
     * step runs once every gradient is ready. */
    cr_assert_eq(zc_block_release(o.eng, o.B[2], NULL), ZC_OK);
    close_one(&o);
}

Test(f32_view, option_out_of_range_is_refused)
{
    zc_config *cfg = NULL;
    zc_engine *eng = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_comm_local_world(1, comms), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    const int bad[] = {-1, 65};
    for (int i = 0; i < 2; i++) {
        eo.f32_view_chunks = bad[i];
        cr_assert_eq(zc_engine_create(&eng, cfg, comms[0], &eo), ZC_ERR_INVALID_ARG);
        cr_assert_null(eng);
        cr_assert_not_null(strstr(zc_last_error(), "f32_view_chunks"), "%s", zc_last_error());
    }
    zc_comm_destroy(comms[0]);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* ZC_DEBUG=1 hands out shadow gradient buffers: the fp32 gradients are
 * narrowed into the shadow and moved on from there, so the result is the
 * same bits as the reference loop without it. */
Test(f32_view, debug_shadows_train_the_same)
{
    for (int stage = 0; stage <= 3; stage++) {
        run ref = {.stage = stage, .world = 2, .steps = 4, .dt = ZC_DTYPE_BF16};
        run view = ref;
        view.views = true;
        train(&ref);
        setenv("ZC_DEBUG", "1", 1);
        train(&view);
        unsetenv("ZC_DEBUG");
        cr_assert(memcmp(ref.master, view.master, (size_t)total() * sizeof(float)) == 0,
                  "stage %d: views under ZC_DEBUG=1 differ", stage);
        free(ref.master);
        free(view.master);
    }
    t_assert_no_leaks();
}

/* ZC_DEBUG=1 and a write into an fp32 gradient view after zc_grad_ready:
 * every rank adds to element 5 of w2's fp32 gradient (block 1) in the same
 * micro-step (when 0) or after the step through the pointer of the previous
 * window (when 1). The next zc_step fails on every rank with the same
 * message naming the fp32 buffer, the parameter and the element, as the
 * 16-bit buffers' check does (tests/core/test_grad_debug.c). */
typedef struct late_view {
    int stage, when;
    zc_status rc[2];
    char msg[2][512];
    char err[2][512];
} late_view;

static void late_view_rank(int rank, void *arg)
{
    late_view *lv = arg;
    zc_engine *eng = NULL;
    zc_param *P[NP] = {0};
    zc_block *B[NB] = {0};
    float *g2 = NULL;
    lv->rc[rank] = ZC_ERR_INTERNAL;
    zc_status rc = open_engine(lv->stage, ZC_DTYPE_BF16, rank, 2, &eng, P, B);
    for (int s = 0; s < 2 && rc == ZC_OK; s++) {
        if (s == 1 && lv->when == 1)
            g2[5] += 2.0f; /* the pointer of the last window is stale */
        for (int l = NB - 1; l >= 0 && rc == ZC_OK; l--) {
            const int a = block_begin[l], n = block_begin[l + 1] - a;
            float *w[NP], *g[NP];
            rc = zc_block_acquire(eng, B[l], NULL, NULL);
            if (rc == ZC_OK)
                rc = zc_block_view_f32(eng, B[l], w);
            if (rc == ZC_OK)
                rc = zc_block_grad_buffers_f32(eng, B[l], g);
            for (int j = 0; j < n && rc == ZC_OK; j++)
                for (int64_t k = 0; k < numel[a + j]; k++)
                    g[j][k] = grad_of(rank, s, a + j, k, w[j][k], 1.0f);
            if (rc == ZC_OK)
                rc = zc_block_grad_ready(eng, B[l]);
            if (rc == ZC_OK && l == 1) {
                g2 = g[0];
                if (s == 0 && lv->when == 0)
                    g2[5] += 2.0f;
            }
            if (rc == ZC_OK)
                rc = zc_block_release(eng, B[l], NULL);
        }
        if (rc != ZC_OK) {
            snprintf(lv->err[rank], sizeof lv->err[rank], "step %d: %s", s, zc_last_error());
            break;
        }
        zc_step_info info;
        zc_status src = zc_step(eng, &info);
        if (src != ZC_OK || s == 1) {
            lv->rc[rank] = src;
            snprintf(lv->msg[rank], sizeof lv->msg[rank], "%s", src ? zc_last_error() : "");
            break;
        }
    }
    if (rc != ZC_OK && !lv->err[rank][0])
        snprintf(lv->err[rank], sizeof lv->err[rank], "open: %s", zc_last_error());
    for (int l = 0; l < NB; l++)
        zc_block_destroy(B[l]);
    zc_engine_destroy(eng);
}

Test(f32_view, debug_catches_late_writes_into_fp32_gradients)
{
    static const char *const seen[2] = {"seen at the end of the micro-step",
                                        "seen at its next zc_block_grad_buffers_f32"};
    for (int when = 0; when <= 1; when++) {
        for (int stage = 0; stage <= 3; stage++) {
            late_view lv = {.stage = stage, .when = when};
            cr_assert_eq(zc_comm_local_world(2, comms), ZC_OK);
            setenv("ZC_DEBUG", "1", 1);
            t_run_ranks(2, late_view_rank, &lv);
            unsetenv("ZC_DEBUG");
            for (int i = 0; i < 2; i++)
                zc_comm_destroy(comms[i]);
            char want[256];
            snprintf(want, sizeof want,
                     "ZC_DEBUG: the fp32 gradient buffer of parameter 'w2' was written after its "
                     "zc_grad_ready (element 5 of 1000 changed, %s); the pointer from "
                     "zc_block_grad_buffers_f32 is valid only",
                     seen[when]);
            for (int r = 0; r < 2; r++) {
                cr_assert_str_empty(lv.err[r], "stage %d when %d rank %d: %s", stage, when, r,
                                    lv.err[r]);
                cr_assert_eq(lv.rc[r], ZC_ERR_INVALID_STATE, "stage %d when %d rank %d: %s (%s)",
                             stage, when, r, zc_status_str(lv.rc[r]), lv.msg[r]);
                cr_assert_not_null(strstr(lv.msg[r], want), "stage %d when %d rank %d: %s",
                                   stage, when, r, lv.msg[r]);
            }
            cr_assert_str_eq(lv.msg[0], lv.msg[1], "stage %d when %d: ranks disagree", stage,
                             when);
        }
    }
    t_assert_no_leaks();
}
