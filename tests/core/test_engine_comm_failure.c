/* A failed collective leaves the ranks at different points of a step, so the
 * engine refuses further work with an error that says to destroy it, instead
 * of computing on gradients the ranks no longer agree on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "zeroc/zeroc.h"

enum { N = 512 };

typedef struct cf_run {
    zc_config *cfg;
    zc_comm *comms[2];
    zc_status step_rc[2], after_rc[2];
    char after_msg[512];
} cf_run;

static void cf_rank(int rank, void *arg)
{
    cf_run *r = arg;
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    if (zc_engine_create(&e, r->cfg, r->comms[rank], &o) != ZC_OK)
        return;
    int64_t shape[1] = {N};
    zc_param *p = zc_param_add(e, "w", shape, 1, 0);
    if (!p || zc_engine_build(e) != ZC_OK) {
        zc_engine_destroy(e);
        return;
    }
    float *g = zc_grad_buffer(e, p);
    for (int i = 0; i < N; i++)
        g[i] = 0.01f * (float)(i % 13);
    zc_grad_ready(e, p);
    if (rank == 1) {
        /* This rank stops before the step: its peer's collectives time out. */
        r->step_rc[1] = ZC_OK;
        zc_engine_destroy(e);
        return;
    }
    r->step_rc[0] = zc_step(e, NULL);
    r->after_rc[0] = zc_grad_ready(e, p);
    snprintf(r->after_msg, sizeof r->after_msg, "%s", zc_last_error());
    zc_engine_destroy(e);
}

Test(engine_comm_failure, engine_refuses_work_after_a_failed_collective)
{
    setenv("ZC_COMM_TIMEOUT", "0.3", 1);
    static cf_run r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(zc_config_create(&r.cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(r.cfg, "zero_optimization.stage", 2), ZC_OK);
    /* Stage 2 reduce-scatters a chunk as soon as its gradients are ready, so
     * both ranks pass zc_grad_ready together; rank 1 then leaves and rank 0's
     * zc_step waits in vain. Without the broken state, the zc_grad_ready after
     * it would be taken as a new micro-step (or "ready twice"), not refused. */
    cr_assert_eq(zc_comm_local_world(2, r.comms), ZC_OK);
    t_run_ranks(2, cf_rank, &r);
    cr_assert_eq(r.step_rc[0], ZC_ERR_COMM, "zc_step on the waiting rank: %s",
                 zc_status_str(r.step_rc[0]));
    cr_assert_eq(r.after_rc[0], ZC_ERR_COMM);
    cr_assert(strstr(r.after_msg, "destroy the engine"), "%s", r.after_msg);
    for (int k = 0; k < 2; k++)
        zc_comm_destroy(r.comms[k]);
    zc_config_destroy(r.cfg);
    t_assert_no_leaks();
}
