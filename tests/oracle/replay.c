/* zeroc's side of a replay: the case's DeepSpeed config, the public API
 * only, one thread per rank (zc_comm_local_world), the host device.
 *
 * The gradient contract this follows (include/zeroc/zeroc.h, zc_grad_buffer):
 * in every micro-step each rank writes its own gradient of its own loss -
 * not divided by the world size or gradient_accumulation_steps, which the
 * engine averages over exactly once - in the parameters' working dtype and,
 * in fp16, multiplied by zc_loss_scale(). DeepSpeed gets the same average by
 * scaling the loss by 1/gradient_accumulation_steps and the loss scale and
 * dividing the reduced gradient by the world size; with the fixtures' exact
 * values (make_fixtures.py) both hold the same numbers before the optimizer.
 *
 * Two layout knobs zeroc's replay sets that change no value: 128-element
 * chunks (zc_engine_options.bucket_elems, so the model spans several chunks
 * and padded shards) and stage3_param_persistence_threshold 16 (so stage 3
 * gathers most parameters on acquire instead of keeping them all). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h" /* the gradients stored in the working dtype */
#include "helpers.h"
#include "oracle.h"
#include "zeroc/zeroc.h"

typedef struct replay {
    const o_fixtures *F;
    const o_case *C;
    o_replay_opts opts;
    zc_config *cfg;
    zc_comm *comms[O_MAX_WORLD];
    zc_dtype dtype;
    o_run *out;
} replay;

/* A failing call in a rank thread cannot use cr_assert (Criterion asserts
 * only from the test's thread) and must not leave the other rank waiting
 * in a collective: it says what failed and stops the test process. */
static void rank_fail(const replay *R, int rank, const char *what, zc_status rc)
{
    fprintf(stderr, "oracle %s, zeroc stage %d, rank %d: %s -> %s: %s\n", R->C->name,
            R->opts.stage, rank, what, zc_status_str(rc), zc_last_error());
    fflush(stderr);
    abort();
}

#define RCHECK(call)                                                                       \
    do {                                                                                   \
        zc_status rc_ = (call);                                                            \
        if (rc_ != ZC_OK)                                                                  \
            rank_fail(R, rank, #call, rc_);                                                \
    } while (0)

/* This rank's gradient of micro-step m of step t, as DeepSpeed's module
 * received it: k * 2^grad_exp[t][m][rank], then the injected inf/nan. */
static void fill_grad(const replay *R, int t, int m, int rank, float *g)
{
    const o_case *C = R->C;
    const int64_t n = R->F->n;
    const int8_t *k = C->grads + (((size_t)t * (size_t)C->accum + (size_t)m) * (size_t)C->world +
                                  (size_t)rank) * (size_t)n;
    const float e = ldexpf(
        1.0f, C->grad_exp[((size_t)t * (size_t)C->accum + (size_t)m) * (size_t)C->world +
                          (size_t)rank]);
    for (int64_t i = 0; i < n; i++)
        g[i] = (float)k[i] * e;
    for (int j = 0; j < C->ninject; j++) {
        const o_inject *x = &C->inject[j];
        if (x->step == t && x->micro == m && x->rank == rank)
            g[x->elem] = x->value;
    }
}

static void rank_main(int rank, void *arg)
{
    replay *R = arg;
    const o_fixtures *F = R->F;
    const o_case *C = R->C;
    const int64_t n = F->n;
    o_run *out = rank == 0 ? R->out : NULL;

    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 128;
    zc_engine *eng = NULL;
    RCHECK(zc_engine_create(&eng, R->cfg, R->comms[rank], &eo));
    zc_param *P[O_MAX_PARAMS];
    for (int i = 0; i < F->nparams; i++) {
        P[i] = zc_param_add(eng, F->names[i], F->shape[i], F->ndim[i], 0);
        if (!P[i])
            rank_fail(R, rank, "zc_param_add", ZC_ERR_INVALID_ARG);
    }
    zc_block *all = NULL;
    RCHECK(zc_block_create(eng, P, F->nparams, &all));
    RCHECK(zc_engine_build(eng));
    if (zc_param_dtype(P[0]) != (int)R->dtype)
        rank_fail(R, rank, "the working dtype is not the case's", ZC_ERR_INTERNAL);

    float *vals = malloc((size_t)n * sizeof(float));
    float *master = malloc((size_t)n * sizeof(float));
    memcpy(vals, C->init, (size_t)n * sizeof(float));
    if (R->opts.round_init)
        RCHECK(zc_block_load_rounded(eng, all, vals, (size_t)n));
    else
        RCHECK(zc_block_load(eng, all, vals, (size_t)n));
    RCHECK(zc_block_gather_master(eng, all, master, (size_t)n));
    if (out)
        memcpy(out->master0, master, (size_t)n * sizeof(float));

    float *g = vals; /* reused: one micro-step's gradient at a time */
    int64_t off[O_MAX_PARAMS];
    for (int i = 0, o = 0; i < F->nparams; o += (int)F->numel[i], i++)
        off[i] = o;
    for (int t = 0; t < C->steps; t++) {
        zc_step_info info;
        for (int m = 0; m < C->accum; m++) {
            fill_grad(R, t, m, rank, g);
            /* fp16 gradients carry the loss scale; bf16 and fp32 have 1. */
            const float scale = (float)zc_loss_scale(eng);
            for (int i = 0; i < F->nparams; i++) {
                if (!zc_param_acquire(eng, P[i], NULL))
                    rank_fail(R, rank, "zc_param_acquire", ZC_ERR_INTERNAL);
                void *buf = zc_grad_buffer(eng, P[i]);
                if (!buf)
                    rank_fail(R, rank, "zc_grad_buffer", ZC_ERR_INTERNAL);
                for (int64_t j = 0; j < F->numel[i]; j++)
                    zc__store_f32(buf, R->dtype, (size_t)j, g[off[i] + j] * scale);
                RCHECK(zc_grad_ready(eng, P[i]));
                RCHECK(zc_param_release(eng, P[i], NULL));
            }
            if (m + 1 < C->accum)
                RCHECK(zc_micro_step_end(eng));
        }
        RCHECK(zc_step(eng, &info));
        RCHECK(zc_block_gather_master(eng, all, master, (size_t)n));
        if (out) {
            memcpy(out->masters + (size_t)t * (size_t)n, master, (size_t)n * sizeof(float));
            out->loss_scale[t] = info.loss_scale;
            out->lr[t] = info.lr;
            out->grad_norm[t] = info.grad_norm;
            out->skipped[t] = info.skipped;
        }
    }
    if (out)
        out->final_scale = zc_loss_scale(eng);
    free(vals);
    free(master);
    zc_block_destroy(all);
    zc_engine_destroy(eng);
}

void o_replay(const o_fixtures *F, const o_case *C, const o_replay_opts *opts, o_run *out)
{
    replay R = {.F = F, .C = C, .opts = *opts, .out = out};
    R.dtype = !strcmp(C->dtype, "fp16")   ? ZC_DTYPE_F16
              : !strcmp(C->dtype, "bf16") ? ZC_DTYPE_BF16
                                          : ZC_DTYPE_F32;
    cr_assert_eq(zc_config_load_string(&R.cfg, C->config_json, C->name, 0), ZC_OK,
                 "%s: zeroc refuses the DeepSpeed config: %s", C->name, zc_last_error());
    cr_assert_eq(zc_config_set_int(R.cfg, "zero_optimization.stage", opts->stage), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc_config_set_int(R.cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   16),
                 ZC_OK, "%s", zc_last_error());
    if (opts->ds_arith)
        cr_assert_eq(zc_config_set_bool(R.cfg, "optimizer.params.deepspeed_arithmetic", true),
                     ZC_OK, "%s", zc_last_error());
    if (opts->extra) {
        const char *key;
        json_t *v;
        json_object_foreach(C->zeroc_extra, key, v) {
            char *text = json_dumps(v, JSON_ENCODE_ANY);
            cr_assert(text);
            cr_assert_eq(zc_config_set(R.cfg, key, text), ZC_OK, "%s: zeroc_extra %s = %s: %s",
                         C->name, key, text, zc_last_error());
            free(text);
        }
    }
    if (opts->grad_accum_dtype) {
        char v[16];
        snprintf(v, sizeof v, "\"%s\"", opts->grad_accum_dtype);
        cr_assert_eq(zc_config_set(R.cfg, "data_types.grad_accum_dtype", v), ZC_OK, "%s",
                     zc_last_error());
    }
    const size_t n = (size_t)F->n, S = (size_t)C->steps;
    *out = (o_run){
        .stage = opts->stage,
        .master0 = calloc(n, sizeof(float)),
        .masters = calloc(S * n, sizeof(float)),
        .loss_scale = calloc(S, sizeof(double)),
        .lr = calloc(S, sizeof(double)),
        .grad_norm = calloc(S, sizeof(double)),
        .skipped = calloc(S, sizeof(bool)),
    };
    cr_assert_eq(zc_comm_local_world(C->world, R.comms), ZC_OK, "%s", zc_last_error());
    t_run_ranks(C->world, rank_main, &R);
    for (int r = 0; r < C->world; r++)
        zc_comm_destroy(R.comms[r]);
    zc_config_destroy(R.cfg);
}

void o_run_free(o_run *r)
{
    free(r->master0);
    free(r->masters);
    free(r->loss_scale);
    free(r->lr);
    free(r->grad_norm);
    free(r->skipped);
    memset(r, 0, sizeof *r);
}
