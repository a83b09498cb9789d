/* The configuration handle (internal view).
 *
 * Typed fields for every DeepSpeed key zeroc reads, holding DeepSpeed's code
 * defaults after zc_config_create. The engine reads these fields; the JSON
 * loader and zc_config_set write them through the key schema in
 * src/config/schema.c. Integer fields that DeepSpeed allows to be unset (None)
 * use -1; "auto" values are tracked per key by the schema layer and resolved by
 * zc_config_resolve / the engine.
 */
#ifndef ZC_CONFIG_CONFIG_H
#define ZC_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

typedef enum zc_offload_device {
    ZC_OFFLOAD_NONE = 0,
    ZC_OFFLOAD_CPU,
    ZC_OFFLOAD_NVME
} zc_offload_device;

/* The kinds zero_optimization.max_memory budgets (its keys device, cpu,
 * nvme). cpu is all host memory the engine takes, pinned and pageable. */
typedef enum zc_budget_kind {
    ZC_BUDGET_DEVICE = 0,
    ZC_BUDGET_CPU,
    ZC_BUDGET_NVME,
    ZC_BUDGET__COUNT
} zc_budget_kind;

/* optimizer.type: DeepSpeed's names, compared without case as its
 * config.py does (the values are stored in zc_config.optimizer.type). */
typedef enum zc_opt_type {
    ZC_OPT_ADAM = 0,
    ZC_OPT_ADAMW,
    ZC_OPT_LION,   /* parsed; zc_engine_create refuses it (support.c) */
    ZC_OPT_ADAGRAD /* parsed; zc_engine_create refuses it (support.c) */
} zc_opt_type;

typedef enum zc_sched_type {
    ZC_SCHED_NONE = 0,
    ZC_SCHED_WARMUP_LR,
    ZC_SCHED_WARMUP_DECAY_LR,
    ZC_SCHED_WARMUP_COSINE_LR,
    ZC_SCHED_ONE_CYCLE,
    ZC_SCHED_LR_RANGE_TEST
} zc_sched_type;

typedef struct zc_sched_cfg {
    zc_sched_type type;
    /* WarmupLR / WarmupDecayLR */
    double warmup_min_lr, warmup_max_lr; /* warmup_max_lr < 0: optimizer lr */
    int64_t warmup_num_steps;            /* 1000 */
    bool warmup_log;                     /* warmup_type "log" (default) vs "linear" */
    int64_t total_num_steps;             /* WarmupDecayLR, WarmupCosineLR; -1 unset */
    /* WarmupCosineLR */
    double warmup_min_ratio, cos_min_ratio;
    /* OneCycle */
    double cycle_min_lr, cycle_max_lr, decay_lr_rate;
    int64_t cycle_first_step_size, cycle_second_step_size, cycle_first_stair_count,
        cycle_second_stair_count, decay_step_size;
    bool cycle_momentum;
    double cycle_min_mom, cycle_max_mom, decay_mom_rate;
    /* LRRangeTest */
    double lr_range_test_min_lr, lr_range_test_step_rate;
    int64_t lr_range_test_step_size;
    bool lr_range_test_staircase;
} zc_sched_cfg;

typedef struct zc_offload_cfg {
    zc_offload_device device;
    char *nvme_path; /* owned, NULL if unset */
    bool pin_memory;
    int64_t buffer_count, buffer_size, max_in_cpu;
    bool fast_init, pipeline_read, pipeline_write;
    double ratio;
} zc_offload_cfg;

struct zc_config {
    /* batch (-1 = unset) */
    int64_t train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
    double gradient_clipping;            /* 1.0; 0 disables */
    int64_t steps_per_print;             /* -1 = never */
    bool wall_clock_breakdown, prescale_gradients;
    double gradient_predivide_factor;    /* 1.0 */
    int communication_data_type;         /* zc_dtype, -1 = follow params */
    int grad_accum_dtype;                /* zc_dtype, -1 = default */
    bool zero_allow_untested_optimizer, zero_force_ds_cpu_optimizer;

    struct {
        bool enabled, auto_cast;
        double loss_scale;               /* 0 = dynamic */
        int64_t initial_scale_power;     /* 16 */
        int64_t loss_scale_window;       /* 1000 */
        int64_t hysteresis;              /* 2 */
        bool consecutive_hysteresis;
        double min_loss_scale;           /* 1 */
        bool deepspeed_unscale_order;    /* zeroc: unscale a growth step by the doubled
                                            scale, as DeepSpeed does (step.c) */
    } fp16;
    struct {
        bool enabled, check_grad_overflow;
        /* The optimizer's state precision (precision.c): DeepSpeed's two
         * keys and zeroc's per-moment dtypes (-1 unset), the rounding of
         * bf16 state written back and its seed. */
        bool master_weights_and_grads, optimizer_states;
        int exp_avg_dtype, exp_avg_sq_dtype;
        bool stochastic_rounding;
        int64_t stochastic_rounding_seed;
    } bf16;

    struct {
        bool present;                    /* an optimizer block was given */
        int type;                        /* zc_opt_type */
        bool adamw_type;                 /* type == ZC_OPT_ADAMW, stored with type
                                            (optimizer.c, for the Adam step's readers) */
        double lr, beta1, beta2, eps, weight_decay;
        /* Adagrad: torch.optim.Adagrad's (DeepSpeedCPUAdagrad takes neither). */
        double lr_decay, initial_accumulator_value;
        bool adam_w_mode, bias_correction, torch_adam;
        bool deepspeed_arithmetic;       /* zeroc: DeepSpeedCPUAdam's arithmetic
                                            (optim/adam.h ZC_ADAM_ARITH_DEEPSPEED) */
    } optimizer;

    zc_sched_cfg scheduler;

    struct {
        int stage;
        bool contiguous_gradients, reduce_scatter, allgather_partitions;
        int overlap_comm;                /* -1 = unset: true iff stage 3 */
        int64_t reduce_bucket_size, allgather_bucket_size;
        bool round_robin_gradients, load_from_fp32_weights, ignore_unused_parameters;
        int64_t sub_group_size;
        int64_t prefetch_bucket_size, param_persistence_threshold, model_persistence_threshold,
            max_live_parameters, max_reuse_distance, module_granularity_threshold;
        bool gather_16bit_weights_on_model_save;
        int64_t zero_hpz_partition_size;  /* hpZ: > 1 at stage 3 (docs/config.md) */
        int64_t mics_shard_size;          /* MiCS: > 0 shards in groups of this many ranks;
                                             -1 (default) or 0: off */
        bool mics_hierarchical_params_gather;
        bool zero_quantized_weights, zero_quantized_gradients;
        zc_offload_cfg offload_optimizer, offload_param;
        /* zero_optimization.max_memory (a zeroc extension, after accelerate's
         * max_memory): one rank's budget of each kind, in bytes, indexed by
         * zc_budget_kind; -1 unset (with the block given: none of that kind).
         * "auto" leaves -1 with the key's origin pending (zc__config_budget). */
        int64_t max_memory[3];
    } zero;

    /* activation_checkpointing (DeepSpeed's section; docs/activations.md): how
     * the activation store (src/act) keeps the checkpoints a training loop
     * hands it. nvme_checkpointing, nvme_path and buffer_count are zeroc's. */
    struct zc_act_cfg {
        bool partition_activations;  /* split each checkpoint over the model-parallel
                                        group (zc_engine_options.act_mp_comm) */
        bool contiguous_memory_optimization; /* accepted: the store is always one
                                        reservation made at build */
        bool cpu_checkpointing;      /* keep checkpoints in pinned host memory */
        int64_t number_checkpoints;  /* checkpoints per micro-step; -1 unset */
        bool synchronize_checkpoint_boundary; /* device sync around every store call */
        bool profile;                /* log each save and restore with its time */
        bool nvme_checkpointing;     /* (zeroc) keep them in swap files on NVMe */
        char *nvme_path;             /* (zeroc) owned, NULL: the offload blocks' */
        int64_t buffer_count;        /* (zeroc) pinned buffers of the NVMe home */
    } act;

    struct {
        int64_t block_size, queue_depth, intra_op_parallelism;
        bool single_submit, overlap_events, use_gds;
    } aio;

    /* The timeline (a zeroc extension, docs/trace.md) and DeepSpeed's
     * comms_logger. */
    struct {
        char *path;         /* trace.path; NULL: no timeline */
        char *steps;        /* trace.steps, "A-B" or "A"; NULL: ZC_TRACE_STEPS_DEFAULT */
        int64_t max_events; /* trace.max_events; -1: the most the window can need */
    } trace;
    struct {
        bool enabled, verbose, prof_all, debug;
        char *prof_ops;     /* DeepSpeed's op names joined with '\n'; NULL: none */
    } comms_logger;

    zc_program_values program; /* what the program told us, for "auto" */

    struct zc_config_meta *meta; /* schema layer: per-key origin, "auto" flags */
};

/* Effective overlap_comm (DeepSpeed: unset means true iff stage 3). */
static inline bool zc__cfg_overlap_comm(const zc_config *c)
{
    return c->zero.overlap_comm < 0 ? c->zero.stage == 3 : c->zero.overlap_comm != 0;
}

/* Deep copy (the engine keeps its own). Returns ZC_ERR_NO_MEMORY. */
zc_status zc__config_clone(const zc_config *src, zc_config **out);

/* Resolves the "auto" keys derived from the model, as the Hugging Face
 * integration does, from H = the largest dimension of the largest 2-D
 * parameter: reduce_bucket_size = H^2 and, for stage 3 only,
 * stage3_prefetch_bucket_size = 0.9 H^2 and stage3_param_persistence_threshold
 * = 10 H. Keys not written "auto" are untouched. H <= 0 (no 2-D parameter)
 * leaves DeepSpeed's defaults, with an INFO line per key. The engine calls it
 * in zc_engine_build, before sizing buckets. */
zc_status zc__config_resolve_model_auto(zc_config *cfg, int64_t hidden_size);

/* What zc_engine_create runs on its private copy: when neither batch key is
 * given (nor "auto"), the micro batch is taken as 1 (the engine counts
 * micro-steps, not samples); then zc_config_resolve (batch rules, program
 * "auto" values, semantic checks). Same failure contract as zc_config_resolve. */
zc_status zc__config_resolve_for_engine(zc_config *cfg, int world);

/* The engine's acceptance rule beyond the schema (see support.c): returns
 * ZC_ERR_UNSUPPORTED naming every block the engine cannot run, ZC_OK
 * otherwise. zc_engine_create calls it; `zeroc config check` reports the same
 * errors. */
zc_status zc__config_engine_check(const zc_config *cfg);
/* Hybrid sharding against the data-parallel world (zc_engine_create,
 * zc_plan_memory): mics_shard_size and, at stage 3, zero_hpz_partition_size
 * divide `world` and are not larger; ZC_ERR_CONFIG naming the key and both
 * sizes. */
zc_status zc__config_hybrid_check(const zc_config *cfg, int world);
/* The same rules, their message led by `what` (e.g. "zc_engine_build"). */
zc_status zc__config_engine_rules(const zc_config *cfg, const char *what);
/* data_types.grad_accum_dtype's rule of that check, against the working
 * dtype zc_engine_create picked (zc_engine_options.param_dtype may differ from
 * the precision blocks): ZC_ERR_CONFIG naming the key unless it is unset,
 * fp32 or pdt. */
zc_status zc__config_grad_accum_check(const zc_config *cfg, zc_dtype pdt);

/* The single rules of that check, for the parts of zc_engine_build that take
 * these values (the NVMe homes and the optimizer placement): ZC_ERR_CONFIG
 * with the message `zeroc config check` prints for the key ("aio.block_size:
 * 4097: NVMe offload needs a power of two ..."). */
#define ZC_CFG_AIO_QUEUE_DEPTH_MAX 4096  /* the NVMe store's ring */
#define ZC_CFG_AIO_INTRA_OP_MAX 64
#define ZC_CFG_PARAM_SWAP_BUFFERS_MAX 256 /* src/offload/param_home_nvme.c's table */
zc_status zc__config_aio_check(int64_t block_size, int64_t queue_depth, int64_t intra_op);
zc_status zc__config_opt_buffers_check(int64_t buffer_count);
zc_status zc__config_param_buffers_check(int64_t buffer_count);
zc_status zc__config_ratio_check(double ratio);

/* ---- the optimizer's state precision (precision.c) ---------------------- */

/* The dtype each optimizer-state tensor is stored in, from bf16's keys:
 * master (bf16_master_weights_and_grads), m (exp_avg_dtype, else
 * bf16_optimizer_states), v (exp_avg_sq_dtype, else bf16_optimizer_states).
 * Each is ZC_DTYPE_F32 or ZC_DTYPE_BF16 once zc__cfg_engine_support holds. */
typedef struct zc_state_dtypes {
    zc_dtype master, m, v;
} zc_state_dtypes;
zc_state_dtypes zc__config_state_dtypes(const zc_config *cfg);
/* Whether any of them is 16-bit. */
bool zc__config_state_lp(const zc_config *cfg);

/* ---- the timeline and the comms logger (observe_keys.c) ----------------- */

/* The window trace.steps takes when unset: step 1 records stage 3's acquire
 * order (and warms every cache), so the window starts after it. */
#define ZC_TRACE_STEPS_DEFAULT "2-4"
#define ZC_TRACE_STEPS_MAX ((int64_t)1 << 53)
/* Parses a window of optimizer steps, "A-B" or "A" (whole decimal numbers,
 * 1 <= A <= B <= 2^53, nothing else): ZC_OK with *first and *last, or
 * ZC_ERR_CONFIG naming `what` (a key or a variable), the text and what is
 * accepted. */
zc_status zc__config_step_range(const char *text, const char *what, int64_t *first,
                                int64_t *last);
/* The collective kinds (one bit per zc_coll_kind) of comms_logger.prof_ops
 * ('\n'-joined DeepSpeed op names: all_reduce, all_gather,
 * all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, broadcast,
 * and the ones zeroc never issues: all_to_all_single, send, recv, isend,
 * irecv, reduce, gather, scatter, barrier): ZC_OK, or ZC_ERR_CONFIG naming
 * the key and an unknown name. NULL is none. */
zc_status zc__config_comms_ops(const char *ops, unsigned *mask);

/* ---- placement from memory budgets (size.c, budget.c) ------------------- */

/* Parses a size as accelerate's max_memory writes it: "44GiB" (2^30),
 * "500MB" (10^6), "1.5TB", KiB..TiB and KB..TB case-insensitive (a decimal
 * unit ending in a lower-case "b" is bits, as accelerate reads it), or a
 * string of digits (bytes). Rounded down to whole bytes. false with a message
 * in err (the text, what is accepted) when it is not one or passes int64. */
bool zc__parse_size(const char *s, int64_t *out, char *err, size_t cap);

/* What zero_optimization.max_memory says of one kind. */
typedef enum zc_budget_state {
    ZC_BUDGET_NONE = 0, /* not given: none of this kind may be used */
    ZC_BUDGET_BYTES,    /* a number of bytes */
    ZC_BUDGET_AUTO      /* "auto": what the machine has, resolved at build */
} zc_budget_state;

/* Whether the configuration gives zero_optimization.max_memory at all
 * (any of its keys, "auto" included). */
bool zc__config_has_budgets(const zc_config *cfg);
/* The state of one kind's budget, and its bytes when ZC_BUDGET_BYTES. */
zc_budget_state zc__config_budget(const zc_config *cfg, zc_budget_kind kind, int64_t *bytes);
/* Whether zero_optimization.stage is "auto": the lowest of 1-3 whose
 * placement fits the budgets, chosen at build (the struct holds 0 until
 * then). */
bool zc__config_stage_auto(const zc_config *cfg);
/* Whether the planner chooses offload_optimizer.device (param false) or
 * offload_param.device (param true): the key is "auto", or not written while
 * budgets are given. An explicit "none", "cpu" or "nvme" is kept. */
bool zc__config_place_free(const zc_config *cfg, bool param);

#endif
