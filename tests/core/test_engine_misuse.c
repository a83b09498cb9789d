/* API misuse gets a clear error and changes nothing.
 *
 * In-training misuse runs on W = 2 rank threads for every stage: each rank
 * makes the same mistakes (so no rank waits in a collective for another),
 * checks the status and message, then finishes the training; the final master
 * parameters must be bitwise equal to a clean run's. Creation-time misuse
 * runs on the test's thread. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "base/dtype.h"
#include "helpers.h"
#include "t_engine.h"

#define EXPECT(cond, ...)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            int n_ = snprintf(x->run->err[x->rank], sizeof x->run->err[x->rank],        \
                              "rank %d line %d: ", x->rank, __LINE__);                  \
            snprintf(x->run->err[x->rank] + n_, sizeof x->run->err[x->rank] - (size_t)n_, \
                     __VA_ARGS__);                                                      \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

#define EXPECT_ERR(call, status, needle)                                                \
    do {                                                                                \
        zc_status rc_ = (call);                                                         \
        EXPECT(rc_ == (status), "%s returned %s, expected %s (%s)", #call,              \
               zc_status_str(rc_), zc_status_str(status), zc_last_error());             \
        EXPECT(strstr(zc_last_error(), needle), "%s: message '%s' lacks '%s'", #call,   \
               zc_last_error(), needle);                                                \
    } while (0)

/* A harness call that fails has recorded its own message. */
#define HARNESS(call)             \
    do {                          \
        if ((call) != ZC_OK)      \
            goto out;             \
    } while (0)

typedef struct shared {
    t_run *run;
    zc_comm *comms[T_MAX_WORLD];
} shared;

static int64_t num_params(zc_engine *e)
{
    zc_stats s = {.size = sizeof s};
    zc_engine_stats(e, &s);
    return s.num_params;
}

static void misuse_rank(int rank, void *arg)
{
    shared *sh = arg;
    t_ctx ctx, *x = &ctx;
    zc_comm *solo = NULL;
    zc_engine *other = NULL;
    zc_config *ocfg = NULL;
    if (t_ctx_open(x, sh->run, rank, sh->comms[rank]) != ZC_OK)
        goto out;

    /* A second engine on this thread, with a parameter of its own. */
    EXPECT(zc_comm_local_world(1, &solo) == ZC_OK, "solo comm");
    EXPECT(zc_config_create(&ocfg) == ZC_OK, "config");
    EXPECT(zc_engine_create(&other, ocfg, solo, NULL) == ZC_OK, "other engine: %s",
           zc_last_error());
    const int64_t qshape[1] = {10};
    zc_param *q = zc_param_add(other, "q", qshape, 1, 0);
    EXPECT(q && zc_engine_build(other) == ZC_OK, "other build: %s", zc_last_error());

    /* Registration after build. */
    const int64_t before = num_params(x->eng);
    EXPECT(zc_param_add(x->eng, "late", qshape, 1, 0) == NULL, "param_add after build");
    EXPECT(strstr(zc_last_error(), "before zc_engine_build"), "%s", zc_last_error());
    EXPECT(num_params(x->eng) == before, "param count changed");
    int gid;
    EXPECT_ERR(zc_group_add(x->eng, 0.1, 1.0, &gid), ZC_ERR_INVALID_STATE, "before");
    EXPECT_ERR(zc_chunk_boundary(x->eng), ZC_ERR_INVALID_STATE, "before");
    EXPECT_ERR(zc_engine_build(x->eng), ZC_ERR_INVALID_STATE, "already built");

    /* Unknown parameters and parameters of another engine. */
    static char fake[4096];
    zc_param *bogus = (zc_param *)fake;
    EXPECT(zc_param_acquire(x->eng, NULL, NULL) == NULL, "acquire(NULL)");
    EXPECT(zc_param_acquire(x->eng, bogus, NULL) == NULL, "acquire(bogus)");
    EXPECT(strstr(zc_last_error(), "not a parameter"), "%s", zc_last_error());
    EXPECT(zc_param_acquire(x->eng, q, NULL) == NULL, "acquire(other engine's)");
    EXPECT(strstr(zc_last_error(), "'q' belongs to another engine"), "%s", zc_last_error());
    EXPECT_ERR(zc_grad_ready(x->eng, bogus), ZC_ERR_INVALID_ARG, "not a parameter");
    EXPECT_ERR(zc_grad_ready(x->eng, q), ZC_ERR_INVALID_ARG, "another engine");
    EXPECT_ERR(zc_grad_ready(x->eng, NULL), ZC_ERR_INVALID_ARG, "NULL");
    EXPECT(zc_grad_buffer(x->eng, q) == NULL, "grad_buffer(other engine's)");
    EXPECT_ERR(zc_param_release(x->eng, x->p[0], NULL), ZC_ERR_INVALID_STATE, "not acquired");
    EXPECT_ERR(zc_param_release(other, x->p[0], NULL), ZC_ERR_INVALID_ARG, "another engine");

    for (int s = 0; s < x->run->steps; s++) {
        if (s == 1) {
            /* Step with a gradient missing: p3 is left out of backward. */
            HARNESS(t_forward(x, NULL));
            HARNESS(t_backward(x, s, 0, 3));
            EXPECT_ERR(zc_step(x->eng, NULL), ZC_ERR_INVALID_STATE, "parameter 'p3' is missing");
            EXPECT_ERR(zc_micro_step_end(x->eng), ZC_ERR_INVALID_STATE, "last of the");
            /* Loading values inside a window is refused. */
            float zeros[4000] = {0};
            EXPECT_ERR(zc_param_load(x->eng, x->p[0], zeros), ZC_ERR_INVALID_STATE, "window");
            /* grad_ready twice, and a buffer after ready. */
            EXPECT_ERR(zc_grad_ready(x->eng, x->p[7]), ZC_ERR_INVALID_STATE, "twice");
            EXPECT(zc_grad_buffer(x->eng, x->p[7]) == NULL, "grad_buffer after ready");
            /* Now hand p3 over, with the gradient backward would have
             * written. */
            HARNESS(t_backward_one(x, s, 0, 3));
            EXPECT(zc_step(x->eng, NULL) == ZC_OK, "step after the fix: %s", zc_last_error());
        } else {
            HARNESS(t_train_step(x, s, NULL));
        }
    }
    HARNESS(t_gather(x, x->run->master));
out:
    zc_engine_destroy(other);
    zc_config_destroy(ocfg);
    zc_comm_destroy(solo);
    t_ctx_close(x);
}

Test(misuse, in_training_errors_change_nothing)
{
    const int W = 2;
    for (int stage = 0; stage <= 3; stage++) {
        t_run *clean = calloc(1, sizeof *clean);
        t_run_init(clean, stage, W, ZC_DTYPE_BF16);
        clean->steps = 4;
        cr_assert(t_engine_run(clean), "%s", t_run_error(clean));

        t_run *bad = calloc(1, sizeof *bad);
        t_run_init(bad, stage, W, ZC_DTYPE_BF16);
        bad->steps = 4;
        bad->master = calloc((size_t)t_total_numel(), sizeof(float));
        shared sh = {.run = bad};
        cr_assert_eq(zc_comm_local_world(W, sh.comms), ZC_OK);
        t_run_ranks(W, misuse_rank, &sh);
        for (int r = 0; r < W; r++)
            zc_comm_destroy(sh.comms[r]);
        cr_assert(t_run_error(bad)[0] == '\0', "stage %d: %s", stage, t_run_error(bad));
        cr_assert(memcmp(bad->master, clean->master, (size_t)t_total_numel() * sizeof(float)) ==
                      0,
                  "stage %d: the misuse changed the result", stage);
        free(clean->master);
        free(bad->master);
        free(clean);
        free(bad);
    }
    t_assert_no_leaks();
}

/* ---- creation-time misuse, on the test's thread ------------------------------ */

static zc_engine *make_engine(zc_comm **comm, zc_config **cfg)
{
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(zc_config_create(cfg), ZC_OK);
    zc_engine *e = NULL;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&e, *cfg, *comm, &eo), ZC_OK, "%s", zc_last_error());
    return e;
}

Test(misuse, world_size_zero)
{
    zc_comm *comms[1] = {NULL};
    cr_assert_neq(zc_comm_local_world(0, comms), ZC_OK);
    cr_assert_null(comms[0]);
    cr_assert_neq(zc_comm_local_world(-3, comms), ZC_OK);
    t_assert_no_leaks();
}

Test(misuse, stage_outside_0_3)
{
    zc_comm *comm = NULL;
    zc_config *cfg = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    /* The setter refuses it... */
    cr_assert_neq(zc_config_set_int(cfg, "zero_optimization.stage", 4), ZC_OK);
    /* ...and the engine checks what it is given (a hand-edited struct). */
    cfg->zero.stage = 7;
    zc_engine *e = (zc_engine *)0x1;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, NULL), ZC_ERR_CONFIG);
    cr_assert_null(e);
    cr_assert(strstr(zc_last_error(), "zero_optimization.stage is 7"), "%s", zc_last_error());
    cfg->zero.stage = -1;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, NULL), ZC_ERR_CONFIG);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(misuse, bad_parameters)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e = make_engine(&comm, &cfg);
    const int64_t zero[2] = {3, 0}, neg[1] = {-4}, ok[2] = {3, 5};
    cr_assert_null(zc_param_add(e, "z", zero, 2, 0));
    cr_assert(strstr(zc_last_error(), "dimension 1 is 0"), "%s", zc_last_error());
    cr_assert_null(zc_param_add(e, "n", neg, 1, 0));
    cr_assert_null(zc_param_add(e, "d0", ok, 0, 0));
    cr_assert_null(zc_param_add(e, "d9", ok, 9, 0));
    cr_assert_null(zc_param_add(e, NULL, ok, 2, 0));
    cr_assert_null(zc_param_add(e, "g", ok, 2, 5));
    cr_assert(strstr(zc_last_error(), "unknown group 5"), "%s", zc_last_error());
    cr_assert_eq(num_params(e), 0);
    /* Build with nothing registered is refused, and the engine stays usable. */
    cr_assert_eq(zc_engine_build(e), ZC_ERR_INVALID_STATE);
    zc_param *a = zc_param_add(e, "a", ok, 2, 0);
    cr_assert_not_null(a);
    cr_assert_null(zc_param_add(e, "a", ok, 2, 0));
    cr_assert(strstr(zc_last_error(), "already exists"), "%s", zc_last_error());
    cr_assert_eq(num_params(e), 15);
    /* Before build: no buffers to hand out. */
    cr_assert_null(zc_param_acquire(e, a, NULL));
    cr_assert_null(zc_grad_buffer(e, a));
    cr_assert_eq(zc_step(e, NULL), ZC_ERR_INVALID_STATE);
    cr_assert_eq(zc_engine_build(e), ZC_OK);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(misuse, null_handles)
{
    cr_assert_eq(zc_step(NULL, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_engine_build(NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_grad_ready(NULL, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_null(zc_param_acquire(NULL, NULL, NULL));
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, NULL, NULL, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_engine_create(NULL, NULL, NULL, NULL), ZC_ERR_INVALID_ARG);
    zc_engine_destroy(NULL);
    t_assert_no_leaks();
}

/* An allocation failure at any point of build is reported and leaves an
 * engine that can only be destroyed, without leaks. */
Test(misuse, build_out_of_memory)
{
    for (int k = 1; k <= 40; k++) {
        zc_comm *comm;
        zc_config *cfg;
        zc_engine *e = make_engine(&comm, &cfg);
        const int64_t s1[1] = {5000}, s2[2] = {7, 9};
        cr_assert_not_null(zc_param_add(e, "a", s1, 1, 0));
        zc_param *b = zc_param_add(e, "b", s2, 2, 0);
        cr_assert_not_null(b);
        zc__mem_fail_after(ZC_MEMKIND_HOST, k);
        zc_status rc = zc_engine_build(e);
        zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
        if (rc == ZC_OK) {
            zc_engine_destroy(e);
            zc_config_destroy(cfg);
            zc_comm_destroy(comm);
            cr_assert_gt(k, 3, "build never hit the injected failure");
            break;
        }
        cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "k %d: %s", k, zc_last_error());
        cr_assert(strstr(zc_last_error(), "zc_engine_build"), "%s", zc_last_error());
        cr_assert_null(zc_param_acquire(e, b, NULL));
        cr_assert(strstr(zc_last_error(), "build failed"), "%s", zc_last_error());
        cr_assert_eq(zc_step(e, NULL), ZC_ERR_INVALID_STATE);
        zc_engine_destroy(e);
        zc_config_destroy(cfg);
        zc_comm_destroy(comm);
        t_assert_no_leaks();
    }
    t_assert_no_leaks();
}

/* Each parameter is bounded (numel * 4 bytes fits int64), and so is their sum:
 * five parameters of 2^61 - 1 elements would overflow the engine's int64
 * element and byte totals. The one that crosses the bound is refused and the
 * engine keeps the others. */
Test(misuse, total_elements_bounded)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e = make_engine(&comm, &cfg);
    const int64_t huge[1] = {INT64_MAX / 4};
    int added = 0;
    for (int i = 0; i < 5; i++) {
        char name[8] = {'h', (char)('0' + i), 0};
        if (!zc_param_add(e, name, huge, 1, 0)) {
            cr_assert(strstr(zc_last_error(), "exceed"), "%s", zc_last_error());
            break;
        }
        added++;
    }
    cr_assert_eq(added, 1, "%d parameters of 2^61 - 1 elements were accepted", added);
    cr_assert_eq(num_params(e), INT64_MAX / 4);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

/* zc_param_add_status: each refusal of zc_param_add with its own status and
 * message, *out NULL and nothing registered; success gives the handle that
 * zc_param_find finds. */
Test(misuse, param_add_status)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e = make_engine(&comm, &cfg);
    const int64_t zero[2] = {3, 0}, ok[2] = {3, 5};
    const struct {
        const char *name;
        const int64_t *shape;
        int ndim, group;
        zc_status want;
        const char *needle;
    } bad[] = {
        {"z", zero, 2, 0, ZC_ERR_INVALID_ARG, "dimension 1 is 0"},
        {"d0", ok, 0, 0, ZC_ERR_INVALID_ARG, "ndim 0 must be 1..8"},
        {"d9", ok, 9, 0, ZC_ERR_INVALID_ARG, "ndim 9 must be 1..8"},
        {"", ok, 2, 0, ZC_ERR_INVALID_ARG, "name is NULL or empty"},
        {NULL, ok, 2, 0, ZC_ERR_INVALID_ARG, "name is NULL or empty"},
        {"g", ok, 2, 5, ZC_ERR_INVALID_ARG, "unknown group 5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_param *p = (zc_param *)&p; /* not NULL: the call must clear it */
        cr_assert_eq(zc_param_add_status(e, bad[i].name, bad[i].shape, bad[i].ndim, bad[i].group,
                                         &p),
                     bad[i].want, "case %zu: %s", i, zc_last_error());
        cr_assert_null(p, "case %zu", i);
        cr_assert(strstr(zc_last_error(), bad[i].needle), "case %zu: %s", i, zc_last_error());
    }
    cr_assert_eq(zc_param_add_status(e, "a", ok, 2, 0, NULL), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "out is NULL"), "%s", zc_last_error());
    cr_assert_eq(zc_param_count(e), 0);
    /* An allocation failure is ZC_ERR_NO_MEMORY, not just NULL. */
    zc__mem_fail_after(ZC_MEMKIND_HOST, 1);
    zc_param *p = NULL;
    zc_status rc = zc_param_add_status(e, "a", ok, 2, 0, &p);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "%s", zc_last_error());
    cr_assert_null(p);
    cr_assert_eq(zc_param_count(e), 0);
    cr_assert_eq(zc_param_add_status(e, "a", ok, 2, 0, &p), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(p, zc_param_find(e, "a"));
    cr_assert_eq(zc_param_numel(p), 15);
    zc_param *q = NULL;
    cr_assert_eq(zc_param_add_status(e, "a", ok, 2, 0, &q), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "already exists"), "%s", zc_last_error());
    cr_assert_null(q);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_param_add_status(e, "b", ok, 2, 0, &q), ZC_ERR_INVALID_STATE);
    cr_assert(strstr(zc_last_error(), "before zc_engine_build"), "%s", zc_last_error());
    cr_assert_null(q);
    cr_assert_eq(zc_param_count(e), 1);
    cr_assert_eq(zc_param_add_status(NULL, "b", ok, 2, 0, &q), ZC_ERR_INVALID_ARG);
    cr_assert_null(q);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

/* zc_block_numel: the sum of the shapes registered here, the count that
 * zc_block_load then takes; a bad block or NULL count is refused. */
Test(misuse, block_numel)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e = make_engine(&comm, &cfg);
    const int64_t shapes[3][3] = {{7, 3, 2}, {11, 1, 1}, {5, 4, 1}};
    const int ndims[3] = {3, 1, 2};
    const size_t want = 7 * 3 * 2 + 11 + 5 * 4;
    zc_param *ps[3];
    for (int i = 0; i < 3; i++) {
        char name[8] = {'p', (char)('0' + i), 0};
        cr_assert_eq(zc_param_add_status(e, name, shapes[i], ndims[i], 0, &ps[i]), ZC_OK, "%s",
                     zc_last_error());
    }
    zc_block *b = NULL, *tail = NULL;
    cr_assert_eq(zc_block_create(e, ps, 3, &b), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_block_create(e, ps + 1, 2, &tail), ZC_OK, "%s", zc_last_error());
    size_t n = 0, m = 0;
    cr_assert_eq(zc_block_numel(b, &n), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(n, want);
    cr_assert_eq(zc_block_numel(tail, &m), ZC_OK);
    cr_assert_eq(m, (size_t)(11 + 5 * 4));
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    size_t after = 0;
    cr_assert_eq(zc_block_numel(b, &after), ZC_OK);
    cr_assert_eq(after, want);
    float *vals = calloc(want, sizeof *vals);
    cr_assert_not_null(vals);
    cr_assert_eq(zc_block_load(e, b, vals, n), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_block_load(e, b, vals, n - 1), ZC_ERR_INVALID_ARG);
    free(vals);
    size_t keep = 12345;
    cr_assert_eq(zc_block_numel(NULL, &keep), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "zc_block_numel: not a block handle"), "%s",
              zc_last_error());
    cr_assert_eq(keep, 12345);
    cr_assert_eq(zc_block_numel(b, NULL), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "count is NULL"), "%s", zc_last_error());
    const uint32_t junk[8] = {0};
    cr_assert_eq(zc_block_numel((const zc_block *)junk, &keep), ZC_ERR_INVALID_ARG);
    cr_assert_eq(keep, 12345);
    zc_block_destroy(b);
    zc_block_destroy(tail);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}
