/* How the engine orders its work with the caller's streams, checked on the
 * host path with a recording device.
 *
 * The host backend runs everything at once, so a missing event cannot race
 * here; what can be checked is that the engine makes the right ordering calls.
 * A device that forwards every operation to the host backend and logs it
 * (operation, stream, event) stands in for the CUDA backend: its streams and
 * events are distinct handles, so the log says which stream waits on which
 * recorded work. It is installed right after zc_engine_create, so the
 * engine's streams are created through it at build.
 *
 *   - zc_param_acquire records an event on the engine's stream and makes the
 *     caller's stream wait on it (a caller's NULL stream too), never a host
 *     wait; zc_param_release records one on the caller's stream that the
 *     engine's stream waits on;
 *   - zc_grad_buffer orders zc_engine_options.stream after the zero-fill;
 *     the chunk's last zc_grad_ready orders the engine's stream after it
 *     before any reduction work; with overlap_comm the reduction runs on a
 *     communication stream, the next chunk's buffer does not wait for it,
 *     a reused slot does, and zc_step waits for all reductions first;
 *   - zc_step waits on the host once per step for the engine's work (the
 *     norm partials, however many chunks) and, when it applies the update,
 *     once for the agreement's exchange on the control stream;
 *   - after zc_engine_build nothing allocates in a 3-step run at any stage:
 *     device allocations counted by the recording device (world 2), and the
 *     allocator's fault switch armed for the next host allocation (world 1,
 *     where device memory is host memory).
 *   - offload_optimizer "cpu" with staging forced on: the gradient D2H and
 *     output H2D copies on a copy stream of their own (see below).
 * The numerics of these runs are covered by the stage-equivalence tests. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"

#include "t_recdev.h"

/* ---- a small model ------------------------------------------------------- */

#define NP 4
/* With a bucket of 512: chunks {p0 p1}, {p2} (larger than the bucket), {p3}. */
static const int64_t numel[NP] = {300, 200, 700, 400};

typedef struct st_eng {
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[NP];
    rec_dev *f;
} st_eng;

static char user_stream_handle, caller_stream_handle;
#define U ((void *)&user_stream_handle)
#define S ((void *)&caller_stream_handle)

/* Opens an engine on comm with the recording device installed (or none
 * when f is NULL); asserts from the calling thread only through its return
 * value, so rank threads may use it. */
/* offload_param.device for the next open_eng (NULL: none). */
static const char *g_offload_param;
/* offload_optimizer.device for the next open_eng (NULL: none). */
static const char *g_offload_opt;

static zc_status open_eng(st_eng *x, zc_comm *comm, int stage, int overlap, rec_dev *f)
{
    memset(x, 0, sizeof *x);
    x->f = f;
    ZC_CHECK(zc_config_create(&x->cfg));
    ZC_CHECK(zc_config_set_int(x->cfg, "zero_optimization.stage", stage));
    if (g_offload_param) {
        ZC_CHECK(zc_config_set(x->cfg, "zero_optimization.offload_param.device",
                               g_offload_param));
        /* small chunks would otherwise be persistent: never offloaded */
        ZC_CHECK(zc_config_set_int(x->cfg,
                                   "zero_optimization.stage3_param_persistence_threshold", 0));
    }
    if (g_offload_opt)
        ZC_CHECK(zc_config_set(x->cfg, "zero_optimization.offload_optimizer.device",
                               g_offload_opt));
    ZC_CHECK(zc_config_set_bool(x->cfg, "zero_optimization.overlap_comm", overlap != 0));
    ZC_CHECK(zc_config_set_double(x->cfg, "gradient_clipping", 1.0));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 512;
    eo.stream = U;
    ZC_CHECK(zc_engine_create(&x->e, x->cfg, comm, &eo));
    if (f)
        rec_install(x->e, f);
    for (int i = 0; i < NP; i++) {
        char name[4] = {'p', (char)('0' + i), 0};
        x->p[i] = zc_param_add(x->e, name, &numel[i], 1, 0);
        if (!x->p[i])
            return ZC_ERR_INVALID_ARG;
    }
    ZC_CHECK(zc_engine_build(x->e));
    float v[700];
    for (int i = 0; i < NP; i++) {
        for (int64_t j = 0; j < numel[i]; j++)
            v[j] = 0.01f * (float)((j + i) % 17) - 0.08f;
        ZC_CHECK(zc_param_load(x->e, x->p[i], v));
    }
    return ZC_OK;
}

static void close_eng(st_eng *x)
{
    zc_engine_destroy(x->e);
    zc_config_destroy(x->cfg);
}

/* Writes parameter i's gradient for (rank, step) and makes it ready. */
static zc_status backward_one(st_eng *x, int i, int rank, int step)
{
    zc_engine *e = x->e;
    if (!zc_param_acquire(e, x->p[i], S))
        return ZC_ERR_INVALID_STATE;
    float *g = zc_grad_buffer(e, x->p[i]);
    if (!g)
        return ZC_ERR_INVALID_STATE;
    for (int64_t j = 0; j < numel[i]; j++)
        g[j] = (float)t_noise(18, rank, step, 0, i, j);
    ZC_CHECK(zc_grad_ready(e, x->p[i]));
    return zc_param_release(e, x->p[i], S);
}

/* Forward (acquire, release) and backward in reverse order. */
static zc_status window(st_eng *x, int rank, int step)
{
    for (int i = 0; i < NP; i++) {
        if (!zc_param_acquire(x->e, x->p[i], S))
            return ZC_ERR_INVALID_STATE;
        ZC_CHECK(zc_param_release(x->e, x->p[i], S));
    }
    for (int i = NP - 1; i >= 0; i--)
        ZC_CHECK(backward_one(x, i, rank, step));
    return ZC_OK;
}

static zc_comm *comm1(void)
{
    zc_comm *c = NULL;
    cr_assert_eq(zc_comm_local_world(1, &c), ZC_OK);
    return c;
}

/* ---- acquire / release --------------------------------------------------- */

static void check_acquire_release(int stage)
{
    zc_comm *comm = comm1();
    static rec_dev f;
    st_eng x;
    cr_assert_eq(open_eng(&x, comm, stage, 0, &f), ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    void *es = e->stream;
    cr_assert(rec_is_nonblocking(&f, es), "stage %d: the engine's stream was not created "
                                      "non-blocking through the device", stage);
    void *callers[2] = {S, NULL}; /* NULL: the legacy default stream */
    for (int c = 0; c < 2; c++) {
        void *cs = callers[c];
        int mark = f.n;
        cr_assert_not_null(zc_param_acquire(e, x.p[2], cs), "%s", zc_last_error());
        int end = f.n;
        int rec_i = rec_find(&f, mark, end, R_RECORD, es, ANY);
        cr_assert_geq(rec_i, 0, "stage %d: acquire recorded no event on the engine's stream",
                      stage);
        void *ev = f.log[rec_i].event;
        cr_assert_geq(rec_find(&f, rec_i + 1, end, R_WAIT, cs, ev), 0,
                      "stage %d: the caller's stream (%s) does not wait for the acquire's "
                      "event", stage, cs ? "S" : "NULL");
        /* The event captures everything the acquire queued on the engine's stream. */
        for (int i = rec_i + 1; i < end; i++)
            cr_assert(!(rec_is_work(f.log[i].op) && f.log[i].stream == es),
                      "stage %d: work queued on the engine's stream after the acquire's event",
                      stage);
        cr_assert_eq(rec_count_host_waits(&f, mark, end, ANY), 0,
                     "stage %d: zc_param_acquire waited on the host", stage);

        mark = f.n;
        cr_assert_eq(zc_param_release(e, x.p[2], cs), ZC_OK, "%s", zc_last_error());
        end = f.n;
        rec_i = rec_find(&f, mark, end, R_RECORD, cs, ANY);
        cr_assert_geq(rec_i, 0, "stage %d: release recorded no event on the caller's stream",
                      stage);
        cr_assert_geq(rec_find(&f, rec_i + 1, end, R_WAIT, es, f.log[rec_i].event), 0,
                      "stage %d: the engine's stream does not wait for the release's event",
                      stage);
        cr_assert_eq(rec_count_host_waits(&f, mark, end, ANY), 0,
                     "stage %d: zc_param_release waited on the host", stage);
    }
    cr_assert(!f.overflow);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, acquire_and_release_order_by_events_stage0) { check_acquire_release(0); }
Test(engine_streams, acquire_and_release_order_by_events_stage1) { check_acquire_release(1); }
Test(engine_streams, acquire_and_release_order_by_events_stage2) { check_acquire_release(2); }
Test(engine_streams, acquire_and_release_order_by_events_stage3) { check_acquire_release(3); }

/* Stage 3 with offload_param: the shard's H2D copy out of its pinned home
 * runs on a copy stream of its own, after the engine's stream (an event the
 * copy stream waits on), and the engine's stream - where the all-gather
 * runs - waits for the copy's event: no host wait in the acquire. */
Test(engine_streams, offload_param_copy_on_its_own_stream)
{
    zc_comm *comm = comm1();
    static rec_dev f;
    st_eng x;
    g_offload_param = "\"cpu\"";
    zc_status orc = open_eng(&x, comm, 3, 0, &f);
    g_offload_param = NULL;
    cr_assert_eq(orc, ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    void *es = e->stream, *hs = e->h2d_stream;
    cr_assert_not_null(hs);
    cr_assert_neq(hs, es);
    cr_assert(rec_is_nonblocking(&f, hs), "the copy stream was not created non-blocking");
    const int mark = f.n;
    cr_assert_not_null(zc_param_acquire(e, x.p[2], S), "%s", zc_last_error());
    const int end = f.n;
    const int cp = rec_find(&f, mark, end, R_COPY, hs, NULL);
    cr_assert_geq(cp, 0, "the shard's copy is not on the copy stream");
    cr_assert_lt(rec_find(&f, mark, end, R_COPY, es, NULL), 0, "a copy on the engine's stream");
    /* before the copy: the copy stream waits for an event of the engine's */
    int w = -1;
    for (int i = cp - 1; i >= mark && w < 0; i--)
        if (f.log[i].op == R_WAIT && f.log[i].stream == hs)
            w = i;
    cr_assert_geq(w, 0, "the copy stream does not wait before the copy");
    cr_assert_geq(rec_find(&f, mark, w, R_RECORD, es, f.log[w].event), 0,
                  "the copy stream waits for an event not recorded on the engine's stream");
    /* after it: its event, which the engine's stream waits for */
    const int rc_i = rec_find(&f, cp + 1, end, R_RECORD, hs, ANY);
    cr_assert_geq(rc_i, 0, "no event recorded after the copy");
    cr_assert_geq(rec_find(&f, rc_i + 1, end, R_WAIT, es, f.log[rc_i].event), 0,
                  "the engine's stream does not wait for the copy");
    cr_assert_eq(rec_count_host_waits(&f, mark, end, ANY), 0, "the acquire waited on the host");
    cr_assert_eq(zc_param_release(e, x.p[2], S), ZC_OK, "%s", zc_last_error());
    cr_assert(!f.overflow);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

/* Optimizer offload "cpu" with the staging a GPU takes (forced on the host):
 *   - backward: each chunk's reduced slice is copied D2H on the engine's
 *     optimizer copy stream, after an event of the reduction's stream, and
 *     the chunk's own event is recorded after it; no host wait at all, and
 *     no copy on the engine's or the communication stream (stages 2/3: a
 *     gradient pool slot is zeroed for another chunk only after the engine's
 *     stream waited for the copy that read it);
 *   - the step: chunk k's H2D output copy runs on the copy stream after an
 *     event of the engine's stream, and the engine's stream waits for it;
 *     before it, the host waited only for chunk k's gradient copy and for
 *     the output buffer's copy two chunks back - never for a later chunk's
 *     gradient or the previous chunk's output (stages 2/3 wait for chunk
 *     k's gradient in the norm, before chunk k's partial and after chunk
 *     k-1's); the reset waits, on the device, for the copy stream. */
static void check_offload_opt_copies(int stage, int overlap)
{
    zc_comm *comm = comm1();
    static rec_dev f;
    st_eng x;
    g_offload_opt = "\"cpu\"";
    zc__opt_force_staging(true);
    zc_status orc = open_eng(&x, comm, stage, overlap, &f);
    zc__opt_force_staging(false);
    g_offload_opt = NULL;
    cr_assert_eq(orc, ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    void *es = e->stream, *cs = e->comm_stream, *cp = e->copy_stream;
    cr_assert_not_null(cp, "stage %d: no optimizer copy stream", stage);
    cr_assert(cp != es && cp != cs && rec_is_nonblocking(&f, cp));
    cr_assert_eq(e->nchunks, 3);

    /* backward, chunks completed in order 2, 1, 0; which gradient pool slot
     * each chunk's buffer took, and where its zero-fill was logged */
    int mark = f.n;
    int slot_of[3] = {-1, -1, -1}, fill_from[3] = {-1, -1, -1};
    for (int i = NP - 1; i >= 0; i--) {
        const int c = x.p[i]->chunk;
        if (fill_from[c] < 0)
            fill_from[c] = f.n;
        cr_assert_not_null(zc_param_acquire(e, x.p[i], S));
        float *g = zc_grad_buffer(e, x.p[i]);
        cr_assert_not_null(g, "%s", zc_last_error());
        if (stage >= 2)
            slot_of[c] = zc__bufpool_slot(&e->pool_grad, e->chunks[c].gbuf);
        for (int64_t j = 0; j < numel[i]; j++)
            g[j] = (float)t_noise(18, 0, 0, 0, i, j);
        cr_assert_eq(zc_grad_ready(e, x.p[i]), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_param_release(e, x.p[i], S), ZC_OK);
    }
    int end = f.n;
    cr_assert_eq(rec_count_host_waits(&f, mark, end, ANY), 0,
                 "stage %d: the host waited during backward", stage);
    int copies = 0;
    for (int i = mark; i < end; i++) {
        if (f.log[i].op != R_COPY)
            continue;
        cr_assert_eq(f.log[i].stream, cp, "stage %d: a copy off the copy stream in backward",
                     stage);
        copies++;
        int w = -1;
        for (int j = i - 1; j >= mark && w < 0; j--)
            if (f.log[j].op == R_WAIT && f.log[j].stream == cp)
                w = j;
        cr_assert_geq(w, 0, "stage %d: the gradient copy waits for nothing", stage);
        cr_assert_geq(rec_find(&f, mark, w, R_RECORD, cs, f.log[w].event), 0,
                      "stage %d: the gradient copy does not wait for the reduction's stream",
                      stage);
    }
    cr_assert_eq(copies, 3, "stage %d: %d gradient copies for 3 chunks", stage, copies);
    for (int k = 0; k < 3; k++)
        cr_assert_geq(rec_find(&f, mark, end, R_RECORD, cp, e->ev_land[k]), 0,
                      "stage %d: chunk %d's copy recorded no event", stage, k);
    /* a chunk whose buffer reuses an earlier chunk's slot: its zero-fill
     * waits for that chunk's copy (3 chunks, 2 slots: at least one reuse) */
    int reuses = 0;
    for (int c = 1; stage >= 2 && c >= 0; c--)
        for (int p = c + 1; p <= 2; p++) {
            if (slot_of[p] != slot_of[c])
                continue;
            reuses++;
            const int z = rec_find(&f, fill_from[c], end, R_MEMSET, es, NULL);
            cr_assert_geq(z, 0);
            cr_assert_geq(rec_find(&f, fill_from[c], z, R_WAIT, es, e->ev_land[p]), 0,
                          "stage %d: chunk %d's slot is zeroed before chunk %d's copy read it",
                          stage, c, p);
            break;
        }
    cr_assert(stage < 2 || reuses > 0, "stage %d: no slot was reused", stage);

    /* the step */
    mark = f.n;
    cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error());
    end = f.n;
    int h2d[3], n = 0;
    for (int i = mark; i < end; i++)
        if (f.log[i].op == R_COPY && f.log[i].stream == cp) {
            cr_assert_lt(n, 3, "stage %d: more than 3 copies in the step", stage);
            h2d[n++] = i;
        }
    cr_assert_eq(n, 3, "stage %d: %d output copies on the copy stream", stage, n);
    cr_assert_eq(rec_count_host_waits(&f, mark, end, cp), 0, "stage %d: the copy stream was synced",
                 stage);
    for (int k = 0; k < 3; k++) {
        const int from = k ? h2d[k - 1] : mark;
        /* ordered after the engine's stream, and the engine's stream after it */
        int w = -1;
        for (int j = h2d[k] - 1; j >= from && w < 0; j--)
            if (f.log[j].op == R_WAIT && f.log[j].stream == cp)
                w = j;
        cr_assert_geq(w, 0, "stage %d chunk %d: the output copy waits for nothing", stage, k);
        cr_assert_geq(rec_find(&f, from, w, R_RECORD, es, f.log[w].event), 0);
        const int r = rec_find(&f, h2d[k] + 1, end, R_RECORD, cp, e->ev_out[k & 1]);
        cr_assert_geq(r, 0, "stage %d chunk %d: no event after the output copy", stage, k);
        cr_assert_geq(rec_find(&f, r + 1, end, R_WAIT, es, e->ev_out[k & 1]), 0,
                      "stage %d chunk %d: the engine's stream does not wait for it", stage, k);
        /* chunk k's host waits since the previous output copy: its own
         * gradient (stage 1) and its output buffer's copy of chunk k-2 */
        for (int j = from; j < h2d[k]; j++) {
            if (f.log[j].op != R_EVSYNC)
                continue;
            void *ev = f.log[j].event;
            const bool own = ev == e->ev_land[k] && stage == 1;
            const bool buf = ev == e->ev_out[k & 1] && k >= 2;
            cr_assert(own || buf || (stage >= 2 && k == 0),
                      "stage %d: before chunk %d's output the host waited for another event",
                      stage, k);
            if (buf)
                cr_assert_gt(j, h2d[k - 1], "stage %d chunk %d: waited for the previous "
                             "chunk's output copy", stage, k);
        }
        if (stage == 1)
            cr_assert_geq(rec_find(&f, from, h2d[k], R_EVSYNC, NULL, e->ev_land[k]), 0,
                          "stage 1 chunk %d: Adam does not wait for its gradient copy", k);
    }
    if (stage >= 2) {
        /* the norm: chunk k's gradient copy is waited for right before its
         * partial, after chunk k-1's */
        int prev = mark;
        for (int k = 0; k < 3; k++) {
            const int sy = rec_find(&f, prev, end, R_EVSYNC, NULL, e->ev_land[k]);
            cr_assert_geq(sy, 0, "stage %d: the norm does not wait for chunk %d's copy", stage,
                          k);
            for (int j = k + 1; j < 3; j++)
                cr_assert_lt(rec_find(&f, mark, sy, R_EVSYNC, NULL, e->ev_land[j]), 0,
                             "stage %d: chunk %d's copy waited for before chunk %d's", stage,
                             j, k);
            prev = sy + 1;
        }
    }
    /* the reset: the engine's stream waits for the copy stream before it
     * clears what the copies read */
    const int tail = rec_find(&f, h2d[2], end, R_RECORD, cp, e->ev_copy_tail);
    cr_assert_geq(tail, 0, "stage %d: no event for the reset", stage);
    cr_assert_geq(rec_find(&f, tail + 1, end, R_WAIT, es, e->ev_copy_tail), 0,
                  "stage %d: the reset does not wait for the copy stream", stage);
    if (stage == 1) {
        const int wt = rec_find(&f, tail + 1, end, R_WAIT, es, e->ev_copy_tail);
        const int z = rec_find(&f, h2d[2], end, R_MEMSET, es, NULL);
        cr_assert(z > wt, "stage 1: the gradient is cleared before the copy stream's wait");
    }
    cr_assert(!f.overflow);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, offload_optimizer_copies_stage1) { check_offload_opt_copies(1, 0); }
Test(engine_streams, offload_optimizer_copies_stage2) { check_offload_opt_copies(2, 0); }
Test(engine_streams, offload_optimizer_copies_stage2_overlap) { check_offload_opt_copies(2, 1); }
Test(engine_streams, offload_optimizer_copies_stage3_overlap) { check_offload_opt_copies(3, 1); }

/* ---- gradients ----------------------------------------------------------- */

/* Backward of chunk {p0 p1} with options.stream = U: grad_buffer makes U
 * wait for the zero-fill, the chunk's last grad_ready makes the engine's
 * stream wait for U before any reduction work. */
static void check_grad_order(int stage, int overlap)
{
    zc_comm *comm = comm1();
    static rec_dev f;
    st_eng x;
    cr_assert_eq(open_eng(&x, comm, stage, overlap, &f), ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    void *es = e->stream, *cs = e->comm_stream;
    cr_assert_neq(U, es);
    if (overlap)
        cr_assert(cs != es && rec_is_nonblocking(&f, cs),
                  "stage %d: overlap_comm has no communication stream of its own", stage);
    else
        cr_assert_eq(cs, es, "stage %d: a communication stream without overlap_comm", stage);

    int mark = f.n;
    float *g1 = zc_grad_buffer(e, x.p[1]);
    cr_assert_not_null(g1, "%s", zc_last_error());
    int end = f.n;
    int rec_i = rec_find(&f, mark, end, R_RECORD, es, ANY);
    cr_assert_geq(rec_i, 0, "stage %d: grad_buffer recorded no event on the engine's stream",
                  stage);
    cr_assert_geq(rec_find(&f, rec_i + 1, end, R_WAIT, U, f.log[rec_i].event), 0,
                  "stage %d: options.stream does not wait for the buffer's zero-fill", stage);
    if (stage >= 2) {
        int z = rec_find(&f, mark, end, R_MEMSET, es, NULL);
        cr_assert(z >= 0 && z < rec_i, "stage %d: the zero-fill is not before the event",
                  stage);
    }
    for (int64_t j = 0; j < numel[1]; j++)
        g1[j] = 0.5f;
    mark = f.n;
    cr_assert_eq(zc_grad_ready(e, x.p[1]), ZC_OK, "%s", zc_last_error());
    for (int i = mark; i < f.n; i++)
        cr_assert(!rec_is_work(f.log[i].op), "stage %d: reduction work before the chunk is complete",
                  stage);
    float *g0 = zc_grad_buffer(e, x.p[0]);
    cr_assert_not_null(g0);
    for (int64_t j = 0; j < numel[0]; j++)
        g0[j] = -0.25f;
    mark = f.n;
    cr_assert_eq(zc_grad_ready(e, x.p[0]), ZC_OK, "%s", zc_last_error());
    end = f.n;
    rec_i = rec_find(&f, mark, end, R_RECORD, U, ANY);
    cr_assert_geq(rec_i, 0, "stage %d: the chunk's last grad_ready recorded nothing on "
                            "options.stream", stage);
    int wait_i = rec_find(&f, rec_i + 1, end, R_WAIT, es, f.log[rec_i].event);
    cr_assert_geq(wait_i, 0, "stage %d: the engine's stream does not wait for options.stream",
                  stage);
    for (int i = mark; i < wait_i; i++)
        cr_assert(!rec_is_work(f.log[i].op), "stage %d: reduction work before the engine's stream "
                                         "waits for the gradients", stage);
    cr_assert_eq(rec_count_host_waits(&f, mark, end, ANY), 0, "stage %d: grad_ready waited on the "
                                                          "host", stage);
    if (stage >= 2) {
        /* Adding the reduced slice to the fp32 shard runs on comm_stream,
         * after comm_stream was ordered after the engine's stream. */
        int acc = rec_find(&f, wait_i, end, R_ACCUM, cs, NULL);
        cr_assert_geq(acc, 0, "stage %d: no accumulation on the communication stream", stage);
        if (overlap) {
            int h = rec_find(&f, wait_i, acc, R_RECORD, es, ANY);
            cr_assert(h >= 0 && rec_find(&f, h + 1, acc, R_WAIT, cs, f.log[h].event) >= 0,
                      "stage %d: comm_stream is not ordered after the engine's stream", stage);
        }
    }
    cr_assert(!f.overflow);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, grad_order_stage0) { check_grad_order(0, 0); }
Test(engine_streams, grad_order_stage1) { check_grad_order(1, 0); }
Test(engine_streams, grad_order_stage2) { check_grad_order(2, 0); }
Test(engine_streams, grad_order_stage3) { check_grad_order(3, 0); }
Test(engine_streams, grad_order_stage0_overlap) { check_grad_order(0, 1); }
Test(engine_streams, grad_order_stage2_overlap) { check_grad_order(2, 1); }
Test(engine_streams, grad_order_stage3_overlap) { check_grad_order(3, 1); }

/* overlap_comm, stage 2: three chunks completed in order 0, 1, 2 with two
 * gradient slots. Chunk 1's buffer must not wait for chunk 0's reduction
 * (that is the overlap); chunk 2 reuses chunk 0's slot and must; zc_step
 * orders the engine's stream after the last reduction before the norm. */
static void check_overlap_slots(int stage)
{
    zc_comm *comm = comm1();
    static rec_dev f;
    st_eng x;
    cr_assert_eq(open_eng(&x, comm, stage, 1, &f), ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    void *es = e->stream, *cs = e->comm_stream;
    cr_assert_eq(e->nchunks, 3);
    const int order[NP] = {0, 1, 2, 3}; /* chunks 0 {p0 p1}, 1 {p2}, 2 {p3} */
    int done_at[3] = {-1, -1, -1}, buf_at[3] = {-1, -1, -1};
    for (int k = 0; k < NP; k++) {
        int i = order[k], c = x.p[i]->chunk;
        int mark = f.n;
        float *g = zc_grad_buffer(e, x.p[i]);
        cr_assert_not_null(g, "%s", zc_last_error());
        if (buf_at[c] < 0)
            buf_at[c] = mark;
        for (int64_t j = 0; j < numel[i]; j++)
            g[j] = 0.125f;
        cr_assert_eq(zc_grad_ready(e, x.p[i]), ZC_OK, "%s", zc_last_error());
        if (x.p[i] == x.p[e->chunks[c].first + e->chunks[c].count - 1])
            done_at[c] = f.n;
    }
    /* The event recorded on comm_stream after chunk 0's accumulation. */
    int acc0 = rec_find(&f, buf_at[0], done_at[0], R_ACCUM, cs, NULL);
    cr_assert_geq(acc0, 0);
    int slot_ev = rec_find(&f, acc0 + 1, done_at[0], R_RECORD, cs, ANY);
    cr_assert_geq(slot_ev, 0, "no event recorded after chunk 0's reduction");
    /* Chunk 1's zero-fill waits for nothing on comm_stream. */
    int z1 = rec_find(&f, buf_at[1], done_at[1], R_MEMSET, es, NULL);
    cr_assert_geq(z1, 0);
    for (int i = buf_at[1]; i < z1; i++)
        cr_assert(f.log[i].op != R_WAIT || f.log[i].stream != es,
                  "chunk 1's buffer waits for an earlier reduction: no overlap");
    /* Chunk 2 reuses chunk 0's slot: its zero-fill waits for an event
     * recorded on comm_stream after chunk 0's reduction. */
    int z2 = rec_find(&f, buf_at[2], done_at[2], R_MEMSET, es, NULL);
    cr_assert_geq(z2, 0);
    bool waited = false;
    for (int i = buf_at[2]; i < z2; i++)
        if (f.log[i].op == R_WAIT && f.log[i].stream == es &&
            rec_find(&f, acc0 + 1, done_at[0], R_RECORD, cs, f.log[i].event) >= 0)
            waited = true;
    cr_assert(waited, "chunk 2's reused slot is zeroed without waiting for chunk 0's reduction");

    /* zc_step: the engine's stream waits for the last event recorded on
     * comm_stream before the first norm partial. */
    int last_rec = -1;
    for (int i = 0; i < f.n; i++)
        if (f.log[i].op == R_RECORD && f.log[i].stream == cs)
            last_rec = i;
    int mark = f.n;
    cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error());
    int norm = rec_find(&f, mark, f.n, R_SUMSQ_ASYNC, es, NULL);
    cr_assert_geq(norm, 0);
    cr_assert_geq(rec_find(&f, mark, norm, R_WAIT, es, f.log[last_rec].event), 0,
                  "the norm does not wait for the last reduction");
    cr_assert(!f.overflow);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, overlap_double_buffers_gradient_slots_stage2) { check_overlap_slots(2); }
Test(engine_streams, overlap_double_buffers_gradient_slots_stage3) { check_overlap_slots(3); }

/* ---- host waits and allocations per step (world 2) ----------------------- */

#define STEPS 3

typedef struct w2_run {
    int stage, overlap;
    zc_comm *comms[2];
    rec_dev devs[2];
    zc_status rc[2];
    char err[2][512];
    int engine_waits[2][STEPS], ctl_waits[2][STEPS], other_waits[2][STEPS];
    int norm_partials[2][STEPS];
    int allocs[2];
    bool skipped[2][STEPS];
} w2_run;

static void w2_rank(int rank, void *arg)
{
    w2_run *r = arg;
    rec_dev *f = &r->devs[rank];
    st_eng x;
    zc_status rc = open_eng(&x, r->comms[rank], r->stage, r->overlap, f);
    if (rc == ZC_OK) {
        f->allocs = 0; /* from here on: the training steps */
        for (int s = 0; s < STEPS && rc == ZC_OK; s++) {
            rc = window(&x, rank, s);
            if (rc != ZC_OK)
                break;
            int mark = f->n;
            zc_step_info info;
            rc = zc_step(x.e, &info);
            r->skipped[rank][s] = info.skipped;
            r->engine_waits[rank][s] = rec_count_host_waits(f, mark, f->n, x.e->stream);
            r->ctl_waits[rank][s] = rec_count_host_waits(f, mark, f->n, x.e->ctl_stream);
            r->other_waits[rank][s] = rec_count_host_waits(f, mark, f->n, ANY) -
                                      r->engine_waits[rank][s] - r->ctl_waits[rank][s];
            for (int i = mark; i < f->n; i++)
                r->norm_partials[rank][s] += f->log[i].op == R_SUMSQ_ASYNC;
        }
        r->allocs[rank] = f->allocs;
    }
    r->rc[rank] = rc;
    if (rc != ZC_OK)
        snprintf(r->err[rank], sizeof r->err[rank], "%s", zc_last_error());
    if (x.e)
        close_eng(&x);
    else
        zc_config_destroy(x.cfg);
}

static void run_w2(w2_run *r)
{
    cr_assert_eq(zc_comm_local_world(2, r->comms), ZC_OK);
    t_run_ranks(2, w2_rank, r);
    for (int k = 0; k < 2; k++)
        zc_comm_destroy(r->comms[k]);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(r->rc[k], ZC_OK, "stage %d rank %d: %s", r->stage, k, r->err[k]);
}

static void check_host_waits(int stage, int overlap)
{
    static w2_run r;
    memset(&r, 0, sizeof r);
    r.stage = stage;
    r.overlap = overlap;
    run_w2(&r);
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < STEPS; s++) {
            cr_assert(!r.skipped[k][s]);
            /* Three chunks: one partial each per owned shard (stage 0 owns
             * both ranks' shards), and still one wait for all of them. */
            cr_assert_eq(r.norm_partials[k][s], stage == 0 ? 6 : 3,
                         "stage %d rank %d step %d: %d norm partials", stage, k, s,
                         r.norm_partials[k][s]);
            cr_assert_eq(r.engine_waits[k][s], 1,
                         "stage %d rank %d step %d: %d host waits on the engine's stream",
                         stage, k, s, r.engine_waits[k][s]);
            cr_assert_eq(r.ctl_waits[k][s], 1,
                         "stage %d rank %d step %d: %d host waits for the agreement", stage, k,
                         s, r.ctl_waits[k][s]);
            cr_assert_eq(r.other_waits[k][s], 0,
                         "stage %d rank %d step %d: %d other host waits", stage, k, s,
                         r.other_waits[k][s]);
        }
    t_assert_no_leaks();
}

Test(engine_streams, one_host_wait_per_step_stage0) { check_host_waits(0, 0); }
Test(engine_streams, one_host_wait_per_step_stage1) { check_host_waits(1, 0); }
Test(engine_streams, one_host_wait_per_step_stage2) { check_host_waits(2, 0); }
Test(engine_streams, one_host_wait_per_step_stage3) { check_host_waits(3, 0); }
Test(engine_streams, one_host_wait_per_step_stage2_overlap) { check_host_waits(2, 1); }

static void check_no_device_alloc(int stage, int overlap)
{
    static w2_run r;
    memset(&r, 0, sizeof r);
    r.stage = stage;
    r.overlap = overlap;
    run_w2(&r);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(r.allocs[k], 0, "stage %d rank %d: %d device allocations in %d steps after "
                                     "build", stage, k, r.allocs[k], STEPS);
    t_assert_no_leaks();
}

Test(engine_streams, no_device_alloc_after_build_stage0) { check_no_device_alloc(0, 0); }
Test(engine_streams, no_device_alloc_after_build_stage1) { check_no_device_alloc(1, 0); }
Test(engine_streams, no_device_alloc_after_build_stage2) { check_no_device_alloc(2, 1); }
Test(engine_streams, no_device_alloc_after_build_stage3) { check_no_device_alloc(3, 1); }

/* World 1 on this thread, the plain host device: the next host allocation
 * after build fails, so any allocation in the 3 steps (device memory is host
 * memory here) would fail the run. */
static void check_no_alloc(int stage)
{
    zc_comm *comm = comm1();
    st_eng x;
    cr_assert_eq(open_eng(&x, comm, stage, stage == 3, NULL), ZC_OK, "%s", zc_last_error());
    const int64_t live = zc__mem_global_count(ZC_MEMKIND_HOST);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 1);
    zc_status rc = ZC_OK;
    for (int s = 0; s < STEPS && rc == ZC_OK; s++) {
        rc = window(&x, 0, s);
        if (rc == ZC_OK)
            rc = zc_step(x.e, NULL);
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zc_last_error());
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    cr_assert_eq(rc, ZC_OK, "stage %d: a step allocated: %s", stage, msg);
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_HOST), live);
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, no_alloc_after_build_stage0) { check_no_alloc(0); }
Test(engine_streams, no_alloc_after_build_stage1) { check_no_alloc(1); }
Test(engine_streams, no_alloc_after_build_stage2) { check_no_alloc(2); }
Test(engine_streams, no_alloc_after_build_stage3) { check_no_alloc(3); }

/* ---- communicator groups ------------------------------------------------- */

/* A local communicator whose ops gain group_start / group_end (the local
 * backend has none) that count, and fail group_end when asked. */
static const zc_comm_ops *base_ops;
static zc_comm_ops grp_ops;
static int g_starts, g_ends, g_in, g_grouped, g_fail_end;

static zc_status g_start(zc_comm *c)
{
    (void)c;
    g_starts++;
    g_in = 1;
    return ZC_OK;
}
static zc_status g_end(zc_comm *c)
{
    (void)c;
    g_ends++;
    g_in = 0;
    if (g_fail_end)
        return ZC_ERR(ZC_ERR_COMM, "group_end: injected failure");
    return ZC_OK;
}
static zc_status g_all_gather(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                              void *stream)
{
    g_grouped += g_in;
    return base_ops->all_gather(c, s, r, n, dt, stream);
}

static void check_groups(int stage)
{
    zc_comm *comm = comm1();
    base_ops = comm->ops;
    grp_ops = *comm->ops;
    grp_ops.group_start = g_start;
    grp_ops.group_end = g_end;
    grp_ops.all_gather = g_all_gather;
    comm->ops = &grp_ops;
    g_starts = g_ends = g_in = g_grouped = g_fail_end = 0;
    st_eng x;
    cr_assert_eq(open_eng(&x, comm, stage, 0, NULL), ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    /* Stage 3 refreshes what is still gathered at the step: hold two chunks. */
    if (stage == 3) {
        cr_assert_not_null(zc_param_acquire(e, x.p[0], NULL));
        cr_assert_not_null(zc_param_acquire(e, x.p[2], NULL));
    }
    cr_assert_eq(window(&x, 0, 0), ZC_OK, "%s", zc_last_error());
    g_grouped = 0;
    const int starts = g_starts;
    cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(g_starts - starts, 1, "stage %d: %d groups in one step", stage,
                 g_starts - starts);
    cr_assert_eq(g_ends, g_starts);
    /* Stage 2 publishes every chunk; stage 3 refreshes every chunk still
     * gathered: the two held, and at the default persistence threshold
     * (1e5 elements) every chunk of this small model - 3 either way. */
    cr_assert_eq(g_grouped, 3, "stage %d: %d all-gathers inside the group",
                 stage, g_grouped);

    /* A failed group_end is a failed collective: the engine is broken. */
    cr_assert_eq(window(&x, 0, 1), ZC_OK, "%s", zc_last_error());
    g_fail_end = 1;
    cr_assert_eq(zc_step(e, NULL), ZC_ERR_COMM);
    g_fail_end = 0;
    cr_assert_eq(g_ends, g_starts, "a group was left open");
    zc_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_stats(e, &st), ZC_ERR_COMM);
    cr_assert(strstr(zc_last_error(), "broken") && strstr(zc_last_error(), "injected"), "%s",
              zc_last_error());
    close_eng(&x);
    comm->ops = base_ops;
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(engine_streams, publish_is_one_group_and_a_failed_group_end_breaks_stage2)
{
    check_groups(2);
}
Test(engine_streams, refresh_is_one_group_and_a_failed_group_end_breaks_stage3)
{
    check_groups(3);
}
