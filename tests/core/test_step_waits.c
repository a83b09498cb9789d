/* What one training step costs the host, counted on the recording device
 * (t_recdev.h), the host twin of the CUDA backend.
 *
 *   - Host waits per step (forward, backward and zc_step), world 2, with the
 *     local communicator bound to the recording device too, so that its
 *     collectives are counted: two at every stage, with and without
 *     overlap_comm - the norm partials on the engine's stream and the
 *     agreement on the optimizer's outcome on the control stream - and the
 *     same with 2 and with 6 chunks. The collectives themselves (stage 0-2
 *     reductions and publishes, stage 3 gathers on acquire) order the ranks'
 *     streams with events and never wait on the host.
 *   - Each public call makes the device current before its own device work
 *     (so the device layer need not set it per launch).
 *   - The fused Adam: one call per segment on the device home, however long
 *     the segment (the NVMe home alone cuts segments into pieces, to move
 *     its I/O along between them).
 * The numerics of these runs are the stage-equivalence tests'. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_recdev.h"

#define STEPS 3
#define MAXP 8

static char caller_stream_handle, user_stream_handle;
#define S ((void *)&caller_stream_handle)
#define U ((void *)&user_stream_handle)

typedef struct model {
    int np;
    int64_t numel[MAXP];
    int64_t bucket;
} model;

typedef struct eng {
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[MAXP];
} eng;

/* Opens an engine on comm with f installed; with bind_comm the communicator
 * moves its work onto f as well. Reports through its return value only, so
 * rank threads may call it. */
static zc_status open_eng(eng *x, const model *m, zc_comm *comm, int stage, int overlap,
                          rec_dev *f, bool bind_comm)
{
    memset(x, 0, sizeof *x);
    ZC_CHECK(zc_config_create(&x->cfg));
    ZC_CHECK(zc_config_set_int(x->cfg, "zero_optimization.stage", stage));
    ZC_CHECK(zc_config_set_bool(x->cfg, "zero_optimization.overlap_comm", overlap != 0));
    ZC_CHECK(zc_config_set_double(x->cfg, "gradient_clipping", 1.0));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = m->bucket;
    eo.stream = U;
    ZC_CHECK(zc_engine_create(&x->e, x->cfg, comm, &eo));
    rec_install(x->e, f);
    if (bind_comm)
        ZC_CHECK(comm->ops->bind_device(comm, &f->base));
    for (int i = 0; i < m->np; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        x->p[i] = zc_param_add(x->e, name, &m->numel[i], 1, 0);
        if (!x->p[i])
            return ZC_ERR_INVALID_ARG;
    }
    ZC_CHECK(zc_engine_build(x->e));
    for (int i = 0; i < m->np; i++) {
        float *v = NULL;
        ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)m->numel[i] * sizeof *v, "values",
                                (void **)&v));
        for (int64_t j = 0; j < m->numel[i]; j++)
            v[j] = 0.01f * (float)((j + i) % 17) - 0.08f;
        zc_status rc = zc_param_load(x->e, x->p[i], v);
        zc__host_free(NULL, ZC_MEM_OTHER, v, (size_t)m->numel[i] * sizeof *v);
        ZC_CHECK(rc);
    }
    return ZC_OK;
}

static void close_eng(eng *x)
{
    zc_engine_destroy(x->e);
    zc_config_destroy(x->cfg);
}

/* Forward (acquire, release) and backward in reverse order, gradients from
 * t_noise. */
static zc_status window(eng *x, const model *m, int rank, int step)
{
    zc_engine *e = x->e;
    for (int i = 0; i < m->np; i++) {
        if (!zc_param_acquire(e, x->p[i], S))
            return ZC_ERR_INVALID_STATE;
        ZC_CHECK(zc_param_release(e, x->p[i], S));
    }
    for (int i = m->np - 1; i >= 0; i--) {
        if (!zc_param_acquire(e, x->p[i], S))
            return ZC_ERR_INVALID_STATE;
        float *g = zc_grad_buffer(e, x->p[i]);
        if (!g)
            return ZC_ERR_INVALID_STATE;
        for (int64_t j = 0; j < m->numel[i]; j++)
            g[j] = (float)t_noise(26, rank, step, 0, i, j);
        ZC_CHECK(zc_grad_ready(e, x->p[i]));
        ZC_CHECK(zc_param_release(e, x->p[i], S));
    }
    return ZC_OK;
}

/* ---- host waits per step, world 2 ---------------------------------------- */

typedef struct w2_run {
    model m;
    int stage, overlap;
    zc_comm *comms[2];
    rec_dev devs[2];
    zc_status rc[2];
    char err[2][512];
    int nchunks[2];
    int engine_waits[2][STEPS], ctl_waits[2][STEPS], all_waits[2][STEPS];
    int peer_waits[2][STEPS]; /* the rank's streams waiting on the other rank's events */
    bool log_full[2];
} w2_run;

static void w2_rank(int rank, void *arg)
{
    w2_run *r = arg;
    rec_dev *f = &r->devs[rank];
    eng x;
    zc_status rc = open_eng(&x, &r->m, r->comms[rank], r->stage, r->overlap, f, true);
    rec_dev *peer = &r->devs[1 - rank];
    if (rc == ZC_OK)
        r->nchunks[rank] = x.e->nchunks;
    for (int s = 0; s < STEPS && rc == ZC_OK; s++) {
        const int mark = f->n;
        rc = window(&x, &r->m, rank, s);
        if (rc == ZC_OK)
            rc = zc_step(x.e, NULL);
        r->engine_waits[rank][s] = rec_count_host_waits(f, mark, f->n, x.e->stream);
        r->ctl_waits[rank][s] = rec_count_host_waits(f, mark, f->n, x.e->ctl_stream);
        r->all_waits[rank][s] = rec_count_host_waits(f, mark, f->n, ANY);
        for (int i = mark; i < f->n; i++) {
            const char *ev = f->log[i].event;
            r->peer_waits[rank][s] += f->log[i].op == R_WAIT && ev >= peer->handles &&
                                      ev < peer->handles + NHANDLES;
        }
    }
    r->log_full[rank] = f->overflow;
    r->rc[rank] = rc;
    if (rc != ZC_OK)
        snprintf(r->err[rank], sizeof r->err[rank], "%s", zc_last_error());
    if (x.e)
        close_eng(&x);
    else
        zc_config_destroy(x.cfg);
}

/* Runs 3 steps at world 2 on a model of `chunks` equal parameters, one chunk
 * each. */
static void run_w2(w2_run *r, int stage, int overlap, int chunks)
{
    memset(r, 0, sizeof *r);
    r->stage = stage;
    r->overlap = overlap;
    r->m.np = chunks;
    r->m.bucket = 512;
    for (int i = 0; i < chunks; i++)
        r->m.numel[i] = 512;
    cr_assert_eq(zc_comm_local_world(2, r->comms), ZC_OK);
    t_run_ranks(2, w2_rank, r);
    for (int k = 0; k < 2; k++)
        zc_comm_destroy(r->comms[k]);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(r->rc[k], ZC_OK, "stage %d rank %d: %s", stage, k, r->err[k]);
        cr_assert(!r->log_full[k], "the recording device's log is full");
        cr_assert_eq(r->nchunks[k], chunks, "stage %d: %d chunks, meant %d", stage,
                     r->nchunks[k], chunks);
    }
}

/* The host waits of one training step, by stage: the norm partials (engine's
 * stream) and the agreement on the optimizer's outcome (control stream). */
static const int waits_per_step[4] = {2, 2, 2, 2};

static void check_waits(int stage, int overlap)
{
    static w2_run few, many;
    run_w2(&few, stage, overlap, 2);
    run_w2(&many, stage, overlap, 6);
    const w2_run *runs[2] = {&few, &many};
    for (int i = 0; i < 2; i++) {
        const w2_run *r = runs[i];
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < STEPS; s++) {
                cr_assert_eq(r->all_waits[k][s], waits_per_step[stage],
                             "stage %d overlap %d, %d chunks, rank %d step %d: %d host waits "
                             "(%d on the engine's stream, %d on the control stream), meant %d",
                             stage, overlap, r->m.np, k, s, r->all_waits[k][s],
                             r->engine_waits[k][s], r->ctl_waits[k][s], waits_per_step[stage]);
                cr_assert_eq(r->engine_waits[k][s], 1);
                cr_assert_eq(r->ctl_waits[k][s], 1);
                /* The collectives happened, ordered by the peer's events. */
                cr_assert_gt(r->peer_waits[k][s], 0,
                             "stage %d: no stream waited on the other rank's events", stage);
            }
    }
    /* More chunks, more collectives: more event waits, the same host waits. */
    cr_assert_gt(many.peer_waits[0][1], few.peer_waits[0][1]);
    t_assert_no_leaks();
}

Test(step_waits, host_waits_per_step_stage0) { check_waits(0, 0); }
Test(step_waits, host_waits_per_step_stage1) { check_waits(1, 0); }
Test(step_waits, host_waits_per_step_stage2) { check_waits(2, 0); }
Test(step_waits, host_waits_per_step_stage3) { check_waits(3, 0); }
Test(step_waits, host_waits_per_step_stage2_overlap) { check_waits(2, 1); }
Test(step_waits, host_waits_per_step_stage3_overlap) { check_waits(3, 1); }

/* ---- Adam calls per segment ---------------------------------------------- */

/* Longer than the NVMe home's pieces (2^18 elements): cut there, it would
 * take 3 calls. */
#define BIG ((int64_t)(1 << 19) + 320)

static void check_adam_calls(int stage)
{
    static rec_dev f;
    memset(&f, 0, sizeof f);
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    const model m = {.np = 2, .numel = {BIG, 100}, .bucket = 512};
    eng x;
    cr_assert_eq(open_eng(&x, &m, comm, stage, 0, &f, false), ZC_OK, "%s", zc_last_error());
    zc_engine *e = x.e;
    int segments = 0;
    int64_t longest = 0;
    for (int k = 0; k < e->nchunks; k++) {
        const zc_chunk *c = &e->chunks[k];
        for (int si = c->seg_begin[0]; si < c->seg_begin[1]; si++) {
            segments++;
            if (c->segs[si].n > longest)
                longest = c->segs[si].n;
        }
    }
    cr_assert_gt(longest, (int64_t)1 << 18, "stage %d: no segment longer than a piece", stage);
    for (int s = 0; s < 2; s++) {
        cr_assert_eq(window(&x, &m, 0, s), ZC_OK, "%s", zc_last_error());
        const int mark = f.n;
        zc_step_info info;
        cr_assert_eq(zc_step(e, &info), ZC_OK, "%s", zc_last_error());
        cr_assert(!info.skipped);
        int calls = 0;
        for (int i = mark; i < f.n; i++)
            calls += f.log[i].op == R_ADAM;
        cr_assert_eq(calls, segments, "stage %d step %d: %d Adam calls for %d segments", stage,
                     s, calls, segments);
    }
    close_eng(&x);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(step_waits, one_adam_call_per_segment_stage0) { check_adam_calls(0); }
Test(step_waits, one_adam_call_per_segment_stage1) { check_adam_calls(1); }
Test(step_waits, one_adam_call_per_segment_stage2) { check_adam_calls(2); }
Test(step_waits, one_adam_call_per_segment_stage3) { check_adam_calls(3); }

/* ---- the local communicator's ordering ------------------------------------ */

typedef struct coll_run {
    zc_comm *comms[2];
    rec_dev devs[2];
    float send[2][64], recv[2][128];
    zc_status rc[2];
} coll_run;

static char rank_stream[2];

static void coll_rank(int rank, void *arg)
{
    coll_run *r = arg;
    zc_comm *c = r->comms[rank];
    zc_status rc = c->ops->bind_device(c, &r->devs[rank].base);
    if (rc == ZC_OK)
        rc = zc__all_gather(c, r->send[rank], r->recv[rank], 64, ZC_DTYPE_F32,
                            &rank_stream[rank]);
    if (rc == ZC_OK)
        rc = zc__reduce_scatter(c, r->recv[rank], r->send[rank], 64, ZC_DTYPE_F32,
                                &rank_stream[rank]);
    r->rc[rank] = rc;
}

/* Each rank's stream: records "ready", waits on the peer's "ready" before
 * its first read of the peer's buffers, records "done" after its work and
 * then waits on the peer's "done"; no host wait. The values: the gather in
 * rank order, and the scatter's sums (exact small integers). */
Test(step_waits, local_collectives_order_streams_by_events)
{
    static coll_run r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < 2; k++) {
        rec_init(&r.devs[k], zc__device_host());
        for (int i = 0; i < 64; i++)
            r.send[k][i] = (float)(100 * k + i);
    }
    cr_assert_eq(zc_comm_local_world(2, r.comms), ZC_OK);
    t_run_ranks(2, coll_rank, &r);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(r.rc[k], ZC_OK, "rank %d: %s", k, zc_last_error());
    for (int k = 0; k < 2; k++) {
        const rec_dev *f = &r.devs[k], *p = &r.devs[1 - k];
        void *st = &rank_stream[k];
        cr_assert_eq(rec_count_host_waits(f, 0, f->n, ANY), 0, "rank %d waited on the host", k);
        int at = 0;
        for (int coll = 0; coll < 2; coll++) {
            const int ready = rec_find(f, at, f->n, R_RECORD, st, ANY);
            cr_assert_geq(ready, 0, "rank %d collective %d: no ready event", k, coll);
            const int wait_ready = rec_find(f, ready + 1, f->n, R_WAIT, st, ANY);
            cr_assert_geq(wait_ready, 0);
            const char *ev = f->log[wait_ready].event;
            cr_assert(ev >= p->handles && ev < p->handles + NHANDLES,
                      "rank %d collective %d: its stream waited on its own event", k, coll);
            const int work = coll == 0 ? rec_find(f, ready + 1, f->n, R_COPY, st, NULL)
                                       : rec_find(f, ready + 1, f->n, R_REDUCE, st, NULL);
            cr_assert_gt(work, wait_ready, "rank %d collective %d: read before the peer was "
                                           "ready", k, coll);
            const int done = rec_find(f, work + 1, f->n, R_RECORD, st, ANY);
            cr_assert_gt(done, work);
            cr_assert_neq(f->log[done].event, f->log[ready].event);
            const int wait_done = rec_find(f, done + 1, f->n, R_WAIT, st, ANY);
            cr_assert_gt(wait_done, done, "rank %d collective %d: no wait on the peer's done "
                                          "event", k, coll);
            cr_assert_neq(f->log[wait_done].event, f->log[wait_ready].event);
            at = wait_done + 1;
        }
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 64; i++) {
            cr_assert_eq(r.recv[k][i], (float)i);
            cr_assert_eq(r.recv[k][64 + i], (float)(100 + i));
            /* reduce_scatter of recv (128 = 2 x 64, both ranks alike): rank
             * k's slice is 2 x recv[64k + i]. */
            cr_assert_eq(r.send[k][i], 2.0f * (float)(100 * k + i));
        }
    for (int k = 0; k < 2; k++)
        zc_comm_destroy(r.comms[k]);
    t_assert_no_leaks();
}

/* ---- the device made current at each public entry ------------------------- */

/* The device layer sets the thread's GPU only when it has not itself done so
 * on the thread (device.h make_current); each public call makes it current
 * first, before any device work of its own, so a caller that switched the
 * thread's GPU between two calls is followed. */
Test(step_waits, each_public_call_makes_the_device_current_first)
{
    static rec_dev f;
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    const model m = {.np = 3, .numel = {300, 200, 700}, .bucket = 512};
    for (int stage = 0; stage <= 3; stage++) {
        eng x;
        cr_assert_eq(open_eng(&x, &m, comm, stage, 0, &f, false), ZC_OK, "%s",
                     zc_last_error());
        zc_engine *e = x.e;
        int calls = 0;
#define FIRST_IS_CURRENT(call, what)                                                       \
    do {                                                                                   \
        const int mark_ = f.n;                                                             \
        call;                                                                              \
        cr_assert_gt(f.n, mark_, "stage %d %s: no device call", stage, what);              \
        cr_assert_eq(f.log[mark_].op, R_CURRENT,                                           \
                     "stage %d %s: device work before the device was made current", stage, \
                     what);                                                                \
        calls++;                                                                           \
    } while (0)
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < m.np; i++) {
                FIRST_IS_CURRENT(cr_assert_not_null(zc_param_acquire(e, x.p[i], S)),
                                 "zc_param_acquire");
                FIRST_IS_CURRENT(cr_assert_not_null(zc_grad_buffer(e, x.p[i])),
                                 "zc_grad_buffer");
                FIRST_IS_CURRENT(cr_assert_eq(zc_grad_ready(e, x.p[i]), ZC_OK),
                                 "zc_grad_ready");
                FIRST_IS_CURRENT(cr_assert_eq(zc_param_release(e, x.p[i], S), ZC_OK),
                                 "zc_param_release");
            }
            FIRST_IS_CURRENT(cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error()),
                             "zc_step");
        }
#undef FIRST_IS_CURRENT
        cr_assert_eq(calls, 2 * (4 * m.np + 1));
        const int mark = f.n;
        close_eng(&x);
        cr_assert_gt(f.n, mark);
        cr_assert_eq(f.log[mark].op, R_CURRENT, "stage %d zc_engine_destroy", stage);
    }
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}
