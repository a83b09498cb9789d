/* Stage 3 with offload_param "nvme": the shard reads started ahead, seen
 * after every acquire of a recorded step on one rank.
 *
 * NCHUNK chunks of CHUNK bf16 elements, one parameter each, acquired in order
 * (forward) and in reverse (backward), reuse distance 0, a prefetch bucket
 * covering the model and buffer_count 16, so neither the bucket nor the
 * buffers bound the reads ahead: only the prefetcher's own bound does. The
 * expected schedule is computed from the trace, not observed: after the
 * activation at trace position i, the reads in flight are those of the next
 * min(2, what is left of the pass) chunks, none of them gathered yet.
 *
 * aio.block_size 4096 and aio.queue_depth 2 make a shard PIECES requests; a
 * read started ahead must have all of them handed to the store at once (the
 * store cuts further pieces only when called, so with queue_depth pieces a
 * read would stop while the caller computes). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "core/state/param_state.h"
#include "helpers.h"
#include "t_offload.h"

#define NCHUNK 8
#define CHUNK 16384                  /* elements: 32 KiB of bf16 */
#define PIECES (CHUNK * 2 / 4096)    /* requests per shard read */
#define AHEAD 2

typedef struct model {
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[NCHUNK];
} model;

static t_swapdir dir;

static void setup(void) { t_swapdir_make(&dir, "zc-read-ahead"); }

static void teardown(void) { t_swapdir_remove(&dir); }

static void set(model *m, const char *key, const char *v)
{
    cr_assert_eq(zc_config_set(m->cfg, key, v), ZC_OK, "%s: %s", key, zc_last_error());
}

static void open_model(model *m)
{
    memset(m, 0, sizeof *m);
    cr_assert_eq(zc_comm_local_world(1, &m->comm), ZC_OK);
    cr_assert_eq(zc_config_create(&m->cfg), ZC_OK);
    set(m, "zero_optimization.stage", "3");
    set(m, "bf16.enabled", "true");
    set(m, "zero_optimization.stage3_param_persistence_threshold", "0");
    set(m, "zero_optimization.stage3_max_reuse_distance", "0");
    set(m, "zero_optimization.stage3_prefetch_bucket_size", "1000000000");
    set(m, "zero_optimization.offload_param.device", "\"nvme\"");
    set(m, "zero_optimization.offload_param.nvme_path", dir.json);
    set(m, "zero_optimization.offload_param.max_in_cpu", "0");
    set(m, "zero_optimization.offload_param.buffer_count", "16");
    set(m, "aio.block_size", "4096");
    set(m, "aio.queue_depth", "2");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = CHUNK;
    cr_assert_eq(zc_engine_create(&m->e, m->cfg, m->comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < NCHUNK; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        const int64_t numel = CHUNK;
        m->p[i] = zc_param_add(m->e, name, &numel, 1, 0);
        cr_assert_not_null(m->p[i], "%s", zc_last_error());
    }
    cr_assert_eq(zc_engine_build(m->e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(m->e->nchunks, NCHUNK);
}

static void close_model(model *m)
{
    zc_engine_destroy(m->e);
    zc_config_destroy(m->cfg);
    zc_comm_destroy(m->comm);
}

static int64_t read_requests(const zc_engine *e)
{
    zc_param_home_io io;
    zc__param_io(e, &io);
    return io.requests - io.write_requests;
}

static int64_t reads_done(const zc_engine *e)
{
    zc_param_home_io io;
    zc__param_io(e, &io);
    return io.reads;
}

/* After the activation of trace position pos (0 .. 2 NCHUNK - 1) in a
 * recorded step: exactly the next chunks of the trace within AHEAD are
 * being read, not gathered; no other chunk is. Forward is positions
 * 0..NCHUNK-1 (chunk = pos), backward NCHUNK..2 NCHUNK-1 (chunk = 2 NCHUNK - 1
 * - pos); backward's first chunk is forward's last, acquired right now at
 * the end of forward, so nothing is read ahead across that turn. */
static void check_reads(const model *m, int pos, int step)
{
    bool want[NCHUNK] = {false};
    const int fwd_end = NCHUNK; /* the turn: position NCHUNK is chunk NCHUNK-1 */
    if (pos != fwd_end - 1)
        for (int j = pos + 1; j <= pos + AHEAD && j < 2 * NCHUNK; j++)
            want[j < NCHUNK ? j : 2 * NCHUNK - 1 - j] = true;
    int inflight = 0;
    for (int k = 0; k < NCHUNK; k++) {
        const zc_chunk *c = &m->e->chunks[k];
        cr_assert_eq(c->reading, want[k], "step %d, after position %d: chunk %d reading %d, "
                     "expected %d", step, pos, k, c->reading, want[k]);
        if (c->reading) {
            inflight++;
            cr_assert_null(c->gather, "step %d, after position %d: chunk %d gathered before "
                           "its activation", step, pos, k);
        }
    }
    cr_assert_leq(inflight, AHEAD);
}

/* Every read started so far is wholly in the store's hands: its PIECES
 * requests were issued when it started, not when it was waited for. */
static void check_requests(const model *m, int64_t req0, int64_t done0, int pos, int step)
{
    int inflight = 0;
    for (int k = 0; k < NCHUNK; k++)
        inflight += m->e->chunks[k].reading;
    const int64_t started = reads_done(m->e) - done0 + inflight;
    cr_assert_eq(read_requests(m->e) - req0, PIECES * started,
                 "step %d, after position %d: %lld read requests for %lld reads of %d pieces",
                 step, pos, (long long)(read_requests(m->e) - req0), (long long)started, PIECES);
}

static void acquire(model *m, int k, int pos, int step, int64_t req0, int64_t done0)
{
    void *w = NULL;
    cr_assert_eq(zc_param_acquire_status(m->e, m->p[k], NULL, &w), ZC_OK, "%s",
                 zc_last_error());
    if (step > 0) {
        check_reads(m, pos, step);
        check_requests(m, req0, done0, pos, step);
    }
}

Test(read_ahead, bounded_gathered_by_their_activation_wholly_submitted, .init = setup,
     .fini = teardown)
{
    model m;
    open_model(&m);
    for (int step = 0; step < 3; step++) {
        const int64_t req0 = read_requests(m.e), done0 = reads_done(m.e);
        for (int i = 0; i < NCHUNK; i++) {
            acquire(&m, i, i, step, req0, done0);
            cr_assert_eq(zc_param_release(m.e, m.p[i], NULL), ZC_OK, "%s", zc_last_error());
        }
        for (int i = NCHUNK - 1; i >= 0; i--) {
            acquire(&m, i, 2 * NCHUNK - 1 - i, step, req0, done0);
            cr_assert_not_null(zc_grad_buffer(m.e, m.p[i]), "%s", zc_last_error());
            cr_assert_eq(zc_grad_ready(m.e, m.p[i]), ZC_OK, "%s", zc_last_error());
            cr_assert_eq(zc_param_release(m.e, m.p[i], NULL), ZC_OK, "%s", zc_last_error());
        }
        cr_assert_eq(zc_step(m.e, NULL), ZC_OK, "%s", zc_last_error());
        zc_offload_stats os = {.size = sizeof os};
        cr_assert_eq(zc_engine_offload_stats(m.e, &os), ZC_OK);
        cr_assert_eq(os.param_reads, 2 * NCHUNK);
        if (step > 0) {
            /* Misses: the first chunk of forward and of backward. */
            cr_assert_eq(os.prefetch_misses, 2, "step %d: %lld misses", step,
                         (long long)os.prefetch_misses);
            cr_assert_eq(os.prefetch_hits, 2 * NCHUNK - 2);
        }
    }
    close_model(&m);
    t_assert_no_leaks();
}
