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
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"

static void make_dir(char *out, size_t cap)
{
    snprintf(out, cap, "zc-poff-test-XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp");
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

typedef struct variant {
    const char *param, *optim; /* offload devices (NULL: none) */
    int64_t prefetch, reuse;
    bool layerwise;
    int permute_step;
} variant;

static t_run *run_variant(int world, zc_dtype dt, int accum, const variant *v, const char *json)
{
    t_run *r = calloc(1, sizeof *r);
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
    cr_assert(t_engine_run(r), "world %d %s accum %d param %s optim %s: %s", world,
              zc_dtype_name(dt), accum, v->param ? v->param : "none",
              v->optim ? v->optim : "none", t_run_error(r));
    return r;
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

static void same(const t_run *r, const t_run *ref, const char *what)
{
    const int64_t n = t_total_numel();
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&r->master[i], &ref->master[i], sizeof(float))) {
            diff++;
            if (first < 0)
                first = i;
        }
    cr_assert_eq(diff, 0, "%s: %lld of %lld master elements differ (first %lld)", what,
                 (long long)diff, (long long)n, (long long)first);
    for (int s = 0; s < ref->steps; s++) {
        cr_assert(r->info[s].grad_norm == ref->info[s].grad_norm, "%s step %d: norm %.17g vs %.17g",
                  what, s, r->info[s].grad_norm, ref->info[s].grad_norm);
        cr_assert_eq(r->info[s].skipped, ref->info[s].skipped, "%s step %d skipped", what, s);
        cr_assert(r->info[s].loss_scale == ref->info[s].loss_scale, "%s step %d scale", what, s);
    }
}

/* Six combinations of homes, each with a different schedule, so that every
 * schedule setting meets every home across the sweep's worlds. */
static void sweep(zc_dtype dt, int accum)
{
    char dir[64], json[96];
    make_dir(dir, sizeof dir);
    snprintf(json, sizeof json, "\"%s\"", dir);
    const char *params[2] = {"cpu", "nvme"}, *optims[3] = {NULL, "cpu", "nvme"};
    const int64_t prefetch[2] = {0, 1 << 20}, reuse[2] = {0, 1 << 20};
    for (int world = 1; world <= 4; world++) {
        const variant base = {.prefetch = -1, .permute_step = -1};
        t_run *ref = run_variant(world, dt, accum, &base, json);
        int i = 0;
        for (int pi = 0; pi < 2; pi++)
            for (int oi = 0; oi < 3; oi++, i++) {
                const int s = i + world;
                variant v = {.param = params[pi], .optim = optims[oi],
                             .prefetch = prefetch[s % 2], .reuse = reuse[(s / 2) % 2],
                             .layerwise = (s / 4) % 2, .permute_step = s % 3 == 0 ? 5 : -1};
                t_run *r = run_variant(world, dt, accum, &v, json);
                char what[160];
                snprintf(what, sizeof what,
                         "%s accum %d world %d param %s optim %s prefetch %lld reuse %lld%s%s",
                         zc_dtype_name(dt), accum, world, v.param, v.optim ? v.optim : "none",
                         (long long)v.prefetch, (long long)v.reuse,
                         v.layerwise ? " layer-wise" : "",
                         v.permute_step >= 0 ? " order changed at step 5" : "");
                same(r, ref, what);
                if (v.permute_step >= 0)
                    cr_assert_gt(r->stats[0].trace_invalidations, 0, "%s: no invalidation", what);
                free_run(r);
                cr_assert_eq(entries(dir), 0, "swap files left in %s", dir);
            }
        free_run(ref);
    }
    rmdir(dir);
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
    char dir[64], json[96];
    make_dir(dir, sizeof dir);
    snprintf(json, sizeof json, "\"%s\"", dir);
    const variant base = {.prefetch = -1, .permute_step = -1};
    t_run *ref = run_variant(2, ZC_DTYPE_BF16, 1, &base, json);
    for (int c = 0; c < 16; c++) {
        variant v = {.param = "nvme", .optim = c % 2 ? "nvme" : NULL,
                     .prefetch = c & 2 ? 1 << 20 : 0, .reuse = c & 4 ? 1 << 20 : 0,
                     .layerwise = true, .permute_step = c & 8 ? 5 : -1};
        t_run *r = calloc(1, sizeof *r);
        t_run_init(r, 3, 2, ZC_DTYPE_BF16);
        r->prefetch = v.prefetch;
        r->reuse = v.reuse;
        r->layerwise = true;
        r->permute_step = v.permute_step;
        r->offload_param = "nvme";
        r->param_nvme_path_json = json;
        r->offload = v.optim;
        r->nvme_path_json = v.optim ? json : NULL;
        r->max_in_cpu = c % 3 == 0 ? 1500 : 0;  /* the first chunk's shard or nothing */
        r->param_buffer_count = c % 4 == 1 ? 2 : 0;
        cr_assert(t_engine_run(r), "case %d: %s", c, t_run_error(r));
        char what[64];
        snprintf(what, sizeof what, "nvme case %d", c);
        same(r, ref, what);
        free_run(r);
        cr_assert_eq(entries(dir), 0, "swap files left in %s", dir);
    }
    free_run(ref);
    rmdir(dir);
    t_assert_no_leaks();
}
