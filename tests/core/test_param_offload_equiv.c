/* Parameter offload changes where stage-3 shards live, never the numbers:
 * training with offload_param "cpu" and "nvme" gives the same fp32 master
 * parameters (bitwise), grad norms, skips and loss scales after 20 steps as
 * stage 3 without offload (the independent reference, which the
 * stage-equivalence tests tie to the unsharded reference), for worlds 1-4,
 * fp32/bf16/fp16 and accumulation 1 and 4, combined with offload_optimizer
 * none / cpu / nvme, prefetch 0 or large, reuse distance 0 or large, one
 * parameter at a time or layer-wise, and a forward whose acquire order
 * changes at step 5. Every run must leave its nvme_path directories empty. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

typedef struct variant {
    const char *param, *optim; /* offload devices (NULL: none) */
    int64_t prefetch, reuse;
    bool layerwise;
    int permute_step;
} variant;

/* Stage 3 with the variant's homes and schedule; swapping is pipelined over
 * 12 buffers on even worlds, serial on odd ones. */
static void variant_init(t_run *r, int world, zc_dtype dt, int accum, const variant *v,
                         const char *json)
{
    t_run_init(r, 3, world, dt);
    r->accum = accum;
    r->prefetch = v->prefetch;
    r->reuse = v->reuse;
    r->layerwise = v->layerwise;
    r->permute_step = v->permute_step;
    r->offload_param = v->param;
    r->param_nvme_path_json = v->param && !strcmp(v->param, "nvme") ? json : NULL;
    r->offload = v->optim;
    r->nvme_path_json = v->optim && !strcmp(v->optim, "nvme") ? json : NULL;
    r->pipeline = world % 2 == 0;
    r->buffer_count = r->pipeline ? 12 : 0;
}

static t_run *run_variant(int world, zc_dtype dt, int accum, const variant *v, const char *json)
{
    t_run cfg;
    variant_init(&cfg, world, dt, accum, v, json);
    return t_run_trained(&cfg);
}

/* Six combinations of homes, each with a different schedule, so that every
 * schedule setting meets every home across the sweep's worlds. */
static void sweep(zc_dtype dt, int accum)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-poff-test");
    const char *params[2] = {"cpu", "nvme"}, *optims[3] = {NULL, "cpu", "nvme"};
    const int64_t prefetch[2] = {0, 1 << 20}, reuse[2] = {0, 1 << 20};
    for (int world = 1; world <= 4; world++) {
        const variant base = {.prefetch = -1, .permute_step = -1};
        t_run *ref = run_variant(world, dt, accum, &base, dir.json);
        int i = 0;
        for (int pi = 0; pi < 2; pi++)
            for (int oi = 0; oi < 3; oi++, i++) {
                const int s = i + world;
                variant v = {.param = params[pi], .optim = optims[oi],
                             .prefetch = prefetch[s % 2], .reuse = reuse[(s / 2) % 2],
                             .layerwise = (s / 4) % 2, .permute_step = s % 3 == 0 ? 5 : -1};
                t_run *r = run_variant(world, dt, accum, &v, dir.json);
                char what[160];
                snprintf(what, sizeof what,
                         "%s accum %d world %d param %s optim %s prefetch %lld reuse %lld%s%s",
                         zc_dtype_name(dt), accum, world, v.param, v.optim ? v.optim : "none",
                         (long long)v.prefetch, (long long)v.reuse,
                         v.layerwise ? " layer-wise" : "",
                         v.permute_step >= 0 ? " order changed at step 5" : "");
                t_assert_same_training(r, ref, what);
                if (v.permute_step >= 0)
                    cr_assert_gt(r->stats[0].trace_invalidations, 0, "%s: no invalidation", what);
                t_run_free(r);
                cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s", dir.path);
            }
        t_run_free(ref);
    }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(param_offload_equiv, fp32_accum1) { sweep(ZC_DTYPE_F32, 1); }
Test(param_offload_equiv, bf16_accum1) { sweep(ZC_DTYPE_BF16, 1); }
Test(param_offload_equiv, fp16_accum1) { sweep(ZC_DTYPE_F16, 1); }
Test(param_offload_equiv, fp32_accum4) { sweep(ZC_DTYPE_F32, 4); }
Test(param_offload_equiv, bf16_accum4) { sweep(ZC_DTYPE_BF16, 4); }
Test(param_offload_equiv, fp16_accum4) { sweep(ZC_DTYPE_F16, 4); }

/* Every prefetch / reuse / order combination under nvme for both homes, on
 * two ranks in bf16, with a small max_in_cpu (some chunks cached, the rest
 * read) and with two buffers only (no read-ahead can be spared: every read
 * is on demand). */
Test(param_offload_equiv, nvme_schedules_cache_and_two_buffers)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-poff-test");
    const variant base = {.prefetch = -1, .permute_step = -1};
    t_run *ref = run_variant(2, ZC_DTYPE_BF16, 1, &base, dir.json);
    for (int c = 0; c < 16; c++) {
        variant v = {.param = "nvme", .optim = c % 2 ? "nvme" : NULL,
                     .prefetch = c & 2 ? 1 << 20 : 0, .reuse = c & 4 ? 1 << 20 : 0,
                     .layerwise = true, .permute_step = c & 8 ? 5 : -1};
        t_run cfg;
        variant_init(&cfg, 2, ZC_DTYPE_BF16, 1, &v, dir.json);
        /* Serial swapping, whatever the world. */
        cfg.pipeline = false;
        cfg.buffer_count = 0;
        cfg.max_in_cpu = c % 3 == 0 ? 1500 : 0;  /* the first chunk's shard or nothing */
        cfg.param_buffer_count = c % 4 == 1 ? 2 : 0;
        t_run *r = t_run_trained(&cfg);
        char what[64];
        snprintf(what, sizeof what, "nvme case %d", c);
        t_assert_same_training(r, ref, what);
        t_run_free(r);
        cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s", dir.path);
    }
    t_run_free(ref);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}
