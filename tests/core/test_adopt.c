/* Adopted storage (zc_block_adopt): the engine uses the caller's memory in
 * place - zc_param_acquire returns it, zc_step writes the update into it -
 * and trains bitwise like a run whose parameters live in zeroc's memory with
 * the same chunks, at stages 0-2 and world sizes 1-4; stage 3 and misuse
 * are refused. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

static void run_adopt(int stage, int world, zc_dtype dt, const char *offload)
{
    t_run ref, ad;
    t_run_init(&ref, stage, world, dt);
    ref.offload = offload;
    ref.steps = 6;
    /* A bucket that holds each span, so the reference has the same two
     * chunks {p0..p4} {p5..p7} that adoption forces. */
    ref.bucket = 8192;
    ad = ref;
    ad.adopt = true;
    cr_assert(t_engine_run(&ref), "stage %d W %d: %s", stage, world, t_run_error(&ref));
    cr_assert(t_engine_run(&ad), "stage %d W %d adopted: %s", stage, world, t_run_error(&ad));
    const size_t n = (size_t)t_total_numel();
    cr_assert(memcmp(ref.master, ad.master, n * sizeof(float)) == 0,
              "stage %d W %d %s: adopted memory changed the training", stage, world,
              zc_dtype_name(dt));
    cr_assert_gt(ad.info[ad.steps - 1].grad_norm, 0.0);
    for (int r = 0; r < world; r++) {
        cr_assert(ad.adopt_identity[r], "stage %d W %d rank %d: acquire is not the caller's memory",
                  stage, world, r);
        /* The caller's buffer holds the updated working parameters: in fp32
         * the master itself; in bf16 the master rounded to nearest even
         * (the working copy zc_step writes). */
        for (size_t k = 0; k < n; k++) {
            float want = ref.master[k];
            if (dt == ZC_DTYPE_BF16) {
                uint32_t u;
                memcpy(&u, &want, sizeof u);
                u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
                memcpy(&want, &u, sizeof u);
            }
            cr_assert(memcmp(&ad.adopt_out[r][k], &want, sizeof want) == 0,
                      "stage %d W %d rank %d element %zu: %a in the caller's buffer, want %a",
                      stage, world, r, k, (double)ad.adopt_out[r][k], (double)want);
        }
        free(ad.adopt_out[r]);
    }
    free(ref.master);
    free(ad.master);
}

Test(adopt, in_place_equals_owned_stages_0_2)
{
    for (int stage = 0; stage <= 2; stage++)
        for (int w = 1; w <= 4; w++)
            run_adopt(stage, w, ZC_DTYPE_F32, NULL);
    t_assert_no_leaks();
}

Test(adopt, in_place_bf16)
{
    for (int stage = 0; stage <= 2; stage++)
        run_adopt(stage, 2, ZC_DTYPE_BF16, NULL);
    t_assert_no_leaks();
}

/* Optimizer offload moves the master and Adam state to the cpu home; the
 * adopted memory stays the working copy, which zc_step updates in place. */
Test(adopt, in_place_with_cpu_offload)
{
    for (int stage = 1; stage <= 2; stage++)
        run_adopt(stage, 2, ZC_DTYPE_BF16, "cpu");
    t_assert_no_leaks();
}

/* An engine with p0 (300) and p1 (1000), not built. */
static void open_raw(int stage, zc_comm **comm, zc_config **cfg, zc_engine **e, zc_param *p[2])
{
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(zc_config_create(cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(*cfg, "zero_optimization.stage", stage), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(e, *cfg, *comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t s0 = 300, s1 = 1000;
    p[0] = zc_param_add(*e, "a", &s0, 1, 0);
    p[1] = zc_param_add(*e, "b", &s1, 1, 0);
    cr_assert(p[0] && p[1]);
}

Test(adopt, stage3_refused)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[2];
    open_raw(3, &comm, &cfg, &e, p);
    zc_block *b = NULL;
    cr_assert_eq(zc_block_create(e, p, 2, &b), ZC_OK);
    size_t bytes = 0;
    cr_assert_eq(zc_block_adopt_bytes(e, b, &bytes), ZC_OK);
    void *mem = calloc(1, bytes);
    cr_assert_eq(zc_block_adopt(e, b, mem, bytes), ZC_ERR_UNSUPPORTED);
    cr_assert(strstr(zc_last_error(), "stage 3 keeps only a shard"), "%s", zc_last_error());
    /* Refused means not adopted: the build allocates its own memory. */
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    void *w = zc_param_acquire(e, p[0], NULL);
    cr_assert(w && w != mem);
    cr_assert_eq(zc_param_release(e, p[0], NULL), ZC_OK);
    zc_block_destroy(b);
    zc_engine_destroy(e);
    free(mem);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(adopt, misuse_refused)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[2];
    open_raw(1, &comm, &cfg, &e, p);
    zc_block *b = NULL, *rev = NULL;
    cr_assert_eq(zc_block_create(e, p, 2, &b), ZC_OK);
    size_t bytes = 0;
    cr_assert_eq(zc_block_adopt_bytes(e, b, &bytes), ZC_OK);
    /* 1300 fp32 elements padded to a multiple of 1 x 64: 1344. */
    cr_assert_eq(bytes, (size_t)1344 * 4);
    float *mem = calloc(1344, sizeof(float));
    cr_assert_eq(zc_block_adopt(e, b, mem, bytes - 4), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "needs 5376"), "%s", zc_last_error());
    cr_assert_eq(zc_block_adopt(e, b, (char *)mem + 1, bytes), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_block_adopt(e, b, NULL, bytes), ZC_ERR_INVALID_ARG);
    zc_param *backwards[2] = {p[1], p[0]};
    cr_assert_eq(zc_block_create(e, backwards, 2, &rev), ZC_OK);
    cr_assert_eq(zc_block_adopt(e, rev, mem, bytes), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "does not follow"), "%s", zc_last_error());
    cr_assert_eq(zc_block_adopt(e, b, mem, bytes), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_block_adopt(e, b, mem, bytes), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "already in adopted memory"), "%s", zc_last_error());
    /* The values in the memory at build are the initial values. */
    for (int k = 0; k < 1300; k++)
        mem[k] = 0.25f * (float)(k % 5);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_block_adopt(e, b, mem, bytes), ZC_ERR_INVALID_STATE);
    float got[1000];
    cr_assert_eq(zc_param_gather_master(e, p[1], got), ZC_OK);
    for (int k = 0; k < 1000; k++)
        cr_assert_eq(got[k], 0.25f * (float)((300 + k) % 5), "master of b[%d]", k);
    void *w = zc_param_acquire(e, p[1], NULL);
    cr_assert_eq(w, (void *)(mem + 300));
    cr_assert_eq(zc_param_release(e, p[1], NULL), ZC_OK);
    zc_block_destroy(b);
    zc_block_destroy(rev);
    zc_engine_destroy(e);
    free(mem);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}
