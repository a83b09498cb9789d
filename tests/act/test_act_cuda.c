/* The activation store on a CUDA device against its host twin.
 *
 * On a GPU a save copies the caller's checkpoint into a device staging slot
 * on the caller's stream and the store's copy stream takes it to pinned host
 * memory (and from there to the swap file); a restore copies the home's
 * host memory back on the caller's stream, and the home gets that memory
 * back only once the copy has passed (src/act/transfer.c). The host twin is
 * the same path run on the host device with the staging forced
 * (zc__act_force_staging, tests/act/test_act_store.c's staging_path): the
 * same slots, the same order of the homes' calls, the same reads ahead. So
 * here, for every home (device memory, pinned host memory, NVMe) the GPU run
 * must give
 *   - every byte restored equal to the pattern saved, although the caller's
 *     stream is busy before each save and restore (a sleep kernel) and
 *     overwrites the source right after the save and the destination right
 *     after the restore's read-back - stream order alone keeps them apart;
 *   - the figures of the twin: saves, restores, bytes saved and restored,
 *     swap-file bytes written and read (which the reads ahead decide);
 *   - the store's bytes by kind as zc_plan_memory plans them for a CUDA
 *     device, equal to the twin's (the staging slots counted as device).
 * Beside that: the legacy default stream with synchronize_checkpoint_boundary,
 * and partition_activations over two model-parallel ranks sharing the GPU
 * (threads on local communicators, the gather over device memory).
 * Skips without a GPU (fails under ZC_REQUIRE_GPU=1). */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "act/act.h"
#include "helpers.h"
#include "kernels/kernels.h"
#include "require_gpu.h"
#include "t_act.h"
#include "t_offload.h"

#define SLOTS 5
#define BYTES (3 * 65536 + 12) /* not a page multiple: the slots round up */
#define STEPS 2
#define GAS 2

typedef struct outcome {
    zc_status rc;
    char err[1024];
    int64_t bad_bytes, restores;
    zc_act_stats st;
    int64_t built[ZC_KIND__COUNT];   /* ZC_MEM_ACTIVATIONS by kind after build */
    int64_t planned[ZC_KIND__COUNT]; /* zc_plan_memory's */
} outcome;

typedef struct drive_in {
    zc_device_kind kind;
    const char *home, *nvme_json;
    bool legacy_stream; /* NULL stream, with synchronize_checkpoint_boundary */
    zc_comm *dp, *mp;   /* mp: partition_activations over it (NULL: none) */
} drive_in;

static bool note(outcome *o, zc_status rc, const char *what)
{
    if (rc == ZC_OK)
        return true;
    if (o->rc == ZC_OK) {
        o->rc = rc;
        snprintf(o->err, sizeof o->err, "%s: %s", what, zc_last_error());
    }
    return false;
}

static bool cuda_ok(outcome *o, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    if (o->rc == ZC_OK) {
        o->rc = ZC_ERR_DEVICE;
        snprintf(o->err, sizeof o->err, "%s: %s", what, cudaGetErrorString(e));
    }
    return false;
}

/* The caller's buffers: on the GPU the checkpoints live in device memory and
 * the patterns reach them through pinned host buffers, one per checkpoint
 * (a copy still queued reads its own). */
typedef struct bufs {
    bool cuda;
    uint8_t *src, *dst;    /* device (or host) */
    uint8_t *in[SLOTS];    /* the patterns */
    uint8_t *out;          /* what came back, on the host */
    cudaStream_t s;
} bufs;

static bool bufs_make(bufs *b, bool cuda, bool legacy, outcome *o)
{
    memset(b, 0, sizeof *b);
    b->cuda = cuda;
    if (!cuda) {
        b->src = malloc(BYTES);
        b->dst = malloc(BYTES);
        b->out = malloc(BYTES);
        for (int k = 0; k < SLOTS; k++)
            b->in[k] = malloc(BYTES);
        return b->src && b->dst && b->out && b->in[SLOTS - 1];
    }
    bool ok = cuda_ok(o, cudaMalloc((void **)&b->src, BYTES), "cudaMalloc") &&
              cuda_ok(o, cudaMalloc((void **)&b->dst, BYTES), "cudaMalloc") &&
              cuda_ok(o, cudaMallocHost((void **)&b->out, BYTES), "cudaMallocHost");
    for (int k = 0; ok && k < SLOTS; k++)
        ok = cuda_ok(o, cudaMallocHost((void **)&b->in[k], BYTES), "cudaMallocHost");
    if (ok && !legacy)
        ok = cuda_ok(o, cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags");
    return ok;
}

static void bufs_free(bufs *b)
{
    if (!b->cuda) {
        free(b->src);
        free(b->dst);
        free(b->out);
        for (int k = 0; k < SLOTS; k++)
            free(b->in[k]);
        return;
    }
    cudaFree(b->src);
    cudaFree(b->dst);
    cudaFreeHost(b->out);
    for (int k = 0; k < SLOTS; k++)
        cudaFreeHost(b->in[k]);
    if (b->s)
        cudaStreamDestroy(b->s);
}

/* One micro-step: SLOTS checkpoints saved, then restored last first, every
 * byte compared. */
static bool micro_step(zc_engine *e, bufs *b, int step, int micro, outcome *o)
{
    zc_act_id id[SLOTS];
    for (int k = 0; k < SLOTS; k++) {
        const size_t sz = ta_size(BYTES, k);
        ta_fill(b->in[k], sz, 0, step, micro, k);
        if (b->cuda) {
            /* The source is written after 2 ms of other work on the stream
             * and overwritten right after the save: the store's copy must
             * fall between the two. */
            if (!cuda_ok(o, zc_k_sleep(2, b->s), "zc_k_sleep") ||
                !cuda_ok(o, cudaMemcpyAsync(b->src, b->in[k], sz, cudaMemcpyHostToDevice, b->s),
                         "cudaMemcpyAsync H2D") ||
                !note(o, zc_act_save(e, b->src, sz, b->s, &id[k]), "zc_act_save") ||
                !cuda_ok(o, cudaMemsetAsync(b->src, 0xEE, sz, b->s), "cudaMemsetAsync"))
                return false;
        } else {
            memcpy(b->src, b->in[k], sz);
            if (!note(o, zc_act_save(e, b->src, sz, NULL, &id[k]), "zc_act_save"))
                return false;
            memset(b->src, 0xEE, sz);
        }
    }
    for (int k = SLOTS - 1; k >= 0; k--) {
        const size_t sz = ta_size(BYTES, k);
        if (b->cuda) {
            /* dst holds garbage until the restore's copy, which must land
             * after the sleep and before the read-back and the overwrite. */
            if (!cuda_ok(o, cudaMemsetAsync(b->dst, 0x11, sz, b->s), "cudaMemsetAsync") ||
                !cuda_ok(o, zc_k_sleep(2, b->s), "zc_k_sleep") ||
                !note(o, zc_act_restore(e, id[k], b->dst, sz, b->s), "zc_act_restore") ||
                !cuda_ok(o, cudaMemcpyAsync(b->out, b->dst, sz, cudaMemcpyDeviceToHost, b->s),
                         "cudaMemcpyAsync D2H") ||
                !cuda_ok(o, cudaMemsetAsync(b->dst, 0x22, sz, b->s), "cudaMemsetAsync") ||
                !cuda_ok(o, cudaStreamSynchronize(b->s), "cudaStreamSynchronize"))
                return false;
        } else {
            memset(b->dst, 0x11, sz);
            if (!note(o, zc_act_restore(e, id[k], b->dst, sz, NULL), "zc_act_restore"))
                return false;
            memcpy(b->out, b->dst, sz);
        }
        for (size_t i = 0; i < sz; i++)
            o->bad_bytes += b->out[i] != b->in[k][i];
        o->restores++;
    }
    return true;
}

/* STEPS optimizer steps of GAS micro-steps on one engine of `in`. */
static void drive(const drive_in *in, outcome *o)
{
    memset(o, 0, sizeof *o);
    zc_config *cfg = ta_config(in->home, in->nvme_json, 1, GAS, 1, 2);
    if (!cfg) {
        note(o, ZC_ERR_CONFIG, "config");
        return;
    }
    bool ok = true;
    if (in->legacy_stream)
        ok = note(o, zc_config_set_bool(cfg, "activation_checkpointing."
                                             "synchronize_checkpoint_boundary", true),
                  "synchronize_checkpoint_boundary");
    if (ok && in->mp)
        ok = note(o, zc_config_set_bool(cfg, "activation_checkpointing.partition_activations",
                                        true), "partition_activations");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = in->kind;
    eo.act_checkpoints = SLOTS;
    eo.act_checkpoint_bytes = BYTES;
    eo.act_mp_comm = in->mp;
    const int64_t shape[1] = {1024};
    const zc_plan_tensor t = {shape, 1, false};
    zc_memory_plan plan = {.size = sizeof plan};
    ok = ok && note(o, zc_plan_memory(cfg, 1, &t, 1, &eo, &plan), "zc_plan_memory");
    for (int k = 0; ok && k < ZC_KIND__COUNT; k++)
        o->planned[k] = plan.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS];
    zc_engine *e = NULL;
    zc_param *p = NULL;
    ok = ok && note(o, zc_engine_create(&e, cfg, in->dp, &eo), "zc_engine_create") &&
         note(o, zc_param_add_status(e, "w", shape, 1, 0, &p), "zc_param_add") &&
         note(o, zc_engine_build(e), "zc_engine_build");
    zc_config_destroy(cfg);
    zc_stats es = {.size = sizeof es};
    ok = ok && note(o, zc_engine_stats(e, &es), "zc_engine_stats");
    for (int k = 0; ok && k < ZC_KIND__COUNT; k++)
        o->built[k] = es.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS];
    bufs b = {.cuda = in->kind == ZC_DEVICE_CUDA};
    ok = ok && bufs_make(&b, b.cuda, in->legacy_stream, o);
    for (int step = 0; ok && step < STEPS; step++)
        for (int micro = 0; ok && micro < GAS; micro++) {
            ok = micro_step(e, &b, step, micro, o) &&
                 (zc_grad_buffer(e, p) ? true : note(o, ZC_ERR_NO_MEMORY, "zc_grad_buffer")) &&
                 note(o, zc_grad_ready(e, p), "zc_grad_ready") &&
                 note(o, micro + 1 < GAS ? zc_micro_step_end(e) : zc_step(e, NULL), "step");
        }
    if (e) {
        o->st.size = sizeof o->st;
        note(o, zc_engine_act_stats(e, &o->st), "zc_engine_act_stats");
    }
    bufs_free(&b);
    zc_engine_destroy(e);
}

static void need_gpu(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        gpu_unavailable("no CUDA device");
}

/* The GPU run against the twin. */
static void expect_twins(const char *what, const outcome *g, const outcome *h)
{
    cr_assert_eq(g->rc, ZC_OK, "%s, GPU: %s", what, g->err);
    cr_assert_eq(h->rc, ZC_OK, "%s, host twin: %s", what, h->err);
    cr_assert_eq(g->bad_bytes, 0, "%s: %lld bytes restored on the GPU differ", what,
                 (long long)g->bad_bytes);
    cr_assert_eq(h->bad_bytes, 0, "%s: %lld bytes differ on the host", what,
                 (long long)h->bad_bytes);
    cr_assert_eq(g->restores, (int64_t)STEPS * GAS * SLOTS);
    cr_assert_eq(g->st.home, h->st.home, "%s", what);
    cr_assert_eq(g->st.part_bytes, h->st.part_bytes, "%s", what);
    cr_assert_eq(g->st.saves, h->st.saves, "%s", what);
    cr_assert_eq(g->st.restores, h->st.restores, "%s", what);
    cr_assert_eq(g->st.saved_bytes, h->st.saved_bytes, "%s", what);
    cr_assert_eq(g->st.restored_bytes, h->st.restored_bytes, "%s", what);
    cr_assert_eq(g->st.nvme_write_bytes, h->st.nvme_write_bytes, "%s", what);
    cr_assert_eq(g->st.nvme_read_bytes, h->st.nvme_read_bytes, "%s: read %lld on the GPU, %lld "
                 "on the host (the reads ahead differ)", what, (long long)g->st.nvme_read_bytes,
                 (long long)h->st.nvme_read_bytes);
    cr_assert_eq(g->st.restore_hits + g->st.restore_misses, g->st.restores, "%s", what);
    cr_assert_eq(g->st.held, 0, "%s", what);
    for (int k = 0; k < ZC_KIND__COUNT; k++) {
        cr_assert_eq(g->built[k], g->planned[k], "%s kind %d: built %lld, planned %lld", what,
                     k, (long long)g->built[k], (long long)g->planned[k]);
        cr_assert_eq(g->built[k], h->built[k], "%s kind %d: %lld on the GPU, %lld on the host",
                     what, k, (long long)g->built[k], (long long)h->built[k]);
    }
}

static void homes(bool legacy)
{
    need_gpu();
    static const char *const names[] = {"device", "cpu", "nvme"};
    for (int i = 0; i < 3; i++) {
        t_swapdir dir;
        const bool nvme = i == 2;
        if (nvme)
            t_swapdir_make(&dir, "zc-act-cuda");
        outcome g, h;
        zc_comm *comm;
        cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
        drive(&(drive_in){ZC_DEVICE_CUDA, names[i], nvme ? dir.json : NULL, legacy, comm, NULL},
              &g);
        zc_comm_destroy(comm);
        cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
        /* The twin: the device home has no staging; the host homes stage. */
        zc__act_force_staging(i > 0);
        drive(&(drive_in){ZC_DEVICE_HOST, names[i], nvme ? dir.json : NULL, legacy, comm, NULL},
              &h);
        zc__act_force_staging(false);
        zc_comm_destroy(comm);
        expect_twins(names[i], &g, &h);
        if (nvme)
            t_swapdir_remove(&dir);
    }
    t_assert_no_leaks();
}

Test(gpu_act, homes_against_the_host_twin, .timeout = 300) { homes(false); }
Test(gpu_act, legacy_stream_with_boundary_sync, .timeout = 300) { homes(true); }

/* partition_activations: two model-parallel ranks on the one GPU, each its
 * own data-parallel world of one; both save the same checkpoints (a
 * tensor-parallel block's replicated input) and each gets the whole back. */
typedef struct part_arg {
    drive_in in;
    outcome o;
} part_arg;

static void *part_main(void *arg)
{
    part_arg *a = arg;
    drive(&a->in, &a->o);
    return NULL;
}

static void run_partition(zc_device_kind kind, const char *home, const char *nvme_json,
                          outcome out[2])
{
    part_arg a[2];
    zc_comm *mp[2], *dp[2];
    cr_assert_eq(zc_comm_local_world(2, mp), ZC_OK, "%s", zc_last_error());
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(zc_comm_local_world(1, &dp[r]), ZC_OK);
        a[r].in = (drive_in){kind, home, nvme_json, false, dp[r], mp[r]};
    }
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        cr_assert_eq(pthread_create(&th[r], NULL, part_main, &a[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        out[r] = a[r].o;
        zc_comm_destroy(dp[r]);
        zc_comm_destroy(mp[r]);
    }
}

Test(gpu_act, partition_over_two_ranks, .timeout = 300)
{
    need_gpu();
    static const char *const names[] = {"device", "cpu", "nvme"};
    for (int i = 0; i < 3; i++) {
        t_swapdir dir;
        const bool nvme = i == 2;
        if (nvme)
            t_swapdir_make(&dir, "zc-act-cuda-part");
        outcome g[2], h[2];
        run_partition(ZC_DEVICE_CUDA, names[i], nvme ? dir.json : NULL, g);
        zc__act_force_staging(i > 0);
        run_partition(ZC_DEVICE_HOST, names[i], nvme ? dir.json : NULL, h);
        zc__act_force_staging(false);
        for (int r = 0; r < 2; r++) {
            char what[64];
            snprintf(what, sizeof what, "%s, model-parallel rank %d", names[i], r);
            expect_twins(what, &g[r], &h[r]);
            cr_assert_eq(g[r].st.parts, 2, "%s", what);
            cr_assert_eq(g[r].st.part_bytes, (int64_t)(BYTES + 1) / 2, "%s", what);
        }
        if (nvme)
            t_swapdir_remove(&dir);
    }
    t_assert_no_leaks();
}
