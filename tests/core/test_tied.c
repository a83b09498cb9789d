/* Tied parameters (the pattern documented in zeroc.h): an embedding E used
 * by the LM head and by the token lookup receives gradient at the start of
 * backward (the head, from E's values) and at its end (the lookup). The loop
 * takes E's gradient buffer at the head, keeps it through the backward of
 * the blocks - whose chunks are reduced in between, E's chunk holding one of
 * the two reserved buffers in stages 2-3 - adds the lookup's contribution at
 * the end and makes E ready last. The reference is the same model without
 * tying: E's gradient is taken only at the end, both contributions summed
 * there by hand in the same float order. Claims: bitwise equal masters and
 * norms at stages 0-3 (world 2; fp32, bf16, and bf16 through the fp32
 * views), every stage equal to stage 0, and making E ready at its first use
 * leaves the second contribution with nowhere to go (ZC_ERR_INVALID_STATE). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"

/* E (its own chunk), then two blocks of two tensors (a chunk each):
 * block l is tensors 1 + 2l and 2 + 2l. */
#define NP 5
#define NBLK 2
static const int64_t numel[NP] = {640, 300, 21, 1000, 3};
#define MAXN 1000
#define WORLD 2
#define STEPS 4

typedef struct run {
    int stage;
    zc_dtype dt;
    bool tied;              /* E's buffer held through backward, else summed at the end */
    bool views;             /* through zc_block_grad_buffers_f32 / zc_block_view_f32 */
    float *master;
    double norms[STEPS];
    char err[WORLD][512];
} run;

static zc_comm *comms[WORLD];

#define TRY(call)                                                                            \
    do {                                                                                     \
        zc_status rc_ = (call);                                                              \
        if (rc_ != ZC_OK) {                                                                  \
            snprintf(r->err[rank], sizeof r->err[rank], "rank %d: %s: %s", rank, #call,      \
                     zc_last_error());                                                       \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

/* The head's contribution to E (depends on E's values) and the lookup's
 * (only on the data). */
static float head_grad(int rank, int step, int64_t k, float w)
{
    return 0.1f * w + (float)t_noise(0x4ead, rank, step, 0, 0, k);
}

static float lookup_grad(int rank, int step, int64_t k)
{
    /* Sparse, as a lookup's is: only some rows receive gradient. */
    return k % 3 == 0 ? (float)t_noise(0x100c, rank, step, 0, 0, k) / 7.0f : 0.0f;
}

/* The fp32 pointers of a block's values and gradients (at most two
 * tensors): the views, or scratch the loop widens into and narrows from. */
typedef struct fgrad {
    float *w[2], *g[2];
    void *w16[2], *g16[2];
    float wbuf[2][MAXN], gbuf[2][MAXN];
} fgrad;

static zc_status take(const run *r, zc_engine *eng, zc_block *b, fgrad *f)
{
    const int n = zc_block_size(b);
    ZC_CHECK(zc_block_acquire(eng, b, NULL, f->w16));
    if (r->views) {
        ZC_CHECK(zc_block_view_f32(eng, b, f->w));
        return zc_block_grad_buffers_f32(eng, b, f->g);
    }
    ZC_CHECK(zc_block_grad_buffers(eng, b, f->g16));
    for (int j = 0; j < n; j++) {
        const int64_t m = zc_param_numel(zc_block_param(b, j));
        for (int64_t k = 0; k < m; k++) {
            f->wbuf[j][k] = zc__load_f32(f->w16[j], r->dt, (size_t)k);
            f->gbuf[j][k] = zc__load_f32(f->g16[j], r->dt, (size_t)k);
        }
        f->w[j] = f->wbuf[j];
        f->g[j] = f->gbuf[j];
    }
    return ZC_OK;
}

/* Without views the loop narrows its float gradients into the buffers, and
 * (reget) reads them back as the next contribution's starting point. */
static void put(const run *r, zc_block *b, fgrad *f, bool reget)
{
    if (r->views)
        return;
    for (int j = 0; j < zc_block_size(b); j++) {
        const int64_t m = zc_param_numel(zc_block_param(b, j));
        for (int64_t k = 0; k < m; k++)
            zc__store_f32(f->g16[j], r->dt, (size_t)k, f->g[j][k]);
        if (reget)
            for (int64_t k = 0; k < m; k++)
                f->g[j][k] = zc__load_f32(f->g16[j], r->dt, (size_t)k);
    }
}

static void rank_main(int rank, void *arg)
{
    run *r = arg;
    zc_engine *eng = NULL;
    zc_config *cfg = NULL;
    zc_param *P[NP] = {0};
    zc_block *E = NULL, *L[NBLK] = {0};
    static __thread fgrad fe, fb;
    float scratch[MAXN];
    TRY(zc_config_create(&cfg));
    TRY(zc_config_set_int(cfg, "zero_optimization.stage", r->stage));
    TRY(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold", 0));
    TRY(zc_config_set_double(cfg, "optimizer.params.lr", 1e-2));
    if (r->dt == ZC_DTYPE_BF16)
        TRY(zc_config_set_bool(cfg, "bf16.enabled", true));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 4096;
    eo.f32_view_chunks = r->views ? 2 : 0;
    TRY(zc_engine_create(&eng, cfg, comms[rank], &eo));
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        if (i == 0 || i == 1 || i == 3) /* E, block 0, block 1: a chunk each */
            TRY(zc_chunk_boundary(eng));
        P[i] = zc_param_add(eng, name, &numel[i], 1, 0);
        if (!P[i])
            TRY(ZC_ERR_INVALID_ARG);
    }
    TRY(zc_engine_build(eng));
    for (int i = 0; i < NP; i++) {
        for (int64_t k = 0; k < numel[i]; k++)
            scratch[k] = 0.3f * (float)t_noise(0x7ed0, 0, 0, 0, i, k);
        TRY(zc_param_load(eng, P[i], scratch));
    }
    TRY(zc_block_span(eng, P[0], &E));
    TRY(zc_block_span(eng, P[1], &L[0]));
    TRY(zc_block_span(eng, P[3], &L[1]));
    for (int s = 0; s < STEPS; s++) {
        /* Forward: the lookup, the blocks, the head (E again). */
        zc_block *fwd[4] = {E, L[0], L[1], E};
        for (int j = 0; j < 4; j++) {
            TRY(zc_block_acquire(eng, fwd[j], NULL, NULL));
            TRY(zc_block_release(eng, fwd[j], NULL));
        }
        /* Backward: the head first (the tied run takes E's buffer now). */
        if (r->tied) {
            TRY(take(r, eng, E, &fe));
            for (int64_t k = 0; k < numel[0]; k++)
                fe.g[0][k] += head_grad(rank, s, k, fe.w[0][k]);
            put(r, E, &fe, true);
            TRY(zc_block_release(eng, E, NULL));
        }
        for (int l = NBLK - 1; l >= 0; l--) {
            TRY(take(r, eng, L[l], &fb));
            for (int j = 0; j < 2; j++) {
                const int i = 1 + 2 * l + j;
                for (int64_t k = 0; k < numel[i]; k++)
                    fb.g[j][k] += 0.05f * fb.w[j][k] + (float)t_noise(0xb10c, rank, s, 0, i, k);
            }
            put(r, L[l], &fb, false);
            TRY(zc_block_grad_ready(eng, L[l]));
            TRY(zc_block_release(eng, L[l], NULL));
        }
        /* The lookup last: the tied run adds to the buffer it kept; the
         * untied reference takes E's buffer only now and sums both parts
         * by hand, in the same order. */
        if (!r->tied) {
            TRY(take(r, eng, E, &fe));
            for (int64_t k = 0; k < numel[0]; k++)
                fe.g[0][k] += head_grad(rank, s, k, fe.w[0][k]);
            put(r, E, &fe, true);
            TRY(zc_block_release(eng, E, NULL));
        }
        for (int64_t k = 0; k < numel[0]; k++)
            fe.g[0][k] += lookup_grad(rank, s, k);
        put(r, E, &fe, false);
        TRY(zc_block_grad_ready(eng, E));
        zc_step_info info;
        TRY(zc_step(eng, &info));
        if (rank == 0)
            r->norms[s] = info.grad_norm;
    }
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        TRY(zc_param_gather_master(eng, P[i], rank == 0 ? r->master + off : scratch));
        off += numel[i];
    }
out:
    zc_block_destroy(E);
    for (int l = 0; l < NBLK; l++)
        zc_block_destroy(L[l]);
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
}

static size_t total(void)
{
    size_t n = 0;
    for (int i = 0; i < NP; i++)
        n += (size_t)numel[i];
    return n;
}

static void train(run *r)
{
    r->master = calloc(total(), sizeof(float));
    cr_assert_eq(zc_comm_local_world(WORLD, comms), ZC_OK);
    t_run_ranks(WORLD, rank_main, r);
    for (int i = 0; i < WORLD; i++)
        zc_comm_destroy(comms[i]);
    for (int i = 0; i < WORLD; i++)
        cr_assert_eq(r->err[i][0], 0, "stage %d %s tied %d views %d: %s", r->stage,
                     zc_dtype_name(r->dt), r->tied, r->views, r->err[i]);
}

static void tied_equals_summed(zc_dtype dt, bool views)
{
    float *stage0 = NULL;
    for (int stage = 0; stage <= 3; stage++) {
        run tied = {.stage = stage, .dt = dt, .tied = true, .views = views};
        run ref = tied;
        ref.tied = false;
        train(&tied);
        train(&ref);
        cr_assert(memcmp(tied.master, ref.master, total() * sizeof(float)) == 0,
                  "stage %d %s views %d: the tied loop differs from summing by hand", stage,
                  zc_dtype_name(dt), views);
        for (int s = 0; s < STEPS; s++)
            cr_assert_eq(tied.norms[s], ref.norms[s], "stage %d step %d", stage, s);
        cr_assert_gt(tied.norms[STEPS - 1], 0.0);
        if (stage == 0) {
            stage0 = tied.master;
        } else {
            cr_assert(memcmp(tied.master, stage0, total() * sizeof(float)) == 0,
                      "stage %d differs from stage 0", stage);
            free(tied.master);
        }
        free(ref.master);
    }
    free(stage0);
    t_assert_no_leaks();
}

Test(tied, fp32) { tied_equals_summed(ZC_DTYPE_F32, false); }
Test(tied, bf16) { tied_equals_summed(ZC_DTYPE_BF16, false); }
Test(tied, bf16_fp32_views) { tied_equals_summed(ZC_DTYPE_BF16, true); }

/* Made ready at its first use, E has no buffer for the lookup's part: a
 * second zc_grad_buffer or zc_grad_ready in the micro-step is refused. */
Test(tied, ready_twice_is_refused)
{
    zc_config *cfg = NULL;
    zc_comm *comm = NULL;
    zc_engine *eng = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 2), ZC_OK);
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&eng, cfg, comm, &eo), ZC_OK);
    zc_param *e = zc_param_add(eng, "wte", &numel[0], 1, 0);
    cr_assert_not_null(e);
    cr_assert_eq(zc_engine_build(eng), ZC_OK);
    cr_assert_not_null(zc_grad_buffer(eng, e));
    cr_assert_eq(zc_grad_ready(eng, e), ZC_OK);
    cr_assert_null(zc_grad_buffer(eng, e));
    cr_assert_not_null(strstr(zc_last_error(), "already made ready"), "%s", zc_last_error());
    cr_assert_eq(zc_grad_ready(eng, e), ZC_ERR_INVALID_STATE);
    cr_assert_eq(zc_step(eng, NULL), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(eng);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
