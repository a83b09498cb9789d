/* Assigning one value to one key: "auto", deprecated names, synonyms and the
 * "did you mean" hints shared by zc_config_set and the JSON loader. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/internal.h"
#include "config/hints.h"
#include "base/error.h"

static bool is_auto(const json_t *v)
{
    return json_is_string(v) && !strcmp(json_string_value(v), "auto");
}

/* Truthy for "asks for something": true, a non-zero number, a non-empty
 * string/object/array. */
static bool json_truthy(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) > 0 && !is_auto(v);
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    default: return false;
    }
}

zc_status zc__cfg_assign(zc_config *cfg, int key, const json_t *v, zc_cfg_origin origin,
                         const char *written_as, zc_cfg_diag *d)
{
    const zc_cfg_key *k = &zc__cfg_keys[key];
    const char *shown = written_as ? written_as : k->path;
    if (!strncmp(k->path, "optimizer.", 10))
        cfg->optimizer.present = true; /* the config names its optimizer */
    if (k->type == ZC_KT_IGNORED) {
        if (k->flags & ZC_KF_WARN_SET && json_truthy(v))
            zc__diag_add(d, ZC_SEV_WARN, ZC_OK, shown,
                         "zeroc does not implement this DeepSpeed option; it is ignored");
        return ZC_OK;
    }
    if (is_auto(v)) {
        /* The struct keeps the default while "auto" is pending, so a reader
         * that ignores the origin still sees DeepSpeed's value. */
        ZC_CHECK(zc__cfg_store_default(cfg, k));
        if (k->flags & (ZC_KF_AUTO_PROGRAM | ZC_KF_AUTO_MODEL | ZC_KF_AUTO_PLAN)) {
            zc__cfg_set_origin(cfg, key, ZC_ORIGIN_AUTO_PENDING, "%s", written_as ? written_as : "");
        } else {
            zc__cfg_set_origin(cfg, key, ZC_ORIGIN_AUTO, "no rule resolves it: DeepSpeed default");
            zc__diag_add(d, ZC_SEV_INFO, ZC_OK, shown,
                         "\"auto\" has no resolution rule in zeroc; using DeepSpeed's default");
        }
        return ZC_OK;
    }
    char err[300];
    zc_cfg_val val;
    if (!zc__cfg_parse(k, v, &val, err, sizeof err)) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, shown, "%s", err);
        return ZC_OK;
    }
    ZC_CHECK(zc__cfg_store(cfg, k, &val));
    if (written_as && strcmp(written_as, k->path))
        zc__cfg_set_origin(cfg, key, origin, "as %s", written_as);
    else
        zc__cfg_set_origin(cfg, key, origin, NULL);
    if (k->flags & ZC_KF_WARN_SET && !zc__cfg_is_default(cfg, k))
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, shown,
                     "zeroc does not implement this yet; the value is recorded and has no effect");
    return ZC_OK;
}

/* Deprecated names (DeepSpeed's _process_deprecated_field mappings). */
typedef enum { DEP_RENAME, DEP_OFFLOAD_OPT, DEP_OFFLOAD_PARAM, DEP_PIN } dep_kind;
static const struct {
    const char *old_path, *new_path; /* new_path: a key, or the block that replaces it */
    dep_kind kind;
} deprecated[] = {
    {"zero_optimization.cpu_offload", "zero_optimization.offload_optimizer", DEP_OFFLOAD_OPT},
    {"zero_optimization.cpu_offload_param", "zero_optimization.offload_param", DEP_OFFLOAD_PARAM},
    {"zero_optimization.cpu_offload_params", "zero_optimization.offload_param", DEP_OFFLOAD_PARAM},
    {"zero_optimization.cpu_offload_use_pin_memory", "zero_optimization.offload_*.pin_memory",
     DEP_PIN},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save",
     "zero_optimization.stage3_gather_16bit_weights_on_model_save", DEP_RENAME},
    {"aio.thread_count", "aio.intra_op_parallelism", DEP_RENAME},
};

int zc__cfg_deprecated_find(const char *path, const char **new_path)
{
    for (size_t i = 0; i < sizeof deprecated / sizeof deprecated[0]; i++) {
        if (!strcmp(deprecated[i].old_path, path)) {
            if (new_path)
                *new_path = deprecated[i].new_path;
            return (int)i;
        }
    }
    return -1;
}

zc_status zc__cfg_apply_deprecated(zc_config *cfg, int dep, const json_t *v, zc_cfg_diag *d)
{
    const char *old = deprecated[dep].old_path;
    switch (deprecated[dep].kind) {
    case DEP_RENAME: {
        int k = zc__cfg_key_find(deprecated[dep].new_path);
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, old, "deprecated; use %s", deprecated[dep].new_path);
        size_t before = (size_t)d->nerr;
        ZC_CHECK(zc__cfg_assign(cfg, k, v, ZC_ORIGIN_ALIAS, old, d));
        if ((size_t)d->nerr == before && cfg->meta->origin[k] == ZC_ORIGIN_ALIAS)
            zc__cfg_set_origin(cfg, k, ZC_ORIGIN_ALIAS, "from %s", old);
        return ZC_OK;
    }
    case DEP_OFFLOAD_OPT:
    case DEP_OFFLOAD_PARAM: {
        bool opt = deprecated[dep].kind == DEP_OFFLOAD_OPT;
        if (!json_is_boolean(v)) {
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, old, "expected true or false");
            return ZC_OK;
        }
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, old, "deprecated; use %s.device = \"cpu\"",
                     deprecated[dep].new_path);
        if (json_is_true(v)) {
            const char *dev = opt ? "zero_optimization.offload_optimizer.device"
                                  : "zero_optimization.offload_param.device";
            int k = zc__cfg_key_find(dev);
            if (opt)
                cfg->zero.offload_optimizer.device = ZC_OFFLOAD_CPU;
            else
                cfg->zero.offload_param.device = ZC_OFFLOAD_CPU;
            zc__cfg_set_origin(cfg, k, ZC_ORIGIN_ALIAS, "from %s", old);
        }
        return ZC_OK;
    }
    case DEP_PIN: {
        if (!json_is_boolean(v)) {
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, old, "expected true or false");
            return ZC_OK;
        }
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, old,
                     "deprecated; use offload_optimizer.pin_memory / offload_param.pin_memory");
        const char *keys[2] = {"zero_optimization.offload_optimizer.pin_memory",
                               "zero_optimization.offload_param.pin_memory"};
        cfg->zero.offload_optimizer.pin_memory = json_is_true(v);
        cfg->zero.offload_param.pin_memory = json_is_true(v);
        for (int i = 0; i < 2; i++)
            zc__cfg_set_origin(cfg, zc__cfg_key_find(keys[i]), ZC_ORIGIN_ALIAS, "from %s", old);
        return ZC_OK;
    }
    }
    return ZC_OK;
}

zc_status zc__cfg_apply_key(zc_config *cfg, const char *dotted, const json_t *v,
                            zc_cfg_origin origin, zc_cfg_diag *d)
{
    char path[256];
    if (strlen(dotted) >= sizeof path) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, "", "key is too long");
        return ZC_OK;
    }
    snprintf(path, sizeof path, "%s", dotted);
    /* A whole block given as an object goes through the loader's walk. */
    if (json_is_object(v) && zc__cfg_is_block(path))
        return zc__cfg_walk_block(cfg, path, v, origin, 0, d);
    if (!strcmp(path, "zero_optimization") && json_is_boolean(v))
        return zc__cfg_walk_block(cfg, path, v, origin, 0, d);
    if (!strncmp(path, "bfloat16.", 9)) {
        char canon[256];
        snprintf(canon, sizeof canon, "bf16.%s", path + 9);
        int k = zc__cfg_key_find(canon);
        if (k >= 0) {
            zc__diag_add(d, ZC_SEV_WARN, ZC_OK, path, "bfloat16 is the old name of bf16; use %s",
                         canon);
            size_t before = (size_t)d->nerr;
            ZC_CHECK(zc__cfg_assign(cfg, k, v, ZC_ORIGIN_ALIAS, path, d));
            if ((size_t)d->nerr == before && cfg->meta->origin[k] == ZC_ORIGIN_ALIAS)
                zc__cfg_set_origin(cfg, k, ZC_ORIGIN_ALIAS, "from %s", path);
            return ZC_OK;
        }
    }
    int k = zc__cfg_key_find(path);
    if (k >= 0)
        return zc__cfg_assign(cfg, k, v, origin, path, d);
    int dep = zc__cfg_deprecated_find(path, NULL);
    if (dep >= 0)
        return zc__cfg_apply_deprecated(cfg, dep, v, d);
    char hint[200];
    zc__cfg_hint(path, hint, sizeof hint);
    zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_INVALID_ARG, path, "unknown key%s", hint);
    return ZC_OK;
}
