/* What the training program tells the configuration (zc_program_values), the
 * way the Hugging Face Trainer fills a DeepSpeed template's "auto" keys.
 *
 * The values are numbers from a program, so they obey the same rule as the
 * file's: each one given must be finite and inside the range of the key it
 * fills, checked here, when they are handed over, and all at once. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "base/error.h"

/* Which field fills which key ("auto" messages name the field). */
static const struct {
    const char *key, *field;
} fields[] = {
    {"train_micro_batch_size_per_gpu", "micro_batch_per_gpu"},
    {"gradient_accumulation_steps", "gradient_accumulation_steps"},
    {"scheduler.params.total_num_steps", "total_num_steps"},
    {"scheduler.params.warmup_num_steps", "warmup_num_steps"},
    {"scheduler.params.warmup_max_lr", "lr"},
    {"optimizer.params.lr", "lr"},
    {"optimizer.params.betas", "beta1 and beta2"},
    {"optimizer.params.eps", "eps"},
    {"optimizer.params.weight_decay", "weight_decay"},
    {"gradient_clipping", "max_grad_norm"},
    {"fp16.enabled", "dtype"},
    {"bf16.enabled", "dtype"},
};

const char *zc__cfg_program_field(const char *key_path)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(fields[i].key, key_path))
            return fields[i].field;
    return NULL;
}

/* An integer field: negative = not given; else inside the key's range. The
 * lower bound is at most `lo`, for fields that map 0 to the key's minimum. */
static void check_int(zc_cfg_diag *d, const char *field, int64_t v, const char *key, int64_t lo)
{
    if (v < 0)
        return;
    const zc_cfg_key *k = &zc__cfg_keys[zc__cfg_key_find(key)];
    int64_t min = lo < k->imin ? lo : k->imin;
    if (v < min || v > k->imax)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, field,
                     "%lld is out of range [%lld, %lld] (it fills %s)", (long long)v,
                     (long long)min, (long long)k->imax, key);
}

/* A real field: negative = not given; nan or inf is refused rather than read
 * as "not given" (no silent fallback); else inside [lo, hi]. */
static void check_real(zc_cfg_diag *d, const char *field, double v, const char *key, double lo,
                       double hi, bool hi_open)
{
    if (isnan(v) || isinf(v)) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, field,
                     "%g is not a finite number (it fills %s; leave it negative when unknown)",
                     v, key);
        return;
    }
    if (v < 0)
        return;
    if (v < lo || v > hi || (hi_open && v == hi))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, field,
                     "%g is out of range [%g, %g%s (it fills %s)", v, lo, hi, hi_open ? ")" : "]",
                     key);
}

ZC_API zc_status zc_config_set_program_values(zc_config *cfg, const zc_program_values *values)
{
    zc__error_clear();
    if (!cfg || !values)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_set_program_values: NULL argument");
    if (values->size < sizeof(zc_program_values))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_config_set_program_values: values->size %zu < %zu; start from "
                      "ZC_PROGRAM_VALUES_INIT",
                      values->size, sizeof(zc_program_values));
    const zc_program_values *p = values;
    zc_cfg_diag d = {0};
    if (p->dtype >= ZC_DTYPE__COUNT || (p->dtype >= 0 && p->dtype != ZC_DTYPE_F32 &&
                                        p->dtype != ZC_DTYPE_F16 && p->dtype != ZC_DTYPE_BF16))
        zc__diag_add(&d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, "dtype",
                     "%d is not a parameter dtype (ZC_DTYPE_F32, _F16 or _BF16, or -1)", p->dtype);
    check_int(&d, "micro_batch_per_gpu", p->micro_batch_per_gpu, "train_micro_batch_size_per_gpu",
              1);
    check_int(&d, "gradient_accumulation_steps", p->gradient_accumulation_steps,
              "gradient_accumulation_steps", 1);
    check_int(&d, "total_num_steps", p->total_num_steps, "scheduler.params.total_num_steps", 1);
    /* 0 warmup steps is what the Trainer passes without warmup: it becomes 1. */
    check_int(&d, "warmup_num_steps", p->warmup_num_steps, "scheduler.params.warmup_num_steps",
              0);
    check_real(&d, "lr", p->lr, "optimizer.params.lr", 0, INFINITY, false);
    check_real(&d, "beta1", p->beta1, "optimizer.params.betas", 0, 1, true);
    check_real(&d, "beta2", p->beta2, "optimizer.params.betas", 0, 1, true);
    check_real(&d, "eps", p->eps, "optimizer.params.eps", 0, INFINITY, false);
    check_real(&d, "weight_decay", p->weight_decay, "optimizer.params.weight_decay", 0, INFINITY,
               false);
    check_real(&d, "max_grad_norm", p->max_grad_norm, "gradient_clipping", 0, INFINITY, false);
    zc_status rc = zc__diag_report(&d, "zc_config_set_program_values");
    zc__diag_free(&d);
    if (rc != ZC_OK)
        return rc; /* nothing recorded */
    cfg->program = *values;
    cfg->program.size = sizeof(zc_program_values);
    return ZC_OK;
}
