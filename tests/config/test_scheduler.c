/* Learning-rate schedules against values derived by hand from DeepSpeed's
 * formulas (runtime/lr_schedules.py). `n` is the number of scheduler steps
 * taken; DeepSpeed's last_batch_iteration is t = n - 1 and n = 0 is the value
 * set by the constructor. Each expected value is written out here from the
 * formula (or as a hand-computed number), not taken from the code. */
#include <criterion/criterion.h>
#include <math.h>

#include "config/config.h"
#include "config/scheduler.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

static void near(double got, double want, const char *what)
{
    cr_assert(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)), "%s: got %.17g, want %.17g", what,
              got, want);
}

static zc_config *make(const char *json)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(&cfg, json, "sched.json", 0), ZC_OK, "%s", zc_last_error());
    return cfg;
}

Test(scheduler, none_is_the_optimizer_lr)
{
    zc_config *cfg = make("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}}");
    double b1;
    near(zc_config_lr_at(cfg, 0, &b1), 3e-4, "n=0");
    near(zc_config_lr_at(cfg, 12345, &b1), 3e-4, "n=12345");
    near(b1, 0.9, "beta1 default");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, warmup_lr_log)
{
    /* min 0, max 0.01, W = 100, log: lr = 0.01 * ln(t + 1) / ln(100) for t < 100. */
    zc_config *cfg = make("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {"
                          "\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.01, \"warmup_num_steps\": 100}}}");
    near(zc_config_lr_at(cfg, 0, NULL), 0.0, "n=0 (constructor: min)");
    near(zc_config_lr_at(cfg, 1, NULL), 0.0, "n=1 (t=0: ln 1 = 0)");
    near(zc_config_lr_at(cfg, 2, NULL), 0.01 * log(2.0) / log(100.0), "n=2");
    /* mid-warmup t = 50: ln(51)/ln(100) = 0.853785... */
    near(zc_config_lr_at(cfg, 51, NULL), 0.01 * log(51.0) / log(100.0), "n=51");
    cr_assert(fabs(zc_config_lr_at(cfg, 51, NULL) - 0.0085378) < 1e-7);
    near(zc_config_lr_at(cfg, 100, NULL), 0.01, "n=100 (t=99: ln 100 / ln 100)");
    near(zc_config_lr_at(cfg, 101, NULL), 0.01, "n=101 (end of warmup)");
    near(zc_config_lr_at(cfg, 100000, NULL), 0.01, "long after");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, warmup_lr_unset_max_is_optimizer_lr_and_w_at_least_2)
{
    /* warmup_max_lr omitted: the optimizer's lr (0.002). warmup_num_steps 1 -> W = 2. */
    zc_config *cfg = make("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.002}},"
                          "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {"
                          "\"warmup_num_steps\": 1, \"warmup_type\": \"linear\"}}}");
    near(zc_config_lr_at(cfg, 1, NULL), 0.0, "t=0");
    near(zc_config_lr_at(cfg, 2, NULL), 0.002 * 0.5, "t=1: 1/2");
    near(zc_config_lr_at(cfg, 3, NULL), 0.002, "t=2: done");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, warmup_decay_lr_linear)
{
    /* min 0.001, max 0.011 (delta 0.01), W = 10 linear, T = 110:
     * t < 10: gamma = t/10; else gamma = max(0, (110 - t) / 100). */
    zc_config *cfg = make("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
                          "\"warmup_min_lr\": 0.001, \"warmup_max_lr\": 0.011,"
                          "\"warmup_num_steps\": 10, \"warmup_type\": \"linear\","
                          "\"total_num_steps\": 110}}}");
    near(zc_config_lr_at(cfg, 0, NULL), 0.001, "n=0");
    near(zc_config_lr_at(cfg, 1, NULL), 0.001, "n=1 (t=0)");
    near(zc_config_lr_at(cfg, 6, NULL), 0.006, "mid-warmup t=5: 0.001 + 0.5 * 0.01");
    near(zc_config_lr_at(cfg, 11, NULL), 0.011, "end of warmup t=10: (110-10)/100 = 1");
    near(zc_config_lr_at(cfg, 61, NULL), 0.006, "mid-decay t=60: (110-60)/100 = 0.5");
    near(zc_config_lr_at(cfg, 111, NULL), 0.001, "t=110: gamma 0");
    near(zc_config_lr_at(cfg, 500, NULL), 0.001, "after the end: clamped at 0");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, warmup_cosine_lr)
{
    /* lr 0.1, W = 10 linear, warmup_min_ratio 0.1, T = 110, cos_min_ratio 0.01.
     * warmup: r = 0.1 + (t/10) * 0.9; decay: p = min(1, (t - 9) / 100),
     * r = 0.01 + 0.99 * (1 + cos(pi p)) / 2. lr = 0.1 r. */
    zc_config *cfg = make("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1}},"
                          "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {"
                          "\"warmup_min_ratio\": 0.1, \"warmup_num_steps\": 10,"
                          "\"warmup_type\": \"linear\", \"total_num_steps\": 110,"
                          "\"cos_min_ratio\": 0.01}}}");
    near(zc_config_lr_at(cfg, 0, NULL), 0.0, "n=0: DeepSpeed returns 0 before the first step");
    near(zc_config_lr_at(cfg, 1, NULL), 0.01, "t=0: r = 0.1");
    near(zc_config_lr_at(cfg, 6, NULL), 0.055, "mid-warmup t=5: r = 0.55");
    near(zc_config_lr_at(cfg, 11, NULL), 0.1 * (0.01 + 0.99 * (1 + cos(M_PI * 0.01)) / 2),
         "end of warmup t=10: p = 0.01");
    near(zc_config_lr_at(cfg, 60, NULL), 0.0505, "mid-decay t=59: p = 0.5, r = 0.505");
    near(zc_config_lr_at(cfg, 110, NULL), 0.001, "t=109: p = 1, r = 0.01");
    near(zc_config_lr_at(cfg, 1000, NULL), 0.001, "after the end: p clamped");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, one_cycle_lr_and_momentum)
{
    /* min 0.001, max 0.01, first = second = 10 (total 20, ratio 0.5),
     * momentum 0.85..0.95, decay_step_size 5, decay_lr_rate 0.5.
     * scale at bi = t + 1: x = bi/20 (first cycle); x <= 0.5: x / 0.5, else
     * (x - 1) / (0.5 - 1). lr = min + 0.009 s, beta1 = 0.95 - 0.1 s. After the
     * cycle (t >= 20): k = t - 19, lr = 0.001 / (1 + 0.5 k / 5), beta1 = 0.95. */
    zc_config *cfg = make("{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {"
                          "\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01,"
                          "\"cycle_first_step_size\": 10, \"cycle_min_mom\": 0.85,"
                          "\"cycle_max_mom\": 0.95, \"decay_step_size\": 5,"
                          "\"decay_lr_rate\": 0.5}}}");
    double b1, b2;
    near(zc__sched_lr(&cfg->scheduler, 1e-3, 0.9, 0.999, 0, &b1, &b2), 0.001, "n=0: min");
    near(b1, 0.85, "n=0: the constructor sets cycle_min_mom");
    near(b2, 0.99, "OneCycle sets beta2 = 0.99");
    near(zc_config_lr_at(cfg, 1, &b1), 0.0019, "t=0: s = 0.1");
    near(b1, 0.94, "t=0 beta1");
    near(zc_config_lr_at(cfg, 6, &b1), 0.0064, "mid-rise t=5: s = 0.6 -> 0.001 + 0.0054");
    near(b1, 0.89, "mid-rise beta1: 0.95 - 0.06");
    near(zc_config_lr_at(cfg, 10, &b1), 0.01, "peak t=9: s = 1");
    near(b1, 0.85, "peak beta1");
    near(zc_config_lr_at(cfg, 15, &b1), 0.0055, "mid-fall t=14: s = 0.5");
    near(b1, 0.9, "mid-fall beta1");
    near(zc_config_lr_at(cfg, 20, &b1), 0.001, "t=19: end of the cycle, s = 0");
    near(zc_config_lr_at(cfg, 21, &b1), 0.001 / 1.1, "t=20: k = 1");
    near(b1, 0.95, "decay without decay_mom_rate: max momentum");
    near(zc_config_lr_at(cfg, 30, &b1), 0.0005, "t=29: k = 10 -> 0.001 / 2");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, one_cycle_staircase)
{
    /* first = 10, 4 stairs: the position is floor(ci * 4 / 10) / 4 with ci = t + 1. */
    zc_config *cfg = make("{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {"
                          "\"cycle_min_lr\": 0.0, \"cycle_max_lr\": 1.0,"
                          "\"cycle_first_step_size\": 10, \"cycle_first_stair_count\": 4}}}");
    near(zc_config_lr_at(cfg, 1, NULL), 0.0, "t=0: floor(0.4) = 0");
    near(zc_config_lr_at(cfg, 3, NULL), 0.25, "t=2: floor(1.2) = 1");
    near(zc_config_lr_at(cfg, 10, NULL), 1.0, "t=9: floor(4) = 4");
    near(zc_config_lr_at(cfg, 13, NULL), 0.5, "t=12: falling, (20 - 13) * 4 / 10 = 2.8 -> 2");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(scheduler, lr_range_test)
{
    /* lr = 0.001 * (1 + 0.5 * (t + 1) / 10); staircase floors the interval. */
    zc_config *cfg = make("{\"scheduler\": {\"type\": \"LRRangeTest\", \"params\": {"
                          "\"lr_range_test_min_lr\": 0.001, \"lr_range_test_step_size\": 10,"
                          "\"lr_range_test_step_rate\": 0.5}}}");
    near(zc_config_lr_at(cfg, 0, NULL), 0.001, "n=0");
    near(zc_config_lr_at(cfg, 5, NULL), 0.00125, "t=4: interval 0.5");
    near(zc_config_lr_at(cfg, 10, NULL), 0.0015, "t=9: interval 1");
    near(zc_config_lr_at(cfg, 40, NULL), 0.003, "t=39: interval 4");
    cr_assert_eq(zc_config_set(cfg, "scheduler.params.lr_range_test_staircase", "true"), ZC_OK);
    near(zc_config_lr_at(cfg, 5, NULL), 0.001, "staircase t=4: floor(0.5) = 0");
    near(zc_config_lr_at(cfg, 15, NULL), 0.0015, "staircase t=14: floor(1.5) = 1");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
