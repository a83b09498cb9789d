/* Cross-key checks: each message says what to change. Run after a load and
 * by zc_config_resolve (so configurations built with zc_config_set are
 * checked too). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/internal.h"

static int key(const char *path) { return zc__cfg_key_find(path); }

static zc_cfg_origin origin_of(const zc_config *cfg, const char *path)
{
    int k = key(path);
    return k >= 0 && cfg->meta ? (zc_cfg_origin)cfg->meta->origin[k] : ZC_ORIGIN_DEFAULT;
}

static bool pending(const zc_config *cfg, const char *path)
{
    return origin_of(cfg, path) == ZC_ORIGIN_AUTO_PENDING;
}

static void check_offload(const zc_config *cfg, const zc_offload_cfg *o, const char *block,
                          bool optimizer, unsigned flags, zc_cfg_diag *d)
{
    char p[160];
    int stage = cfg->zero.stage;
    if (o->device != ZC_OFFLOAD_NONE && !(flags & ZC__CFG_NO_STAGE)) {
        if (!optimizer && stage != 3)
            zc__diag_add(d, ZC_SEV_WARN, ZC_OK, block,
                         "parameter offload has no effect below stage 3 (stage is %d); set "
                         "zero_optimization.stage to 3 or remove the block",
                         stage);
        if (optimizer && stage == 0)
            zc__diag_add(d, ZC_SEV_WARN, ZC_OK, block,
                         "optimizer offload has no effect at stage 0; set zero_optimization.stage "
                         "to 1, 2 or 3 or remove the block");
    }
    if (o->device == ZC_OFFLOAD_NVME) {
        snprintf(p, sizeof p, "%s.nvme_path", block);
        if (!o->nvme_path) {
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p,
                         "required with device \"nvme\": a writable directory on the NVMe drive");
        } else if (!(flags & ZC__CFG_SKIP_PATH_CHECK)) {
            /* nvme_path may be a list (stored joined with '\n'): check each. */
            for (const char *q = o->nvme_path; q;) {
                const char *nl = strchr(q, '\n');
                char one[512];
                snprintf(one, sizeof one, "%.*s", (int)(nl ? nl - q : (ptrdiff_t)strlen(q)), q);
                q = nl ? nl + 1 : NULL;
                struct stat st;
                if (stat(one, &st) != 0)
                    zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p,
                                 "'%s' is not a writable directory: %s; create it or point "
                                 "nvme_path at a mounted NVMe directory",
                                 one, strerror(errno));
                else if (!S_ISDIR(st.st_mode))
                    zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p, "'%s' is not a directory",
                                 one);
                else if (access(one, W_OK | X_OK) != 0)
                    zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p, "'%s' is not writable: %s",
                                 one, strerror(errno));
            }
        }
        if (optimizer)
            zc__cfg_rule_opt_buffers(o->buffer_count, d);
    }
}

static const char *sched_users(unsigned mask)
{
    static const char *const names[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                        "OneCycle", "LRRangeTest"};
    static char buf[96];
    buf[0] = 0;
    for (int t = 1; t <= ZC_SCHED_LR_RANGE_TEST; t++) {
        if (mask & (1u << t)) {
            size_t n = strlen(buf);
            snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", names[t]);
        }
    }
    return buf;
}

static void check_scheduler(const zc_config *cfg, zc_cfg_diag *d)
{
    const zc_sched_cfg *s = &cfg->scheduler;
    int tk = key("scheduler.type");
    const char *tname = zc__cfg_enum_name(&zc__cfg_keys[tk], s->type);
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        const zc_cfg_key *k = &zc__cfg_keys[i];
        if (!(k->flags & ZC_KF_SCHED) || !cfg->meta ||
            cfg->meta->origin[i] == ZC_ORIGIN_DEFAULT)
            continue;
        if (s->type == ZC_SCHED_NONE)
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, k->path,
                         "set but scheduler.type is not; set scheduler.type to one of %s",
                         sched_users(k->sched_mask));
        else if (!(k->sched_mask & (1u << s->type)))
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, k->path,
                         "not a parameter of %s (it belongs to %s)", tname,
                         sched_users(k->sched_mask));
    }
    if (s->type == ZC_SCHED_ONE_CYCLE) {
        if (s->cycle_min_lr < 0)
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "scheduler.params.cycle_min_lr",
                         "required by OneCycle");
        if (s->cycle_max_lr < 0)
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "scheduler.params.cycle_max_lr",
                         "required by OneCycle");
    }
    if ((s->type == ZC_SCHED_WARMUP_DECAY_LR || s->type == ZC_SCHED_WARMUP_COSINE_LR) &&
        s->total_num_steps < 0 && !pending(cfg, "scheduler.params.total_num_steps"))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "scheduler.params.total_num_steps",
                     "required by %s: the step at which the decay ends", tname);
}

/* zero_optimization.max_memory and the "auto" placement keys: "auto" needs
 * budgets to choose from, and an NVMe budget needs a directory for the swap
 * files (either block's nvme_path serves both homes). */
static void check_budgets(const zc_config *cfg, zc_cfg_diag *d)
{
    const bool budgets = zc__config_has_budgets(cfg);
    static const char *const dev[3] = {"zero_optimization.offload_optimizer.device",
                                       "zero_optimization.offload_param.device",
                                       "zero_optimization.stage"};
    for (int i = 0; i < 3; i++)
        if (pending(cfg, dev[i]) && !budgets)
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, dev[i],
                         "\"auto\" is chosen from zero_optimization.max_memory, which is not "
                         "given; add {\"max_memory\": {\"device\": ..., \"cpu\": ...}} or give "
                         "the value");
    int64_t b = 0;
    const bool nvme = zc__config_budget(cfg, ZC_BUDGET_NVME, &b) != ZC_BUDGET_NONE;
    if (nvme && !cfg->zero.offload_optimizer.nvme_path && !cfg->zero.offload_param.nvme_path)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.max_memory.nvme",
                     "an NVMe budget needs a directory for the swap files: set "
                     "zero_optimization.offload_optimizer.nvme_path or offload_param.nvme_path");
}

/* activation_checkpointing.nvme_checkpointing (zeroc): the swap files need a
 * directory - the section's own nvme_path, else an offload block's (either
 * serves every home) - checked as the offload blocks check theirs. */
static void check_act(const zc_config *cfg, unsigned flags, zc_cfg_diag *d)
{
    if (!cfg->act.nvme_checkpointing)
        return;
    const char *path = cfg->act.nvme_path      ? cfg->act.nvme_path
                       : cfg->zero.offload_param.nvme_path ? cfg->zero.offload_param.nvme_path
                                                           : cfg->zero.offload_optimizer.nvme_path;
    if (!path) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "activation_checkpointing.nvme_path",
                     "required with nvme_checkpointing (or an offload block's nvme_path): a "
                     "writable directory on the NVMe drive");
        return;
    }
    if (!cfg->act.nvme_path || (flags & ZC__CFG_SKIP_PATH_CHECK))
        return; /* an offload block's path is checked with its block */
    zc_offload_cfg as_block = {.device = ZC_OFFLOAD_NVME, .nvme_path = cfg->act.nvme_path};
    check_offload(cfg, &as_block, "activation_checkpointing", false, flags | ZC__CFG_NO_STAGE, d);
}

void zc__cfg_semantic(const zc_config *cfg, unsigned flags, zc_cfg_diag *d)
{
    if (cfg->fp16.enabled && cfg->bf16.enabled && !pending(cfg, "fp16.enabled") &&
        !pending(cfg, "bf16.enabled"))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.enabled",
                     "fp16.enabled and bf16.enabled are both true; enable only one (bf16 needs "
                     "no loss scaling)");
    if (cfg->zero.stage < 0 || cfg->zero.stage > 3)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.stage",
                     "%d is out of range [0, 3]", cfg->zero.stage);
    check_offload(cfg, &cfg->zero.offload_optimizer, "zero_optimization.offload_optimizer", true,
                  flags, d);
    check_offload(cfg, &cfg->zero.offload_param, "zero_optimization.offload_param", false, flags,
                  d);
    if (cfg->zero.offload_optimizer.ratio < 1.0 && cfg->zero.stage != 3 &&
        !zc__config_stage_auto(cfg))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.offload_optimizer.ratio",
                     "%g < 1 (partial offload) needs stage 3 (stage is %d); set it to 1 or use "
                     "stage 3",
                     cfg->zero.offload_optimizer.ratio, cfg->zero.stage);
    check_budgets(cfg, d);
    check_act(cfg, flags, d);
    if (cfg->zero.allgather_bucket_size % 2 != 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.allgather_bucket_size",
                     "%lld is odd; it must be even (DeepSpeed all-gathers 16-bit pairs)",
                     (long long)cfg->zero.allgather_bucket_size);
    check_scheduler(cfg, d);
    zc__cfg_check_optimizer(cfg, d);
    zc__cfg_check_observe(cfg, d);
}
