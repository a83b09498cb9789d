#include "t_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"

const int64_t t_numel[T_NPARAMS] = {300, 1000, 7, 2500, 64, 129, 4000, 1};
const int t_group[T_NPARAMS] = {0, 1, 0, 0, 1, 1, 0, 1};
const bool t_boundary[T_NPARAMS] = {false, false, false, false, false, true, false, false};

const int t_layer_begin[T_NLAYERS + 1] = {0, 3, 4, 5, 6, 7, 8};
const int64_t t_layer_numel[T_NLAYERS] = {1307, 2500, 64, 129, 4000, 1};

int64_t t_total_numel(void)
{
    int64_t n = 0;
    for (int i = 0; i < T_NPARAMS; i++)
        n += t_numel[i];
    return n;
}

int t_nlayers(const t_ctx *x)
{
    return x->run->layers ? x->run->nlayers : T_NLAYERS;
}

int t_layer_at(const t_ctx *x, int l)
{
    return x->run->layers ? x->run->layers[l] : t_layer_begin[l];
}

void t_run_init(t_run *run, int stage, int world, zc_dtype dtype)
{
    memset(run, 0, sizeof *run);
    run->stage = stage;
    run->world = world;
    run->steps = 20;
    run->accum = 1;
    run->dtype = dtype;
    run->bucket = 2048;
    run->clip = 1.0;
    run->grad_gain = 1.0;
    run->persistence = -1;
    run->prefetch = -1;
    run->max_live = -1;
    run->reuse = 0;
    run->permute_step = -1;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1) from a key. */
static float unit(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = mix(mix(mix(a) ^ b) ^ c);
    return (float)((double)(h >> 11) * 0x1p-53 * 2.0 - 1.0);
}

#define TRY(call)                                                                   \
    do {                                                                            \
        zc_status rc_ = (call);                                                     \
        if (rc_ != ZC_OK) {                                                         \
            if (!x->run->err[x->rank][0])                                           \
                snprintf(x->run->err[x->rank], sizeof x->run->err[x->rank],         \
                         "rank %d: %s: %s: %s", x->rank, #call, zc_status_str(rc_), \
                         zc_last_error());                                          \
            return rc_;                                                             \
        }                                                                           \
    } while (0)

static zc_status fail(t_ctx *x, const char *what)
{
    if (!x->run->err[x->rank][0])
        snprintf(x->run->err[x->rank], sizeof x->run->err[x->rank], "rank %d: %s: %s", x->rank,
                 what, zc_last_error());
    return ZC_ERR_INTERNAL;
}

static float init_value(int i, int64_t k)
{
    return 0.5f * unit(0x1417, (uint64_t)i, (uint64_t)k);
}

float t_init_value(int i, int64_t k) { return init_value(i, k); }

float t_init_value_as(int i, int64_t k, zc_dtype dt)
{
    float v = init_value(i, k);
    if (dt == ZC_DTYPE_BF16)
        return zc__bf16_to_f32(zc__f32_to_bf16(v));
    if (dt == ZC_DTYPE_F16)
        return zc__f16_to_f32(zc__f32_to_f16(v));
    return v;
}

float t_round_to(float v, zc_dtype dt)
{
    if (dt == ZC_DTYPE_F16)
        return (float)__extension__(_Float16)v;
    if (dt != ZC_DTYPE_BF16)
        return v;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    const uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
    float lo, hi;
    memcpy(&lo, &lo_bits, sizeof lo);
    memcpy(&hi, &hi_bits, sizeof hi); /* the next bf16 away from zero */
    const double dl = fabs((double)v - (double)lo), dh = fabs((double)hi - (double)v);
    if (dl != dh)
        return dl < dh ? lo : hi;
    return (lo_bits & 0x10000u) ? hi : lo; /* a tie: the even one */
}

/* The offset of parameter i in the model's values, registration order. */
static size_t param_offset(int i)
{
    size_t off = 0;
    for (int j = 0; j < i; j++)
        off += (size_t)t_numel[j];
    return off;
}

/* With run->block_values: the blocks the values go through (the layer blocks,
 * or the one block of every parameter), n of them, block j starting at
 * parameter first[j]. */
static int value_blocks(t_ctx *x, zc_block **blk, int *first)
{
    if (!x->run->blocks) {
        blk[0] = x->all;
        first[0] = 0;
        return 1;
    }
    for (int l = 0; l < t_nlayers(x); l++) {
        blk[l] = x->blk[l];
        first[l] = t_layer_at(x, l);
    }
    return t_nlayers(x);
}

/* Loads (gather false) or gathers (true) every parameter's values, block by
 * block, from or into vals (t_total_numel() floats, registration order). */
static zc_status block_values(t_ctx *x, float *vals, bool gather, bool rounded)
{
    zc_block *blk[T_NPARAMS];
    int first[T_NPARAMS];
    const int n = value_blocks(x, blk, first);
    for (int j = 0; j < n; j++) {
        size_t count = 0;
        for (int i = 0; i < zc_block_size(blk[j]); i++)
            count += (size_t)zc_param_numel(zc_block_param(blk[j], i));
        float *at = vals + param_offset(first[j]);
        TRY(gather    ? zc_block_gather_master(x->eng, blk[j], at, count)
            : rounded ? zc_block_load_rounded(x->eng, blk[j], at, count)
                      : zc_block_load(x->eng, blk[j], at, count));
    }
    return ZC_OK;
}

/* The two spans {p0..p4} and {p5..p7} over memory this rank owns, holding
 * the initial values in the working dtype, back to back as a trainer's
 * single weight buffer would. */
static zc_status adopt(t_ctx *x)
{
    static const int span[3] = {0, 5, 8};
    for (int s = 0; s < 2; s++) {
        zc_block *b = NULL;
        size_t bytes = 0;
        TRY(zc_block_span(x->eng, x->p[span[s]], &b));
        zc_status rc = zc_block_adopt_bytes(x->eng, b, &bytes);
        x->adopt_mem[s] = rc == ZC_OK ? calloc(1, bytes) : NULL;
        if (x->adopt_mem[s]) {
            size_t at = 0;
            for (int i = span[s]; i < span[s + 1]; i++)
                for (int64_t k = 0; k < t_numel[i]; k++)
                    zc__store_f32(x->adopt_mem[s], x->run->dtype, at++, init_value(i, k));
            rc = zc_block_adopt(x->eng, b, x->adopt_mem[s], bytes);
        }
        zc_block_destroy(b);
        TRY(rc);
    }
    return ZC_OK;
}

/* The run's configuration into cfg (zc_config_create'd). */
/* A failed setting's status (zc_last_error says which). */
#define CFG_TRY(call)                                                               \
    do {                                                                            \
        zc_status rc_ = (call);                                                     \
        if (rc_ != ZC_OK)                                                           \
            return rc_;                                                             \
    } while (0)

static zc_status config_fill(zc_config *cfg, const t_run *run)
{
    CFG_TRY(zc_config_set_int(cfg, "zero_optimization.stage", run->stage));
    CFG_TRY(zc_config_set_int(cfg, "gradient_accumulation_steps", run->accum));
    if (run->steps_per_print > 0)
        CFG_TRY(zc_config_set_int(cfg, "steps_per_print", run->steps_per_print));
    if (run->wall_clock_breakdown)
        CFG_TRY(zc_config_set_bool(cfg, "wall_clock_breakdown", true));
    CFG_TRY(zc_config_set_double(cfg, "gradient_clipping", run->clip));
    CFG_TRY(zc_config_set_double(cfg, "optimizer.params.lr", 1e-2));
    CFG_TRY(zc_config_set_double(cfg, "optimizer.params.weight_decay", 0.01));
    if (run->dtype == ZC_DTYPE_BF16)
        CFG_TRY(zc_config_set_bool(cfg, "bf16.enabled", true));
    if (run->dtype == ZC_DTYPE_F16)
        CFG_TRY(zc_config_set_bool(cfg, "fp16.enabled", true));
    if (run->dtype == ZC_DTYPE_F16 && run->loss_scale_window > 0)
        CFG_TRY(zc_config_set_int(cfg, "fp16.loss_scale_window", run->loss_scale_window));
    CFG_TRY(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold",
                          run->persistence < 0 ? 0 : run->persistence));
    if (run->prefetch >= 0)
        CFG_TRY(zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size",
                              run->prefetch));
    if (run->max_live >= 0)
        CFG_TRY(zc_config_set_int(cfg, "zero_optimization.stage3_max_live_parameters",
                              run->max_live));
    CFG_TRY(zc_config_set_int(cfg, "zero_optimization.stage3_max_reuse_distance",
                          run->reuse < 0 ? 0 : run->reuse));
    if (run->offload_param) {
        char dev[32];
        snprintf(dev, sizeof dev, "\"%s\"", run->offload_param);
        CFG_TRY(zc_config_set(cfg, "zero_optimization.offload_param.device", dev));
        if (run->param_nvme_path_json)
            CFG_TRY(zc_config_set(cfg, "zero_optimization.offload_param.nvme_path",
                              run->param_nvme_path_json));
        if (run->param_buffer_count > 0)
            CFG_TRY(zc_config_set_int(cfg, "zero_optimization.offload_param.buffer_count",
                                  run->param_buffer_count));
        CFG_TRY(zc_config_set_int(cfg, "zero_optimization.offload_param.max_in_cpu",
                              run->max_in_cpu));
    }
    if (run->offload) {
        char dev[32];
        snprintf(dev, sizeof dev, "\"%s\"", run->offload);
        CFG_TRY(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", dev));
        if (run->nvme_path_json)
            CFG_TRY(zc_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path",
                              run->nvme_path_json));
        if (run->offload_ratio > 0)
            CFG_TRY(zc_config_set_double(cfg, "zero_optimization.offload_optimizer.ratio",
                                     run->offload_ratio));
        if (run->buffer_count > 0)
            CFG_TRY(zc_config_set_int(cfg, "zero_optimization.offload_optimizer.buffer_count",
                                  run->buffer_count));
        CFG_TRY(zc_config_set_bool(cfg, "zero_optimization.offload_optimizer.pipeline_read",
                               run->pipeline));
        CFG_TRY(zc_config_set_bool(cfg, "zero_optimization.offload_optimizer.pipeline_write",
                               run->pipeline));
    }
    for (int i = 0; run->keys && run->keys[i]; i += 2)
        CFG_TRY(zc_config_set(cfg, run->keys[i], run->keys[i + 1]));
    return ZC_OK;
}

zc_status t_config_make(const t_run *run, zc_config **out)
{
    *out = NULL;
    zc_config *cfg = NULL;
    zc_status rc = zc_config_create(&cfg);
    if (rc == ZC_OK)
        rc = config_fill(cfg, run);
    if (rc != ZC_OK)
        zc_config_destroy(cfg);
    else
        *out = cfg;
    return rc;
}

zc_status t_plan(const t_run *run, zc_memory_plan *out)
{
    zc_config *cfg = NULL;
    zc_status rc = t_config_make(run, &cfg);
    zc_plan_tensor t[T_NPARAMS];
    for (int i = 0; i < T_NPARAMS; i++)
        t[i] = (zc_plan_tensor){.shape = &t_numel[i], .ndim = 1, .boundary = t_boundary[i]};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = run->bucket;
    eo.f32_view_chunks = run->f32_views;
    out->size = sizeof *out;
    if (rc == ZC_OK)
        rc = zc_plan_memory(cfg, run->world, t, T_NPARAMS, &eo, out);
    zc_config_destroy(cfg);
    return rc;
}

zc_status t_ctx_open(t_ctx *x, t_run *run, int rank, zc_comm *comm)
{
    memset(x, 0, sizeof *x);
    x->run = run;
    x->rank = rank;
    TRY(zc_config_create(&x->cfg));
    TRY(config_fill(x->cfg, run));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = run->bucket;
    eo.f32_view_chunks = run->f32_views;
    TRY(zc_engine_create(&x->eng, x->cfg, comm, &eo));
    int nodecay = -1;
    TRY(zc_group_add(x->eng, 0.0, 0.5, &nodecay));
    for (int i = 0; i < T_NPARAMS; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        bool boundary = t_boundary[i];
        if (run->layer_boundaries) {
            boundary = false;
            for (int l = 0; l < t_nlayers(x); l++)
                boundary = boundary || t_layer_at(x, l) == i;
        }
        if (boundary)
            TRY(zc_chunk_boundary(x->eng));
        x->p[i] = zc_param_add(x->eng, name, &t_numel[i], 1, t_group[i] ? nodecay : 0);
        if (!x->p[i])
            return fail(x, "zc_param_add");
    }
    if (run->adopt)
        TRY(adopt(x));
    TRY(zc_engine_build(x->eng));
    if (run->blocks) {
        for (int l = 0; l < t_nlayers(x); l++) {
            int a = t_layer_at(x, l), b = t_layer_at(x, l + 1);
            if (run->blocks == T_BLOCK_SPAN)
                TRY(zc_block_span(x->eng, x->p[a], &x->blk[l]));
            else
                TRY(zc_block_create(x->eng, &x->p[a], b - a, &x->blk[l]));
            if (zc_block_size(x->blk[l]) != b - a)
                return fail(x, "zc_block_span: the block does not end at the layer's end");
        }
    }
    if (run->block_values && !run->blocks)
        TRY(zc_block_create(x->eng, x->p, T_NPARAMS, &x->all));
    float *init = malloc((size_t)t_total_numel() * sizeof(float));
    if (!init)
        return fail(x, "malloc");
    const bool prerounded = run->init_load == T_LOAD_PREROUNDED;
    const bool rounded = run->init_load == T_LOAD_ROUNDED;
    for (int i = 0; i < T_NPARAMS; i++)
        for (int64_t k = 0; k < t_numel[i]; k++) {
            const float v = t_init_value_as(i, k, run->load_dtype);
            init[param_offset(i) + (size_t)k] = prerounded ? t_round_to(v, run->dtype) : v;
        }
    zc_status rc = ZC_OK;
    if (run->load_path) {
        zc_load_stats st = {.size = sizeof st};
        rc = zc_load_safetensors(x->eng, run->load_path, run->load_opts, &st);
        run->load_stats[rank] = st;
        free(init);
        TRY(rc);
        return ZC_OK;
    }
    if (run->block_values)
        rc = block_values(x, init, false, rounded);
    for (int i = 0; i < T_NPARAMS && rc == ZC_OK && !run->block_values; i++)
        rc = rounded ? zc_param_load_rounded(x->eng, x->p[i], init + param_offset(i))
                     : zc_param_load(x->eng, x->p[i], init + param_offset(i));
    free(init);
    TRY(rc);
    return ZC_OK;
}

void t_ctx_close(t_ctx *x)
{
    /* The adopted memory is the caller's, and must outlive the engine. */
    zc_engine_destroy(x->eng);
    x->eng = NULL;
    for (int s = 0; s < 2; s++) {
        free(x->adopt_mem[s]);
        x->adopt_mem[s] = NULL;
    }
    for (int l = 0; l < T_NPARAMS; l++) {
        zc_block_destroy(x->blk[l]);
        x->blk[l] = NULL;
    }
    zc_block_destroy(x->all);
    x->all = NULL;
    zc_config_destroy(x->cfg);
    x->cfg = NULL;
}

static zc_status use_param(t_ctx *x, int i, const void **w)
{
    *w = zc_param_acquire(x->eng, x->p[i], NULL);
    if (!*w)
        return fail(x, "zc_param_acquire");
    volatile float sink = zc__load_f32(*w, x->run->dtype, (size_t)t_numel[i] - 1);
    (void)sink;
    return ZC_OK;
}

zc_status t_forward(t_ctx *x, const int *order)
{
    const void *w;
    if (x->run->layerwise) {
        for (int j = 0; j < t_nlayers(x); j++) {
            int l = order ? order[j] : j;
            int a = t_layer_at(x, l), b = t_layer_at(x, l + 1);
            if (x->run->blocks) {
                void *ptrs[T_NPARAMS];
                TRY(zc_block_acquire(x->eng, x->blk[l], NULL, ptrs));
                for (int i = a; i < b; i++) {
                    volatile float sink =
                        zc__load_f32(ptrs[i - a], x->run->dtype, (size_t)t_numel[i] - 1);
                    (void)sink;
                }
                TRY(zc_block_release(x->eng, x->blk[l], NULL));
                continue;
            }
            for (int i = a; i < b; i++)
                ZC_CHECK(use_param(x, i, &w));
            for (int i = a; i < b; i++)
                TRY(zc_param_release(x->eng, x->p[i], NULL));
        }
        return ZC_OK;
    }
    for (int j = 0; j < T_NPARAMS; j++) {
        int i = order ? order[j] : j;
        ZC_CHECK(use_param(x, i, &w));
        TRY(zc_param_release(x->eng, x->p[i], NULL));
    }
    return ZC_OK;
}

static void fill_grad(t_ctx *x, int i, const void *w, void *g, int step, int micro)
{
    const zc_dtype dt = x->run->dtype;
    const float scale = (float)zc_loss_scale(x->eng) * (float)x->run->grad_gain;
    const uint64_t rank = x->run->same_grads ? 0 : (uint64_t)x->rank;
    uint64_t key = (rank << 48) ^ ((uint64_t)step << 24) ^ ((uint64_t)micro << 8);
    for (int64_t k = 0; k < t_numel[i]; k++) {
        float v = 0.05f * zc__load_f32(w, dt, (size_t)k) + unit(key, (uint64_t)i, (uint64_t)k);
        if (x->run->same_grads) {
            /* Five significant bits: the sum of up to four equal values is
             * exact even in bf16 (8 bits), so the average is the value at
             * every world 1-4, not only at powers of two. */
            int e;
            const float m = frexpf(v, &e);
            v = ldexpf(roundf(m * 32.0f) / 32.0f, e);
        }
        zc__store_f32(g, dt, (size_t)k, v * scale);
    }
}

/* Backward of layer l through the block calls: the same gradients as the
 * per-parameter path, with one call per kind for the whole layer. */
static zc_status backward_block(t_ctx *x, int l, int step, int micro)
{
    int a = t_layer_at(x, l), b = t_layer_at(x, l + 1);
    void *w[T_NPARAMS], *g[T_NPARAMS];
    TRY(zc_block_acquire(x->eng, x->blk[l], NULL, w));
    TRY(zc_block_grad_buffers(x->eng, x->blk[l], g));
    for (int i = b - 1; i >= a; i--)
        fill_grad(x, i, w[i - a], g[i - a], step, micro);
    TRY(zc_block_grad_ready(x->eng, x->blk[l]));
    TRY(zc_block_release(x->eng, x->blk[l], NULL));
    return ZC_OK;
}

static zc_status write_grad(t_ctx *x, int i, const void *w, int step, int micro)
{
    void *g = zc_grad_buffer(x->eng, x->p[i]);
    if (!g)
        return fail(x, "zc_grad_buffer");
    fill_grad(x, i, w, g, step, micro);
    return ZC_OK;
}

zc_status t_backward(t_ctx *x, int step, int micro, int skip)
{
    const void *w[T_NPARAMS];
    if (x->run->layerwise) {
        for (int l = t_nlayers(x) - 1; l >= 0; l--) {
            int a = t_layer_at(x, l), b = t_layer_at(x, l + 1);
            if (x->run->blocks && skip < 0) {
                ZC_CHECK(backward_block(x, l, step, micro));
                continue;
            }
            for (int i = b - 1; i >= a; i--)
                ZC_CHECK(use_param(x, i, &w[i]));
            for (int i = b - 1; i >= a; i--) {
                if (i == skip)
                    continue;
                ZC_CHECK(write_grad(x, i, w[i], step, micro));
                TRY(zc_grad_ready(x->eng, x->p[i]));
            }
            for (int i = b - 1; i >= a; i--)
                TRY(zc_param_release(x->eng, x->p[i], NULL));
        }
        return ZC_OK;
    }
    for (int i = T_NPARAMS - 1; i >= 0; i--) {
        if (i == skip)
            continue;
        ZC_CHECK(use_param(x, i, &w[i]));
        ZC_CHECK(write_grad(x, i, w[i], step, micro));
        TRY(zc_grad_ready(x->eng, x->p[i]));
        TRY(zc_param_release(x->eng, x->p[i], NULL));
    }
    return ZC_OK;
}

zc_status t_backward_one(t_ctx *x, int step, int micro, int i)
{
    const void *w;
    ZC_CHECK(use_param(x, i, &w));
    ZC_CHECK(write_grad(x, i, w, step, micro));
    TRY(zc_grad_ready(x->eng, x->p[i]));
    TRY(zc_param_release(x->eng, x->p[i], NULL));
    return ZC_OK;
}

static double sum_values(t_ctx *x, int i, const void *w)
{
    double s = 0.0;
    for (int64_t k = 0; k < t_numel[i]; k++)
        s += zc__load_f32(w, x->run->dtype, (size_t)k);
    return s;
}

/* A forward pass that reads every value: layer by layer through the
 * blocks with `blocks`, else one parameter at a time (or layer-wise). */
static zc_status eval_forward(t_ctx *x)
{
    for (int l = 0; l < t_nlayers(x); l++) {
        int a = t_layer_at(x, l), b = t_layer_at(x, l + 1);
        void *w[T_NPARAMS];
        if (x->run->blocks) {
            TRY(zc_block_acquire(x->eng, x->blk[l], NULL, w));
            for (int i = a; i < b; i++)
                x->eval_sum += sum_values(x, i, w[i - a]);
            TRY(zc_block_release(x->eng, x->blk[l], NULL));
            continue;
        }
        for (int i = a; i < b; i++) {
            w[i - a] = zc_param_acquire(x->eng, x->p[i], NULL);
            if (!w[i - a])
                return fail(x, "zc_param_acquire (evaluation pass)");
            x->eval_sum += sum_values(x, i, w[i - a]);
            if (!x->run->layerwise)
                TRY(zc_param_release(x->eng, x->p[i], NULL));
        }
        if (x->run->layerwise)
            for (int i = a; i < b; i++)
                TRY(zc_param_release(x->eng, x->p[i], NULL));
    }
    return ZC_OK;
}

zc_status t_eval_pass(t_ctx *x)
{
    TRY(zc_pass_begin(x->eng, ZC_PASS_EVAL));
    const int n = x->run->eval_batches > 0 ? x->run->eval_batches : 1;
    for (int b = 0; b < n; b++)
        ZC_CHECK(eval_forward(x));
    TRY(zc_pass_end(x->eng));
    x->evals++;
    return ZC_OK;
}

static const int t_permuted[T_NPARAMS] = {5, 6, 7, 0, 1, 2, 3, 4};
static const int t_permuted_layers[T_NLAYERS] = {3, 4, 5, 0, 1, 2};

zc_status t_train_step(t_ctx *x, int step, zc_step_info *info)
{
    const unsigned at = x->run->eval_at;
    if (at & T_EVAL_BEFORE_STEP)
        ZC_CHECK(t_eval_pass(x));
    for (int m = 0; m < x->run->accum; m++) {
        const int *perm = x->run->layerwise ? t_permuted_layers : t_permuted;
        ZC_CHECK(t_forward(x, step == x->run->permute_step ? perm : NULL));
        if (at & T_EVAL_MID_MICRO)
            ZC_CHECK(t_eval_pass(x));
        ZC_CHECK(t_backward(x, step, m, -1));
        if (m + 1 < x->run->accum) {
            TRY(zc_micro_step_end(x->eng));
            if (at & T_EVAL_BETWEEN_MICRO)
                ZC_CHECK(t_eval_pass(x));
        }
    }
    TRY(zc_step(x->eng, info));
    return ZC_OK;
}

zc_status t_gather(t_ctx *x, float *out)
{
    if (x->run->block_values) {
        float *all = x->rank == 0 && out ? out : malloc((size_t)t_total_numel() * sizeof(float));
        zc_status rc = all ? block_values(x, all, true, false) : ZC_ERR_NO_MEMORY;
        if (all != out)
            free(all);
        TRY(rc);
        return ZC_OK;
    }
    float *scratch = malloc((size_t)4000 * sizeof(float));
    int64_t off = 0;
    zc_status rc = ZC_OK;
    for (int i = 0; i < T_NPARAMS && rc == ZC_OK; i++) {
        rc = zc_param_gather_master(x->eng, x->p[i], x->rank == 0 && out ? out + off : scratch);
        off += t_numel[i];
    }
    free(scratch);
    TRY(rc);
    return ZC_OK;
}

static void rank_main(void *argp, zc_comm *comm, int rank)
{
    t_run *run = argp;
    t_ctx x;
    if (t_ctx_open(&x, run, rank, comm) == ZC_OK) {
        for (int s = 0; s < run->steps; s++) {
            zc_step_info info;
            if (t_train_step(&x, s, &info) != ZC_OK)
                goto out;
            if (run->after_step)
                run->after_step(&x, s, run->hook_arg);
            if (rank == 0 && s < T_MAX_STEPS) {
                run->info[s] = info;
                run->step_stats[s] = (zc_stats){.size = sizeof(zc_stats)};
                zc_engine_stats(x.eng, &run->step_stats[s]);
            }
        }
        if ((run->eval_at & T_EVAL_AFTER) && t_eval_pass(&x) != ZC_OK)
            goto out;
        if (t_gather(&x, run->master) != ZC_OK)
            goto out;
        run->eval_sum[rank] = x.eval_sum;
        run->evals_run[rank] = x.evals;
        run->pass_stats[rank] = (zc_pass_stats){.size = sizeof(zc_pass_stats)};
        zc_engine_pass_stats(x.eng, &run->pass_stats[rank]);
        if (run->adopt) {
            const void *w0 = zc_param_acquire(x.eng, x.p[0], NULL);
            const void *w5 = zc_param_acquire(x.eng, x.p[5], NULL);
            run->adopt_identity[rank] = w0 == x.adopt_mem[0] && w5 == x.adopt_mem[1];
            if (w0)
                zc_param_release(x.eng, x.p[0], NULL);
            if (w5)
                zc_param_release(x.eng, x.p[5], NULL);
            float *o = run->adopt_out[rank];
            size_t at = 0;
            for (int s = 0; s < 2; s++) {
                int64_t n = 0;
                for (int i = s ? 5 : 0; i < (s ? T_NPARAMS : 5); i++)
                    n += t_numel[i];
                for (int64_t k = 0; k < n; k++)
                    o[at++] = zc__load_f32(x.adopt_mem[s], run->dtype, (size_t)k);
            }
        }
        run->stats[rank] = (zc_stats){.size = sizeof(zc_stats)};
        zc_engine_stats(x.eng, &run->stats[rank]);
    }
out:
    t_ctx_close(&x);
}

typedef struct on_ranks {
    t_rank_fn *fn;
    void *arg;
    zc_comm **comms;
} on_ranks;

static void on_rank(int rank, void *argp)
{
    on_ranks *o = argp;
    o->fn(o->arg, o->comms[rank], rank);
}

bool t_on_ranks(int world, t_rank_fn *fn, void *arg, char *err, size_t cap)
{
    /* A failing rank makes the others' next collective time out instead of
     * hanging the suite. */
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    zc_comm *comms[T_MAX_WORLD] = {0};
    if (world < 1 || world > T_MAX_WORLD) {
        snprintf(err, cap, "t_on_ranks: world %d is not within 1..%d", world, T_MAX_WORLD);
        return false;
    }
    if (zc_comm_local_world(world, comms) != ZC_OK) {
        snprintf(err, cap, "zc_comm_local_world: %s", zc_last_error());
        return false;
    }
    on_ranks o = {fn, arg, comms};
    t_run_ranks(world, on_rank, &o);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(comms[r]);
    return true;
}

bool t_engine_run(t_run *run)
{
    if (!run->master)
        run->master = calloc((size_t)t_total_numel(), sizeof(float));
    for (int r = 0; run->adopt && r < run->world; r++)
        if (!run->adopt_out[r])
            run->adopt_out[r] = calloc((size_t)t_total_numel(), sizeof(float));
    if (!t_on_ranks(run->world, rank_main, run, run->err[0], sizeof run->err[0]))
        return false;
    return t_run_error(run)[0] == '\0';
}

const char *t_run_error(const t_run *run)
{
    for (int r = 0; r < T_MAX_WORLD; r++)
        if (run->err[r][0])
            return run->err[r];
    return "";
}
