/* zc_param_load under offload_param (stage 3): loading a model of many small
 * parameters writes each chunk's shard home once, not once per parameter,
 * and the values acquired afterwards are the same bits as without offload
 * and as an independent round-to-nearest-even bf16 conversion.
 *
 * The model: NP parameters of PN elements, packed by a bucket of 2048 into
 * 4 chunks (13, 13, 13 and 9 parameters); with two ranks each rank's shard
 * of a chunk overlaps about 7 parameters, so a write per parameter would be
 * about 7 writes per chunk. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define W 2
#define NP 48
#define PN 150
#define NCHUNKS 4

typedef struct lrun {
    const char *offload;    /* "none", "cpu", "nvme" */
    const char *json;       /* nvme_path */
    float acquired[2][NP * PN];        /* rank 0's acquired values, after each round */
    int64_t load_writes[W][2];         /* shard writes per round of loading */
    int64_t chunks_offloaded[W];
    char err[W][512];
} lrun;

static float value(int round, int i, int k)
{
    /* Values that bf16 cannot hold exactly, so rounding shows. */
    return (float)(round + 1) * (0.37f + 0.0131f * (float)i) * (1.0f + 0.001f * (float)k) -
           0.5f;
}

#define TRY(call)                                                                  \
    do {                                                                           \
        zc_status rc_ = (call);                                                    \
        if (rc_ != ZC_OK) {                                                        \
            snprintf(r->err[rank], sizeof r->err[rank], "%s: %s", #call,           \
                     zc_last_error());                                             \
            goto out;                                                              \
        }                                                                          \
    } while (0)

static void rank_main(void *arg, zc_comm *comm, int rank)
{
    lrun *r = arg;
    zc_config *cfg = NULL;
    zc_engine *eng = NULL;
    zc_param *ps[NP];
    float vals[PN];
    TRY(zc_config_create(&cfg));
    TRY(zc_config_set_int(cfg, "zero_optimization.stage", 3));
    TRY(zc_config_set_bool(cfg, "bf16.enabled", true));
    TRY(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold", 0));
    if (strcmp(r->offload, "none")) {
        char dev[32];
        snprintf(dev, sizeof dev, "\"%s\"", r->offload);
        TRY(zc_config_set(cfg, "zero_optimization.offload_param.device", dev));
        TRY(zc_config_set(cfg, "zero_optimization.offload_param.nvme_path", r->json));
        TRY(zc_config_set_int(cfg, "zero_optimization.offload_param.max_in_cpu", 0));
    }
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 2048;
    TRY(zc_engine_create(&eng, cfg, comm, &eo));
    for (int i = 0; i < NP; i++) {
        char name[16];
        const int64_t shape = PN;
        snprintf(name, sizeof name, "w%d", i);
        ps[i] = zc_param_add(eng, name, &shape, 1, 0);
        if (!ps[i])
            TRY(ZC_ERR_INVALID_ARG);
    }
    TRY(zc_engine_build(eng));
    for (int k = 0; k < eng->nchunks; k++)
        r->chunks_offloaded[rank] += eng->chunks[k].poff;
    for (int round = 0; round < 2; round++) {
        zc_param_home_io io0, io1;
        zc__param_io(eng, &io0);
        /* Round 0 loads every parameter; round 1 loads the first chunk's
         * parameters again (one chunk to write). */
        const int n = round == 0 ? NP : 13;
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < PN; k++)
                vals[k] = value(round, i, k);
            TRY(zc_param_load(eng, ps[i], vals));
        }
        /* The acquires are where the last shard goes home (agreed). */
        for (int i = 0; i < NP; i++) {
            const void *w = zc_param_acquire(eng, ps[i], NULL);
            if (!w)
                TRY(ZC_ERR_INTERNAL);
            if (rank == 0)
                for (int k = 0; k < PN; k++)
                    r->acquired[round][i * PN + k] = zc__load_f32(w, ZC_DTYPE_BF16, (size_t)k);
            TRY(zc_param_release(eng, ps[i], NULL));
        }
        zc__param_io(eng, &io1);
        r->load_writes[rank][round] = io1.writes - io0.writes;
    }
out:
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
}

static void run(lrun *r)
{
    char err[512];
    cr_assert(t_on_ranks(W, rank_main, r, err, sizeof err), "%s", err);
    for (int i = 0; i < W; i++)
        cr_assert_str_empty(r->err[i], "%s rank %d: %s", r->offload, i, r->err[i]);
}

/* fp32 -> bf16 -> fp32, round to nearest even (the values are finite). */
static float bf16_rne(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}

Test(param_offload_load, one_write_per_chunk_same_values)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-poff-load");
    lrun *ref = calloc(1, sizeof *ref);
    ref->offload = "none";
    ref->json = dir.json;
    run(ref);
    /* The independent reference: what the engine must hold after each round. */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NP; i++)
            for (int k = 0; k < PN; k++) {
                const int src = round == 1 && i >= 13 ? 0 : round;
                const float want = bf16_rne(value(src, i, k));
                cr_assert(ref->acquired[round][i * PN + k] == want,
                          "no offload, round %d, w%d[%d]: %g, want %g", round, i, k,
                          (double)ref->acquired[round][i * PN + k], (double)want);
            }
    const char *devs[] = {"cpu", "nvme"};
    for (int d = 0; d < 2; d++) {
        lrun *r = calloc(1, sizeof *r);
        r->offload = devs[d];
        r->json = dir.json;
        run(r);
        cr_assert(!memcmp(r->acquired, ref->acquired, sizeof ref->acquired),
                  "%s: acquired values differ from the run without offload", devs[d]);
        for (int rank = 0; rank < W; rank++) {
            cr_assert_eq(r->chunks_offloaded[rank], NCHUNKS);
            if (!strcmp(devs[d], "cpu")) {
                cr_assert_eq(r->load_writes[rank][0], 0); /* no I/O at all */
                continue;
            }
            /* One write per chunk whose shard the loads touched, and the
             * acquires read but never write. */
            cr_assert_eq(r->load_writes[rank][0], NCHUNKS, "rank %d: %lld writes for %d chunks",
                         rank, (long long)r->load_writes[rank][0], NCHUNKS);
            cr_assert_eq(r->load_writes[rank][1], 1, "rank %d: %lld writes reloading one chunk",
                         rank, (long long)r->load_writes[rank][1]);
        }
        free(r);
    }
    free(ref);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}
