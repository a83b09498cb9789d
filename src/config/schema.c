/* The key table: every key zeroc reads, its type, range and default, and the
 * lookups by path (the typed parse/store/format of one value is
 * schema_value.c).
 *
 * Defaults are DeepSpeed's CODE defaults (runtime/constants.py, zero/config.py,
 * zero/offload_config.py, precision_config.py, lr_schedules.py), not its docs,
 * where the two differ: overlap_comm unset (= true iff stage 3),
 * steps_per_print unset (= never), gradient_clipping 1.0, adam_w_mode true. */
#include "config/schema.h"

#include <math.h>
#include <string.h>

#define O(f) offsetof(struct zc_config, f)
#define I64MAX INT64_MAX
/* A per-rank memory budget: 1 EiB, far past any machine. */
#define BUDGET_MAX ((int64_t)1 << 60)

/* Every number of the file has a stated range, chosen so that what is
 * computed from it cannot overflow (the computations are still checked):
 * - batch sizes fit an int: micro batch x accumulation x world stays inside
 *   int64 for any int world, and programs count samples in int;
 * - step counts are exact in a double (the schedule formulas run in double);
 * - element counts (buckets, thresholds, sub-groups) times any dtype size,
 *   and times a few more such factors, stay inside int64; the largest seen in
 *   real configs is 1e14. */
#define BATCH_MAX ((int64_t)INT32_MAX)
#define STEPS_MAX ((int64_t)1 << 53)
#define ELEMS_MAX ((int64_t)1 << 50)
/* Loss scales are applied to fp32 values. */
#define SCALE_MAX 3.4028234663852886e38

#define KBOOL(p, f, def, fl, d) \
    { .path = p, .type = ZC_KT_BOOL, .flags = (fl), .off = O(f), .idef = (def), .doc = d }
#define KTRI(p, f, d) \
    { .path = p, .type = ZC_KT_TRI, .flags = ZC_KF_NULL, .off = O(f), .idef = -1, .doc = d }
#define KI64(p, f, def, lo, hi, fl, d)                                                         \
    { .path = p, .type = ZC_KT_I64, .flags = (fl), .off = O(f), .imin = (lo), .imax = (hi), \
      .idef = (def), .doc = d }
#define KI64A(p, a, f, def, lo, hi, fl, d)                                                     \
    { .path = p, .type = ZC_KT_I64, .flags = (fl), .off = O(f), .imin = (lo), .imax = (hi), \
      .idef = (def), .alias = a, .doc = d }
#define KF64(p, f, def, lo, hi, fl, d)                                                         \
    { .path = p, .type = ZC_KT_F64, .flags = (fl), .off = O(f), .dmin = (lo), .dmax = (hi), \
      .ddef = (def), .doc = d }
#define KENUM(p, f, tab, sz, def, fl, d)                                                   \
    { .path = p, .type = ZC_KT_ENUM, .flags = (fl), .off = O(f), .enums = tab, .esz = sz, \
      .idef = (def), .doc = d }
#define KIGN(p, fl, d) { .path = p, .type = ZC_KT_IGNORED, .flags = (fl), .doc = d }

/* Scheduler parameters: which types take them (DeepSpeed passes params as
 * constructor kwargs, so a parameter of another type is a TypeError there). */
#define SB(t) (1u << (t))
#define S_WARM (SB(ZC_SCHED_WARMUP_LR) | SB(ZC_SCHED_WARMUP_DECAY_LR))
#define S_WDEC SB(ZC_SCHED_WARMUP_DECAY_LR)
#define S_COS SB(ZC_SCHED_WARMUP_COSINE_LR)
#define S_1C SB(ZC_SCHED_ONE_CYCLE)
#define S_RT SB(ZC_SCHED_LR_RANGE_TEST)
#define KSF(p, f, def, lo, hi, fl, m, d)                                                       \
    { .path = "scheduler.params." p, .type = ZC_KT_F64, .flags = (fl) | ZC_KF_SCHED,         \
      .off = O(scheduler.f), .dmin = (lo), .dmax = (hi), .ddef = (def), .sched_mask = (m),   \
      .doc = d }
#define KSI(p, f, def, lo, hi, fl, m, d)                                                       \
    { .path = "scheduler.params." p, .type = ZC_KT_I64, .flags = (fl) | ZC_KF_SCHED,         \
      .off = O(scheduler.f), .imin = (lo), .imax = (hi), .idef = (def), .sched_mask = (m),   \
      .doc = d }
#define KSB(p, f, def, m, d)                                                                   \
    { .path = "scheduler.params." p, .type = ZC_KT_BOOL, .flags = ZC_KF_SCHED,               \
      .off = O(scheduler.f), .idef = (def), .sched_mask = (m), .doc = d }

static const zc_cfg_enum offload_devices[] = {
    {"none", ZC_OFFLOAD_NONE}, {"cpu", ZC_OFFLOAD_CPU}, {"nvme", ZC_OFFLOAD_NVME}, {NULL, 0}};
static const zc_cfg_enum sched_types[] = {{"WarmupLR", ZC_SCHED_WARMUP_LR},
                                          {"WarmupDecayLR", ZC_SCHED_WARMUP_DECAY_LR},
                                          {"WarmupCosineLR", ZC_SCHED_WARMUP_COSINE_LR},
                                          {"OneCycle", ZC_SCHED_ONE_CYCLE},
                                          {"LRRangeTest", ZC_SCHED_LR_RANGE_TEST},
                                          {NULL, 0}};
static const zc_cfg_enum opt_types[] = {{"Adam", ZC_OPT_ADAM},
                                        {"AdamW", ZC_OPT_ADAMW},
                                        {"Lion", ZC_OPT_LION},
                                        {"Adagrad", ZC_OPT_ADAGRAD},
                                        {NULL, 0}};
static const zc_cfg_enum warmup_types[] = {{"log", 1}, {"linear", 0}, {NULL, 0}};

/* Optimizer parameters: which types take them. */
#define OB(t) (1u << (t))
#define OPT_ADAMS (OB(ZC_OPT_ADAM) | OB(ZC_OPT_ADAMW))
#define OPT_ALL (OPT_ADAMS | OB(ZC_OPT_LION) | OB(ZC_OPT_ADAGRAD))

#define ZOPT "zero_optimization."
#define OOPT "zero_optimization.offload_optimizer."
#define OPAR "zero_optimization.offload_param."
#define PROG ZC_KF_AUTO_PROGRAM
#define ACT "activation_checkpointing."
/* The activation store's bounds (src/act/act.h holds the same numbers). */
#define ACT_SLOTS_MAX ((int64_t)1 << 20)

const zc_cfg_key zc__cfg_keys[] = {
    /* top level */
    KI64("train_batch_size", train_batch_size, -1, 1, BATCH_MAX,
         ZC_KF_NULL | PROG | ZC_KF_MUST_RESOLVE,
         "global batch = micro batch x accumulation x data-parallel world"),
    KI64("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu, -1, 1, BATCH_MAX,
         ZC_KF_NULL | PROG | ZC_KF_MUST_RESOLVE, "samples per rank per micro-step"),
    KI64("gradient_accumulation_steps", gradient_accumulation_steps, -1, 1, BATCH_MAX,
         ZC_KF_NULL | PROG | ZC_KF_MUST_RESOLVE, "micro-steps per optimizer step"),
    KF64("gradient_clipping", gradient_clipping, 1.0, 0, INFINITY, PROG,
         "global gradient-norm clip; 0 disables"),
    KI64("steps_per_print", steps_per_print, -1, 1, STEPS_MAX, ZC_KF_NULL,
         "progress line every N steps; unset = never"),
    KBOOL("wall_clock_breakdown", wall_clock_breakdown, 0, 0, "per-phase timings"),
    KBOOL("prescale_gradients", prescale_gradients, 0, 0,
          "divide gradients before the reduction instead of after"),
    KF64("gradient_predivide_factor", gradient_predivide_factor, 1.0, 0, INFINITY, ZC_KF_EXMIN,
         "divide by this before the reduction and by world/this after"),
    { .path = "communication_data_type", .type = ZC_KT_DTYPE, .flags = ZC_KF_NULL,
      .off = O(communication_data_type), .idef = -1,
      .doc = "dtype of gradient reductions; unset = the parameters' dtype" },
    { .path = "data_types.grad_accum_dtype", .type = ZC_KT_DTYPE, .flags = ZC_KF_NULL,
      .off = O(grad_accum_dtype), .idef = -1,
      .doc = "dtype micro-step gradients are summed in: fp32 or the parameters' dtype; "
             "unset = fp32 (DeepSpeed's default: the parameters' dtype)" },
    KBOOL("zero_allow_untested_optimizer", zero_allow_untested_optimizer, 0, 0,
          "allow a client optimizer with ZeRO"),
    KBOOL("zero_force_ds_cpu_optimizer", zero_force_ds_cpu_optimizer, 1, 0,
          "offload requires DeepSpeed's CPU Adam"),

    /* fp16 */
    KBOOL("fp16.enabled", fp16.enabled, 0, PROG, "fp16 parameters with loss scaling"),
    KBOOL("fp16.auto_cast", fp16.auto_cast, 0, 0, "cast inputs to fp16"),
    KF64("fp16.loss_scale", fp16.loss_scale, 0, 0, SCALE_MAX, 0,
         "static loss scale; 0 = dynamic"),
    KI64("fp16.initial_scale_power", fp16.initial_scale_power, 16, 0, 127, 0,
         "dynamic scale starts at 2^this (a finite fp32)"),
    KI64("fp16.loss_scale_window", fp16.loss_scale_window, 1000, 1, STEPS_MAX, 0,
         "clean steps before the scale doubles"),
    KI64("fp16.hysteresis", fp16.hysteresis, 2, 1, STEPS_MAX, 0,
         "overflows tolerated before the scale halves"),
    KBOOL("fp16.consecutive_hysteresis", fp16.consecutive_hysteresis, 0, 0,
          "refill hysteresis on every clean step"),
    KF64("fp16.min_loss_scale", fp16.min_loss_scale, 1, 0, SCALE_MAX, ZC_KF_EXMIN,
         "the scale never goes below this"),
    KIGN("fp16.fp16_master_weights_and_grads", ZC_KF_WARN_SET, "not implemented by zeroc"),
    KBOOL("fp16.deepspeed_unscale_order", fp16.deepspeed_unscale_order, 0, 0,
          "(zeroc) unscale by the scale after this step's update, as DeepSpeed"),

    /* bf16 (old name: bfloat16) */
    KBOOL("bf16.enabled", bf16.enabled, 0, PROG, "bf16 parameters"),
    KBOOL("bf16.check_grad_overflow", bf16.check_grad_overflow, 1, 0,
          "skip the step on inf/nan gradients"),
    KIGN("bf16.immediate_grad_update", ZC_KF_WARN_SET, "not implemented by zeroc"),
    KBOOL("bf16.bf16_master_weights_and_grads", bf16.master_weights_and_grads, 0, 0,
          "bf16 master weights (stages 1-3; with fp32 moments only under optimizer offload) "
          "and, unless data_types.grad_accum_dtype says otherwise, bf16 gradient accumulation"),
    KBOOL("bf16.bf16_optimizer_states", bf16.optimizer_states, 0, 0,
          "bf16 Adam moments (stages 1-3; needs bf16_master_weights_and_grads)"),
    { .path = "bf16.exp_avg_dtype", .type = ZC_KT_DTYPE, .flags = ZC_KF_NULL,
      .off = O(bf16.exp_avg_dtype), .idef = -1,
      .doc = "(zeroc) dtype of Adam's first moment: fp32 or bf16; unset = "
             "bf16_optimizer_states's" },
    { .path = "bf16.exp_avg_sq_dtype", .type = ZC_KT_DTYPE, .flags = ZC_KF_NULL,
      .off = O(bf16.exp_avg_sq_dtype), .idef = -1,
      .doc = "(zeroc) dtype of Adam's second moment: fp32 or bf16; unset = "
             "bf16_optimizer_states's" },
    KBOOL("bf16.stochastic_rounding", bf16.stochastic_rounding, 1, 0,
          "(zeroc) round bf16 optimizer state stochastically (false: to nearest even)"),
    KI64("bf16.stochastic_rounding_seed", bf16.stochastic_rounding_seed, 0, 0, STEPS_MAX, 0,
         "(zeroc) seed of the stochastic rounding's counter-based random bits"),

    /* optimizer. DeepSpeed builds the optimizer with optimizer.params as
     * keyword arguments (runtime/engine.py _configure_basic_optimizer), so a
     * parameter the type's class does not take is a TypeError there; opt_mask
     * names the types that take each (semantic.c refuses the others). Lion is
     * DeepSpeedCPULion / FusedLion (ops/lion): lr 1e-3, betas (0.9, 0.999),
     * weight_decay 0. Adagrad is DeepSpeedCPUAdagrad / torch.optim.Adagrad:
     * lr 1e-2 and eps 1e-10 (optimizer.c sets these defaults with the type). */
    KENUM("optimizer.type", optimizer.type, opt_types, (int)sizeof(int), ZC_OPT_ADAM, 0,
          "Adam or AdamW (decoupled decay unless adam_w_mode is false); Lion and Adagrad are "
          "parsed, not yet run by the engine"),
    { .path = "optimizer.params.lr", .type = ZC_KT_F64, .flags = PROG, .off = O(optimizer.lr),
      .dmin = 0, .dmax = INFINITY, .ddef = 1e-3, .opt_mask = OPT_ALL,
      .doc = "learning rate (Adagrad: default 0.01)" },
    { .path = "optimizer.params.betas", .type = ZC_KT_BETAS, .flags = PROG,
      .off = O(optimizer.beta1), .off2 = O(optimizer.beta2), .dmin = 0, .dmax = 1,
      .ddef = 0.9, .ddef2 = 0.999, .opt_mask = OPT_ADAMS | OB(ZC_OPT_LION),
      .doc = "[beta1, beta2], each in [0, 1) (Lion: interpolation, momentum)" },
    { .path = "optimizer.params.eps", .type = ZC_KT_F64, .flags = PROG, .off = O(optimizer.eps),
      .dmin = 0, .dmax = INFINITY, .ddef = 1e-8, .opt_mask = OPT_ADAMS | OB(ZC_OPT_ADAGRAD),
      .doc = "added after the (bias-corrected) square root (Adagrad: default 1e-10)" },
    { .path = "optimizer.params.weight_decay", .type = ZC_KT_F64, .flags = PROG,
      .off = O(optimizer.weight_decay), .dmin = 0, .dmax = INFINITY, .ddef = 0,
      .opt_mask = OPT_ALL,
      .doc = "weight decay (decoupled in AdamW mode and for Lion, L2 for Adagrad)" },
    { .path = "optimizer.params.adam_w_mode", .type = ZC_KT_BOOL, .off = O(optimizer.adam_w_mode),
      .idef = 1, .opt_mask = OPT_ADAMS, .doc = "decoupled weight decay (true even for type Adam)" },
    { .path = "optimizer.params.bias_correction", .type = ZC_KT_BOOL,
      .off = O(optimizer.bias_correction), .idef = 1, .opt_mask = OPT_ADAMS,
      .doc = "Adam bias correction" },
    { .path = "optimizer.params.torch_adam", .type = ZC_KT_BOOL, .off = O(optimizer.torch_adam),
      .idef = 0, .opt_mask = OPT_ADAMS,
      .doc = "DeepSpeed: use torch.optim.Adam (same math here)" },
    { .path = "optimizer.params.deepspeed_arithmetic", .type = ZC_KT_BOOL,
      .off = O(optimizer.deepspeed_arithmetic), .idef = 0, .opt_mask = OPT_ADAMS,
      .doc = "(zeroc) DeepSpeedCPUAdam's fp32 coefficients and FMAs, to match a DeepSpeed run" },
    { .path = "optimizer.params.amsgrad", .type = ZC_KT_IGNORED, .flags = ZC_KF_WARN_SET,
      .opt_mask = OPT_ADAMS | OB(ZC_OPT_ADAGRAD), .doc = "not implemented by zeroc" },
    { .path = "optimizer.params.lr_decay", .type = ZC_KT_F64, .off = O(optimizer.lr_decay),
      .dmin = 0, .dmax = INFINITY, .ddef = 0, .opt_mask = OB(ZC_OPT_ADAGRAD),
      .doc = "Adagrad (torch.optim.Adagrad): lr / (1 + (step - 1) * lr_decay)" },
    { .path = "optimizer.params.initial_accumulator_value", .type = ZC_KT_F64,
      .off = O(optimizer.initial_accumulator_value), .dmin = 0, .dmax = INFINITY, .ddef = 0,
      .opt_mask = OB(ZC_OPT_ADAGRAD),
      .doc = "Adagrad (torch.optim.Adagrad): the accumulator's start" },

    /* scheduler */
    KENUM("scheduler.type", scheduler.type, sched_types, (int)sizeof(int), ZC_SCHED_NONE,
          ZC_KF_NULL, "learning-rate schedule"),
    KSF("warmup_min_lr", warmup_min_lr, 0, 0, INFINITY, PROG, S_WARM, "lr at step 0"),
    KSF("warmup_max_lr", warmup_max_lr, -1, 0, INFINITY, PROG | ZC_KF_NULL, S_WARM,
        "lr at the end of warmup; unset = optimizer lr (WarmupLR) or 0.001 (WarmupDecayLR)"),
    KSI("warmup_num_steps", warmup_num_steps, 1000, 1, STEPS_MAX, PROG, S_WARM | S_COS,
        "warmup length (at least 2 is used)"),
    { .path = "scheduler.params.warmup_type", .type = ZC_KT_ENUM, .flags = ZC_KF_SCHED,
      .off = O(scheduler.warmup_log), .enums = warmup_types, .esz = (int)sizeof(bool),
      .idef = 1, .sched_mask = S_WARM | S_COS, .doc = "log or linear warmup" },
    KSI("total_num_steps", total_num_steps, -1, 1, STEPS_MAX,
        PROG | ZC_KF_MUST_RESOLVE | ZC_KF_NULL, S_WDEC | S_COS, "end of the decay"),
    KSF("warmup_min_ratio", warmup_min_ratio, 0, 0, 1, 0, S_COS, "lr ratio at step 0"),
    KSF("cos_min_ratio", cos_min_ratio, 1e-4, 0, 1, 0, S_COS, "lr ratio at the end"),
    KSF("cycle_min_lr", cycle_min_lr, -1, 0, INFINITY, 0, S_1C, "lower lr (required)"),
    KSF("cycle_max_lr", cycle_max_lr, -1, 0, INFINITY, 0, S_1C, "upper lr (required)"),
    KSF("decay_lr_rate", decay_lr_rate, 0, 0, INFINITY, 0, S_1C, "lr decay after the cycle"),
    KSI("cycle_first_step_size", cycle_first_step_size, 2000, 1, STEPS_MAX, 0, S_1C,
        "steps of the rising half"),
    KSI("cycle_second_step_size", cycle_second_step_size, -1, 1, STEPS_MAX, ZC_KF_NULL, S_1C,
        "steps of the falling half; unset = first"),
    KSI("cycle_first_stair_count", cycle_first_stair_count, 0, 0, STEPS_MAX, 0, S_1C,
        "stairs in the rising half; 0 = continuous"),
    KSI("cycle_second_stair_count", cycle_second_stair_count, -1, 0, STEPS_MAX, ZC_KF_NULL, S_1C,
        "stairs in the falling half; unset = first"),
    KSI("decay_step_size", decay_step_size, 0, 0, STEPS_MAX, 0, S_1C,
        "decay interval after the cycle; 0 = no decay"),
    KSB("cycle_momentum", cycle_momentum, 1, S_1C, "cycle beta1 inversely to the lr"),
    KSF("cycle_min_mom", cycle_min_mom, 0.8, 0, 1, 0, S_1C, "lower beta1"),
    KSF("cycle_max_mom", cycle_max_mom, 0.9, 0, 1, 0, S_1C, "upper beta1"),
    KSF("decay_mom_rate", decay_mom_rate, 0, 0, INFINITY, 0, S_1C, "beta1 decay after the cycle"),
    KSF("lr_range_test_min_lr", lr_range_test_min_lr, 1e-3, 0, INFINITY, 0, S_RT,
        "starting lr"),
    KSI("lr_range_test_step_size", lr_range_test_step_size, 2000, 1, STEPS_MAX, 0, S_RT,
        "steps per increase"),
    KSF("lr_range_test_step_rate", lr_range_test_step_rate, 1.0, 0, INFINITY, 0, S_RT,
        "increase per interval"),
    KSB("lr_range_test_staircase", lr_range_test_staircase, 0, S_RT, "step-wise increase"),

    /* zero_optimization */
    { .path = ZOPT "stage", .type = ZC_KT_I32, .flags = ZC_KF_AUTO_PLAN, .off = O(zero.stage),
      .imin = 0, .imax = 3, .idef = 0,
      .doc = "0 = DDP, 1 = optimizer states, 2 = + gradients, 3 = + parameters; auto: the "
             "lowest of 1-3 that fits max_memory (zeroc)" },
    KBOOL(ZOPT "contiguous_gradients", zero.contiguous_gradients, 1, 0,
          "copy gradients into contiguous buckets"),
    KTRI(ZOPT "overlap_comm", zero.overlap_comm,
         "overlap reductions with backward; unset = true iff stage 3"),
    KBOOL(ZOPT "reduce_scatter", zero.reduce_scatter, 1, 0, "reduce-scatter gradients"),
    KI64(ZOPT "reduce_bucket_size", zero.reduce_bucket_size, 500000000, 0, ELEMS_MAX,
         ZC_KF_AUTO_MODEL, "elements per gradient bucket (auto = H^2)"),
    KBOOL(ZOPT "allgather_partitions", zero.allgather_partitions, 1, 0,
          "all-gather updated parameters"),
    KI64(ZOPT "allgather_bucket_size", zero.allgather_bucket_size, 500000000, 0, ELEMS_MAX, 0,
         "elements per all-gather (even)"),
    KBOOL(ZOPT "round_robin_gradients", zero.round_robin_gradients, 0, 0,
          "stage 1/2 offload gradient copy order"),
    KI64(ZOPT "sub_group_size", zero.sub_group_size, 1000000000, 0, ELEMS_MAX, 0,
         "elements per optimizer sub-group"),
    KBOOL(ZOPT "load_from_fp32_weights", zero.load_from_fp32_weights, 1, 0,
          "restore masters from fp32 checkpoint copies"),
    KBOOL(ZOPT "ignore_unused_parameters", zero.ignore_unused_parameters, 1, 0,
          "tolerate parameters without gradients"),
    KI64A(ZOPT "stage3_prefetch_bucket_size", ZOPT "prefetch_bucket_size",
          zero.prefetch_bucket_size, 50000000, 0, ELEMS_MAX, ZC_KF_AUTO_MODEL,
          "elements gathered ahead of use (auto = 0.9 H^2)"),
    KI64A(ZOPT "stage3_param_persistence_threshold", ZOPT "param_persistence_threshold",
          zero.param_persistence_threshold, 100000, 0, ELEMS_MAX, ZC_KF_AUTO_MODEL,
          "parameters this small stay gathered (auto = 10 H)"),
    KI64A(ZOPT "stage3_model_persistence_threshold", ZOPT "model_persistence_threshold",
          zero.model_persistence_threshold, I64MAX, 0, I64MAX, 0,
          "cap on persistent elements"),
    KI64A(ZOPT "stage3_max_live_parameters", ZOPT "max_live_parameters",
          zero.max_live_parameters, 1000000000, 0, ELEMS_MAX, 0, "cap on gathered elements"),
    KI64A(ZOPT "stage3_max_reuse_distance", ZOPT "max_reuse_distance", zero.max_reuse_distance,
          1000000000, 0, ELEMS_MAX, 0, "keep a parameter reused within this many elements"),
    { .path = ZOPT "stage3_gather_16bit_weights_on_model_save", .type = ZC_KT_BOOL,
      .off = O(zero.gather_16bit_weights_on_model_save), .idef = 0,
      .alias = ZOPT "gather_16bit_weights_on_model_save",
      .doc = "gather full 16-bit weights when saving the model" },
    KI64A(ZOPT "stage3_module_granularity_threshold", ZOPT "module_granularity_threshold",
          zero.module_granularity_threshold, 0, 0, ELEMS_MAX, 0,
          "fine-grained module threshold"),
    KI64(ZOPT "zero_hpz_partition_size", zero.zero_hpz_partition_size, 1, 0, INT32_MAX, 0,
         "ZeRO++ hpZ (stage 3): a secondary copy of the parameters sharded in groups of this "
         "many ranks, which the gathers after a step's first use read; 0 or 1: off"),
    KBOOL(ZOPT "zero_quantized_weights", zero.zero_quantized_weights, 0, ZC_KF_WARN_SET,
          "ZeRO++ qwZ (not implemented)"),
    KBOOL(ZOPT "zero_quantized_gradients", zero.zero_quantized_gradients, 0, ZC_KF_WARN_SET,
          "ZeRO++ qgZ (not implemented)"),
    KIGN(ZOPT "zero_quantized_nontrainable_weights", ZC_KF_WARN_SET, "not implemented"),
    KIGN(ZOPT "use_multi_rank_bucket_allreduce", 0, "DeepSpeed reduce detail; unused"),
    KIGN(ZOPT "elastic_checkpoint", ZC_KF_WARN_SET, "not implemented"),
    KIGN(ZOPT "stage3_use_all_reduce_for_fetch_params", ZC_KF_WARN_SET, "not implemented"),
    KIGN(ZOPT "stage3_allgather_sequential", ZC_KF_WARN_SET, "not implemented"),
    KIGN(ZOPT "stage3_partition_stream_chunk_size", ZC_KF_WARN_SET, "not implemented"),
    KIGN(ZOPT "zeropp_loco_param", ZC_KF_WARN_SET, "not implemented"),
    KI64(ZOPT "mics_shard_size", zero.mics_shard_size, -1, -1, INT32_MAX, 0,
         "MiCS (stages 1-3): model states sharded in groups of this many consecutive ranks "
         "and replicated across the groups; -1 or 0: off"),
    KBOOL(ZOPT "mics_hierarchical_params_gather", zero.mics_hierarchical_params_gather, 0, 0,
          "MiCS: gather parameters across nodes first, then inside each node"),
    KIGN(ZOPT "memory_efficient_linear", 0, "PyTorch-specific; unused"),
    KIGN(ZOPT "pipeline_loading_checkpoint", 0, "unused"),
    KIGN(ZOPT "override_module_apply", 0, "PyTorch-specific; unused"),
    KIGN(ZOPT "log_trace_cache_warnings", 0, "unused"),
    KIGN(ZOPT "enable_sanity_checks", 0, "unused"),
    KIGN(ZOPT "save_muon_momentum_buffer_in_memory", 0, "unused"),
    KIGN(ZOPT "leaf_module", 0, "PyTorch-specific; unused"),
    KIGN(ZOPT "zenflow", ZC_KF_WARN_SET, "ZenFlow is not implemented"),

    /* offload_optimizer */
    KENUM(OOPT "device", zero.offload_optimizer.device, offload_devices, (int)sizeof(int),
          ZC_OFFLOAD_NONE, ZC_KF_AUTO_PLAN,
          "none, cpu or nvme; auto: chosen from max_memory (zeroc)"),
    { .path = OOPT "nvme_path", .type = ZC_KT_STR, .flags = ZC_KF_NULL | ZC_KF_PATH_LIST,
      .off = O(zero.offload_optimizer.nvme_path),
      .doc = "directory for NVMe swap files, or a list of them to stripe over (zeroc)" },
    KBOOL(OOPT "pin_memory", zero.offload_optimizer.pin_memory, 1, 0, "pinned host buffers"),
    KI64(OOPT "buffer_count", zero.offload_optimizer.buffer_count, 4, 0, 1 << 20, 0,
         "NVMe swap buffers (>= 4 for Adam)"),
    KBOOL(OOPT "fast_init", zero.offload_optimizer.fast_init, 0, 0, "fast NVMe init"),
    KBOOL(OOPT "pipeline_read", zero.offload_optimizer.pipeline_read, 0, 0,
          "prefetch the next sub-group"),
    KBOOL(OOPT "pipeline_write", zero.offload_optimizer.pipeline_write, 0, 0,
          "defer write-back of the last sub-group"),
    KF64(OOPT "ratio", zero.offload_optimizer.ratio, 1.0, 0, 1, 0,
         "fraction offloaded (< 1 needs stage 3)"),
    KIGN(OOPT "super_offload", ZC_KF_WARN_SET, "not implemented"),
    KIGN(OOPT "cpuadam_cores_perc", 0, "unused"),

    /* offload_param */
    KENUM(OPAR "device", zero.offload_param.device, offload_devices, (int)sizeof(int),
          ZC_OFFLOAD_NONE, ZC_KF_AUTO_PLAN,
          "none, cpu or nvme (stage 3 only); auto: chosen from max_memory (zeroc)"),
    { .path = OPAR "nvme_path", .type = ZC_KT_STR, .flags = ZC_KF_NULL | ZC_KF_PATH_LIST,
      .off = O(zero.offload_param.nvme_path),
      .doc = "directory for NVMe swap files, or a list of them to stripe over (zeroc)" },
    KBOOL(OPAR "pin_memory", zero.offload_param.pin_memory, 1, 0, "pinned host buffers"),
    KI64(OPAR "buffer_count", zero.offload_param.buffer_count, 5, 1, 1 << 20, 0,
         "parameter swap buffers"),
    KI64(OPAR "buffer_size", zero.offload_param.buffer_size, 100000000, 1, ELEMS_MAX, 0,
         "elements per parameter swap buffer"),
    KI64(OPAR "max_in_cpu", zero.offload_param.max_in_cpu, 1000000000, 0, ELEMS_MAX, 0,
         "parameter elements kept in host memory"),

    /* max_memory (a zeroc extension): per-rank budgets by kind */
    KI64(ZOPT "max_memory.device", zero.max_memory[ZC_BUDGET_DEVICE], -1, 0, BUDGET_MAX,
         ZC_KF_NULL | ZC_KF_SIZE | ZC_KF_AUTO_PLAN,
         "device memory one rank may use (\"70GiB\"; auto: free less 10%) (zeroc)"),
    KI64(ZOPT "max_memory.cpu", zero.max_memory[ZC_BUDGET_CPU], -1, 0, BUDGET_MAX,
         ZC_KF_NULL | ZC_KF_SIZE | ZC_KF_AUTO_PLAN,
         "host memory one rank may use (auto: its share of MemAvailable less 10%) (zeroc)"),
    KI64(ZOPT "max_memory.nvme", zero.max_memory[ZC_BUDGET_NVME], -1, 0, BUDGET_MAX,
         ZC_KF_NULL | ZC_KF_SIZE | ZC_KF_AUTO_PLAN,
         "NVMe swap one rank may use (auto: free space of nvme_path less 5%) (zeroc)"),

    /* activation_checkpointing: DeepSpeed's keys, and zeroc's NVMe home */
    KBOOL(ACT "partition_activations", act.partition_activations, 0, 0,
          "split each checkpoint across the model-parallel group "
          "(zc_engine_options.act_mp_comm), gathered back for backward"),
    KBOOL(ACT "contiguous_memory_optimization", act.contiguous_memory_optimization, 0, 0,
          "checkpoints in one reservation: zeroc's store always is (accepted, no effect)"),
    KBOOL(ACT "cpu_checkpointing", act.cpu_checkpointing, 0, 0,
          "keep checkpoints in pinned host memory, brought back ahead of backward"),
    KI64(ACT "number_checkpoints", act.number_checkpoints, -1, 1, ACT_SLOTS_MAX, ZC_KF_NULL,
         "checkpoints one micro-step holds at once (the store's bound unless "
         "zc_engine_options.act_checkpoints says)"),
    KBOOL(ACT "synchronize_checkpoint_boundary", act.synchronize_checkpoint_boundary, 0, 0,
          "wait for the device at the start and end of every save and restore"),
    KBOOL(ACT "profile", act.profile, 0, 0,
          "log every save and restore with its time (INFO)"),
    KBOOL(ACT "nvme_checkpointing", act.nvme_checkpointing, 0, 0,
          "(zeroc) keep checkpoints in swap files under nvme_path"),
    { .path = ACT "nvme_path", .type = ZC_KT_STR, .flags = ZC_KF_NULL | ZC_KF_PATH_LIST,
      .off = O(act.nvme_path),
      .doc = "(zeroc) directory (or list) for the checkpoints' swap files; unset: "
             "offload_param's, else offload_optimizer's" },
    KI64(ACT "buffer_count", act.buffer_count, 4, 2, 256, 0,
         "(zeroc) pinned buffers the NVMe checkpoints stream through"),

    /* aio */
    KI64("aio.block_size", aio.block_size, 1048576, 1, (int64_t)1 << 30, 0,
         "bytes per I/O request (the NVMe store takes at most 1 GiB)"),
    KI64("aio.queue_depth", aio.queue_depth, 8, 1, 4096, 0,
         "requests in flight (the NVMe store takes at most 4096)"),
    KI64("aio.intra_op_parallelism", aio.intra_op_parallelism, 1, 1, 1024, 0,
         "parallel submitters per request"),
    KBOOL("aio.single_submit", aio.single_submit, 0, 0, "one submit per request"),
    KBOOL("aio.overlap_events", aio.overlap_events, 1, 0, "refill the queue per completion"),
    KBOOL("aio.use_gds", aio.use_gds, 0, ZC_KF_WARN_SET, "GPUDirect Storage (not implemented)"),

    /* trace (a zeroc extension, docs/trace.md): the timeline of some steps */
    { .path = "trace.path", .type = ZC_KT_STR, .flags = ZC_KF_NULL, .off = O(trace.path),
      .doc = "(zeroc) Chrome trace JSON of the traced steps, one file per rank (\"{rank}\" "
             "or .rank<R>)" },
    { .path = "trace.steps", .type = ZC_KT_STR, .flags = ZC_KF_NULL, .off = O(trace.steps),
      .doc = "(zeroc) the optimizer steps traced, \"A-B\" or \"A\"; unset = 2-4" },
    KI64("trace.max_events", trace.max_events, -1, 1, (int64_t)1 << 26, ZC_KF_NULL,
         "(zeroc) records the timeline holds; unset = the most the window can need"),

    /* comms_logger (DeepSpeed's communication logging) */
    KBOOL("comms_logger.enabled", comms_logger.enabled, 0, 0,
          "log collectives: count, size, latency, algbw and busbw per kind"),
    KBOOL("comms_logger.verbose", comms_logger.verbose, 0, 0,
          "an INFO line per collective as it completes"),
    KBOOL("comms_logger.prof_all", comms_logger.prof_all, 1, 0, "log every kind of collective"),
    { .path = "comms_logger.prof_ops", .type = ZC_KT_STR, .flags = ZC_KF_NULL | ZC_KF_NAME_LIST,
      .off = O(comms_logger.prof_ops),
      .doc = "the collectives logged when prof_all is false ([\"all_reduce\", ...])" },
    KBOOL("comms_logger.debug", comms_logger.debug, 0, 0,
          "rows per calling function as well"),
};
const int zc__cfg_nkeys = (int)(sizeof(zc__cfg_keys) / sizeof(zc__cfg_keys[0]));

_Static_assert(sizeof(zc__cfg_keys) / sizeof(zc__cfg_keys[0]) <= ZC_CFG_MAX_KEYS,
               "raise ZC_CFG_MAX_KEYS");

int zc__cfg_key_find(const char *path)
{
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        if (!strcmp(zc__cfg_keys[i].path, path))
            return i;
        if (zc__cfg_keys[i].alias && !strcmp(zc__cfg_keys[i].alias, path))
            return i;
    }
    return -1;
}

const char *zc__cfg_enum_name(const zc_cfg_key *k, int value)
{
    for (const zc_cfg_enum *e = k->enums; e && e->name; e++)
        if (e->value == value)
            return e->name;
    return "none";
}
