/* DeepSpeed's learning-rate schedules (runtime/lr_schedules.py), evaluated at
 * any step without state. See scheduler.h for the meaning of `step`. */
#include "config/scheduler.h"

#include <math.h>

/* WarmupLR/WarmupDecayLR/WarmupCosineLR warmup fraction at t >= 0, t < W,
 * in DeepSpeed's expression to the last bit: lr_schedules.py keeps
 * inverse_log_warm_up = 1 / ln(W) (line 751; 891 for WarmupCosineLR) and
 * multiplies it by ln(t + 1) (785, 833, 911), which can differ from
 * ln(t + 1) / ln(W) by one double ulp. */
static double warmup_gamma(bool log_type, int64_t t, int64_t w)
{
    if (log_type)
        return (1.0 / log((double)w)) * log((double)t + 1.0);
    return (double)t / (double)w;
}

static double one_cycle(const zc_sched_cfg *s, int64_t t, double base_beta1, double *beta1)
{
    double first = (double)s->cycle_first_step_size;
    double second = s->cycle_second_step_size > 0 ? (double)s->cycle_second_step_size : first;
    double total = first + second;
    double ratio = first / total;
    double scale;
    if ((double)t < total) {
        double bi = (double)t + 1.0;
        double cycle = floor(1.0 + bi / total);
        double x = 1.0 + bi / total - cycle;
        int64_t stairs;
        if (x <= ratio) {
            scale = x / ratio;
            stairs = s->cycle_first_stair_count;
        } else {
            scale = (x - 1.0) / (ratio - 1.0);
            stairs = s->cycle_second_stair_count >= 0 ? s->cycle_second_stair_count
                                                      : s->cycle_first_stair_count;
        }
        if (stairs > 0) {
            /* Quantise from the integer offset, as DeepSpeed does. */
            double ci = fmod(bi, total);
            double pos = ci <= first ? ci * (double)stairs / first
                                     : (total - ci) * (double)stairs / second;
            scale = floor(pos) / (double)stairs;
        }
        if (beta1)
            *beta1 = s->cycle_momentum ? s->cycle_max_mom - (s->cycle_max_mom - s->cycle_min_mom) * scale
                                       : base_beta1;
        return s->cycle_min_lr + (s->cycle_max_lr - s->cycle_min_lr) * scale;
    }
    double k = (double)t - total + 1.0;
    if (beta1) {
        if (!s->cycle_momentum)
            *beta1 = base_beta1;
        else if (s->decay_step_size == 0 || s->decay_mom_rate == 0)
            *beta1 = s->cycle_max_mom;
        else
            *beta1 = s->cycle_max_mom * (1.0 + s->decay_mom_rate * k / (double)s->decay_step_size);
    }
    if (s->decay_step_size == 0 || s->decay_lr_rate == 0)
        return s->cycle_min_lr;
    return s->cycle_min_lr / (1.0 + s->decay_lr_rate * k / (double)s->decay_step_size);
}

double zc__sched_lr(const zc_sched_cfg *s, double base_lr, double base_beta1, double base_beta2,
                    int64_t step, double *beta1, double *beta2)
{
    int64_t t = step - 1; /* DeepSpeed's last_batch_iteration */
    if (beta1)
        *beta1 = base_beta1;
    if (beta2)
        *beta2 = base_beta2;
    int64_t w = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
    switch (s->type) {
    case ZC_SCHED_NONE:
        return base_lr;
    case ZC_SCHED_WARMUP_LR:
    case ZC_SCHED_WARMUP_DECAY_LR: {
        double max_lr = s->warmup_max_lr;
        if (max_lr < 0) /* unset: WarmupLR takes the optimizer's lr, WarmupDecayLR 0.001 */
            max_lr = s->type == ZC_SCHED_WARMUP_LR ? base_lr : 0.001;
        if (t < 0)
            return s->warmup_min_lr;
        double gamma;
        if (t < w)
            gamma = warmup_gamma(s->warmup_log, t, w);
        else if (s->type == ZC_SCHED_WARMUP_LR)
            gamma = 1.0;
        else {
            double den = (double)(s->total_num_steps - w);
            gamma = (double)(s->total_num_steps - t) / (den > 1.0 ? den : 1.0);
            if (gamma < 0)
                gamma = 0;
        }
        return s->warmup_min_lr + (max_lr - s->warmup_min_lr) * gamma;
    }
    case ZC_SCHED_WARMUP_COSINE_LR: {
        if (t < 0)
            return 0.0;
        double ratio;
        if (t < w) {
            ratio = s->warmup_min_ratio + warmup_gamma(s->warmup_log, t, w) * (1.0 - s->warmup_min_ratio);
        } else {
            double real_last = (double)(t - w + 1);
            double real_total = (double)(s->total_num_steps - w);
            if (real_total < 1)
                real_total = 1;
            double p = real_last / real_total;
            if (p > 1)
                p = 1;
            ratio = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * (1.0 + cos(M_PI * p)) / 2.0;
            if (ratio < 0)
                ratio = 0;
        }
        return base_lr * ratio;
    }
    case ZC_SCHED_ONE_CYCLE:
        if (s->cycle_momentum && beta2)
            *beta2 = 0.99;
        if (t < 0) { /* the constructor sets lr = min, betas = (min_mom, 0.99) */
            if (beta1 && s->cycle_momentum)
                *beta1 = s->cycle_min_mom;
            return s->cycle_min_lr;
        }
        return one_cycle(s, t, base_beta1, beta1);
    case ZC_SCHED_LR_RANGE_TEST: {
        double interval = (double)(t + 1) / (double)s->lr_range_test_step_size;
        if (s->lr_range_test_staircase)
            interval = floor(interval);
        return s->lr_range_test_min_lr * (1.0 + s->lr_range_test_step_rate * interval);
    }
    }
    return base_lr;
}
