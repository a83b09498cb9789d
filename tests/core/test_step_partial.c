/* zc_step after a failure part-way through the optimizer update.
 *
 * A device whose Adam fails on the n-th call (the host backend otherwise)
 * stands in for a kernel or driver failure: the shards updated before it keep
 * their new values, so the step must never be run again (that would apply
 * the update twice, the second time with the loss scale already advanced),
 * and the other ranks must not go on as if it had worked.
 *
 *   - world 1, fp16 with loss_scale_window 1 (every clean step after the
 *     first doubles the scale): the failed zc_step reports the device error,
 *     the loss scale is still the one of the failed step, and a repeated
 *     zc_step (or any other call) is refused, naming the failure;
 *   - world 2, stage 2, Adam failing on rank 1 only: both ranks return the
 *     same status with the same message naming rank 1, and both engines are
 *     broken. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"

typedef struct fail_dev {
    zc_device base; /* first: the engine sees a zc_device */
    zc_device_ops ops;
    int adam_calls, fail_at;
} fail_dev;

static zc_status failing_adam(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c,
                              void *stream)
{
    fail_dev *f = (fail_dev *)d;
    if (++f->adam_calls == f->fail_at)
        return ZC_ERR(ZC_ERR_DEVICE, "adam: injected device failure (call %d)", f->adam_calls);
    zc_device *h = zc__device_host();
    return h->ops->adam(h, s, c, stream);
}

static void no_destroy(zc_device *d) { (void)d; }

/* Routes the engine's device calls through f from now on (build is done, so
 * every buffer is already host memory the copy of the host ops can free). */
static void install(zc_engine *e, fail_dev *f, int fail_at)
{
    f->base = *e->dev;
    f->ops = *e->dev->ops;
    f->ops.adam = failing_adam;
    f->ops.destroy = no_destroy;
    f->base.ops = &f->ops;
    f->adam_calls = 0;
    f->fail_at = fail_at;
    e->dev = &f->base;
}

#define N0 300
#define N1 700

typedef struct sp_run {
    int stage, world, fail_rank;
    zc_comm *comms[2];
    fail_dev devs[2];
    zc_status first_rc[2], step_rc[2], again_rc[2], stats_rc[2];
    char step_msg[2][1024], again_msg[2][1024];
    double scale_before[2], scale_after[2];
    int adam_calls[2];
} sp_run;

static zc_engine *open_engine(sp_run *r, int rank, zc_config **cfgp, zc_param **p)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", r->stage), ZC_OK);
    cr_assert_eq(zc_config_set_bool(cfg, "fp16.enabled", true), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "fp16.initial_scale_power", 4), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "fp16.loss_scale_window", 1), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 512;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, r->comms[rank], &eo), ZC_OK);
    const int64_t n[2] = {N0, N1};
    for (int i = 0; i < 2; i++) {
        char name[4] = {'p', (char)('0' + i), 0};
        p[i] = zc_param_add(e, name, &n[i], 1, 0);
        cr_assert_not_null(p[i]);
    }
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    *cfgp = cfg;
    return e;
}

static void window(zc_engine *e, zc_param **p)
{
    for (int i = 1; i >= 0; i--) {
        uint16_t *g = zc_grad_buffer(e, p[i]);
        if (g)
            for (int j = 0; j < (i ? N1 : N0); j++)
                g[j] = 0x3c00; /* fp16 1.0 */
        zc_grad_ready(e, p[i]);
    }
}

/* A clean step (Adam once per chunk: 2 calls on every rank here), then a
 * second window whose update fails at its second Adam call. The scaler's
 * window of 1 doubles the scale after the second step (DeepSpeed counts the
 * first clean step from iteration 0, which does not double). */
static void sp_rank(int rank, void *arg)
{
    sp_run *r = arg;
    zc_config *cfg = NULL;
    zc_param *p[2];
    zc_engine *e = open_engine(r, rank, &cfg, p);
    install(e, &r->devs[rank], rank == r->fail_rank ? 4 : 0);
    window(e, p);
    r->first_rc[rank] = zc_step(e, NULL);
    window(e, p);
    r->scale_before[rank] = zc_loss_scale(e);
    r->step_rc[rank] = zc_step(e, NULL);
    snprintf(r->step_msg[rank], sizeof r->step_msg[rank], "%s", zc_last_error());
    r->scale_after[rank] = zc_loss_scale(e);
    r->adam_calls[rank] = r->devs[rank].adam_calls;
    r->again_rc[rank] = zc_step(e, NULL);
    snprintf(r->again_msg[rank], sizeof r->again_msg[rank], "%s", zc_last_error());
    zc_stats st = {.size = sizeof st};
    r->stats_rc[rank] = zc_engine_stats(e, &st);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void run(sp_run *r)
{
    setenv("ZC_COMM_TIMEOUT", "2", 1);
    cr_assert_eq(zc_comm_local_world(r->world, r->comms), ZC_OK);
    t_run_ranks(r->world, sp_rank, r);
    for (int k = 0; k < r->world; k++)
        zc_comm_destroy(r->comms[k]);
}

Test(step_partial, failed_update_is_never_run_again)
{
    static sp_run r;
    memset(&r, 0, sizeof r);
    r.stage = 0;
    r.world = 1;
    r.fail_rank = 0;
    run(&r);
    cr_assert_eq(r.first_rc[0], ZC_OK);
    cr_assert_eq(r.adam_calls[0], 4, "Adam ran %d times: the failure was not part-way",
                 r.adam_calls[0]);
    cr_assert_eq(r.step_rc[0], ZC_ERR_DEVICE, "zc_step: %s: %s", zc_status_str(r.step_rc[0]),
                 r.step_msg[0]);
    cr_assert(strstr(r.step_msg[0], "injected device failure"), "%s", r.step_msg[0]);
    /* The scaler advances only after the update worked (window 1 would have
     * doubled it). */
    cr_assert(r.scale_after[0] == r.scale_before[0] && r.scale_before[0] == 16.0,
              "loss scale %g before, %g after the failed step", r.scale_before[0],
              r.scale_after[0]);
    cr_assert_neq(r.again_rc[0], ZC_OK, "zc_step ran again after a part-applied update");
    cr_assert(strstr(r.again_msg[0], "broken") && strstr(r.again_msg[0], "injected device"),
              "the repeated zc_step says '%s'", r.again_msg[0]);
    cr_assert_neq(r.stats_rc[0], ZC_OK);
    t_assert_no_leaks();
}

Test(step_partial, failure_on_one_rank_breaks_every_rank_alike)
{
    static sp_run r;
    memset(&r, 0, sizeof r);
    r.stage = 2;
    r.world = 2;
    r.fail_rank = 1;
    run(&r);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(r.first_rc[k], ZC_OK);
        cr_assert_eq(r.step_rc[k], ZC_ERR_DEVICE, "rank %d: zc_step: %s: %s", k,
                     zc_status_str(r.step_rc[k]), r.step_msg[k]);
        cr_assert(strstr(r.step_msg[k], "rank 1") && strstr(r.step_msg[k], "injected device"),
                  "rank %d: '%s' does not name rank 1's failure", k, r.step_msg[k]);
        cr_assert_neq(r.again_rc[k], ZC_OK, "rank %d: zc_step ran again", k);
        cr_assert(strstr(r.again_msg[k], "broken"), "rank %d: %s", k, r.again_msg[k]);
        cr_assert(r.scale_after[k] == r.scale_before[k], "rank %d: loss scale moved", k);
    }
    cr_assert_str_eq(r.step_msg[0], r.step_msg[1], "the ranks report different failures");
    t_assert_no_leaks();
}
