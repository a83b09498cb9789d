/* tp_mlp — zeroc inside a program that has its own communicators: 2-way
 * tensor parallelism x data parallelism, with ZeRO over each data-parallel
 * group only.
 *
 * The model: y = W2 tanh(W1 x + b1) + b2 (32 -> 128 -> 8), learning a fixed
 * random teacher. With --tp 2 the hidden layer is split Megatron-style:
 * tensor-parallel rank t holds rows [64t, 64t + 64) of W1 and b1 and the
 * same columns of W2 (b2 lives on t = 0), computes its partial output
 * W2_t h_t, and the program all-reduces the two partials across the
 * tensor-parallel pair itself - with MPI_Allreduce on its own MPI
 * communicator under mpirun, through memory shared by the pair's threads
 * otherwise. Backward needs no tensor-parallel traffic. Ranks are numbered
 * as Megatron does: rank = dp_rank x tp + tp_rank, so the pairs are
 * consecutive ranks and a data-parallel group holds one tp_rank.
 *
 * zeroc sees only the data-parallel groups: each rank's engine runs over
 * the ranks holding the same half (zc_comm_split of the whole world, or
 * under mpirun the program's own MPI_Comm_split handed over with
 * zc_comm_from_mpi: --dp-from mpi), so its reductions, gathers,
 * agreements and checkpoints stay in the group.
 *
 * With --tp 1 the program runs the same model with no tensor parallelism:
 * each data-parallel rank computes both halves itself, in the same order
 * (the partial outputs summed half 0 first), and trains each half with an
 * engine of its own over a 2-rank world of threads - the 2-rank run of each
 * half alone. Each half's params_sha256 equals the --tp 2 run's group of
 * that half, bit for bit, as threads and under mpirun -np 4
 * (tests/examples/check_tp_mlp.py).
 *
 *   tp_mlp [--tp 1|2] [--dp D] [--stage 0..3] [--dtype fp32|bf16] [--steps N]
 *          [--batch B] [--seed S] [--lr X] [--config FILE] [--json]
 *          [--dp-from split|mpi]
 *
 * gradient_clipping is 0 here: zeroc clips by the norm of the parameters
 * of its own engine, one half; a tensor-parallel program that clips must
 * clip by the norm over both halves (docs/loop.md, "Using zeroc inside a
 * program that has its own communicators").
 *
 * With --json: a line per optimizer step with the loss (the mean over the
 * data-parallel ranks, zc_all_reduce_f64 over the group of half 0), and a
 * final line per half with the SHA-256 of its fp32 master (gathered,
 * little-endian, in registration order), printed by the group's rank 0. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zeroc/zeroc.h>

#if TP_MLP_MPI
#include <mpi.h>
#endif

#include "cliarg.h"
#include "sha256.h"

#define IN 32
#define HID 128
#define HALF (HID / 2)
#define OUT 8
#define MAXDP 8

typedef struct opts {
    int tp, dp, stage, steps, batch;
    zc_dtype dtype;
    uint64_t seed;
    double lr;
    const char *config;
    bool json, dp_from_mpi;
} opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: tp_mlp [--tp 1|2] [--dp 1..%d] [--stage 0..3] [--dtype fp32|bf16]\n"
               "              [--steps 1..100000] [--batch 1..4096] [--seed N] [--lr X]\n"
               "              [--config ds_config.json] [--json] [--dp-from split|mpi]\n"
               "defaults: --tp 2 --dp 2 --stage 2 --dtype fp32 --steps 20 --batch 16\n"
               "Under mpirun the world size must be tp x dp.\n", MAXDP);
}

static _Noreturn void die(const char *what, zc_status rc)
{
    fprintf(stderr, "tp_mlp: %s: %s: %s\n", what, zc_status_str(rc), zc_last_error());
    fflush(stdout);
#if TP_MLP_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited)
        MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    exit(1);
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        zc_status rc_ = (call);                                                                \
        if (rc_ != ZC_OK)                                                                      \
            die(#call, rc_);                                                                   \
    } while (0)

static int arg_int(const char *flag, const char *v, int lo, int hi)
{
    char err[ZC_ARG_ERRLEN];
    int x;
    if (!zc__arg_int(flag, v, lo, hi, &x, err, sizeof err)) {
        fprintf(stderr, "tp_mlp: %s\n", err);
        exit(2);
    }
    return x;
}

static opts parse(int argc, char **argv)
{
    opts o = {.tp = 2, .dp = 2, .stage = 2, .steps = 20, .batch = 16, .dtype = ZC_DTYPE_F32,
              .seed = 1, .lr = 3e-3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tp_mlp: %s needs a value\n", a);
            exit(2);
        }
        const char *v = argv[++i];
        char err[ZC_ARG_ERRLEN];
        if (!strcmp(a, "--tp"))
            o.tp = arg_int(a, v, 1, 2);
        else if (!strcmp(a, "--dp"))
            o.dp = arg_int(a, v, 1, MAXDP);
        else if (!strcmp(a, "--stage"))
            o.stage = arg_int(a, v, 0, 3);
        else if (!strcmp(a, "--steps"))
            o.steps = arg_int(a, v, 1, 100000);
        else if (!strcmp(a, "--batch"))
            o.batch = arg_int(a, v, 1, 4096);
        else if (!strcmp(a, "--seed")) {
            int64_t s;
            if (!zc__arg_i64(a, v, 0, INT64_MAX, 0, &s, err, sizeof err)) {
                fprintf(stderr, "tp_mlp: %s\n", err);
                exit(2);
            }
            o.seed = (uint64_t)s;
        } else if (!strcmp(a, "--lr")) {
            if (!zc__arg_double(a, v, 0, 1, &o.lr, err, sizeof err)) {
                fprintf(stderr, "tp_mlp: %s\n", err);
                exit(2);
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "fp32"))
                o.dtype = ZC_DTYPE_F32;
            else if (!strcmp(v, "bf16"))
                o.dtype = ZC_DTYPE_BF16;
            else {
                fprintf(stderr, "tp_mlp: --dtype '%s': expected fp32 or bf16\n", v);
                exit(2);
            }
        } else if (!strcmp(a, "--config"))
            o.config = v;
        else if (!strcmp(a, "--dp-from")) {
            if (strcmp(v, "split") && strcmp(v, "mpi")) {
                fprintf(stderr, "tp_mlp: --dp-from '%s': expected split or mpi\n", v);
                exit(2);
            }
            o.dp_from_mpi = !strcmp(v, "mpi");
        } else {
            fprintf(stderr, "tp_mlp: unknown option '%s' (see --help)\n", a);
            exit(2);
        }
    }
    return o;
}

/* ---- deterministic data ---------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1), a function of its arguments only. */
static float unif(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = mix(seed ^ mix(a ^ mix(b ^ mix(c))));
    return (float)((double)(h >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Element k of the full-model tensor `which` (0 W1, 1 b1, 2 W2, 3 b2) at
 * initialisation: the same for a half whichever run holds it. */
static float init_value(uint64_t seed, int which, int k)
{
    const float scale[4] = {0.18f, 0.05f, 0.09f, 0.02f};
    return scale[which] * unif(seed, 11, (uint64_t)which, (uint64_t)k);
}

/* Sample b of data-parallel rank d at step s: its input and the teacher's
 * output (tanh of a fixed random map). */
static void sample(const opts *o, int d, int s, int b, float *x, float *y)
{
    const uint64_t id = ((uint64_t)s * MAXDP + (uint64_t)d) * 4096 + (uint64_t)b;
    for (int i = 0; i < IN; i++)
        x[i] = unif(o->seed, 21, id, (uint64_t)i);
    for (int j = 0; j < OUT; j++) {
        float acc = 0;
        for (int i = 0; i < IN; i++)
            acc += 0.3f * unif(o->seed, 31, (uint64_t)j, (uint64_t)i) * x[i];
        y[j] = tanhf(acc);
    }
}

/* ---- one half of the model in one engine ------------------------------------ */

typedef struct half {
    int t;            /* which half: hidden units [64t, 64t + 64) */
    zc_engine *eng;
    zc_param *p[4];   /* W1_t [64 x 32], b1_t [64], W2_t [8 x 64], b2 [8] (t = 0 only) */
    int np;
    zc_block *blk;
    float h[4096 * HALF];   /* activations of the batch */
} half;

static zc_config *make_config(const opts *o)
{
    zc_config *cfg = NULL;
    CHECK(o->config ? zc_config_load(&cfg, o->config) : zc_config_create(&cfg));
    CHECK(zc_config_set_int(cfg, "zero_optimization.stage", o->stage));
    CHECK(zc_config_set_double(cfg, "optimizer.params.lr", o->lr));
    CHECK(zc_config_set_double(cfg, "gradient_clipping", 0.0));
    CHECK(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", o->batch));
    CHECK(zc_config_set_int(cfg, "gradient_accumulation_steps", 1));
    if (o->dtype == ZC_DTYPE_BF16)
        CHECK(zc_config_set_bool(cfg, "bf16.enabled", true));
    return cfg;
}

static void half_open(half *hf, int t, const opts *o, zc_comm *dp)
{
    memset(hf, 0, sizeof *hf);
    hf->t = t;
    zc_config *cfg = make_config(o);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST; /* the loop below computes on the CPU */
    eo.f32_view_chunks = 2;
    CHECK(zc_engine_create(&hf->eng, cfg, dp, &eo));
    zc_config_destroy(cfg);
    static const char *const names[4] = {"w1", "b1", "w2", "b2"};
    const int64_t shapes[4][2] = {{HALF, IN}, {HALF, 1}, {OUT, HALF}, {OUT, 1}};
    const int ndim[4] = {2, 1, 2, 1};
    hf->np = t == 0 ? 4 : 3;
    for (int i = 0; i < hf->np; i++) {
        char name[32];
        snprintf(name, sizeof name, "half%d.%s", t, names[i]);
        hf->p[i] = zc_param_add(hf->eng, name, shapes[i], ndim[i], 0);
        if (!hf->p[i])
            die("zc_param_add", ZC_ERR_INVALID_ARG);
    }
    CHECK(zc_block_create(hf->eng, hf->p, hf->np, &hf->blk));
    CHECK(zc_engine_build(hf->eng));
    /* The half's slices of the full model's tensors. */
    float buf[HALF * IN];
    for (int r = 0; r < HALF; r++)
        for (int i = 0; i < IN; i++)
            buf[r * IN + i] = init_value(o->seed, 0, (t * HALF + r) * IN + i);
    CHECK(zc_param_load(hf->eng, hf->p[0], buf));
    for (int r = 0; r < HALF; r++)
        buf[r] = init_value(o->seed, 1, t * HALF + r);
    CHECK(zc_param_load(hf->eng, hf->p[1], buf));
    for (int j = 0; j < OUT; j++)
        for (int r = 0; r < HALF; r++)
            buf[j * HALF + r] = init_value(o->seed, 2, j * HID + t * HALF + r);
    CHECK(zc_param_load(hf->eng, hf->p[2], buf));
    if (t == 0) {
        for (int j = 0; j < OUT; j++)
            buf[j] = init_value(o->seed, 3, j);
        CHECK(zc_param_load(hf->eng, hf->p[3], buf));
    }
}

/* Forward of the half: h_t = tanh(W1_t x + b1_t), part = W2_t h_t (+ b2). */
static void half_forward(half *hf, const float *x, int B, float *part)
{
    float *v[4];
    CHECK(zc_block_acquire(hf->eng, hf->blk, NULL, NULL));
    CHECK(zc_block_view_f32(hf->eng, hf->blk, v));
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * IN;
        float *hb = hf->h + (size_t)b * HALF;
        for (int r = 0; r < HALF; r++) {
            float acc = v[1][r];
            for (int i = 0; i < IN; i++)
                acc += v[0][r * IN + i] * xb[i];
            hb[r] = tanhf(acc);
        }
        for (int j = 0; j < OUT; j++) {
            float acc = hf->t == 0 ? v[3][j] : 0.0f;
            for (int r = 0; r < HALF; r++)
                acc += v[2][j * HALF + r] * hb[r];
            part[(size_t)b * OUT + j] = acc;
        }
    }
    CHECK(zc_block_release(hf->eng, hf->blk, NULL));
}

/* Backward of the half from dy (the loss gradient, loss scale applied). */
static void half_backward(half *hf, const float *x, int B, const float *dy)
{
    float *v[4], *g[4];
    CHECK(zc_block_acquire(hf->eng, hf->blk, NULL, NULL));
    CHECK(zc_block_view_f32(hf->eng, hf->blk, v));
    CHECK(zc_block_grad_buffers_f32(hf->eng, hf->blk, g));
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * IN, *hb = hf->h + (size_t)b * HALF;
        const float *db = dy + (size_t)b * OUT;
        float da[HALF];
        for (int r = 0; r < HALF; r++) {
            float dh = 0;
            for (int j = 0; j < OUT; j++) {
                dh += v[2][j * HALF + r] * db[j];
                g[2][j * HALF + r] += db[j] * hb[r];
            }
            da[r] = dh * (1.0f - hb[r] * hb[r]);
        }
        for (int r = 0; r < HALF; r++) {
            g[1][r] += da[r];
            for (int i = 0; i < IN; i++)
                g[0][r * IN + i] += da[r] * xb[i];
        }
        if (hf->t == 0)
            for (int j = 0; j < OUT; j++)
                g[3][j] += db[j];
    }
    CHECK(zc_block_grad_ready(hf->eng, hf->blk));
    CHECK(zc_block_release(hf->eng, hf->blk, NULL));
}

/* The half's fp32 master, gathered (collective over its group), hashed. */
static void half_sha(half *hf, bool keep, char hex[65])
{
    sha256_ctx c;
    sha256_init(&c);
    for (int i = 0; i < hf->np; i++) {
        const int64_t n = zc_param_numel(hf->p[i]);
        float *m = calloc((size_t)n, sizeof(float));
        uint8_t *le = calloc((size_t)n, 4);
        if (!m || !le)
            die("out of memory", ZC_ERR_NO_MEMORY);
        CHECK(zc_param_gather_master(hf->eng, hf->p[i], m));
        for (int64_t k = 0; k < n; k++) {
            uint32_t u;
            memcpy(&u, &m[k], 4);
            for (int q = 0; q < 4; q++)
                le[4 * k + q] = (uint8_t)(u >> (8 * q));
        }
        if (keep)
            sha256_update(&c, le, (size_t)n * 4);
        free(m);
        free(le);
    }
    sha256_final_hex(&c, hex);
}

/* ---- the tensor-parallel all-reduce of the program ---------------------------- */

/* Threads: the pair's partials in shared memory, summed in index order. */
typedef struct tp_pair {
    pthread_barrier_t bar;
    float *part[2];
} tp_pair;

typedef struct rank_ctx {
    const opts *o;
    int rank, tp_rank, dp_rank;
    zc_comm *dp[2];    /* the engines' communicators: one, or one per half (--tp 1) */
    tp_pair *pair;     /* threads, --tp 2 */
#if TP_MLP_MPI
    MPI_Comm tp_comm;  /* mpirun, --tp 2: the program's own */
#endif
    bool mpi;
} rank_ctx;

static void tp_all_reduce(rank_ctx *rc, float *part, float *y, size_t n)
{
#if TP_MLP_MPI
    if (rc->mpi) {
        /* Two partials: a + b whichever rank adds, the same bits. */
        if (MPI_Allreduce(part, y, (int)n, MPI_FLOAT, MPI_SUM, rc->tp_comm) != MPI_SUCCESS)
            die("MPI_Allreduce", ZC_ERR_COMM);
        return;
    }
#endif
    tp_pair *p = rc->pair;
    p->part[rc->tp_rank] = part;
    pthread_barrier_wait(&p->bar);
    for (size_t k = 0; k < n; k++)
        y[k] = p->part[0][k] + p->part[1][k];
    pthread_barrier_wait(&p->bar); /* the partials are read before they change */
}

static void *rank_main(void *argp)
{
    rank_ctx *rc = argp;
    const opts *o = rc->o;
    const int B = o->batch;
    const int nh = o->tp == 1 ? 2 : 1;
    half *hs = calloc((size_t)nh, sizeof *hs);
    float *x = calloc((size_t)B * IN, sizeof(float)), *yt = calloc((size_t)B * OUT, sizeof(float));
    float *part[2] = {calloc((size_t)B * OUT, sizeof(float)), calloc((size_t)B * OUT, sizeof(float))};
    float *y = calloc((size_t)B * OUT, sizeof(float)), *dy = calloc((size_t)B * OUT, sizeof(float));
    if (!hs || !x || !yt || !part[0] || !part[1] || !y || !dy)
        die("out of memory", ZC_ERR_NO_MEMORY);
    for (int k = 0; k < nh; k++)
        half_open(&hs[k], o->tp == 1 ? k : rc->tp_rank, o, rc->dp[k]);
    for (int s = 0; s < o->steps; s++) {
        for (int b = 0; b < B; b++)
            sample(o, rc->dp_rank, s, b, x + (size_t)b * IN, yt + (size_t)b * OUT);
        for (int k = 0; k < nh; k++)
            half_forward(&hs[k], x, B, part[k]);
        if (o->tp == 1)
            for (int k = 0; k < B * OUT; k++)
                y[k] = part[0][k] + part[1][k]; /* half 0 first, as the pair sums */
        else
            tp_all_reduce(rc, part[0], y, (size_t)B * OUT);
        const float scale = (float)zc_loss_scale(hs[0].eng), inv = 2.0f / (float)(B * OUT);
        double lsum = 0;
        for (int k = 0; k < B * OUT; k++) {
            const float d = y[k] - yt[k];
            lsum += (double)d * d;
            dy[k] = d * inv * scale;
        }
        for (int k = nh - 1; k >= 0; k--)
            half_backward(&hs[k], x, B, dy);
        for (int k = 0; k < nh; k++)
            CHECK(zc_step(hs[k].eng, NULL));
        double loss = lsum / (B * OUT);
        CHECK(zc_all_reduce_f64(hs[0].eng, &loss, 1, ZC_REDUCE_SUM));
        loss /= o->dp;
        if (rc->rank == 0 && o->json)
            printf("{\"step\":%d,\"loss\":%.17g}\n", s + 1, loss);
        else if (rc->rank == 0 && (s + 1) % 5 == 0)
            printf("step %4d/%d  loss %.6f\n", s + 1, o->steps, loss);
    }
    for (int k = 0; k < nh; k++) {
        char hex[65];
        half_sha(&hs[k], rc->dp_rank == 0, hex);
        zc_stats st = {.size = sizeof st};
        CHECK(zc_engine_stats(hs[k].eng, &st));
        if (rc->dp_rank == 0) {
            if (o->json)
                printf("{\"final\":true,\"tp\":%d,\"dp\":%d,\"half\":%d,\"stage\":%d,"
                       "\"group_world\":%d,\"params_sha256\":\"%s\"}\n",
                       o->tp, o->dp, hs[k].t, st.stage, st.world, hex);
            else
                printf("half %d (data-parallel group of %d): fp32 master sha256 %s\n", hs[k].t,
                       st.world, hex);
        }
        zc_block_destroy(hs[k].blk);
        zc_engine_destroy(hs[k].eng);
    }
    fflush(stdout);
    free(hs), free(x), free(yt), free(part[0]), free(part[1]), free(y), free(dy);
    return NULL;
}

/* ---- the two ways to run ------------------------------------------------------ */

typedef struct split_args {
    zc_comm *c;
    int colour, key;
    zc_comm **out;
    zc_status rc;
} split_args;

/* zc_comm_split is collective: one thread per rank calls it. */
static void *split_thread(void *p)
{
    split_args *a = p;
    a->rc = zc_comm_split(a->c, a->colour, a->key, a->out);
    return NULL;
}

static int run_threads(const opts *o)
{
    const int world = o->tp * o->dp;
    zc_comm *all[2 * MAXDP] = {0}, *halves[2][MAXDP] = {{0}};
    rank_ctx rc[2 * MAXDP];
    tp_pair pairs[MAXDP];
    pthread_t th[2 * MAXDP];
    if (o->tp == 2) {
        CHECK(zc_comm_local_world(world, all));
        for (int d = 0; d < o->dp; d++)
            pthread_barrier_init(&pairs[d].bar, NULL, 2);
    } else {
        /* Each half trained over its own 2-rank world: the run alone. */
        for (int t = 0; t < 2; t++)
            CHECK(zc_comm_local_world(o->dp, halves[t]));
    }
    for (int r = 0; r < world; r++) {
        rc[r] = (rank_ctx){.o = o, .rank = r, .tp_rank = r % o->tp, .dp_rank = r / o->tp,
                           .pair = &pairs[r / o->tp]};
        if (o->tp == 1) {
            rc[r].dp[0] = halves[0][r];
            rc[r].dp[1] = halves[1][r];
        }
    }
    if (o->tp == 2) {
        /* The data-parallel groups: the ranks holding the same half. */
        split_args args[2 * MAXDP];
        for (int r = 0; r < world; r++) {
            args[r] = (split_args){all[r], r % 2, r, &rc[r].dp[0], ZC_OK};
            pthread_create(&th[r], NULL, split_thread, &args[r]);
        }
        for (int r = 0; r < world; r++)
            pthread_join(th[r], NULL);
        for (int r = 0; r < world; r++)
            if (args[r].rc != ZC_OK)
                die("zc_comm_split", args[r].rc);
    }
    for (int r = 0; r < world; r++)
        pthread_create(&th[r], NULL, rank_main, &rc[r]);
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < world; r++) {
        if (o->tp == 2) {
            zc_comm_destroy(rc[r].dp[0]);
            zc_comm_destroy(all[r]);
        } else {
            zc_comm_destroy(halves[0][r]);
            zc_comm_destroy(halves[1][r]);
        }
    }
    if (o->tp == 2)
        for (int d = 0; d < o->dp; d++)
            pthread_barrier_destroy(&pairs[d].bar);
    return 0;
}

#if TP_MLP_MPI
/* One rank per process, as llm.c runs: the program initialises MPI, makes
 * its own tensor-parallel communicator and hands zeroc the data-parallel
 * one (or lets zeroc split the world). */
static int run_mpi(const opts *o)
{
    int provided = 0, rank = 0, world = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (o->tp != 2 || world != o->tp * o->dp) {
        if (rank == 0)
            fprintf(stderr, "tp_mlp: mpirun started %d ranks; this runs --tp 2 x --dp %d = %d\n",
                    world, o->dp, 2 * o->dp);
        MPI_Finalize();
        return 2;
    }
    rank_ctx rc = {.o = o, .rank = rank, .tp_rank = rank % 2, .dp_rank = rank / 2, .mpi = true};
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &rc.tp_comm);
    MPI_Comm dp = MPI_COMM_NULL, world_comm = MPI_COMM_WORLD;
    zc_comm *zworld = NULL;
    if (o->dp_from_mpi) {
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &dp);
        CHECK(zc_comm_from_mpi(&dp, &rc.dp[0]));
    } else {
        CHECK(zc_comm_from_mpi(&world_comm, &zworld));
        CHECK(zc_comm_split(zworld, rank % 2, rank, &rc.dp[0]));
    }
    rank_main(&rc);
    zc_comm_destroy(rc.dp[0]);
    zc_comm_destroy(zworld);
    if (dp != MPI_COMM_NULL)
        MPI_Comm_free(&dp);
    MPI_Comm_free(&rc.tp_comm);
    MPI_Finalize();
    return 0;
}
#endif

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    opts o = parse(argc, argv);
    const char *ompi = getenv("OMPI_COMM_WORLD_SIZE");
    if (ompi && *ompi) {
#if TP_MLP_MPI
        return run_mpi(&o);
#else
        fprintf(stderr, "tp_mlp: started by mpirun, but built without MPI\n");
        return 2;
#endif
    }
    if (o.dp_from_mpi) {
        fprintf(stderr, "tp_mlp: --dp-from mpi needs mpirun\n");
        return 2;
    }
    return run_threads(&o);
}
