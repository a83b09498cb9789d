/* A training loop written outside zeroc, as a user's program is: it includes
 * only <zeroc/zeroc.h> and links only what `pkg-config --cflags --libs zeroc`
 * gives (no -lm, no -pthread: glibc has both). tests/cli/check_install.py
 * builds it against an installed copy and against the build tree's
 * meson-uninstalled/zeroc-uninstalled.pc, and compares what it prints with
 * the same source built inside the tree (tests/cli/meson.build).
 *
 *   outside_trainer          trains the model below at stage 0 and at stage 3
 *                            on two ranks (threads), 5 steps each, and prints
 *                            one line per stage: the final fp32 master's
 *                            FNV-1a checksum and its largest difference from a
 *                            plain AdamW loop computed here in double;
 *   outside_trainer plugin   asks for a CUDA device (zc_cuda_device_index) and
 *                            prints the status and which libzeroc_cuda.so the
 *                            process mapped, if any.
 * Both print which libzeroc the process mapped. Exit status: 0, 1 a call
 * failed or the master is not the plain loop's, 2 usage.
 *
 * The loss of rank r is 1/2 |w - t_r|^2 for a target t_r of its own, so its
 * gradient is w - t_r, and the engine's averaged gradient is w - mean_r t_r:
 * the plain loop below steps on that mean. The configuration turns off what
 * a plain AdamW loop does not do (gradient_clipping, DeepSpeed's 1.0 by
 * default) and shards the parameters at stage 3 (persistence threshold 0,
 * else a model this small stays gathered). */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zeroc/zeroc.h>

#define WORLD 2
#define STEPS 5
#define NPARAMS 3
#define LR 0.01
#define BETA1 0.9
#define BETA2 0.999
#define EPS 1e-8
#define WEIGHT_DECAY 0.01

static const int64_t shapes[NPARAMS][2] = {{8, 5}, {13, 1}, {3, 7}};
static const int ndims[NPARAMS] = {2, 1, 2};
static const char *const names[NPARAMS] = {"fc.weight", "fc.bias", "head.weight"};
#define NBLOCKS 2
static const int layer_of[NPARAMS] = {0, 0, 1}; /* the block of each tensor */

/* Element i of the model, in registration order, back to back. */
static float init_value(int64_t i)
{
    return (float)((i * 37) % 17) / 16.0f - 0.5f;
}

/* Rank r's target: at least 0.5 away from every initial value and from the
 * other rank's side, so the gradient keeps its sign for the 5 steps (a
 * gradient near 0 would make Adam's step depend on rounding). */
static float target_value(int r, int64_t i)
{
    return (r == 0 ? 1.5f : 2.5f) + (float)(i % 5) / 8.0f;
}

typedef struct rank_run {
    int stage, rank;
    zc_comm *comm;
    size_t n;
    float *master; /* rank 0: the gathered fp32 master after STEPS */
    char err[1024];
} rank_run;

#define TRY(call)                                                                    \
    do {                                                                             \
        zc_status rc_ = (call);                                                      \
        if (rc_ != ZC_OK) {                                                          \
            snprintf(x->err, sizeof x->err, "rank %d stage %d: %s: %s (%s)", x->rank, \
                     x->stage, #call, zc_status_str(rc_), zc_last_error());          \
            goto out;                                                                \
        }                                                                            \
    } while (0)

static zc_status configure(zc_config **cfg, int stage)
{
    zc_status rc = zc_config_create(cfg);
    if (rc == ZC_OK)
        rc = zc_config_set_int(*cfg, "zero_optimization.stage", stage);
    if (rc == ZC_OK)
        rc = zc_config_set_int(*cfg, "zero_optimization.stage3_param_persistence_threshold", 0);
    if (rc == ZC_OK)
        rc = zc_config_set_int(*cfg, "train_micro_batch_size_per_gpu", 1);
    if (rc == ZC_OK)
        rc = zc_config_set_int(*cfg, "gradient_accumulation_steps", 1);
    if (rc == ZC_OK)
        rc = zc_config_set_double(*cfg, "gradient_clipping", 0.0);
    if (rc == ZC_OK)
        rc = zc_config_set_string(*cfg, "optimizer.type", "AdamW");
    if (rc == ZC_OK)
        rc = zc_config_set_double(*cfg, "optimizer.params.lr", LR);
    if (rc == ZC_OK)
        rc = zc_config_set(*cfg, "optimizer.params.betas", "[0.9, 0.999]");
    if (rc == ZC_OK)
        rc = zc_config_set_double(*cfg, "optimizer.params.eps", EPS);
    if (rc == ZC_OK)
        rc = zc_config_set_double(*cfg, "optimizer.params.weight_decay", WEIGHT_DECAY);
    return rc;
}

static void *rank_main(void *arg)
{
    rank_run *x = arg;
    zc_config *cfg = NULL;
    zc_engine *eng = NULL;
    zc_block *blk[NBLOCKS] = {NULL};
    float *values = NULL, *target = NULL;
    zc_param *params[NPARAMS];
    TRY(configure(&cfg, x->stage));
    zc_engine_options opts = ZC_ENGINE_OPTIONS_INIT;
    opts.device = ZC_DEVICE_HOST;
    TRY(zc_engine_create(&eng, cfg, x->comm, &opts));
    /* A block per layer, each after a chunk boundary (docs/loop.md). */
    for (int p = 0; p < NPARAMS; p++) {
        if (p == 0 || layer_of[p] != layer_of[p - 1])
            TRY(zc_chunk_boundary(eng));
        TRY(zc_param_add_status(eng, names[p], shapes[p], ndims[p], 0, &params[p]));
    }
    for (int p = 0; p < NPARAMS; p++)
        if (p == 0 || layer_of[p] != layer_of[p - 1])
            TRY(zc_block_span(eng, params[p], &blk[layer_of[p]]));
    TRY(zc_engine_build(eng));
    size_t count[NBLOCKS], n = 0;
    for (int b = 0; b < NBLOCKS; b++) {
        TRY(zc_block_numel(blk[b], &count[b]));
        n += count[b];
    }
    values = malloc(n * sizeof *values);
    target = malloc(n * sizeof *target);
    if (!values || !target) {
        snprintf(x->err, sizeof x->err, "rank %d: out of memory", x->rank);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        values[i] = init_value((int64_t)i);
        target[i] = target_value(x->rank, (int64_t)i);
    }
    for (int b = 0, at = 0; b < NBLOCKS; at += (int)count[b], b++)
        TRY(zc_block_load(eng, blk[b], values + at, count[b]));
    for (int step = 0; step < STEPS; step++) {
        /* The forward pass reads every block; the loss needs no value of
         * it here, since its gradient is computed from the weights alone. */
        for (int b = 0; b < NBLOCKS; b++) {
            TRY(zc_block_acquire(eng, blk[b], NULL, NULL));
            TRY(zc_block_release(eng, blk[b], NULL));
        }
        /* Backward, last block first: gradient w - t_r. */
        for (int b = NBLOCKS - 1; b >= 0; b--) {
            void *w[NPARAMS], *g[NPARAMS];
            TRY(zc_block_acquire(eng, blk[b], NULL, w));
            TRY(zc_block_grad_buffers(eng, blk[b], g));
            size_t at = 0;
            for (int k = 0; k < b; k++)
                at += count[k];
            for (int i = 0; i < zc_block_size(blk[b]); i++) {
                const int64_t numel = zc_param_numel(zc_block_param(blk[b], i));
                for (int64_t j = 0; j < numel; j++, at++)
                    ((float *)g[i])[j] = ((const float *)w[i])[j] - target[at];
            }
            TRY(zc_block_grad_ready(eng, blk[b]));
            TRY(zc_block_release(eng, blk[b], NULL));
        }
        zc_step_info info;
        TRY(zc_step(eng, &info));
    }
    /* Collective at stages 1-3: every rank gathers every block. */
    for (int b = 0, at = 0; b < NBLOCKS; at += (int)count[b], b++)
        TRY(zc_block_gather_master(eng, blk[b], values + at, count[b]));
    if (x->rank == 0) {
        x->n = n;
        x->master = values;
        values = NULL;
    }
out:
    free(values);
    free(target);
    for (int b = 0; b < NBLOCKS; b++)
        zc_block_destroy(blk[b]);
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    return NULL;
}

/* sqrt by Newton's method, so the program needs no libm. */
static double root(double v)
{
    if (v <= 0)
        return 0;
    double r = v > 1 ? v : 1;
    for (int i = 0; i < 200; i++) {
        double next = 0.5 * (r + v / r);
        if (next >= r)
            break;
        r = next;
    }
    return r;
}

/* The plain AdamW loop on the mean gradient, in double: the largest
 * difference from the engine's fp32 master. */
static double plain_adamw_diff(const float *master, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double w = init_value((int64_t)i), m = 0, v = 0, b1 = 1, b2 = 1;
        double mean_t = 0;
        for (int r = 0; r < WORLD; r++)
            mean_t += target_value(r, (int64_t)i);
        mean_t /= WORLD;
        for (int t = 1; t <= STEPS; t++) {
            double g = w - mean_t;
            m = BETA1 * m + (1 - BETA1) * g;
            v = BETA2 * v + (1 - BETA2) * g * g;
            b1 *= BETA1;
            b2 *= BETA2;
            w -= LR * WEIGHT_DECAY * w;
            w -= LR / (1 - b1) * (m / (root(v) / root(1 - b2) + EPS));
        }
        double d = w - (double)master[i];
        d = d < 0 ? -d : d;
        if (d > worst)
            worst = d;
    }
    return worst;
}

static uint64_t fnv1a(const float *v, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < n * sizeof *v; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The file this process mapped whose name begins with `prefix`, or "none". */
static void mapped(const char *prefix, char *out, size_t cap)
{
    snprintf(out, cap, "none");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *path = strchr(line, '/');
        const char *base = path ? strrchr(path, '/') + 1 : NULL;
        if (base && !strncmp(base, prefix, strlen(prefix))) {
            snprintf(out, cap, "%s", path);
            break;
        }
    }
    fclose(f);
}

static int train(int stage)
{
    zc_comm *comms[WORLD];
    if (zc_comm_local_world(WORLD, comms) != ZC_OK) {
        fprintf(stderr, "outside_trainer: zc_comm_local_world: %s\n", zc_last_error());
        return 1;
    }
    rank_run runs[WORLD];
    pthread_t th[WORLD];
    int started = 0;
    for (int r = 0; r < WORLD; r++) {
        runs[r] = (rank_run){.stage = stage, .rank = r, .comm = comms[r]};
        if (pthread_create(&th[r], NULL, rank_main, &runs[r]) != 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++)
        zc_comm_destroy(comms[r]);
    int rc = started == WORLD ? 0 : 1;
    for (int r = 0; r < WORLD; r++)
        if (runs[r].err[0]) {
            fprintf(stderr, "outside_trainer: %s\n", runs[r].err);
            rc = 1;
        }
    if (rc == 0 && runs[0].master) {
        const double diff = plain_adamw_diff(runs[0].master, runs[0].n);
        printf("outside_trainer stage %d world %d steps %d elements %zu checksum %016" PRIx64
               " plain_adamw_max_diff %.3g\n",
               stage, WORLD, STEPS, runs[0].n, fnv1a(runs[0].master, runs[0].n), diff);
        /* fp32 against double over 5 steps of a 0.01 learning rate. */
        if (!(diff <= 1e-5)) {
            fprintf(stderr, "outside_trainer: stage %d: the master is %.3g away from the plain "
                            "AdamW loop's\n", stage, diff);
            rc = 1;
        }
    }
    free(runs[0].master);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "plugin"))) {
        fprintf(stderr, "usage: outside_trainer [plugin]\n");
        return 2;
    }
    int rc = 0;
    if (argc == 2) {
        int ordinal = -1;
        zc_status s = zc_cuda_device_index(-1, &ordinal);
        char plugin[4096];
        mapped("libzeroc_cuda.so", plugin, sizeof plugin);
        printf("outside_trainer cuda_device_index %s plugin %s\n", zc_status_str(s), plugin);
        if (s != ZC_OK)
            printf("outside_trainer why %s\n", zc_last_error());
    } else {
        rc = train(0);
        if (rc == 0)
            rc = train(3);
    }
    char lib[4096];
    mapped("libzeroc.so", lib, sizeof lib);
    printf("outside_trainer libzeroc %s\n", lib);
    return rc;
}
