/* ZC_DEBUG=1: a write into a gradient buffer after the parameter's
 * zc_grad_ready fails zc_step with the same message at every stage; a clean
 * run is unaffected (no false positive, bitwise the same parameters); the
 * variable is parsed strictly. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "t_engine.h"

Test(grad_debug, parsed_strictly)
{
    const char *bad[] = {"yes", "2", "1 ", " 1", "01", "true", "-1"};
    const char *good[] = {"0", "1", ""};
    zc_comm *comm;
    zc_config *cfg;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("ZC_DEBUG", bad[i], 1);
        zc_engine *e = NULL;
        cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_ERR_CONFIG, "ZC_DEBUG='%s'",
                     bad[i]);
        char want[64];
        snprintf(want, sizeof want, "ZC_DEBUG='%s'", bad[i]);
        cr_assert(strstr(zc_last_error(), want), "%s", zc_last_error());
        cr_assert_null(e);
    }
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        setenv("ZC_DEBUG", good[i], 1);
        zc_engine *e = NULL;
        cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "ZC_DEBUG='%s': %s", good[i],
                     zc_last_error());
        zc_engine_destroy(e);
    }
    unsetenv("ZC_DEBUG");
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

/* A clean run with the checks on trains bitwise like one without them, in
 * every stage and world size, per parameter and layer-wise with blocks. */
Test(grad_debug, clean_run_no_false_positive)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int w = 1; w <= 4; w++) {
            t_run off, on;
            t_run_init(&off, stage, w, w == 3 ? ZC_DTYPE_BF16 : ZC_DTYPE_F32);
            off.steps = 4;
            off.accum = w == 2 ? 2 : 1;
            off.layerwise = stage % 2 == 1;
            off.blocks = off.layerwise ? T_BLOCK_LIST : T_BLOCK_NONE;
            on = off;
            unsetenv("ZC_DEBUG");
            cr_assert(t_engine_run(&off), "stage %d W %d: %s", stage, w, t_run_error(&off));
            setenv("ZC_DEBUG", "1", 1);
            cr_assert(t_engine_run(&on), "stage %d W %d ZC_DEBUG=1: %s", stage, w,
                      t_run_error(&on));
            unsetenv("ZC_DEBUG");
            cr_assert(memcmp(off.master, on.master, (size_t)t_total_numel() * sizeof(float)) ==
                          0,
                      "stage %d W %d: ZC_DEBUG=1 changed the parameters", stage, w);
            free(off.master);
            free(on.master);
        }
    t_assert_no_leaks();
}

/* Late writes. Every rank writes element 5 of p3's gradient buffer after
 * making it ready: in the same micro-step (when == 0) or after the step,
 * through the pointer of the previous window (when == 1). */
typedef struct late {
    t_run *run;
    zc_comm *comms[T_MAX_WORLD];
    int when;
    zc_status rc[T_MAX_WORLD];
    char msg[T_MAX_WORLD][512];
} late;

static zc_status backward_simple(t_ctx *x, void **g3)
{
    for (int i = T_NPARAMS - 1; i >= 0; i--) {
        void *g = zc_grad_buffer(x->eng, x->p[i]);
        if (!g)
            return ZC_ERR_INTERNAL;
        for (int64_t k = 0; k < t_numel[i]; k++)
            zc__store_f32(g, x->run->dtype, (size_t)k, 0.001f * (float)(k % 7));
        zc_status rc = zc_grad_ready(x->eng, x->p[i]);
        if (rc != ZC_OK)
            return rc;
        if (i == 3)
            *g3 = g;
    }
    return ZC_OK;
}

static void late_rank(int rank, void *arg)
{
    late *lt = arg;
    t_ctx ctx, *x = &ctx;
    void *g3 = NULL;
    lt->rc[rank] = ZC_ERR_INTERNAL;
    if (t_ctx_open(x, lt->run, rank, lt->comms[rank]) != ZC_OK)
        goto out;
    if (lt->when == 1) {
        if (backward_simple(x, &g3) != ZC_OK || zc_step(x->eng, NULL) != ZC_OK) {
            snprintf(lt->msg[rank], sizeof lt->msg[rank], "clean step: %s", zc_last_error());
            goto out;
        }
        /* After the step: the pointer of the last window is stale. */
        zc__store_f32(g3, lt->run->dtype, 5, 2.0f);
    }
    if (backward_simple(x, &g3) != ZC_OK) {
        snprintf(lt->msg[rank], sizeof lt->msg[rank], "backward: %s", zc_last_error());
        goto out;
    }
    if (lt->when == 0)
        zc__store_f32(g3, lt->run->dtype, 5, 2.0f);
    lt->rc[rank] = zc_step(x->eng, NULL);
    snprintf(lt->msg[rank], sizeof lt->msg[rank], "%s", zc_last_error());
out:
    t_ctx_close(x);
}

static void run_late(int stage, int when, char *msg, size_t cap)
{
    t_run run;
    t_run_init(&run, stage, 2, ZC_DTYPE_F32);
    late lt = {.run = &run, .when = when};
    cr_assert_eq(zc_comm_local_world(2, lt.comms), ZC_OK);
    setenv("ZC_DEBUG", "1", 1);
    t_run_ranks(2, late_rank, &lt);
    unsetenv("ZC_DEBUG");
    for (int r = 0; r < 2; r++)
        zc_comm_destroy(lt.comms[r]);
    cr_assert_str_empty(t_run_error(&run), "%s", t_run_error(&run));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(lt.rc[r], ZC_ERR_INVALID_STATE, "stage %d rank %d: %s (%s)", stage, r,
                     zc_status_str(lt.rc[r]), lt.msg[r]);
        cr_assert(strstr(lt.msg[r], "ZC_DEBUG: the gradient buffer of parameter 'p3' was "
                                    "written after its zc_grad_ready (element 5 of 2500"),
                  "stage %d rank %d: %s", stage, r, lt.msg[r]);
    }
    cr_assert_str_eq(lt.msg[0], lt.msg[1], "stage %d: ranks disagree", stage);
    snprintf(msg, cap, "%s", lt.msg[0]);
}

Test(grad_debug, late_write_same_message_every_stage)
{
    for (int when = 0; when <= 1; when++) {
        char first[512], msg[512];
        run_late(0, when, first, sizeof first);
        cr_assert(strstr(first, when == 0 ? "seen at the end of the micro-step"
                                          : "seen at its next zc_grad_buffer"),
                  "%s", first);
        for (int stage = 1; stage <= 3; stage++) {
            run_late(stage, when, msg, sizeof msg);
            cr_assert_str_eq(msg, first, "stage %d differs from stage 0", stage);
        }
    }
    t_assert_no_leaks();
}
