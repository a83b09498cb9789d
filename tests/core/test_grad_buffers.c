/* Stage 2/3 gradient buffers come from the slots reserved at build: two
 * units' worth, here (no zc_chunk_boundary) two chunks. A backward pass that
 * holds a third chunk's buffer while two other chunks are incomplete gets
 * ZC_ERR_NO_MEMORY from zc_grad_buffer - on every rank alike, since which
 * slots are held follows the calls - and nothing is allocated; completing a
 * chunk returns its slot, the buffer is then handed out zeroed, and the step
 * ends with the ranks in agreement. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"

#define W 2
#define NP 3
static const int64_t numel[NP] = {300, 500, 700};

typedef struct gb_run {
    int stage;
    zc_comm *comms[W];
    bool third_null[W];
    char third_msg[W][1024];
    int64_t allocs_after_build[W];
    bool zeroed[W];
    zc_status step_rc[W];
    float master[W][NP][700];
} gb_run;

static void gb_rank(int rank, void *arg)
{
    gb_run *r = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", r->stage), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 256; /* one chunk per parameter */
    cr_assert_eq(zc_engine_create(&e, cfg, r->comms[rank], &eo), ZC_OK);
    zc_param *p[NP];
    for (int i = 0; i < NP; i++) {
        char name[4] = {'p', (char)('0' + i), 0};
        p[i] = zc_param_add(e, name, &numel[i], 1, 0);
    }
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e->nchunks, NP);
    float *g[NP];
    for (int i = 0; i < 2; i++) {
        g[i] = zc_grad_buffer(e, p[i]);
        cr_assert_not_null(g[i], "%s", zc_last_error());
        for (int64_t j = 0; j < numel[i]; j++)
            g[i][j] = 0.25f;
    }
    g[2] = zc_grad_buffer(e, p[2]);
    r->third_null[rank] = g[2] == NULL;
    snprintf(r->third_msg[rank], sizeof r->third_msg[rank], "%s", zc_last_error());
    /* Completing chunk 0 returns its slot. */
    cr_assert_eq(zc_grad_ready(e, p[0]), ZC_OK, "%s", zc_last_error());
    g[2] = zc_grad_buffer(e, p[2]);
    cr_assert_not_null(g[2], "%s", zc_last_error());
    bool zero = true;
    for (int64_t j = 0; j < numel[2]; j++)
        zero = zero && g[2][j] == 0.0f;
    r->zeroed[rank] = zero;
    for (int64_t j = 0; j < numel[2]; j++)
        g[2][j] = -0.5f;
    cr_assert_eq(zc_grad_ready(e, p[2]), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_grad_ready(e, p[1]), ZC_OK, "%s", zc_last_error());
    r->step_rc[rank] = zc_step(e, NULL);
    for (int i = 0; i < NP; i++)
        cr_assert_eq(zc_param_gather_master(e, p[i], r->master[rank][i]), ZC_OK);
    r->allocs_after_build[rank] = e->faults.seen[ZC_FAULT_ALLOC];
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void check_stage(int stage)
{
    static gb_run r;
    memset(&r, 0, sizeof r);
    r.stage = stage;
    setenv("ZC_COMM_TIMEOUT", "5", 1);
    cr_assert_eq(zc_comm_local_world(W, r.comms), ZC_OK);
    t_run_ranks(W, gb_rank, &r);
    for (int k = 0; k < W; k++)
        zc_comm_destroy(r.comms[k]);
    for (int k = 0; k < W; k++) {
        cr_assert(r.third_null[k], "stage %d rank %d: a third chunk buffer was handed out",
                  stage, k);
        cr_assert(strstr(r.third_msg[k], "the build reserved 2") &&
                      strstr(r.third_msg[k], "no free slot"),
                  "rank %d: %s", k, r.third_msg[k]);
        cr_assert(r.zeroed[k], "rank %d: a reused buffer was not zeroed", k);
        cr_assert_eq(r.step_rc[k], ZC_OK);
        cr_assert_eq(r.allocs_after_build[k], 0);
    }
    cr_assert_str_eq(r.third_msg[0], r.third_msg[1]);
    cr_assert(memcmp(r.master[0], r.master[1], sizeof r.master[0]) == 0,
              "the ranks' parameters differ");
    t_assert_no_leaks();
}

Test(grad_buffers, third_open_chunk_is_refused_alike_stage2) { check_stage(2); }
Test(grad_buffers, third_open_chunk_is_refused_alike_stage3) { check_stage(3); }
