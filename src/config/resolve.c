/* "auto" resolution (the Hugging Face integration's rules) and DeepSpeed's
 * batch rules (runtime/config.py _set_batch_related_parameters and
 * _batch_assertion, with its message texts). */
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "base/error.h"
#include "base/log.h"

static int key(const char *path) { return zc__cfg_key_find(path); }

static bool is_pending(const zc_config *cfg, int k)
{
    return cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING;
}

static void set_i64(zc_config *cfg, int k, int64_t v, const char *by)
{
    *(int64_t *)((char *)cfg + zc__cfg_keys[k].off) = v;
    zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "%s", by);
}

static void set_f64(zc_config *cfg, int k, double v, const char *by)
{
    *(double *)((char *)cfg + zc__cfg_keys[k].off) = v;
    zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "%s", by);
}

/* Resolves one program-derived key; returns false when nothing resolves it. */
static bool resolve_program(zc_config *cfg, int k)
{
    const zc_program_values *p = &cfg->program;
    const char *path = zc__cfg_keys[k].path;
    if (!strcmp(path, "train_micro_batch_size_per_gpu")) {
        if (p->micro_batch_per_gpu > 0)
            set_i64(cfg, k, p->micro_batch_per_gpu, "program: micro_batch_per_gpu");
        return p->micro_batch_per_gpu > 0;
    }
    if (!strcmp(path, "gradient_accumulation_steps")) {
        if (p->gradient_accumulation_steps > 0)
            set_i64(cfg, k, p->gradient_accumulation_steps, "program: gradient_accumulation_steps");
        return p->gradient_accumulation_steps > 0;
    }
    if (!strcmp(path, "gradient_clipping")) {
        if (p->max_grad_norm >= 0)
            set_f64(cfg, k, p->max_grad_norm, "program: max_grad_norm");
        return p->max_grad_norm >= 0;
    }
    if (!strcmp(path, "optimizer.params.lr")) {
        if (p->lr >= 0)
            set_f64(cfg, k, p->lr, "program: lr");
        return p->lr >= 0;
    }
    if (!strcmp(path, "optimizer.params.eps")) {
        if (p->eps >= 0)
            set_f64(cfg, k, p->eps, "program: eps");
        return p->eps >= 0;
    }
    if (!strcmp(path, "optimizer.params.weight_decay")) {
        if (p->weight_decay >= 0)
            set_f64(cfg, k, p->weight_decay, "program: weight_decay");
        return p->weight_decay >= 0;
    }
    if (!strcmp(path, "optimizer.params.betas")) {
        if (p->beta1 < 0 || p->beta2 < 0 || p->beta1 >= 1 || p->beta2 >= 1)
            return false;
        cfg->optimizer.beta1 = p->beta1;
        cfg->optimizer.beta2 = p->beta2;
        zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "program: beta1, beta2");
        return true;
    }
    if (!strcmp(path, "scheduler.params.warmup_min_lr")) {
        set_f64(cfg, k, 0.0, "Hugging Face rule: 0");
        return true;
    }
    if (!strcmp(path, "scheduler.params.warmup_max_lr")) {
        int lk = key("optimizer.params.lr");
        if (p->lr >= 0)
            set_f64(cfg, k, p->lr, "program: lr");
        else if (!is_pending(cfg, lk))
            set_f64(cfg, k, cfg->optimizer.lr, "= optimizer.params.lr");
        else
            return false;
        return true;
    }
    if (!strcmp(path, "scheduler.params.warmup_num_steps")) {
        if (p->warmup_num_steps >= 0)
            set_i64(cfg, k, p->warmup_num_steps > 0 ? p->warmup_num_steps : 1,
                    "program: warmup_num_steps");
        return p->warmup_num_steps >= 0;
    }
    if (!strcmp(path, "scheduler.params.total_num_steps")) {
        if (p->total_num_steps > 0)
            set_i64(cfg, k, p->total_num_steps, "program: total_num_steps");
        return p->total_num_steps > 0;
    }
    if (!strcmp(path, "fp16.enabled") || !strcmp(path, "bf16.enabled")) {
        if (p->dtype < 0)
            return false;
        bool fp16 = !strcmp(path, "fp16.enabled");
        bool on = p->dtype == (fp16 ? ZC_DTYPE_F16 : ZC_DTYPE_BF16);
        if (fp16)
            cfg->fp16.enabled = on;
        else
            cfg->bf16.enabled = on;
        zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "program: dtype %s",
                           zc_dtype_name((zc_dtype)p->dtype));
        return true;
    }
    return false;
}

/* a * b * c, false when it leaves int64. Every product of batch numbers goes
 * through here: the keys are bounded, the world is any int. */
static bool mul3(int64_t a, int64_t b, int64_t c, int64_t *out)
{
    int64_t ab;
    return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

static zc_status batch_rules(zc_config *cfg, int world, bool preview, zc_cfg_diag *d)
{
    int ktb = key("train_batch_size"), kmb = key("train_micro_batch_size_per_gpu"),
        kga = key("gradient_accumulation_steps");
    int64_t tb = cfg->train_batch_size, mb = cfg->train_micro_batch_size_per_gpu,
            ga = cfg->gradient_accumulation_steps;
    zc_cfg_sev sev = preview ? ZC_SEV_WARN : ZC_SEV_ERROR;
    if (is_pending(cfg, kmb) || is_pending(cfg, kga))
        return ZC_OK; /* preview: the program will provide them */
    bool htb = tb > 0, hmb = mb > 0, hga = ga > 0;
    if (!htb && !hmb) {
        zc__diag_add(d, sev, ZC_ERR_CONFIG, "train_batch_size",
                     "Either train_batch_size or train_micro_batch_size_per_gpu needs to be "
                     "provided");
        return ZC_OK;
    }
    if (world <= 0) {
        /* config check without --world: the world size is what the triple implies. */
        int64_t per_rank;
        if (htb && hmb && hga && (!mul3(mb, ga, 1, &per_rank) || tb % per_rank != 0))
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_batch_size",
                         "%lld is not a multiple of train_micro_batch_size_per_gpu * "
                         "gradient_accumulation_steps = %lld * %lld for any world size",
                         (long long)tb, (long long)mb, (long long)ga);
        return ZC_OK;
    }
    const char *how = NULL;
    int derived = -1;
    int64_t w = world;
    bool overflow = false;
    if (htb && hmb && hga) {
    } else if (htb && hmb) {
        ga = tb / mb / w;
        derived = kga;
        how = "train_batch_size / micro batch / world";
    } else if (htb && hga) {
        mb = tb / w / ga;
        derived = kmb;
        how = "train_batch_size / world / accumulation";
    } else if (hmb && hga) {
        overflow = !mul3(mb, ga, w, &tb);
        derived = ktb;
        how = "micro batch * accumulation * world";
    } else if (htb) {
        ga = 1;
        mb = tb / w;
        derived = kmb;
        how = "train_batch_size / world (accumulation 1)";
        zc__cfg_set_origin(cfg, kga, ZC_ORIGIN_DERIVED, "DeepSpeed rule: 1");
    } else {
        ga = 1;
        overflow = !mul3(mb, 1, w, &tb);
        derived = ktb;
        how = "micro batch * world (accumulation 1)";
        zc__cfg_set_origin(cfg, kga, ZC_ORIGIN_DERIVED, "DeepSpeed rule: 1");
    }
    if (derived >= 0) {
        bool was_auto = cfg->meta->origin[derived] == ZC_ORIGIN_AUTO ||
                        cfg->meta->origin[derived] == ZC_ORIGIN_AUTO_PENDING;
        zc__cfg_set_origin(cfg, derived, was_auto ? ZC_ORIGIN_AUTO : ZC_ORIGIN_DERIVED,
                           "DeepSpeed rule: %s (world %d)", how, world);
    }
    if (overflow) {
        /* Reported as what it is, not as the wrapped (often 0) batch. */
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_batch_size",
                     "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world = "
                     "%lld * %lld * %d does not fit in 64 bits (at most %lld); lower the micro "
                     "batch or the accumulation steps",
                     (long long)mb, (long long)ga, world, (long long)INT64_MAX);
        return ZC_OK;
    }
    if (tb > zc__cfg_keys[ktb].imax) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_batch_size",
                     "micro batch * accumulation * world = %lld * %lld * %d = %lld is out of "
                     "range [1, %lld]",
                     (long long)mb, (long long)ga, world, (long long)tb,
                     (long long)zc__cfg_keys[ktb].imax);
        return ZC_OK;
    }
    int64_t product = 0;
    bool product_ok = tb > 0 && mb > 0 && ga > 0 && mul3(mb, ga, w, &product);
    if (tb <= 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_batch_size",
                     "Train batch size: %lld has to be greater than 0", (long long)tb);
    if (mb <= 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_micro_batch_size_per_gpu",
                     "Micro batch size per gpu: %lld has to be greater than 0", (long long)mb);
    if (ga <= 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "gradient_accumulation_steps",
                     "Gradient accumulation steps: %lld has to be greater than 0", (long long)ga);
    if (tb > 0 && mb > 0 && ga > 0 && (!product_ok || tb != product))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "train_batch_size",
                     "Check batch related parameters. train_batch_size is not equal to "
                     "micro_batch_per_gpu * gradient_acc_step * world_size %lld != %lld * %lld * %d",
                     (long long)tb, (long long)mb, (long long)ga, world);
    cfg->train_batch_size = tb;
    cfg->train_micro_batch_size_per_gpu = mb;
    cfg->gradient_accumulation_steps = ga;
    return ZC_OK;
}

zc_status zc__cfg_resolve(zc_config *cfg, int world, bool preview, zc_cfg_diag *d)
{
    /* warmup_max_lr follows the optimizer's lr, so resolve that first. */
    int order[ZC_CFG_MAX_KEYS], n = 0;
    int lr = key("optimizer.params.lr");
    order[n++] = lr;
    for (int i = 0; i < zc__cfg_nkeys; i++)
        if (i != lr)
            order[n++] = i;
    for (int j = 0; j < n; j++) {
        int k = order[j];
        const zc_cfg_key *kk = &zc__cfg_keys[k];
        if (!is_pending(cfg, k) || !(kk->flags & ZC_KF_AUTO_PROGRAM))
            continue;
        if (resolve_program(cfg, k))
            continue;
        bool needed = kk->flags & ZC_KF_MUST_RESOLVE;
        if (!strcmp(kk->path, "train_batch_size"))
            continue; /* derived by the batch rules below */
        if (!strcmp(kk->path, "gradient_accumulation_steps") && cfg->train_batch_size > 0 &&
            cfg->train_micro_batch_size_per_gpu > 0 &&
            !is_pending(cfg, key("train_batch_size")) &&
            !is_pending(cfg, key("train_micro_batch_size_per_gpu"))) {
            cfg->gradient_accumulation_steps = -1;
            zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "derived by DeepSpeed's batch rules");
            continue; /* derivable from the other two */
        }
        if (!strcmp(kk->path, "scheduler.params.total_num_steps"))
            needed = cfg->scheduler.type == ZC_SCHED_WARMUP_DECAY_LR ||
                     cfg->scheduler.type == ZC_SCHED_WARMUP_COSINE_LR;
        if (needed) {
            const char *field = zc__cfg_program_field(kk->path);
            zc__diag_add(d, preview ? ZC_SEV_WARN : ZC_SEV_ERROR, ZC_ERR_CONFIG, kk->path,
                         "\"auto\" must be resolved by the program: set zc_program_values.%s "
                         "and pass it to zc_config_set_program_values before zc_engine_create "
                         "(or write a number in the file)",
                         field ? field : "?");
            continue;
        }
        ZC_CHECK(zc__cfg_store_default(cfg, kk));
        zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "unresolved: DeepSpeed default");
        zc__diag_add(d, ZC_SEV_INFO, ZC_OK, kk->path,
                     "\"auto\" not resolved by the program; using DeepSpeed's default");
    }
    /* A train_batch_size "auto" is whatever the other two and the world give. */
    int ktb = key("train_batch_size");
    if (is_pending(cfg, ktb) && !is_pending(cfg, key("train_micro_batch_size_per_gpu")) &&
        !is_pending(cfg, key("gradient_accumulation_steps"))) {
        cfg->train_batch_size = -1;
        zc__cfg_set_origin(cfg, ktb, ZC_ORIGIN_AUTO, "micro batch * accumulation * world");
    }
    return batch_rules(cfg, world, preview, d);
}

zc_status zc__config_resolve_model_auto(zc_config *cfg, int64_t hidden_size)
{
    if (!cfg)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__config_resolve_model_auto: cfg is NULL");
    int64_t h = hidden_size;
    for (int k = 0; k < zc__cfg_nkeys; k++) {
        const zc_cfg_key *kk = &zc__cfg_keys[k];
        if (!(kk->flags & ZC_KF_AUTO_MODEL) || !is_pending(cfg, k))
            continue;
        bool stage3_only = strcmp(kk->path, "zero_optimization.reduce_bucket_size") != 0;
        int64_t v;
        char by[ZC_CFG_NOTE_LEN];
        if (h <= 0 || (h > 3037000499LL)) { /* no 2-D parameter, or H^2 overflows */
            ZC_CHECK(zc__cfg_store_default(cfg, kk));
            zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "no model hidden size: DeepSpeed default");
            ZC_LOGI("config", "%s: \"auto\" not resolved (no 2-D parameter); using %lld",
                    kk->path, (long long)*(int64_t *)((char *)cfg + kk->off));
            continue;
        }
        if (stage3_only && cfg->zero.stage != 3) {
            ZC_CHECK(zc__cfg_store_default(cfg, kk));
            zc__cfg_set_origin(cfg, k, ZC_ORIGIN_AUTO, "stage < 3: DeepSpeed default (unused)");
            continue;
        }
        /* h <= 3037000499 above, so H^2 and 10 H fit int64; the key's range
         * (2^50 elements) is the real bound, and a model past it is refused
         * rather than given a bucket the rest of the engine cannot size. */
        bool ok;
        if (!strcmp(kk->path, "zero_optimization.reduce_bucket_size")) {
            ok = !__builtin_mul_overflow(h, h, &v);
            snprintf(by, sizeof by, "model: H^2 with H = %lld", (long long)h);
        } else if (!strcmp(kk->path, "zero_optimization.stage3_prefetch_bucket_size")) {
            ok = !__builtin_mul_overflow(h, h, &v);
            v = (int64_t)(0.9 * (double)v);
            snprintf(by, sizeof by, "model: 0.9 H^2 with H = %lld", (long long)h);
        } else {
            ok = !__builtin_mul_overflow(h, (int64_t)10, &v);
            snprintf(by, sizeof by, "model: 10 H with H = %lld", (long long)h);
        }
        if (!ok || v < kk->imin || v > kk->imax)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "%s: \"auto\" would be %s = %lld, out of range [%lld, %lld]; write a "
                          "number for it",
                          kk->path, by + 7, (long long)v, (long long)kk->imin,
                          (long long)kk->imax);
        set_i64(cfg, k, v, by);
        ZC_LOGI("config", "%s: \"auto\" = %lld (%s)", kk->path, (long long)v, by);
    }
    return ZC_OK;
}

zc_status zc__config_resolve_for_engine(zc_config *cfg, int world)
{
    int ktb = key("train_batch_size"), kmb = key("train_micro_batch_size_per_gpu");
    bool given = cfg->train_batch_size > 0 || cfg->train_micro_batch_size_per_gpu > 0 ||
                 is_pending(cfg, ktb) || is_pending(cfg, kmb);
    if (!given) {
        /* A C program drives micro-steps itself and may never state a batch
         * size; DeepSpeed would assert here. Take a micro batch of 1 so the
         * batch rules still derive and check the rest. */
        cfg->train_micro_batch_size_per_gpu = 1;
        zc__cfg_set_origin(cfg, kmb, ZC_ORIGIN_DERIVED,
                           "engine: no batch key given, the engine counts micro-steps only");
    }
    return zc_config_resolve(cfg, world);
}
