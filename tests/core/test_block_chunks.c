/* Block calls over blocks that span many chunks.
 *
 * A GPT block at width 2304 holds 64 M parameters, which the 2^24-element
 * chunk cap splits into six chunks; stages 2/3 then need the gradient
 * buffers of all six at once when the block hands its gradients over with
 * zc_block_grad_buffers. Here ZC_CHUNK_CAP forces that layout on the
 * harness's eight small tensors: with a cap of 64 elements every tensor is a
 * chunk of its own, and layers cut at zc_chunk_boundary calls make blocks of
 * 1 to 8 chunks. Through the block calls (zc_block_span and zc_block_create)
 * such a loop trains bitwise as the same loop calling the per-parameter
 * functions, at stages 0-3 and worlds 1 and 3, and at stages 2/3 the block
 * really held every chunk's gradient buffer at once. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_runs.h"

/* Layers (first parameter of each, then the end) and the chunks each spans
 * with a cap of 64 elements (one tensor per chunk). */
typedef struct cut {
    int layers[T_NPARAMS + 1];
    int nlayers;
} cut;

static const cut cuts[] = {
    {{0, 8}, 1},             /* one block of 8 chunks */
    {{0, 1, 3, 6, 8}, 4},    /* 1, 2, 3, 2 */
    {{0, 4, 5, 8}, 3},       /* 4, 1, 3 */
    {{0, 5, 8}, 2},          /* 5, 3 */
    {{0, 6, 8}, 2},          /* 6, 2 */
    {{0, 7, 8}, 2},          /* 7, 1 */
};

/* Padded elements of the chunks of layer l of cut c at world w (cap 64: a
 * tensor per chunk, each padded to a multiple of w x 64). */
static int64_t layer_padded(const cut *c, int l, int w)
{
    int64_t n = 0;
    for (int i = c->layers[l]; i < c->layers[l + 1]; i++) {
        const int64_t a = 64 * (int64_t)w;
        n += (t_numel[i] + a - 1) / a * a;
    }
    return n;
}

static void run_cut(const cut *c, int stage, int world, zc_dtype dt, int accum, int mode)
{
    t_run ref;
    t_run_init(&ref, stage, world, dt);
    ref.steps = 5;
    ref.accum = accum;
    ref.layerwise = true;
    ref.layers = c->layers;
    ref.nlayers = c->nlayers;
    ref.layer_boundaries = true;
    t_run blk = ref;
    blk.blocks = mode;
    char what[256];
    t_run_describe(&ref, what, sizeof what);
    t_run *r = t_run_trained(&ref), *b = t_run_trained(&blk);
    cr_assert_eq(r->stats[0].num_chunks, T_NPARAMS, "%s: %lld chunks, not one per tensor", what,
                 (long long)r->stats[0].num_chunks);
    t_assert_trained(b);
    t_assert_same_training(b, r, "block calls");
    if (stage >= 2) {
        /* The largest block's gradient buffers were all held at once: the
         * peak of the buffers in use covers its chunks (stage 3 adds its
         * gather buffers on top). */
        int64_t most = 0;
        for (int l = 0; l < c->nlayers; l++)
            if (layer_padded(c, l, world) > most)
                most = layer_padded(c, l, world);
        const int64_t esz = (int64_t)zc_dtype_size(dt);
        cr_assert_geq(b->stats[0].peak_bytes[ZC_MEM_BUFFERS], most * esz,
                      "%s: peak buffers %lld below the largest block's gradients %lld", what,
                      (long long)b->stats[0].peak_bytes[ZC_MEM_BUFFERS],
                      (long long)(most * esz));
    }
    t_run_free(r);
    t_run_free(b);
}

Test(block_chunks, spans_of_1_to_8_chunks_equal_per_param_stages_0_3)
{
    cr_assert_eq(setenv("ZC_CHUNK_CAP", "64", 1), 0);
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        for (int stage = 0; stage <= 3; stage++)
            for (int w = 1; w <= 3; w += 2)
                run_cut(&cuts[k], stage, w, ZC_DTYPE_F32, 1, T_BLOCK_SPAN);
    t_assert_no_leaks();
}

Test(block_chunks, lists_bf16_and_accumulation)
{
    cr_assert_eq(setenv("ZC_CHUNK_CAP", "64", 1), 0);
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        for (int stage = 0; stage <= 3; stage++) {
            run_cut(&cuts[k], stage, 2, ZC_DTYPE_BF16, 1, T_BLOCK_LIST);
            run_cut(&cuts[k], stage, 2, ZC_DTYPE_F32, 2, T_BLOCK_SPAN);
        }
    t_assert_no_leaks();
}

/* The cap is parsed strictly (a test switch must not be half-read): each
 * bad value makes zc_engine_create fail naming the variable, and a good one
 * shapes the layout as the planner says (one chunk per tensor at 64). */
Test(block_chunks, chunk_cap_is_parsed_strictly)
{
    static const char *const bad[] = {"0", "-1", "64k", " 64", "64 ", "1e3", "16777217",
                                      "99999999999999999999", "0x40"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(setenv("ZC_CHUNK_CAP", bad[i], 1), 0);
        t_run r;
        t_run_init(&r, 2, 1, ZC_DTYPE_F32);
        r.steps = 1;
        cr_assert_not(t_engine_run(&r), "ZC_CHUNK_CAP='%s' was accepted", bad[i]);
        cr_assert(strstr(t_run_error(&r), "ZC_CHUNK_CAP") &&
                      strstr(t_run_error(&r), "configuration"),
                  "ZC_CHUNK_CAP='%s': %s", bad[i], t_run_error(&r));
        free(r.master);
    }
    cr_assert_eq(setenv("ZC_CHUNK_CAP", "1024", 1), 0);
    t_run r;
    t_run_init(&r, 2, 1, ZC_DTYPE_F32);
    r.steps = 1;
    cr_assert(t_engine_run(&r), "%s", t_run_error(&r));
    /* {p0} {p1 p2} {p3} {p4} | {p5} {p6} {p7}: the harness's bucket of 2048
     * is capped at 1024, and the boundary before p5 stays. */
    cr_assert_eq(r.stats[0].num_chunks, 7);
    free(r.master);
    cr_assert_eq(unsetenv("ZC_CHUNK_CAP"), 0);
    t_assert_no_leaks();
}

/* ZC_CHUNK_CAP is a test switch, not a problem with the run: it is said once
 * at INFO, and nothing about it at WARN (a WARN line would print on every
 * run of a program that sets it, at the default level). */
static struct {
    pthread_mutex_t mu;
    int info, warn;
} cap_log = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

static void cap_sink(zc_log_level level, const char *subsys, int rank, const char *line,
                     void *user)
{
    (void)subsys, (void)rank, (void)user;
    if (!strstr(line, "ZC_CHUNK_CAP"))
        return;
    pthread_mutex_lock(&cap_log.mu);
    if (level == ZC_LOG_INFO && strstr(line, "ZC_CHUNK_CAP=64: chunks hold at most"))
        cap_log.info++;
    else if (level <= ZC_LOG_WARN)
        cap_log.warn++;
    pthread_mutex_unlock(&cap_log.mu);
}

Test(block_chunks, chunk_cap_is_said_at_info_not_warn)
{
    cr_assert_eq(setenv("ZC_CHUNK_CAP", "64", 1), 0);
    zc_log_set_level(ZC_LOG_INFO);
    zc_log_set_sink(cap_sink, NULL);
    t_run r;
    t_run_init(&r, 2, 2, ZC_DTYPE_F32);
    r.steps = 1;
    const bool ok = t_engine_run(&r);
    zc_log_set_sink(NULL, NULL);
    zc_log_set_level(ZC_LOG_WARN);
    cr_assert(ok, "%s", t_run_error(&r));
    free(r.master);
    cr_assert_eq(cap_log.info, 1, "%d INFO lines name the cap (once per process)", cap_log.info);
    cr_assert_eq(cap_log.warn, 0, "%d WARN or ERROR lines name ZC_CHUNK_CAP", cap_log.warn);
    cr_assert_eq(unsetenv("ZC_CHUNK_CAP"), 0);
    t_assert_no_leaks();
}
