/* train_mlp — a small training loop on zeroc's public API.
 *
 * A 4-layer tanh MLP (64 -> 320 -> 320 -> 320 -> 16, about 231k parameters)
 * learns to imitate a fixed random "teacher" network on synthetic inputs.
 * Forward and backward are plain C in fp32 at every precision: the loop
 * reads each layer through zeroc's fp32 view (zc_block_view_f32: 16-bit
 * parameters widened) and writes fp32 gradients (zc_block_grad_buffers_f32:
 * narrowed to the parameter dtype at grad-ready), one block call per layer
 * and kind. Each rank is one
 * thread with its own engine (in-process communicator) and its own samples.
 *
 * Started by a launcher (mpirun: OMPI_COMM_WORLD_SIZE/_RANK, PMI_SIZE/_RANK,
 * MV2_COMM_WORLD_SIZE/_RANK; torchrun: WORLD_SIZE, RANK), or with --launcher
 * env (srun),
 * the program is one rank per process instead: zc_comm_init_env joins the
 * job (MPI on a CPU machine), the world size comes from the launcher, and
 * rank 0 prints. The parameters - params_sha256 - are those of the thread run
 * with --world W, and so is "loss", the mean over ranks of each rank's loss
 * (zc_all_reduce_f64: the same bits under either launcher); the memory
 * figures are rank 0's.
 *
 *   train_mlp [--stage 0..3] [--world W] [--dtype fp32|bf16|fp16] [--steps N]
 *             [--accum K] [--batch B] [--seed S] [--clip C] [--lr X]
 *             [--bucket ELEMS] [--persistence-threshold ELEMS]
 *             [--prefetch ELEMS] [--dump-params FILE] [--json]
 *             [--offload-optimizer none|cpu|nvme] [--nvme-path DIR[,DIR]]
 *             [--offload-ratio R] [--offload-param none|cpu|nvme]
 *             [--reuse-distance ELEMS] [--max-in-cpu ELEMS]
 *
 * With --json: one JSON object per optimizer step, then a final object with
 * the SHA-256 of the fp32 master parameters (gathered, little-endian, in
 * registration order), the per-rank memory by category (max over ranks) and
 * the bytes each collective moved in the last step. For a given world size and
 * dtype (accumulation 1) the hash is the same for every ZeRO stage.
 *
 * The library reads ZC_FAULTS (docs/faults.md) to make chosen events fail on
 * one rank. Any failed call - a malformed ZC_FAULTS, or an engine broken by a
 * failure on any rank, which every rank then reports with the same message -
 * is printed and ends the program with a non-zero status. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include <zeroc/zeroc.h>

#include "cliarg.h"
#include "sha256.h"

/* ---- model shape ---------------------------------------------------------- */

#define N_LAYERS 4
static const int DIMS[N_LAYERS + 1] = {64, 320, 320, 320, 16};
#define IN_DIM 64
#define OUT_DIM 16
#define MAX_DIM 320
#define TEACHER_HIDDEN 64

/* ---- options -------------------------------------------------------------- */

typedef struct opts {
    int stage, world, steps, accum, batch;
    zc_dtype dtype;
    unsigned long long seed;
    double clip, lr, weight_decay;
    long long bucket, persistence, prefetch; /* -1: library default */
    const char *dump_path;
    const char *config_path; /* a DeepSpeed JSON file, or NULL */
    const char *offload;     /* --offload-optimizer: "none", "cpu", "nvme" or NULL */
    const char *nvme_path;   /* --nvme-path: DIR[,DIR...] or NULL (both offload blocks) */
    const char *offload_param; /* --offload-param: "none", "cpu", "nvme" or NULL */
    long long reuse, max_in_cpu; /* --reuse-distance, --max-in-cpu; -1: config / default */
    int mics, hpz;           /* --mics-shard-size, --hpz-partition-size; 0: not given */
    bool mics_hier;          /* --mics-hierarchical */
    double offload_ratio;    /* --offload-ratio, 0 = not given */
    unsigned given;          /* GIVEN_* bits: flags set on the command line */
    bool json;
    bool plan;               /* --plan: print zc_plan_memory's plan as JSON, train nothing */
    int save_every;          /* --save-every: checkpoint every N steps (0: never) */
    const char *save_dir;    /* --save-dir */
    bool resume;             /* --resume: load the latest checkpoint in save_dir first */
    int launcher;            /* LAUNCH_*: ranks as threads, or one per process */
} opts;

enum { LAUNCH_AUTO = 0, LAUNCH_THREADS, LAUNCH_ENV };

/* With --config, the file decides and only flags given explicitly override it. */
enum {
    GIVEN_STAGE = 1u << 0, GIVEN_DTYPE = 1u << 1, GIVEN_ACCUM = 1u << 2, GIVEN_BATCH = 1u << 3,
    GIVEN_CLIP = 1u << 4, GIVEN_LR = 1u << 5, GIVEN_BUCKET = 1u << 6, GIVEN_PERSIST = 1u << 7,
    GIVEN_PREFETCH = 1u << 8, GIVEN_WORLD = 1u << 9
};

/* Ends the process from any thread. exit() is not safe to call from two
 * threads at once (two ranks failing together crashed in it), and it would
 * run destructors under ranks that are still working: the first caller
 * flushes stdio and leaves with _exit; any other waits here until then. */
static pthread_mutex_t quit_lock = PTHREAD_MUTEX_INITIALIZER;

/* The calling rank thread's engine (NULL in other threads): quit destroys
 * it first, so an error path releases what the engine holds as the normal
 * end does (zc_engine_destroy calls no collective: safe while the other
 * ranks wait in one). A failure agreed across ranks reaches every rank at
 * once: the process ends when every engine is destroyed, or after 0.5 s (a
 * rank stuck elsewhere does not hold the exit). */
static _Thread_local zc_engine *rank_engine;
static atomic_int live_engines;

static _Noreturn void quit(int code)
{
    zc_engine *e = rank_engine;
    rank_engine = NULL;
    if (e) {
        zc_engine_destroy(e);
        atomic_fetch_sub(&live_engines, 1);
    }
    for (int i = 0; i < 50 && atomic_load(&live_engines) > 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&quit_lock); /* never unlocked: the process ends */
    fflush(NULL);
    _exit(code);
}

/* The library's message, or a stand-in when it has none: a message is
 * never printed empty. */
static const char *lib_error(void)
{
    const char *m = zc_last_error();
    return m && *m ? m : "(the library gave no detail)";
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: train_mlp [--stage 0..3] [--world 1..64] [--dtype fp32|bf16|fp16]\n"
            "                 [--steps 0..1000000] [--accum 1..1024] [--batch 1..65536]\n"
            "                 [--seed 0..2^64-1] [--clip 0..1e9] [--lr 0..1e6]\n"
            "                 [--bucket 1..2^40] [--persistence-threshold 0..2^40]\n"
            "                 [--prefetch 0..2^40] [--dump-params FILE] [--json]\n"
            "                 [--config ds_config.json] [--launcher auto|threads|env]\n"
            "                 [--offload-optimizer none|cpu|nvme] [--nvme-path DIR[,DIR]]\n"
            "                 [--offload-ratio R]   (R in (0, 1]; below 1 needs --stage 3)\n"
            "                 [--save-every N --save-dir DIR] [--resume]\n"
            "                 [--offload-param none|cpu|nvme] (stage 3) [--reuse-distance 0..2^40]\n"
            "                 [--max-in-cpu 0..2^40] [--plan]\n"
            "                 [--mics-shard-size 1..64 [--mics-hierarchical]]\n"
            "                 [--hpz-partition-size 1..64] (stage 3)\n"
            "defaults: --stage 2 --world 2 --dtype bf16 --steps 50 --accum 1 --batch 32\n"
            "          --seed 1 --clip 1.0 --lr 1e-3 --bucket 65536\n"
            "--config: a DeepSpeed JSON file decides stage, precision, optimizer, clipping,\n"
            "          buckets and accumulation; flags given explicitly override it, and\n"
            "          \"auto\" values are resolved from the flags (as the HF Trainer does).\n"
            "--mics-shard-size S: MiCS, states sharded in groups of S ranks, replicated\n"
            "          across them; --hpz-partition-size S: ZeRO++ hpZ (docs/config.md). The\n"
            "          final line's comm_bytes_per_step_by_link splits what a rank sent by\n"
            "          link: set ZC_RANKS_PER_NODE to say how many ranks share a node.\n"
            "--plan: print the engines' memory plan (zc_plan_memory: bytes by kind, the\n"
            "          placement, the stage) as one JSON line and exit without training.\n"
            "--save-every N: a checkpoint in --save-dir every N steps (tag global_stepN);\n"
            "--resume: load the latest checkpoint in --save-dir first and train --steps more\n"
            "          steps from it (step numbers and data go on from the checkpoint).\n"
            "--launcher: threads (every rank a thread here), env (this process is one rank\n"
            "          of a job started by mpirun, srun or torchrun; the world size is the\n"
            "          launcher's), auto (env when mpirun or torchrun started it).\n");
}

/* Every number is parsed strictly (tools/cliarg.h): a value that is not a
 * whole number in the range is refused, never clamped or truncated. */
static long long parse_int(const char *flag, const char *v, long long lo, long long hi)
{
    char err[ZC_ARG_ERRLEN];
    int64_t x;
    if (!zc__arg_i64(flag, v, lo, hi, 0, &x, err, sizeof err)) {
        fprintf(stderr, "train_mlp: %s\n", err);
        quit(2);
    }
    return x;
}

static double parse_double(const char *flag, const char *v, double lo, double hi)
{
    char err[ZC_ARG_ERRLEN];
    double x;
    if (!zc__arg_double(flag, v, lo, hi, &x, err, sizeof err)) {
        fprintf(stderr, "train_mlp: %s\n", err);
        quit(2);
    }
    return x;
}

static opts parse_args(int argc, char **argv)
{
    opts o = {.stage = 2, .world = 2, .steps = 50, .accum = 1, .batch = 32,
              .dtype = ZC_DTYPE_BF16, .seed = 1, .clip = 1.0, .lr = 1e-3,
              .weight_decay = 0.01, .bucket = 65536, .persistence = -1, .prefetch = -1,
              .reuse = -1, .max_in_cpu = -1};
    static const char *const with_value[] = {
        "--config", "--stage", "--world", "--steps", "--accum", "--batch", "--seed", "--clip",
        "--lr", "--bucket", "--persistence-threshold", "--prefetch", "--dump-params", "--dtype",
        "--offload-optimizer", "--nvme-path", "--offload-ratio", "--launcher", "--save-every",
        "--save-dir", "--offload-param", "--reuse-distance", "--max-in-cpu",
        "--mics-shard-size", "--hpz-partition-size"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) { o.json = true; continue; }
        if (!strcmp(a, "--plan")) { o.plan = true; continue; }
        if (!strcmp(a, "--resume")) { o.resume = true; continue; }
        if (!strcmp(a, "--mics-hierarchical")) { o.mics_hier = true; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); quit(0); }
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "train_mlp: unknown flag '%.200s'\n", a);
            usage(stderr);
            quit(2);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "train_mlp: %s needs a value\n", a);
            usage(stderr);
            quit(2);
        }
        const char *v = argv[++i];
        static const struct { const char *flag; unsigned bit; } bits[] = {
            {"--stage", GIVEN_STAGE}, {"--dtype", GIVEN_DTYPE}, {"--accum", GIVEN_ACCUM},
            {"--batch", GIVEN_BATCH}, {"--clip", GIVEN_CLIP}, {"--lr", GIVEN_LR},
            {"--bucket", GIVEN_BUCKET}, {"--persistence-threshold", GIVEN_PERSIST},
            {"--prefetch", GIVEN_PREFETCH}, {"--world", GIVEN_WORLD}};
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++)
            if (!strcmp(a, bits[k].flag))
                o.given |= bits[k].bit;
        /* A file name that starts with '-' is almost always a forgotten
         * value (`--dump-params --json` would write a file named --json). */
        if ((!strcmp(a, "--config") || !strcmp(a, "--dump-params")) && v[0] == '-') {
            fprintf(stderr, "train_mlp: %s needs a file name, got '%.200s' (a flag?); write "
                    "./%.200s for a file of that name\n", a, v, v);
            quit(2);
        }
        if (!strcmp(a, "--config")) o.config_path = v;
        else if (!strcmp(a, "--launcher")) {
            if (!strcmp(v, "auto")) o.launcher = LAUNCH_AUTO;
            else if (!strcmp(v, "threads")) o.launcher = LAUNCH_THREADS;
            else if (!strcmp(v, "env")) o.launcher = LAUNCH_ENV;
            else {
                fprintf(stderr, "train_mlp: --launcher must be auto, threads or env, got "
                        "'%.200s'\n", v);
                quit(2);
            }
        }
        else if (!strcmp(a, "--stage")) o.stage = (int)parse_int(a, v, 0, 3);
        else if (!strcmp(a, "--world")) o.world = (int)parse_int(a, v, 1, 64);
        else if (!strcmp(a, "--steps")) o.steps = (int)parse_int(a, v, 0, 1000000);
        else if (!strcmp(a, "--accum")) o.accum = (int)parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--batch")) o.batch = (int)parse_int(a, v, 1, 65536);
        else if (!strcmp(a, "--seed")) {
            char err[ZC_ARG_ERRLEN];
            uint64_t x;
            if (!zc__arg_u64(a, v, 0, UINT64_MAX, 0, &x, err, sizeof err)) {
                fprintf(stderr, "train_mlp: %s\n", err);
                quit(2);
            }
            o.seed = x;
        }
        else if (!strcmp(a, "--clip")) o.clip = parse_double(a, v, 0, 1e9);
        else if (!strcmp(a, "--lr")) o.lr = parse_double(a, v, 0, 1e6);
        else if (!strcmp(a, "--bucket")) o.bucket = parse_int(a, v, 1, 1LL << 40);
        else if (!strcmp(a, "--persistence-threshold")) o.persistence = parse_int(a, v, 0, 1LL << 40);
        else if (!strcmp(a, "--prefetch")) o.prefetch = parse_int(a, v, 0, 1LL << 40);
        else if (!strcmp(a, "--dump-params")) o.dump_path = v;
        else if (!strcmp(a, "--save-every")) o.save_every = (int)parse_int(a, v, 1, 1000000);
        else if (!strcmp(a, "--save-dir")) o.save_dir = v;
        else if (!strcmp(a, "--offload-optimizer")) {
            if (strcmp(v, "none") && strcmp(v, "cpu") && strcmp(v, "nvme")) {
                fprintf(stderr, "train_mlp: --offload-optimizer must be none, cpu or nvme, got "
                        "'%.200s'\n", v);
                quit(2);
            }
            o.offload = v;
        } else if (!strcmp(a, "--offload-param")) {
            if (strcmp(v, "none") && strcmp(v, "cpu") && strcmp(v, "nvme")) {
                fprintf(stderr, "train_mlp: --offload-param must be none, cpu or nvme, got "
                        "'%.200s'\n", v);
                quit(2);
            }
            o.offload_param = v;
        } else if (!strcmp(a, "--reuse-distance")) o.reuse = parse_int(a, v, 0, 1LL << 40);
        else if (!strcmp(a, "--max-in-cpu")) o.max_in_cpu = parse_int(a, v, 0, 1LL << 40);
        else if (!strcmp(a, "--mics-shard-size")) o.mics = (int)parse_int(a, v, 1, 64);
        else if (!strcmp(a, "--hpz-partition-size")) o.hpz = (int)parse_int(a, v, 1, 64);
        else if (!strcmp(a, "--nvme-path")) o.nvme_path = v;
        else if (!strcmp(a, "--offload-ratio")) {
            o.offload_ratio = parse_double(a, v, 0, 1);
            if (!(o.offload_ratio > 0)) {
                fprintf(stderr, "train_mlp: --offload-ratio must be in (0, 1], got '%.200s'\n",
                        v);
                quit(2);
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "fp32")) o.dtype = ZC_DTYPE_F32;
            else if (!strcmp(v, "bf16")) o.dtype = ZC_DTYPE_BF16;
            else if (!strcmp(v, "fp16")) o.dtype = ZC_DTYPE_F16;
            else {
                fprintf(stderr, "train_mlp: --dtype must be fp32, bf16 or fp16, got '%.200s'\n", v);
                quit(2);
            }
        }
    }
    if ((o.save_every || o.resume) && !o.save_dir) {
        fprintf(stderr, "train_mlp: --save-every and --resume need --save-dir DIR\n");
        quit(2);
    }
    return o;
}

/* ---- deterministic random numbers (splitmix64) ---------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uniform(uint64_t *s) { return (float)((splitmix(s) >> 40) * 0x1p-24 * 2.0 - 1.0); }

/* A stream keyed by (seed, purpose, a, b, c): every rank, step and micro-step
 * gets its own samples, reproducibly. */
static uint64_t stream(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t s = seed ^ 0x5eedf00dull;
    uint64_t k[4] = {purpose, a, b, c};
    for (int i = 0; i < 4; i++) {
        s ^= k[i] + 0x632be59bd9b4e019ull;
        s = splitmix(&s);
    }
    return s;
}

/* ---- shared state --------------------------------------------------------- */

typedef struct teacher {
    float w1[TEACHER_HIDDEN * IN_DIM], b1[TEACHER_HIDDEN];
    float w2[OUT_DIM * TEACHER_HIDDEN], b2[OUT_DIM];
} teacher;

typedef struct shared {
    opts o;
    zc_config *cfg; /* shared by every rank: engines copy it at create */
    zc_comm **comms;
    teacher t;
    float *init[2 * N_LAYERS];      /* initial values: weight, bias per layer */
    size_t numel[2 * N_LAYERS];
    zc_stats *stats;                /* [world] */
    double (*offload)[2];           /* [world]: NVMe bytes read and exposed I/O seconds,
                                       summed over the steps after the first */
    float *master;                  /* gathered fp32 master, registration order */
    size_t total;
    int first, nlocal;              /* the ranks of this process: first..first+nlocal-1 */
} shared;

typedef struct rank_arg {
    shared *sh;
    int rank;
} rank_arg;

static void die(int rank, const char *what, zc_status rc)
{
    char who[32] = "";
    if (rank >= 0) /* -1: the main thread, before or after the ranks run */
        snprintf(who, sizeof who, "rank %d: ", rank);
    fprintf(stderr, "train_mlp: %s%s failed: %s: %s\n", who, what, zc_status_str(rc), lib_error());
    /* A rank that stops would leave the others waiting in a collective. */
    quit(rc == ZC_ERR_LOSS_SCALE ? 3 : 1);
}

/* For calls that return a pointer: NULL carries no status, so none is
 * printed (a guessed one would mislead); the library's message says why. */
static void die_null(int rank, const char *what)
{
    char who[32] = "";
    if (rank >= 0)
        snprintf(who, sizeof who, "rank %d: ", rank);
    fprintf(stderr, "train_mlp: %s%s failed: %s\n", who, what, lib_error());
    quit(1);
}

#define CHECK(call)                                  \
    do {                                             \
        zc_status rc_ = (call);                      \
        if (rc_ != ZC_OK)                            \
            die(rank, #call, rc_);                   \
    } while (0)

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "train_mlp: out of memory (%zu x %zu bytes)\n", n, sz);
        quit(1);
    }
    return p;
}

/* Teacher y = W2 tanh(W1 x + b1) + b2, fixed by the seed. */
static void make_teacher(teacher *t, uint64_t seed)
{
    uint64_t s = stream(seed, 1, 0, 0, 0);
    for (int i = 0; i < TEACHER_HIDDEN * IN_DIM; i++) t->w1[i] = uniform(&s) * 0.2f;
    for (int i = 0; i < TEACHER_HIDDEN; i++) t->b1[i] = uniform(&s) * 0.5f;
    for (int i = 0; i < OUT_DIM * TEACHER_HIDDEN; i++) t->w2[i] = uniform(&s) * 0.25f;
    for (int i = 0; i < OUT_DIM; i++) t->b2[i] = uniform(&s) * 0.2f;
}

/* One micro-batch: inputs uniform with unit variance, targets from the teacher. */
static void make_batch(const shared *sh, int rank, int step, int micro, float *x, float *y)
{
    uint64_t s = stream(sh->o.seed, 2, (uint64_t)rank, (uint64_t)step, (uint64_t)micro);
    const teacher *t = &sh->t;
    for (int b = 0; b < sh->o.batch; b++) {
        float *xb = x + (size_t)b * IN_DIM, h[TEACHER_HIDDEN];
        for (int i = 0; i < IN_DIM; i++) xb[i] = uniform(&s) * 1.7320508f;
        for (int j = 0; j < TEACHER_HIDDEN; j++) {
            float acc = t->b1[j];
            for (int i = 0; i < IN_DIM; i++) acc += t->w1[j * IN_DIM + i] * xb[i];
            h[j] = tanhf(acc);
        }
        for (int o = 0; o < OUT_DIM; o++) {
            float acc = t->b2[o];
            for (int j = 0; j < TEACHER_HIDDEN; j++) acc += t->w2[o * TEACHER_HIDDEN + j] * h[j];
            y[(size_t)b * OUT_DIM + o] = acc;
        }
    }
}

/* Student initialisation: Xavier-uniform weights, small uniform biases. */
static void make_init(shared *sh)
{
    uint64_t s = stream(sh->o.seed, 3, 0, 0, 0);
    for (int l = 0; l < N_LAYERS; l++) {
        int in = DIMS[l], out = DIMS[l + 1];
        sh->numel[2 * l] = (size_t)in * out;
        sh->numel[2 * l + 1] = (size_t)out;
        sh->init[2 * l] = xcalloc(sh->numel[2 * l], sizeof(float));
        sh->init[2 * l + 1] = xcalloc(sh->numel[2 * l + 1], sizeof(float));
        float bound = sqrtf(6.0f / (float)(in + out));
        for (size_t i = 0; i < sh->numel[2 * l]; i++) sh->init[2 * l][i] = uniform(&s) * bound;
        for (int i = 0; i < out; i++) sh->init[2 * l + 1][i] = uniform(&s) * 0.05f;
        sh->total += sh->numel[2 * l] + sh->numel[2 * l + 1];
    }
}

/* A JSON number, or null when v is not finite: a diverging run (--lr 1e6)
 * has a NaN loss, and "nan" is not JSON. */
typedef struct jnum_t {
    char s[32];
} jnum_t;

static jnum_t jnum(double v)
{
    jnum_t j;
    snprintf(j.s, sizeof j.s, isfinite(v) ? "%.9g" : "null", v);
    return j;
}

/* ---- one rank ------------------------------------------------------------- */

/* Reads a resolved integer or boolean back from the configuration and holds
 * it to what this program runs: the config layer accepts, say, a micro batch
 * of 2^31 - 1, which here would not fit the activations in memory (and was
 * once narrowed to int and printed negative). */
static long long config_int(zc_config *cfg, const char *path, const char *key, long long lo,
                            long long hi)
{
    char buf[64], err[ZC_ARG_ERRLEN];
    const int rank = -1;
    CHECK(zc_config_get(cfg, key, buf, sizeof buf));
    if (!strcmp(buf, "true")) return 1;
    if (!strcmp(buf, "false")) return 0;
    int64_t v;
    if (!zc__arg_i64(key, buf, lo, hi, 0, &v, err, sizeof err)) {
        fprintf(stderr, "train_mlp: %s: %s (this example's limit)\n", path, err);
        quit(1);
    }
    return v;
}

/* --nvme-path DIR[,DIR]: a JSON list of the directories (zeroc stripes the
 * swap files over them). Paths with characters JSON would need escaped are
 * refused rather than escaped. */
static void set_nvme_path(zc_config *cfg, const char *key, const char *arg)
{
    char json[4096];
    size_t n = 0;
    json[n++] = '[';
    /* Item by item up to the last comma and past it: "DIR," and "" hold an
     * empty item, refused like ",DIR" and "A,,B". */
    for (const char *p = arg; p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || n + len + 4 >= sizeof json) {
            fprintf(stderr, "train_mlp: --nvme-path '%s': empty or too long entry\n", arg);
            quit(2);
        }
        for (size_t i = 0; i < len; i++)
            if (p[i] == '"' || p[i] == '\\' || (unsigned char)p[i] < 0x20) {
                fprintf(stderr, "train_mlp: --nvme-path '%s': quotes, backslashes and control "
                        "characters are not supported\n", arg);
                quit(2);
            }
        if (n > 1)
            json[n++] = ',';
        json[n++] = '"';
        memcpy(json + n, p, len);
        n += len;
        json[n++] = '"';
        p = comma ? comma + 1 : NULL;
    }
    json[n++] = ']';
    json[n] = '\0';
    if (zc_config_set(cfg, key, json) != ZC_OK) {
        fprintf(stderr, "train_mlp: %s\n", zc_last_error());
        quit(2);
    }
}

/* One configuration for every rank (zc_engine_create copies it). Without
 * --config it is built from the flags; with it, the file is loaded, flags
 * given explicitly override it, "auto" is resolved from the flags, and the
 * stage, precision, accumulation and micro batch are read back into *o. */
static zc_config *make_config(opts *o)
{
    zc_config *cfg = NULL;
    const int rank = -1;
    const bool file = o->config_path != NULL;
    char v[64];
    if (file) {
        if (zc_config_load(&cfg, o->config_path) != ZC_OK) {
            fprintf(stderr, "train_mlp: %s\n", lib_error());
            quit(1);
        }
        zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
        pv.micro_batch_per_gpu = o->batch;
        pv.gradient_accumulation_steps = o->accum;
        pv.total_num_steps = o->steps;
        /* Like the HF Trainer: the program's own values fill "auto" keys;
         * optional ones only when the flag was given, so an "auto" the
         * program says nothing about keeps DeepSpeed's default. */
        if (o->given & GIVEN_LR) pv.lr = o->lr;
        if (o->given & GIVEN_CLIP) pv.max_grad_norm = o->clip;
        if (o->given & GIVEN_DTYPE) pv.dtype = (int)o->dtype;
        CHECK(zc_config_set_program_values(cfg, &pv));
    } else {
        CHECK(zc_config_create(&cfg));
    }
#define SET(bit, key, ...) do { if (!file || (o->given & (bit))) { \
        snprintf(v, sizeof v, __VA_ARGS__); CHECK(zc_config_set(cfg, key, v)); } } while (0)
    SET(GIVEN_STAGE, "zero_optimization.stage", "%d", o->stage);
    SET(GIVEN_BATCH, "train_micro_batch_size_per_gpu", "%d", o->batch);
    SET(GIVEN_ACCUM, "gradient_accumulation_steps", "%d", o->accum);
    SET(GIVEN_CLIP, "gradient_clipping", "%.17g", o->clip);
    if (!file) {
        CHECK(zc_config_set(cfg, "optimizer.type", "\"AdamW\""));
        snprintf(v, sizeof v, "%.17g", o->weight_decay);
        CHECK(zc_config_set(cfg, "optimizer.params.weight_decay", v));
    }
    SET(GIVEN_LR, "optimizer.params.lr", "%.17g", o->lr);
    SET(GIVEN_DTYPE, "bf16.enabled", "%s", o->dtype == ZC_DTYPE_BF16 ? "true" : "false");
    SET(GIVEN_DTYPE, "fp16.enabled", "%s", o->dtype == ZC_DTYPE_F16 ? "true" : "false");
    SET(GIVEN_BUCKET, "zero_optimization.reduce_bucket_size", "%lld", o->bucket);
    if (o->persistence >= 0)
        SET(GIVEN_PERSIST, "zero_optimization.stage3_param_persistence_threshold", "%lld", o->persistence);
    if (o->prefetch >= 0)
        SET(GIVEN_PREFETCH, "zero_optimization.stage3_prefetch_bucket_size", "%lld", o->prefetch);
#undef SET
    if (o->offload) {
        snprintf(v, sizeof v, "\"%s\"", o->offload);
        CHECK(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", v));
    }
    if (o->offload_param) {
        snprintf(v, sizeof v, "\"%s\"", o->offload_param);
        CHECK(zc_config_set(cfg, "zero_optimization.offload_param.device", v));
    }
    if (o->reuse >= 0) {
        snprintf(v, sizeof v, "%lld", o->reuse);
        CHECK(zc_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", v));
    }
    if (o->max_in_cpu >= 0) {
        snprintf(v, sizeof v, "%lld", o->max_in_cpu);
        CHECK(zc_config_set(cfg, "zero_optimization.offload_param.max_in_cpu", v));
    }
    if (o->nvme_path) {
        set_nvme_path(cfg, "zero_optimization.offload_optimizer.nvme_path", o->nvme_path);
        set_nvme_path(cfg, "zero_optimization.offload_param.nvme_path", o->nvme_path);
    }
    if (o->offload_ratio > 0) {
        snprintf(v, sizeof v, "%.17g", o->offload_ratio);
        CHECK(zc_config_set(cfg, "zero_optimization.offload_optimizer.ratio", v));
    }
    if (o->mics)
        CHECK(zc_config_set_int(cfg, "zero_optimization.mics_shard_size", o->mics));
    if (o->mics_hier)
        CHECK(zc_config_set_bool(cfg, "zero_optimization.mics_hierarchical_params_gather", true));
    if (o->hpz)
        CHECK(zc_config_set_int(cfg, "zero_optimization.zero_hpz_partition_size", o->hpz));
    if (file) {
        if (zc_config_resolve(cfg, o->world) != ZC_OK) {
            fprintf(stderr, "train_mlp: %s: %s\n", o->config_path, lib_error());
            quit(1);
        }
        /* The same ranges as the flags. */
        const char *p = o->config_path;
        /* "auto" (with zero_optimization.max_memory): the engine picks the
         * stage at build; the final lines report the one it took. */
        CHECK(zc_config_get(cfg, "zero_optimization.stage", v, sizeof v));
        o->stage = !strcmp(v, "\"auto\"") ? -1
                                           : (int)config_int(cfg, p, "zero_optimization.stage",
                                                             0, 3);
        o->accum = (int)config_int(cfg, p, "gradient_accumulation_steps", 1, 1024);
        o->batch = (int)config_int(cfg, p, "train_micro_batch_size_per_gpu", 1, 65536);
        o->dtype = config_int(cfg, p, "bf16.enabled", 0, 1)   ? ZC_DTYPE_BF16
                   : config_int(cfg, p, "fp16.enabled", 0, 1) ? ZC_DTYPE_F16
                                                               : ZC_DTYPE_F32;
    }
    return cfg;
}

/* --plan: what each rank's zc_engine_build would allocate and where it
 * would place the state (rank_main's tensors and chunk boundaries, its
 * engine options), from zc_plan_memory, without building anything. */
static void print_plan(const zc_config *cfg, const opts *o)
{
    int64_t shapes[2 * N_LAYERS][2];
    zc_plan_tensor t[2 * N_LAYERS];
    for (int l = 0; l < N_LAYERS; l++) {
        shapes[2 * l][0] = DIMS[l + 1];
        shapes[2 * l][1] = DIMS[l];
        shapes[2 * l + 1][0] = DIMS[l + 1];
        t[2 * l] = (zc_plan_tensor){.shape = shapes[2 * l], .ndim = 2, .boundary = l > 0};
        t[2 * l + 1] = (zc_plan_tensor){.shape = shapes[2 * l + 1], .ndim = 1};
    }
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.f32_view_chunks = 2;
    zc_memory_plan p = {.size = sizeof p};
    if (zc_plan_memory(cfg, o->world, t, 2 * N_LAYERS, &eo, &p) != ZC_OK) {
        fprintf(stderr, "train_mlp: zc_plan_memory: %s\n", lib_error());
        quit(1);
    }
    const int64_t *k = p.bytes_by_kind, *oc = p.opt_chunks_by_place,
                  *pc = p.param_chunks_by_place;
    printf("{\"plan\":{\"stage\":%d,\"world\":%d,\"chunks\":%lld,\"bytes_by_kind\":{"
           "\"device\":%lld,\"pinned\":%lld,\"host\":%lld,\"nvme\":%lld},"
           "\"placement\":{\"optimizer\":[%lld,%lld,%lld],\"params\":[%lld,%lld,%lld]}}}\n",
           p.stage, o->world, (long long)p.num_chunks, (long long)k[ZC_KIND_DEVICE],
           (long long)k[ZC_KIND_PINNED], (long long)k[ZC_KIND_HOST], (long long)k[ZC_KIND_NVME],
           (long long)oc[0], (long long)oc[1], (long long)oc[2], (long long)pc[0],
           (long long)pc[1], (long long)pc[2]);
}

static void *rank_main(void *argp)
{
    rank_arg *ra = argp;
    shared *sh = ra->sh;
    const opts *o = &sh->o;
    const int rank = ra->rank, B = o->batch;

    const zc_config *cfg = sh->cfg;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    /* Host memory: the forward and backward below read the acquired
     * parameters and write the gradient buffers with the CPU. */
    eo.device = ZC_DEVICE_HOST;
    /* The loop below is written in float: zeroc widens the 16-bit
     * parameters into fp32 views and narrows the fp32 gradients (round to
     * nearest even). One layer is viewed at a time; 2 leaves room. */
    eo.f32_view_chunks = 2;
    zc_engine *eng = NULL;
    CHECK(zc_engine_create(&eng, cfg, sh->comms[rank], &eo));
    rank_engine = eng;
    atomic_fetch_add(&live_engines, 1);

    /* Biases train without weight decay, as in most recipes. */
    int nodecay = 0;
    CHECK(zc_group_add(eng, 0.0, 1.0, &nodecay));
    zc_param *P[2 * N_LAYERS];
    for (int l = 0; l < N_LAYERS; l++) {
        char name[64];
        int64_t wshape[2] = {DIMS[l + 1], DIMS[l]}, bshape[1] = {DIMS[l + 1]};
        /* One chunk set per layer: a chunk never spans two layers, so stage 3
         * gathers each chunk once in forward and once in backward. */
        if (l > 0)
            CHECK(zc_chunk_boundary(eng));
        snprintf(name, sizeof name, "layers.%d.weight", l);
        if (!(P[2 * l] = zc_param_add(eng, name, wshape, 2, 0))) die_null(rank, "zc_param_add(weight)");
        snprintf(name, sizeof name, "layers.%d.bias", l);
        if (!(P[2 * l + 1] = zc_param_add(eng, name, bshape, 1, nodecay))) die_null(rank, "zc_param_add(bias)");
    }
    /* One block per layer (weight, bias): the parameters between two chunk
     * boundaries, driven with one call per kind below. */
    zc_block *blk[N_LAYERS];
    for (int l = 0; l < N_LAYERS; l++)
        CHECK(zc_block_span(eng, P[2 * l], &blk[l]));
    CHECK(zc_engine_build(eng));
    for (int i = 0; i < 2 * N_LAYERS; i++)
        CHECK(zc_param_load(eng, P[i], sh->init[i]));

    /* Activations act[l] (B x DIMS[l]) and the backward deltas. */
    float *act[N_LAYERS + 1];
    for (int l = 0; l <= N_LAYERS; l++) act[l] = xcalloc((size_t)B * DIMS[l], sizeof(float));
    float *y = xcalloc((size_t)B * OUT_DIM, sizeof(float));
    float *delta = xcalloc((size_t)B * MAX_DIM, sizeof(float)), *dprev = xcalloc((size_t)B * MAX_DIM, sizeof(float));

    /* --resume: the checkpoint's step count is where the step numbers (and
     * the data, a function of the step) go on from. */
    int start = 0;
    if (o->resume) {
        CHECK(zc_checkpoint_load(eng, o->save_dir, NULL));
        zc_stats st = {.size = sizeof st};
        CHECK(zc_engine_stats(eng, &st));
        if (st.steps > INT_MAX - o->steps) {
            fprintf(stderr, "train_mlp: the checkpoint in %s is at step %lld; %d more steps go "
                    "past %d\n", o->save_dir, (long long)st.steps, o->steps, INT_MAX);
            quit(1);
        }
        start = (int)st.steps;
    }
    for (int step = start; step < start + o->steps; step++) {
        double loss_sum = 0;
        for (int micro = 0; micro < o->accum; micro++) {
            make_batch(sh, rank, step, micro, act[0], y);
            /* Forward: acquire, compute, release (stage 3 gathers each layer
             * here and again in backward, as ZeRO-3 does). */
            for (int l = 0; l < N_LAYERS; l++) {
                int in = DIMS[l], out = DIMS[l + 1];
                float *wb[2]; /* the block's weight and bias, in fp32 */
                CHECK(zc_block_acquire(eng, blk[l], NULL, NULL));
                CHECK(zc_block_view_f32(eng, blk[l], wb));
                const float *w = wb[0], *bias = wb[1];
                for (int b = 0; b < B; b++) {
                    const float *xb = act[l] + (size_t)b * in;
                    float *hb = act[l + 1] + (size_t)b * out;
                    for (int j = 0; j < out; j++) {
                        float acc = bias[j];
                        const float *wj = w + (size_t)j * in;
                        for (int i = 0; i < in; i++) acc += wj[i] * xb[i];
                        hb[j] = l + 1 < N_LAYERS ? tanhf(acc) : acc;
                    }
                }
                CHECK(zc_block_release(eng, blk[l], NULL)); /* ends the view */
            }
            /* Loss: mean squared error over the batch and outputs. The
             * gradient is multiplied by the loss scale (1 unless fp16). */
            const float scale = (float)zc_loss_scale(eng);
            double lsum = 0;
            const float inv = 2.0f / (float)(B * OUT_DIM);
            for (int k = 0; k < B * OUT_DIM; k++) {
                float d = act[N_LAYERS][k] - y[k];
                lsum += (double)d * d;
                delta[k] = d * inv * scale;
            }
            loss_sum += lsum / (B * OUT_DIM);
            /* Backward, last layer first. */
            for (int l = N_LAYERS - 1; l >= 0; l--) {
                int in = DIMS[l], out = DIMS[l + 1];
                /* The whole layer is acquired, as ZeRO-3's module hooks do,
                 * although only the weight is read. */
                float *wb[2], *g[2];
                CHECK(zc_block_acquire(eng, blk[l], NULL, NULL));
                CHECK(zc_block_view_f32(eng, blk[l], wb));
                /* Zeroed fp32 gradients, valid until the block's grad_ready
                 * (ZC_DEBUG=1 checks the 16-bit buffers they go to). */
                CHECK(zc_block_grad_buffers_f32(eng, blk[l], g));
                const float *w = wb[0];
                float *gw = g[0], *gb = g[1];
                memset(dprev, 0, (size_t)B * in * sizeof(float));
                for (int b = 0; b < B; b++) {
                    const float *xb = act[l] + (size_t)b * in, *db = delta + (size_t)b * out;
                    float *pb = dprev + (size_t)b * in;
                    for (int j = 0; j < out; j++) {
                        float dj = db[j];
                        float *gwj = gw + (size_t)j * in;
                        const float *wj = w + (size_t)j * in;
                        gb[j] += dj;
                        for (int i = 0; i < in; i++) {
                            gwj[i] += dj * xb[i];
                            pb[i] += dj * wj[i];
                        }
                    }
                }
                CHECK(zc_block_grad_ready(eng, blk[l])); /* narrows g into the engine */
                CHECK(zc_block_release(eng, blk[l], NULL));
                if (l > 0) /* through tanh: d/dh = 1 - a^2 */
                    for (size_t k = 0; k < (size_t)B * in; k++)
                        delta[k] = dprev[k] * (1.0f - act[l][k] * act[l][k]);
            }
            if (micro + 1 < o->accum)
                CHECK(zc_micro_step_end(eng));
        }
        zc_step_info info;
        CHECK(zc_step(eng, &info));
        /* The first step of a run (or of a resumed run: a fresh engine)
         * records the stage-3 trace (no prefetch yet): the per-step figures
         * are the mean over the later steps. */
        zc_offload_stats os = {.size = sizeof os};
        CHECK(zc_engine_offload_stats(eng, &os));
        if (step > start || o->steps == 1) {
            sh->offload[rank][0] += (double)(os.param_nvme_read_bytes + os.optim_nvme_read_bytes);
            sh->offload[rank][1] += os.io_wait_s;
        }
        if (o->save_every && (step + 1) % o->save_every == 0)
            CHECK(zc_checkpoint_save(eng, o->save_dir, NULL));
        /* The mean over ranks: threads or processes, the same bits (the sum
         * is taken in rank order on every rank). Collective. */
        double loss = loss_sum / o->accum;
        CHECK(zc_all_reduce_f64(eng, &loss, 1, ZC_REDUCE_SUM));
        loss /= o->world;
        if (rank == 0) {
            if (o->json)
                printf("{\"step\":%d,\"loss\":%s,\"grad_norm\":%s,\"loss_scale\":%s,"
                       "\"skipped\":%s,\"lr\":%s}\n",
                       step + 1, jnum(loss).s, jnum(info.grad_norm).s, jnum(info.loss_scale).s,
                       info.skipped ? "true" : "false", jnum(info.lr).s);
            else
                printf("step %4d/%d  loss %.6f  grad_norm %8.4f  loss_scale %-6g  lr %.2e%s\n",
                       step + 1, start + o->steps, loss, info.grad_norm, info.loss_scale, info.lr,
                       info.skipped ? "  (skipped: overflow)" : "");
            fflush(stdout);
        }
    }

    sh->stats[rank] = (zc_stats){.size = sizeof(zc_stats)};
    CHECK(zc_engine_stats(eng, &sh->stats[rank]));
    /* Gathering the master is collective: every rank takes part, rank 0 keeps it. */
    size_t off = 0;
    float *scratch = xcalloc((size_t)MAX_DIM * MAX_DIM, sizeof(float));
    for (int i = 0; i < 2 * N_LAYERS; i++) {
        CHECK(zc_param_gather_master(eng, P[i], rank == 0 ? sh->master + off : scratch));
        off += sh->numel[i];
    }
    free(scratch);
    for (int l = 0; l <= N_LAYERS; l++) free(act[l]);
    free(y); free(delta); free(dprev);
    for (int l = 0; l < N_LAYERS; l++)
        zc_block_destroy(blk[l]);
    rank_engine = NULL;
    zc_engine_destroy(eng);
    atomic_fetch_sub(&live_engines, 1);
    return NULL;
}

/* ---- report --------------------------------------------------------------- */

static void report(const shared *sh)
{
    const opts *o = &sh->o;
    /* Little-endian bytes in registration order, whatever the host order. */
    uint8_t *bytes = xcalloc(sh->total, 4);
    for (size_t i = 0; i < sh->total; i++) {
        uint32_t u;
        memcpy(&u, &sh->master[i], 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
    sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, bytes, sh->total * 4);
    sha256_final_hex(&c, hex);
    if (o->dump_path) {
        errno = 0;
        /* Created, never overwritten ("x": O_EXCL, which also refuses a
         * link of that name); a failed write removes only what it made. */
        errno = 0;
        FILE *f = fopen(o->dump_path, "wbx");
        if (!f) {
            fprintf(stderr, "train_mlp: cannot create --dump-params '%s': %s%s\n", o->dump_path,
                    strerror(errno), errno == EEXIST ? " (train_mlp does not overwrite files)" : "");
            quit(1);
        }
        const bool written = fwrite(bytes, 4, sh->total, f) == sh->total;
        if (fclose(f) != 0 || !written) {
            fprintf(stderr, "train_mlp: cannot write --dump-params '%s': %s\n", o->dump_path,
                    errno ? strerror(errno) : "short write");
            unlink(o->dump_path);
            quit(1);
        }
    }
    free(bytes);

    int64_t mem[ZC_MEM__COUNT] = {0}, peak[ZC_MEM__COUNT] = {0}, comm[ZC_COLL__COUNT] = {0};
    int64_t kind[ZC_KIND__COUNT] = {0}, kind_peak[ZC_KIND__COUNT] = {0};
    int64_t link[ZC_LINK__COUNT] = {0};
    for (int r = 0; r < o->world; r++) {
        const zc_stats *s = &sh->stats[r];
        for (int k = 0; k < ZC_KIND__COUNT; k++) {
            if (s->bytes_by_kind[k] > kind[k]) kind[k] = s->bytes_by_kind[k];
            if (s->peak_bytes_by_kind[k] > kind_peak[k]) kind_peak[k] = s->peak_bytes_by_kind[k];
        }
        for (int k = 0; k < ZC_MEM__COUNT; k++) {
            if (s->bytes[k] > mem[k]) mem[k] = s->bytes[k];
            if (s->peak_bytes[k] > peak[k]) peak[k] = s->peak_bytes[k];
        }
        for (int k = 0; k < ZC_COLL__COUNT; k++)
            if (s->comm_bytes_last_step[k] > comm[k]) comm[k] = s->comm_bytes_last_step[k];
        for (int k = 0; k < ZC_LINK__COUNT; k++)
            if (s->comm_bytes_last_step_by_link[k] > link[k])
                link[k] = s->comm_bytes_last_step_by_link[k];
    }
    const zc_stats *s0 = &sh->stats[0];
    const char *dt = zc_dtype_name(o->dtype);
    /* Offload figures per step (mean over the steps after the first, max over
     * ranks). */
    const int counted = o->steps > 1 ? o->steps - 1 : o->steps;
    double nvme_read = 0, exposed = 0;
    for (int r = 0; counted > 0 && r < o->world; r++) {
        if (sh->offload[r][0] / counted > nvme_read) nvme_read = sh->offload[r][0] / counted;
        if (sh->offload[r][1] / counted > exposed) exposed = sh->offload[r][1] / counted;
    }
    if (o->json) {
        printf("{\"final\":true,\"params_sha256\":\"%s\",\"num_params\":%zu,\"world\":%d,"
               "\"stage\":%d,\"dtype\":\"%s\",\"accum\":%d,\"steps\":%d,"
               "\"padded_params\":%lld,\"num_chunks\":%lld,\"skipped_steps\":%lld,"
               "\"bytes\":{\"params\":%lld,\"grads\":%lld,\"master\":%lld,\"adam\":%lld,"
               "\"buffers\":%lld},"
               "\"peak_bytes\":{\"params\":%lld,\"grads\":%lld,\"master\":%lld,\"adam\":%lld,"
               "\"buffers\":%lld},"
               "\"comm_bytes_per_step\":{\"all_reduce\":%lld,\"reduce_scatter\":%lld,"
               "\"all_gather\":%lld},"
               "\"comm_bytes_per_step_by_link\":{\"intra_node\":%lld,\"inter_node\":%lld},"
               "\"nodes\":%d,\"shard_world\":%d,\"hpz\":%d,\"gathers_last_step\":%lld,"
               "\"bytes_by_kind\":{\"device\":%lld,\"pinned\":%lld,\"host\":%lld,"
               "\"nvme\":%lld},\"peak_bytes_by_kind\":{\"device\":%lld,\"pinned\":%lld,"
               "\"host\":%lld,\"nvme\":%lld},"
               "\"placement\":{\"optimizer\":[%lld,%lld,%lld],\"params\":[%lld,%lld,%lld]},"
               "\"nvme_read_bytes_per_step\":%.0f,"
               "\"exposed_io_s_per_step\":%s}\n",
               hex, sh->total, o->world, s0->stage, dt, o->accum, o->steps,
               (long long)s0->padded_params, (long long)s0->num_chunks,
               (long long)s0->skipped_steps, (long long)mem[ZC_MEM_PARAMS],
               (long long)mem[ZC_MEM_GRADS], (long long)mem[ZC_MEM_MASTER],
               (long long)mem[ZC_MEM_ADAM], (long long)mem[ZC_MEM_BUFFERS],
               (long long)peak[ZC_MEM_PARAMS], (long long)peak[ZC_MEM_GRADS],
               (long long)peak[ZC_MEM_MASTER], (long long)peak[ZC_MEM_ADAM],
               (long long)peak[ZC_MEM_BUFFERS], (long long)comm[ZC_COLL_ALL_REDUCE],
               (long long)comm[ZC_COLL_REDUCE_SCATTER], (long long)comm[ZC_COLL_ALL_GATHER],
               (long long)link[ZC_LINK_INTRA_NODE], (long long)link[ZC_LINK_INTER_NODE],
               s0->nodes, s0->shard_world, s0->hpz_partition_size,
               (long long)s0->gathers_last_step, (long long)kind[ZC_KIND_DEVICE],
               (long long)kind[ZC_KIND_PINNED], (long long)kind[ZC_KIND_HOST],
               (long long)kind[ZC_KIND_NVME], (long long)kind_peak[ZC_KIND_DEVICE],
               (long long)kind_peak[ZC_KIND_PINNED], (long long)kind_peak[ZC_KIND_HOST],
               (long long)kind_peak[ZC_KIND_NVME], (long long)s0->opt_chunks_by_place[0],
               (long long)s0->opt_chunks_by_place[1], (long long)s0->opt_chunks_by_place[2],
               (long long)s0->param_chunks_by_place[0], (long long)s0->param_chunks_by_place[1],
               (long long)s0->param_chunks_by_place[2], nvme_read, jnum(exposed).s);
    } else {
        printf("\n%zu parameters (%lld after padding, %lld chunks), ZeRO stage %d, %d ranks, %s, "
               "%lld skipped steps\n",
               sh->total, (long long)s0->padded_params, (long long)s0->num_chunks, s0->stage,
               o->world, dt, (long long)s0->skipped_steps);
        printf("per-rank memory (max over ranks, KiB): params %.1f  grads %.1f  master %.1f  "
               "adam %.1f  buffers %.1f\n",
               mem[ZC_MEM_PARAMS] / 1024.0, mem[ZC_MEM_GRADS] / 1024.0,
               mem[ZC_MEM_MASTER] / 1024.0, mem[ZC_MEM_ADAM] / 1024.0,
               mem[ZC_MEM_BUFFERS] / 1024.0);
        printf("communication per step (KiB): all-reduce %.1f  reduce-scatter %.1f  "
               "all-gather %.1f; sent inside a node %.1f, across nodes %.1f (%d nodes)\n",
               comm[ZC_COLL_ALL_REDUCE] / 1024.0, comm[ZC_COLL_REDUCE_SCATTER] / 1024.0,
               comm[ZC_COLL_ALL_GATHER] / 1024.0, link[ZC_LINK_INTRA_NODE] / 1024.0,
               link[ZC_LINK_INTER_NODE] / 1024.0, s0->nodes);
        printf("fp32 master parameters sha256: %s\n", hex);
    }
}

/* Whether a launcher started this process as one rank of a job: mpirun
 * (Open MPI, MPICH/hydra, MVAPICH2) or torchrun. Not Slurm's variables,
 * which every program of a batch allocation inherits: srun users say
 * --launcher env. */
static bool launched(void)
{
    /* Rank or size, as zc_comm_init_env recognises a launcher: a job with
     * only one of the two set is that call's error to name, not a run of
     * this process alone. */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                       "PMI_SIZE", "PMI_RANK", "MV2_COMM_WORLD_SIZE",
                                       "MV2_COMM_WORLD_RANK", "WORLD_SIZE", "RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    shared *sh = xcalloc(1, sizeof *sh);
    sh->o = parse_args(argc, argv);
    const int rank = -1; /* for CHECK in the main thread */
    zc_comm *proc_comm = NULL; /* one rank per process: this process's rank */
    sh->nlocal = sh->o.world;
    if (sh->o.launcher == LAUNCH_ENV || (sh->o.launcher == LAUNCH_AUTO && launched())) {
        /* Before the configuration: its "auto" values need the world size. */
        CHECK(zc_comm_init_env(&proc_comm));
        int w = zc_comm_world(proc_comm);
        if ((sh->o.given & GIVEN_WORLD) && sh->o.world != w) {
            fprintf(stderr, "train_mlp: --world %d but the launcher started %d ranks\n",
                    sh->o.world, w);
            quit(2);
        }
        if (w > 64) {
            fprintf(stderr, "train_mlp: %d ranks; this example runs at most 64\n", w);
            quit(2);
        }
        sh->o.world = w;
        sh->first = zc_comm_rank(proc_comm);
        sh->nlocal = 1;
    }
    sh->cfg = make_config(&sh->o);
    const opts *o = &sh->o;
    if (o->plan) {
        print_plan(sh->cfg, o);
        quit(0);
    }

    /* Each rank's buffers (rank_main: activations, targets and two deltas,
     * B x 1696 floats, plus about 8 MiB for a layer's weights, its gradients
     * and the engine's share of 231k parameters) must fit the free memory:
     * the allocations are overcommitted, so --world 64 --batch 65536 on a
     * small machine would otherwise end in the OOM killer, not a message. */
    uint64_t per_rank, need, avail;
    if (!zc__mul_u64((uint64_t)o->batch, 1696 * sizeof(float), &per_rank) ||
        !zc__add_u64(per_rank, 8u << 20, &per_rank) ||
        !zc__mul_u64(per_rank, (uint64_t)sh->nlocal, &need)) {
        fprintf(stderr, "train_mlp: the batch and world size overflow a memory estimate\n");
        quit(2);
    }
    if (zc__mem_available(&avail) && need > avail - avail / 8) {
        fprintf(stderr, "train_mlp: %d ranks x micro batch %d need about %.2f GiB; the machine "
                "has %.2f GiB available, of which this takes at most 7/8. Use a smaller --batch "
                "or --world\n", sh->nlocal, o->batch, (double)need / 1073741824.0,
                (double)avail / 1073741824.0);
        quit(1);
    }

    make_teacher(&sh->t, o->seed);
    make_init(sh);
    sh->stats = xcalloc((size_t)o->world, sizeof(zc_stats));
    sh->offload = xcalloc((size_t)o->world, sizeof *sh->offload);
    sh->master = xcalloc(sh->total, sizeof(float));
    sh->comms = xcalloc((size_t)o->world, sizeof(zc_comm *));
    if (proc_comm)
        sh->comms[sh->first] = proc_comm;
    else
        CHECK(zc_comm_local_world(o->world, sh->comms));

    if (!o->json && sh->first == 0)
        printf("train_mlp: %zu-parameter MLP, ZeRO stage %s, %d ranks, %s, %d steps x %d "
               "micro-steps of %d samples per rank\n",
               sh->total, o->stage < 0 ? "auto" : (const char[2]){(char)('0' + o->stage), 0},
               o->world, zc_dtype_name(o->dtype), o->steps, o->accum,
               o->batch);

    pthread_t *th = xcalloc((size_t)sh->nlocal, sizeof(pthread_t));
    rank_arg *args = xcalloc((size_t)sh->nlocal, sizeof(rank_arg));
    for (int r = 0; r < sh->nlocal; r++) {
        args[r] = (rank_arg){sh, sh->first + r};
        int e = pthread_create(&th[r], NULL, rank_main, &args[r]); /* returns the error */
        if (e != 0) {
            fprintf(stderr, "train_mlp: cannot start rank thread %d of %d: %s\n", r, o->world,
                    strerror(e));
            quit(1);
        }
    }
    for (int r = 0; r < sh->nlocal; r++) pthread_join(th[r], NULL);
    if (sh->first == 0) /* rank 0 gathered the parameters */
        report(sh);

    for (int r = 0; r < o->world; r++) zc_comm_destroy(sh->comms[r]);
    zc_config_destroy(sh->cfg);
    for (int i = 0; i < 2 * N_LAYERS; i++) free(sh->init[i]);
    free(th); free(args); free(sh->comms); free(sh->master); free(sh->stats); free(sh->offload);
    free(sh);
    /* Output that could not be written (a full disk, a closed pipe) is a
     * failure, not a silent success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "train_mlp: cannot write the output: %s\n",
                errno ? strerror(errno) : "write error");
        return 1;
    }
    return 0;
}
