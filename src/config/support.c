/* What the engine accepts, as a config-level rule.
 *
 * A configuration can be valid DeepSpeed and still be one this build's engine
 * refuses: optimizer offload at stage 0 has nothing to offload from (stage 0
 * keeps the whole optimizer state on every rank); NVMe offload reads and
 * writes whole aio.block_size blocks of page-aligned memory and takes at most
 * 64 submitters; the engine's step does not run every optimizer type the
 * loader parses (Lion and Adagrad: zc__cfg_rule_optimizer, optimizer.c).
 * Parameter offload below stage 3 is accepted and ignored, as DeepSpeed does
 * (the loader warns that it has no effect, src/config/semantic.c), so its
 * NVMe settings are not held to anything there.
 *
 * Every refusal of a configuration value the engine makes lives here, once:
 * zc_engine_create and `zeroc config check` run zc__cfg_engine_support, and
 * the parts of zc_engine_build that take these values (the NVMe homes,
 * src/offload/opt_home_nvme.c and param_home_nvme.c; the optimizer placement,
 * src/core/state/opt_state.c) call the same rules through the zc__config_*_check
 * functions, so the checker's verdict and message are the engine's. What
 * only a model decides (a parameter shard larger than
 * offload_param.buffer_size, memory or swap beyond what the machine has) is
 * for zc_engine_build and `zeroc estimate`. */
#include <unistd.h>

#include "config/internal.h"
#include "base/error.h"

static const char *device_name(zc_offload_device dev)
{
    return dev == ZC_OFFLOAD_CPU ? "cpu" : dev == ZC_OFFLOAD_NVME ? "nvme" : "none";
}

/* The smallest aio.block_size: a page (the pinned swap buffers are whole
 * pages, read and written with O_DIRECT), and never below the swap files'
 * 4 KiB alignment (ZC_SWAP_ALIGN, src/offload/swap_dirs.h). */
static int64_t block_min(void)
{
    const long page = sysconf(_SC_PAGESIZE);
    return page > 4096 ? (int64_t)page : 4096;
}

static void rule_aio(int64_t block_size, int64_t queue_depth, int64_t intra_op, zc_cfg_diag *d)
{
    const int64_t lo = block_min(), hi = (int64_t)1 << 30;
    if (block_size < lo || block_size > hi || (block_size & (block_size - 1)))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "aio.block_size",
                     "%lld: NVMe offload needs a power of two from %lld (a page) to %lld (1 GiB) "
                     "bytes", (long long)block_size, (long long)lo, (long long)hi);
    if (queue_depth < 1 || queue_depth > ZC_CFG_AIO_QUEUE_DEPTH_MAX)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "aio.queue_depth",
                     "%lld: NVMe offload keeps 1 to %d requests in flight", (long long)queue_depth,
                     ZC_CFG_AIO_QUEUE_DEPTH_MAX);
    if (intra_op < 1 || intra_op > ZC_CFG_AIO_INTRA_OP_MAX)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "aio.intra_op_parallelism",
                     "%lld: NVMe offload takes 1 to %d submitters", (long long)intra_op,
                     ZC_CFG_AIO_INTRA_OP_MAX);
}

void zc__cfg_rule_opt_buffers(int64_t buffer_count, zc_cfg_diag *d)
{
    /* Adam's NVMe swap-in holds the fp32 params, exp_avg, exp_avg_sq and
     * the gradient of a sub-group at once (DeepSpeed's "ran out of swap
     * buffers"). */
    if (buffer_count < 4)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG,
                     "zero_optimization.offload_optimizer.buffer_count",
                     "%lld is too small for NVMe optimizer offload: Adam needs at least 4 "
                     "buffers (fp32 parameters, exp_avg, exp_avg_sq and the gradient)",
                     (long long)buffer_count);
}

static void rule_param_buffers(int64_t buffer_count, zc_cfg_diag *d)
{
    if (buffer_count < 2 || buffer_count > ZC_CFG_PARAM_SWAP_BUFFERS_MAX)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.offload_param.buffer_count",
                     "%lld: NVMe parameter offload needs 2 to %d (one is kept for reads on "
                     "demand)", (long long)buffer_count, ZC_CFG_PARAM_SWAP_BUFFERS_MAX);
}

static void rule_ratio(double ratio, zc_cfg_diag *d)
{
    if (!(ratio > 0.0 && ratio <= 1.0))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.offload_optimizer.ratio",
                     "%g: the share of the optimizer state offloaded must be in (0, 1]", ratio);
}

/* Hybrid sharding (MiCS, hpZ) as the engine takes it; the rules that need
 * the world size (S divides it) or the node map are zc_engine_create's and
 * zc_engine_build's (src/core/common/groups.c). */
static void rule_hybrid(const zc_config *cfg, int stage, bool stage_auto, zc_cfg_diag *d)
{
    const int64_t mics = cfg->zero.mics_shard_size, hpz = cfg->zero.zero_hpz_partition_size;
    const bool on3 = stage == 3 || stage_auto;
    /* hpZ needs stage 3 from the start: its groups are made before "auto"
     * chooses the stage. */
    const bool hpz3 = stage == 3 && !stage_auto;
    if (mics > 0 && stage == 0 && !stage_auto)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.mics_shard_size",
                     "%lld at stage 0, which shards nothing: MiCS shards the model states of "
                     "stages 1-3; set zero_optimization.stage or remove mics_shard_size",
                     (long long)mics);
    if (mics > 0 && cfg->zero.offload_optimizer.device != ZC_OFFLOAD_NONE)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.mics_shard_size",
                     "%lld with offload_optimizer.device \"%s\": MiCS keeps its gradient shards "
                     "on the device for the all-reduce across replicas (DeepSpeed: \"Local "
                     "sharding has no support for CPU offloading\"); remove one of them",
                     (long long)mics, device_name(cfg->zero.offload_optimizer.device));
    if (mics > 0 && on3 && cfg->zero.offload_param.device != ZC_OFFLOAD_NONE)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.mics_shard_size",
                     "%lld with offload_param.device \"%s\": MiCS does not offload; remove one "
                     "of them", (long long)mics, device_name(cfg->zero.offload_param.device));
    if (mics > 0 && zc__config_has_budgets(cfg))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.mics_shard_size",
                     "%lld with zero_optimization.max_memory, whose placement may offload: MiCS "
                     "does not offload; remove one of them", (long long)mics);
    if (mics > 0 && hpz > 1)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.zero_hpz_partition_size",
                     "%lld with mics_shard_size %lld: MiCS already keeps every gather inside "
                     "its shard group; use one of them", (long long)hpz, (long long)mics);
    if (hpz > 1 && hpz3 && cfg->zero.offload_param.device != ZC_OFFLOAD_NONE)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.zero_hpz_partition_size",
                     "%lld with offload_param.device \"%s\": the secondary partition lives in "
                     "device memory beside parameters that are offloaded; remove one of them",
                     (long long)hpz, device_name(cfg->zero.offload_param.device));
    if (hpz > 1 && !hpz3)
        zc__diag_add(d, ZC_SEV_WARN, ZC_ERR_CONFIG, "zero_optimization.zero_hpz_partition_size",
                     "%lld at stage %s: hpZ partitions stage 3's parameters; ignored (DeepSpeed "
                     "ignores it below stage 3; zeroc also with stage \"auto\")",
                     (long long)hpz, stage_auto ? "\"auto\"" : (stage == 0 ? "0" : stage == 1
                                                                      ? "1" : "2"));
    if (cfg->zero.mics_hierarchical_params_gather && mics <= 0)
        zc__diag_add(d, ZC_SEV_WARN, ZC_ERR_CONFIG,
                     "zero_optimization.mics_hierarchical_params_gather",
                     "true without mics_shard_size: ignored, as DeepSpeed ignores it");
}

/* data_types.grad_accum_dtype against the working dtype pdt. zeroc sums a
 * window's micro-step gradients in fp32 (unset or "fp32": its default) or,
 * with the parameters' own 16-bit dtype, rounds the running sum to it after
 * every add as DeepSpeed's default does (src/core/loop/grads.c). Any other
 * mix is refused: DeepSpeed itself raises NotImplementedError for it
 * without ZeRO (engine.py _do_optimizer_sanity_check), and its ZeRO stages
 * take it inconsistently (ZeRO-1 and ZeRO-3 accumulate in the key's dtype,
 * ZeRO-2 in the parameters'), so no run of DeepSpeed's defines it. */
static void rule_grad_accum(int acc, zc_dtype pdt, zc_cfg_diag *d)
{
    if (acc < 0 || acc == (int)ZC_DTYPE_F32 || acc == (int)pdt)
        return;
    if (pdt == ZC_DTYPE_F32)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "data_types.grad_accum_dtype",
                     "\"%s\" with fp32 parameters: their gradients are accumulated in fp32 "
                     "(leave it unset or write \"fp32\"); DeepSpeed refuses this mix without "
                     "ZeRO (NotImplementedError) and its ZeRO stages disagree on it",
                     zc_dtype_name((zc_dtype)acc));
    else
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "data_types.grad_accum_dtype",
                     "\"%s\" with %s parameters: gradients are accumulated in fp32 (unset "
                     "or \"fp32\", zeroc's default) or in the parameters' dtype (\"%s\", "
                     "DeepSpeed's default); DeepSpeed refuses other mixes without ZeRO "
                     "(NotImplementedError) and its ZeRO stages disagree on them",
                     zc_dtype_name((zc_dtype)acc), zc_dtype_name(pdt), zc_dtype_name(pdt));
}

zc_status zc__config_grad_accum_check(const zc_config *cfg, zc_dtype pdt)
{
    zc_cfg_diag d = {0};
    rule_grad_accum(cfg->grad_accum_dtype, pdt, &d);
    zc_status rc = zc__diag_report(&d, "zc_engine_create");
    zc__diag_free(&d);
    return rc;
}

void zc__cfg_engine_support(const zc_config *cfg, zc_cfg_diag *d)
{
    /* The working dtype the precision blocks give (zc_engine_options.
     * param_dtype may override it: zc_engine_create checks again with the
     * one it picked). Both blocks enabled is the loader's error. */
    if (!(cfg->fp16.enabled && cfg->bf16.enabled))
        rule_grad_accum(cfg->grad_accum_dtype,
                        cfg->fp16.enabled   ? ZC_DTYPE_F16
                        : cfg->bf16.enabled ? ZC_DTYPE_BF16
                                            : ZC_DTYPE_F32,
                        d);
    const zc_offload_cfg *opt = &cfg->zero.offload_optimizer, *par = &cfg->zero.offload_param;
    /* "auto" is one of 1-3, chosen at build: offload is possible. */
    const int stage = zc__config_stage_auto(cfg) ? 1 : cfg->zero.stage;
    if (opt->device != ZC_OFFLOAD_NONE && stage == 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.offload_optimizer.device",
                     "\"%s\" at stage 0, which keeps the whole optimizer state on every rank: "
                     "zc_engine_create refuses it; set zero_optimization.stage to 1, 2 or 3 or "
                     "remove offload_optimizer",
                     device_name(opt->device));
    /* What zc_engine_build takes, where it takes it (stage 0 refused above). */
    const bool opt_off = opt->device != ZC_OFFLOAD_NONE && stage > 0;
    const bool opt_nvme = opt_off && opt->device == ZC_OFFLOAD_NVME;
    const bool par_nvme = (stage == 3 || zc__config_stage_auto(cfg)) &&
                          par->device == ZC_OFFLOAD_NVME;
    if (opt_off)
        rule_ratio(opt->ratio, d);
    if (par_nvme)
        rule_param_buffers(par->buffer_count, d);
    /* (offload_optimizer.buffer_count is the loader's rule, semantic.c: it
     * holds whenever the device is nvme.) */
    /* activation_checkpointing.nvme_checkpointing: the activation store's
     * swap files are read and written as the offload homes' are. */
    if (opt_nvme || par_nvme || cfg->act.nvme_checkpointing)
        rule_aio(cfg->aio.block_size, cfg->aio.queue_depth, cfg->aio.intra_op_parallelism, d);
    rule_hybrid(cfg, stage, zc__config_stage_auto(cfg), d);
    zc__cfg_rule_state_precision(cfg, stage, zc__config_stage_auto(cfg), d);
    zc__cfg_rule_optimizer(cfg, d);
}

zc_status zc__config_engine_rules(const zc_config *cfg, const char *what)
{
    zc_cfg_diag d = {0};
    zc__cfg_engine_support(cfg, &d);
    zc_status rc = zc__diag_report(&d, what);
    zc__diag_free(&d);
    return rc;
}

zc_status zc__config_engine_check(const zc_config *cfg)
{
    return zc__config_engine_rules(cfg, "zc_engine_create");
}

/* One rule's verdict as a status, its message "key: text" as in `zeroc
 * config check`. */
static zc_status report(zc_cfg_diag *d)
{
    zc_status rc = zc__diag_report(d, NULL);
    zc__diag_free(d);
    return rc;
}

zc_status zc__config_aio_check(int64_t block_size, int64_t queue_depth, int64_t intra_op)
{
    zc_cfg_diag d = {0};
    rule_aio(block_size, queue_depth, intra_op, &d);
    return report(&d);
}

zc_status zc__config_opt_buffers_check(int64_t buffer_count)
{
    zc_cfg_diag d = {0};
    zc__cfg_rule_opt_buffers(buffer_count, &d);
    return report(&d);
}

zc_status zc__config_param_buffers_check(int64_t buffer_count)
{
    zc_cfg_diag d = {0};
    rule_param_buffers(buffer_count, &d);
    return report(&d);
}

zc_status zc__config_ratio_check(double ratio)
{
    zc_cfg_diag d = {0};
    rule_ratio(ratio, &d);
    return report(&d);
}

zc_status zc__config_hybrid_check(const zc_config *cfg, int world)
{
    const int64_t S = cfg->zero.mics_shard_size, H = cfg->zero.zero_hpz_partition_size;
    if (S > 0 && world % S)
        return ZC_ERR(ZC_ERR_CONFIG,
                      "zero_optimization.mics_shard_size %lld does not divide the data-parallel "
                      "world of %d ranks: every shard group has the same size", (long long)S,
                      world);
    if (S > world)
        return ZC_ERR(ZC_ERR_CONFIG,
                      "zero_optimization.mics_shard_size %lld is larger than the data-parallel "
                      "world of %d ranks", (long long)S, world);
    const bool on3 = cfg->zero.stage == 3 && !zc__config_stage_auto(cfg);
    if (on3 && H > 1 && (world % H || H > world))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "zero_optimization.zero_hpz_partition_size %lld does not divide the "
                      "data-parallel world of %d ranks", (long long)H, world);
    return ZC_OK;
}
