/* Engine test harness: a synthetic model trained by W rank threads through
 * the public API, used by the stage-equivalence, accounting, misuse and
 * stage-3 schedule tests.
 *
 * The model: T_NPARAMS one-dimensional parameters of uneven sizes in two
 * groups (group 0: the optimizer's weight decay; group 1: no decay, half lr),
 * with one forced chunk boundary. With a bucket of 2048 elements the layout is
 * six chunks: {p0 p1 p2} {p3: larger than the bucket} {p4} | {p5} {p6: larger}
 * {p7}, and several parameters straddle shard boundaries for W > 1.
 *
 * Gradients are a deterministic function of (rank, step, micro-step,
 * parameter, element) plus 0.05 x the parameter value the rank acquired, so
 * every rank has different data and the trajectory depends on the parameters.
 * Errors inside rank threads are recorded in t_run.err (Criterion asserts
 * only from the test's own thread). */
#ifndef ZC_TESTS_T_ENGINE_H
#define ZC_TESTS_T_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

#define T_NPARAMS 8
#define T_MAX_WORLD 4
#define T_MAX_STEPS 64

extern const int64_t t_numel[T_NPARAMS];
extern const int t_group[T_NPARAMS];
extern const bool t_boundary[T_NPARAMS];
int64_t t_total_numel(void);
/* Layers: parameters [t_layer_begin[l], t_layer_begin[l + 1]), one chunk each
 * with the default bucket of 2048 (used sizes t_layer_numel). */
#define T_NLAYERS 6
extern const int t_layer_begin[T_NLAYERS + 1];
extern const int64_t t_layer_numel[T_NLAYERS];

enum { T_BLOCK_NONE = 0, T_BLOCK_LIST, T_BLOCK_SPAN };
enum { T_LOAD_PLAIN = 0, T_LOAD_ROUNDED, T_LOAD_PREROUNDED };
/* v rounded to nearest, ties to even, in dt (fp32: v), computed without the
 * library's converters: fp16 through the compiler's _Float16, bf16 by
 * choosing the nearer of the two bf16 neighbours of v in double arithmetic.
 * Finite v only. */
float t_round_to(float v, zc_dtype dt);

/* Where evaluation passes (zc_pass_begin(ZC_PASS_EVAL)) run: bits of
 * t_run.eval_at. */
enum {
    T_EVAL_BEFORE_STEP = 1,   /* before every step: the first one, and between steps */
    T_EVAL_MID_MICRO = 2,     /* between the forward and the backward of each micro-step */
    T_EVAL_BETWEEN_MICRO = 4, /* after each zc_micro_step_end */
    T_EVAL_AFTER = 8,         /* after the last step, before the master is gathered */
    T_EVAL_ALL = 15
};

struct t_ctx;

typedef struct t_run {
    /* inputs */
    int stage, world, steps, accum;
    zc_dtype dtype;
    int64_t bucket;            /* chunk elements (engine option) */
    double clip;               /* gradient_clipping */
    double grad_gain;          /* multiplies the synthetic gradients (1 by default) */
    int64_t loss_scale_window; /* > 0: fp16.loss_scale_window (the scale grows back
                                  and overflows again within a short run) */
    bool same_grads;           /* every rank writes the same gradients (the rank is left
                                  out of the noise), each rounded to five significant
                                  bits, so the averaged gradient does not depend on the
                                  world size (1-4) */
    int64_t persistence;       /* stage3_param_persistence_threshold; < 0: 0 */
    int64_t prefetch;          /* stage3_prefetch_bucket_size; < 0: library default */
    int64_t max_live;          /* stage3_max_live_parameters; < 0: library default */
    int64_t reuse;             /* stage3_max_reuse_distance (default 0 here, so each use
                                  window gathers; the library's default is 1e9) */
    /* offload_param (NULL: none): "cpu" or "nvme"; nvme_path as a JSON value;
     * buffer_count (0: the default); max_in_cpu (elements cached in host
     * memory, 0 by default here) */
    const char *offload_param;
    const char *param_nvme_path_json;
    int64_t param_buffer_count;
    int64_t max_in_cpu;
    int permute_step;          /* forward acquires in another order at this step (-1: never) */
    bool layerwise;            /* acquire a layer's (chunk's) params together, as a model
                                  would, instead of one parameter at a time */
    const int *layers;         /* layer-wise: layer l is parameters [layers[l],
                                  layers[l + 1]) (NULL: t_layer_begin) */
    int nlayers;               /* with layers: how many */
    bool layer_boundaries;     /* with layers: a zc_chunk_boundary before each layer's
                                  first parameter (the first's included) instead of
                                  the harness's one before p5, so each layer is a
                                  span (and a unit of the stage-2/3 gradient pool) */
    int blocks;                /* layer-wise through the block calls: T_BLOCK_LIST
                                  (zc_block_create per layer) or T_BLOCK_SPAN
                                  (zc_block_span at each layer's first parameter:
                                  layers must end at zc_chunk_boundary calls) */
    /* offload_optimizer (NULL: none): "cpu" or "nvme"; nvme_path as a JSON
     * value (a string or a list); ratio (0: the default 1); buffer_count
     * (0: the default); pipeline: pipeline_read and pipeline_write */
    int64_t steps_per_print;   /* > 0: set steps_per_print (progress lines) */
    bool wall_clock_breakdown; /* set the key (step timers) */
    const char *offload;
    const char *nvme_path_json;
    double offload_ratio;
    int64_t buffer_count;
    bool pipeline;
    int f32_views;             /* zc_engine_options.f32_view_chunks (slots reserved;
                                  the harness's loop does not use them) */
    const char *const *keys;   /* more settings: {dotted key, JSON value, ..., NULL},
                                  applied with zc_config_set after the others */
    bool adopt;                /* register {p0..p4} and {p5..p7} over memory the rank
                                  owns (zc_block_adopt), filled with the initial values */
    bool block_values;         /* load the initial values and gather the master with
                                  zc_block_load / zc_block_gather_master: one call per
                                  layer block with `blocks`, else one block over all
                                  T_NPARAMS parameters (it crosses chunks) */
    int init_load;             /* how the initial values are loaded: T_LOAD_PLAIN
                                  (zc_param_load / zc_block_load), T_LOAD_ROUNDED
                                  (the _rounded calls), T_LOAD_PREROUNDED (rounded to
                                  the working dtype here, t_round_to, then loaded
                                  plainly) */
    unsigned eval_at;          /* T_EVAL_* bits: where evaluation passes run (0: none) */
    int eval_batches;          /* forward passes per evaluation pass (0: 1); each
                                  acquires every parameter (the layers' blocks
                                  with `blocks`), sums its values and releases it */
    /* Importing the initial values (tests/load): with load_path every rank
     * takes them from that safetensors file by zc_load_safetensors
     * (load_opts; NULL: the defaults) instead of zc_param_load. load_dtype
     * (ZC_DTYPE_BF16 or ZC_DTYPE_F16; 0, fp32, leaves them) rounds the
     * initial values to a file's precision on both paths, so the reference
     * is zc_param_load of exactly the values such a file holds
     * (t_init_value_as). load_stats: each rank's figures of the import. */
    const char *load_path;
    const zc_load_options *load_opts;
    zc_dtype load_dtype;
    zc_load_stats load_stats[T_MAX_WORLD];
    /* called on every rank thread after each zc_step (may be NULL) */
    void (*after_step)(struct t_ctx *x, int step, void *arg);
    void *hook_arg;
    /* outputs */
    float *master;             /* t_total_numel() floats gathered by rank 0 */
    zc_stats stats[T_MAX_WORLD];
    zc_step_info info[T_MAX_STEPS]; /* rank 0's */
    zc_stats step_stats[T_MAX_STEPS]; /* rank 0's stats after each step */
    char err[T_MAX_WORLD][512];
    /* with eval_at: each rank's sum, over its evaluation passes, of every
       value they acquired (in fp64, in acquire order), the passes it ran
       and its zc_engine_pass_stats at the end */
    double eval_sum[T_MAX_WORLD];
    int64_t evals_run[T_MAX_WORLD];
    zc_pass_stats pass_stats[T_MAX_WORLD];
    /* with adopt: each rank's adopted memory after training, widened to fp32
       (t_total_numel() floats, allocated by t_engine_run), and whether
       zc_param_acquire of p0 and p5 returned that memory */
    float *adopt_out[T_MAX_WORLD];
    bool adopt_identity[T_MAX_WORLD];
} t_run;

/* Defaults: world 1, 20 steps, accumulation 1, fp32, bucket 2048, clip 1. */
void t_run_init(t_run *run, int stage, int world, zc_dtype dtype);

/* One rank's engine and parameters. */
typedef struct t_ctx {
    t_run *run;
    int rank;
    zc_config *cfg;
    zc_engine *eng;
    zc_param *p[T_NPARAMS];
    zc_block *blk[T_NPARAMS];  /* per layer, with run->blocks */
    zc_block *all;             /* with run->block_values and no blocks: every parameter */
    void *adopt_mem[2];        /* with run->adopt: the rank's memory for {p0..p4}, {p5..p7} */
    double eval_sum;           /* t_eval_pass: what the passes read */
    int64_t evals;             /* ... and how many ran */
} t_ctx;

/* The initial value of element k of parameter i (what t_ctx_open loads). */
float t_init_value(int i, int64_t k);
/* The same rounded to dt (to nearest even) and widened back: what a file of
 * that precision holds (dt fp32: t_init_value). */
float t_init_value_as(int i, int64_t k, zc_dtype dt);

/* The layer table of a run (run->layers, else t_layer_begin): how many
 * layers, and where layer l begins (l == t_nlayers: the end). */
int t_nlayers(const t_ctx *x);
int t_layer_at(const t_ctx *x, int l);
/* Creates the configuration and engine, registers the model, builds and
 * loads the initial values. */
/* The configuration a run's ranks build with (the caller destroys it), and
 * zc_plan_memory of the harness's model under it on the host path (the
 * layout_boundaries and adopt options are not planned). */
zc_status t_config_make(const t_run *run, zc_config **out);
zc_status t_plan(const t_run *run, zc_memory_plan *out);
zc_status t_ctx_open(t_ctx *x, t_run *run, int rank, zc_comm *comm);
void t_ctx_close(t_ctx *x);
/* Forward: acquire, touch and release every parameter (order NULL: natural;
 * in layer-wise mode order permutes layers). */
zc_status t_forward(t_ctx *x, const int *order);
/* Backward: acquire in reverse order, write the gradient, make it ready
 * (skip: index of a parameter to leave out, or -1), release. */
zc_status t_backward(t_ctx *x, int step, int micro, int skip);
/* Backward for parameter i alone (acquire, write, ready, release). */
zc_status t_backward_one(t_ctx *x, int step, int micro, int i);
/* One evaluation pass: zc_pass_begin, eval_batches forward passes that sum
 * every value acquired into x->eval_sum, zc_pass_end. */
zc_status t_eval_pass(t_ctx *x);
/* One optimizer step: accum micro-steps of forward + backward, then zc_step,
 * with the evaluation passes run->eval_at asks for. */
zc_status t_train_step(t_ctx *x, int step, zc_step_info *info);
/* Collective: gathers every parameter's fp32 master; rank 0 stores it in out. */
zc_status t_gather(t_ctx *x, float *out);

/* Runs fn(arg, comm, rank) on `world` threads (at most T_MAX_WORLD), one
 * per rank of a fresh local communicator, joins them and destroys the
 * communicators. ZC_COMM_TIMEOUT defaults to 60 s here, so a rank that
 * fails makes the others' next collective fail instead of hanging the suite.
 * Returns false, with the reason in err (cap bytes), when the communicator
 * could not be made; fn then never runs. */
typedef void t_rank_fn(void *arg, zc_comm *comm, int rank);
bool t_on_ranks(int world, t_rank_fn *fn, void *arg, char *err, size_t cap);

/* Runs the whole training on run->world threads; master, stats and info are
 * filled. Returns false (with run->err set) when a rank failed. */
bool t_engine_run(t_run *run);
/* The first error message of a run, or "". */
const char *t_run_error(const t_run *run);

#endif
