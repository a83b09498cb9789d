/* Trained runs, named and compared (t_runs.h). */
#include "t_runs.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


t_run *t_run_trained(const t_run *cfg)
{
    t_run *r = malloc(sizeof *r);
    cr_assert_not_null(r);
    *r = *cfg;
    const bool ok = t_engine_run(r);
    char what[256];
    t_run_describe(r, what, sizeof what);
    cr_assert(ok, "%s: %s", what, t_run_error(r));
    return r;
}

void t_run_free(t_run *r)
{
    if (!r)
        return;
    free(r->master);
    for (int k = 0; k < T_MAX_WORLD; k++)
        free(r->adopt_out[k]);
    free(r);
}

void t_run_describe(const t_run *r, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "stage %d world %d %s accum %d", r->stage, r->world,
                     zc_dtype_name(r->dtype), r->accum);
#define MORE(...)                                                                  \
    do {                                                                           \
        if (n >= 0 && (size_t)n < cap)                                             \
            n += snprintf(buf + n, cap - (size_t)n, __VA_ARGS__);                  \
    } while (0)
    MORE(" optimizer %s", r->offload ? r->offload : "none");
    if (r->offload_ratio > 0)
        MORE(" ratio %g", r->offload_ratio);
    if (r->pipeline)
        MORE(" pipelined");
    if (r->offload_param)
        MORE(" param %s", r->offload_param);
    if (r->max_in_cpu > 0)
        MORE(" max_in_cpu %lld", (long long)r->max_in_cpu);
    if (r->param_buffer_count > 0)
        MORE(" param buffers %lld", (long long)r->param_buffer_count);
    if (r->stage == 3)
        MORE(" prefetch %lld reuse %lld", (long long)r->prefetch, (long long)r->reuse);
    if (r->layerwise)
        MORE(" layer-wise");
    if (r->permute_step >= 0)
        MORE(" order changed at step %d", r->permute_step);
#undef MORE
}

void t_assert_trained(const t_run *r)
{
    int skipped = 0;
    for (int s = 0; s < r->steps; s++)
        skipped += r->info[s].skipped;
    cr_assert_lt(skipped, r->steps, "every step skipped");
}

void t_assert_same_training(const t_run *r, const t_run *ref, const char *what)
{
    const int64_t n = t_total_numel();
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&r->master[i], &ref->master[i], sizeof(float))) {
            diff++;
            if (first < 0)
                first = i;
        }
    cr_assert_eq(diff, 0, "%s: %lld of %lld master elements differ (first %lld: %a vs %a)", what,
                 (long long)diff, (long long)n, (long long)first,
                 first >= 0 ? r->master[first] : 0.0f, first >= 0 ? ref->master[first] : 0.0f);
    for (int s = 0; s < ref->steps; s++) {
        cr_assert(r->info[s].grad_norm == ref->info[s].grad_norm, "%s step %d: norm %.17g vs %.17g",
                  what, s, r->info[s].grad_norm, ref->info[s].grad_norm);
        cr_assert_eq(r->info[s].skipped, ref->info[s].skipped, "%s step %d skipped", what, s);
        cr_assert(r->info[s].loss_scale == ref->info[s].loss_scale, "%s step %d scale", what, s);
    }
}
