/* The DeepSpeed replay fixtures (tests/oracle/fixtures, made by
 * make_fixtures.py) and zeroc's replay of them (o_ prefix).
 *
 * A case is one DeepSpeed run: a JSON config, a world size, the replayed
 * gradients G[step][micro][rank][element] of a module whose loss is
 * sum <p, G>, and what DeepSpeed recorded after every optimizer step (the
 * fp32 masters, the loss scale the step used, whether it was skipped, the
 * learning rate and the gradient norm). o_replay runs the same gradients
 * through a zeroc engine at any stage and records the same quantities. */
#ifndef ZC_TESTS_ORACLE_H
#define ZC_TESTS_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define O_MAX_PARAMS 16
#define O_MAX_WORLD 2

typedef struct o_inject {
    int step, micro, rank;
    int64_t elem;
    float value; /* inf, -inf or nan */
} o_inject;

typedef struct o_case {
    const char *name;
    const char *expect;  /* "match", "D1", "D2", "D4", "D5" */
    const char *expect_at[4]; /* per zeroc stage: expect, or "D3" where the
                                 index's zeroc_stage_expect says so */
    const char *dtype;   /* "fp32", "bf16", "fp16" */
    int ds_stage, world, accum, steps;
    const char *ds_optimizer;  /* the DeepSpeed optimizer class that ran it */
    char *config_json;         /* the DeepSpeed config, as JSON text */
    bool bias_correction;      /* optimizer.params.bias_correction (default true) */
    json_t *zeroc_extra;       /* zeroc-only keys meant for this case (object) */
    const char *twin;          /* D3: the same run with grad_accum_dtype "fp32" */
    bool twin_bitwise_equal;   /* DeepSpeed's masters equal the twin's */
    const char *key_unset_twin; /* D3: the same run with grad_accum_dtype unset
                                   (this one names the model dtype) */
    bool key_unset_twin_bitwise_equal;
    const char *d3_key;        /* D3: the grad_accum_dtype zeroc is also replayed
                                  with (the model dtype: DeepSpeed's default,
                                  which the case leaves unset), or NULL */
    const char *d3_key_expect_at[4]; /* that replay's expectation per zeroc stage:
                                        "match", or "D3" where it still differs */
    const char *init_kind;     /* "grid" or "unrounded" */
    const float *init;         /* N initial values given to DeepSpeed */
    int8_t *grads;             /* [steps][accum][world][N] */
    int *grad_exp;             /* [steps][accum][world]: G = k * 2^grad_exp */
    o_inject *inject;
    int ninject;
    bool has_master0;          /* DeepSpeed's initial master is not `init` */
    float *master0;            /* [N]: DeepSpeed's master before the first step */
    float *masters;            /* [steps][N] after each step */
    double *loss_scale, *lr, *grad_norm; /* [steps]; grad_norm NAN where DeepSpeed
                                            reported none (an overflow) */
    double *beta1;             /* [steps]: Adam's beta1 the step used (OneCycle's
                                  cycle_momentum moves it) */
    bool *skipped;
} o_case;

typedef struct o_fixtures {
    json_t *root;
    int nparams;
    const char *names[O_MAX_PARAMS];
    int64_t shape[O_MAX_PARAMS][8];
    int ndim[O_MAX_PARAMS];
    int64_t numel[O_MAX_PARAMS];
    int64_t n;                 /* elements in all */
    const char *ds_version, *torch_version;
    float *init_grid, *init_unrounded;
    int ncases;
    o_case *cases;
} o_fixtures;

/* Loads tests/oracle/fixtures (every file checked for its size); asserts
 * on any problem. */
void o_load(o_fixtures *F);
void o_free(o_fixtures *F);
const o_case *o_find(const o_fixtures *F, const char *name);

/* What one zeroc run of a case recorded (rank 0's view). */
typedef struct o_run {
    int stage;
    float *master0;     /* [N] after zc_param_load */
    float *masters;     /* [steps][N] */
    double *loss_scale, *lr, *grad_norm;
    bool *skipped;
    double final_scale; /* zc_loss_scale() after the last step */
} o_run;

typedef struct o_replay_opts {
    int stage;          /* zeroc's zero_optimization.stage */
    bool round_init;    /* load with zc_block_load_rounded: the master from the
                           values rounded to the working dtype, as DeepSpeed
                           builds it (D5) */
    bool ds_arith;      /* optimizer.params.deepspeed_arithmetic: true */
    bool extra;         /* the case's zeroc_extra keys (D1's
                           fp16.deepspeed_unscale_order) */
    const char *grad_accum_dtype; /* data_types.grad_accum_dtype set to this
                                     ("bf16", "fp16"); NULL: the case's config */
} o_replay_opts;

/* Runs case C through zeroc (one thread per rank, host device) with the
 * case's DeepSpeed config, only the stage replaced. Asserts on any failure. */
void o_replay(const o_fixtures *F, const o_case *C, const o_replay_opts *opts, o_run *out);
void o_run_free(o_run *r);

/* Distance between a zeroc master and DeepSpeed's in fp32 ulps (the number
 * of floats between them; README.md "The measure"); 0 for two NaNs, inf for
 * one. */
double o_ulp_dist(float zc, float ds);

/* The bound on |zeroc - DeepSpeed| (bound.c): B[step][element], the
 * largest difference a master may show after that step, from a first-order
 * error analysis over the case's gradients, learning rates and betas (the
 * clip factors from run r's norms and the case's). same_coeffs false: zeroc's
 * own arithmetic against DeepSpeed's (coefficients and roundings differ);
 * true: DeepSpeed's arithmetic on both sides (the same coefficients; only
 * the roundings of DeepSpeed's scalar tail and the clip factor may differ). */
void o_arith_bound(const o_fixtures *F, const o_case *C, const o_run *r, bool same_coeffs,
                   double *B);

/* mask[element]: DeepSpeedCPUAdam updated it in its scalar tail, whose
 * rounding zeroc does not reproduce (ds_layout.c). */
void o_ds_tail(const o_fixtures *F, const o_case *C, bool *mask);

/* The largest o_ulp_dist over the elements of one step's masters, and
 * where it is. */
typedef struct o_worst {
    double dist;
    int64_t elem;
    float zc, ds;
} o_worst;
o_worst o_step_worst(const float *zc, const float *ds, int64_t n);

#endif
