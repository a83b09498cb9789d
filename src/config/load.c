/* The DeepSpeed JSON loader: walks the document block by block, assigning
 * known keys through the schema and collecting every problem.
 *
 * Strictness follows DeepSpeed: unknown top-level keys are not errors (a
 * warning with the nearest known key, or quiet for DeepSpeed features zeroc
 * does not use), unknown keys inside the pydantic blocks are errors (warnings
 * with ZC_CONFIG_LENIENT), and `aio`, a plain dict in DeepSpeed, only warns. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/hints.h"
#include "config/internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"

static void join(char *out, size_t cap, const char *a, const char *b)
{
    if (a && a[0])
        snprintf(out, cap, "%s.%s", a, b);
    else
        snprintf(out, cap, "%s", b);
}

static bool has(const json_t *obj, const char *name)
{
    return json_object_get(obj, name) != NULL;
}

/* "Cannot provide deprecated parameter ... together": old and new both given. */
static void check_both(const json_t *obj, const char *written, const char *old_name,
                       const char *const *new_names, zc_cfg_diag *d)
{
    if (!has(obj, old_name))
        return;
    for (int i = 0; new_names[i]; i++) {
        if (has(obj, new_names[i])) {
            char p[256];
            join(p, sizeof p, written, old_name);
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p,
                         "deprecated key given together with its replacement %s; keep only %s",
                         new_names[i], new_names[i]);
            return;
        }
    }
}

static void block_conflicts(const char *canon, const char *written, const json_t *obj,
                            zc_cfg_diag *d)
{
    if (!canon[0]) {
        static const char *const bf16[] = {"bf16", NULL};
        check_both(obj, written, "bfloat16", bf16, d);
    } else if (!strcmp(canon, "zero_optimization")) {
        static const char *const oo[] = {"offload_optimizer", NULL};
        static const char *const op[] = {"offload_param", NULL};
        static const char *const g16[] = {"stage3_gather_16bit_weights_on_model_save",
                                          "gather_16bit_weights_on_model_save", NULL};
        check_both(obj, written, "cpu_offload", oo, d);
        check_both(obj, written, "cpu_offload_param", op, d);
        check_both(obj, written, "cpu_offload_params", op, d);
        check_both(obj, written, "stage3_gather_fp16_weights_on_model_save", g16, d);
    } else if (!strcmp(canon, "aio")) {
        static const char *const iop[] = {"intra_op_parallelism", NULL};
        check_both(obj, written, "thread_count", iop, d);
    }
}

/* Optimizer: the type decides whether the params are ours to check. Returns
 * false when the params must be skipped (unsupported or missing type). */
static bool optimizer_type_ok(const json_t *obj, const char *written, zc_cfg_diag *d)
{
    char p[256];
    join(p, sizeof p, written, "type");
    const json_t *t = json_object_get(obj, "type");
    if (!t) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p,
                     "missing; zeroc needs \"Adam\" or \"AdamW\" (or remove the optimizer block "
                     "to get AdamW with DeepSpeed's defaults)");
        return false;
    }
    if (json_is_string(t) && strcasecmp(json_string_value(t), "adam") &&
        strcasecmp(json_string_value(t), "adamw")) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_UNSUPPORTED, p,
                     "\"%s\" is not supported by zeroc (supported: Adam, AdamW)",
                     json_string_value(t));
        return false;
    }
    return true;
}

typedef struct walk_ctx {
    zc_config *cfg;
    zc_cfg_origin origin;
    unsigned flags;
    zc_cfg_diag *d;
    uint8_t seen[ZC_CFG_MAX_KEYS]; /* catches a key given under two names */
    char seen_as[ZC_CFG_MAX_KEYS][64];
} walk_ctx;

static zc_status walk(walk_ctx *c, const char *canon, const char *written, const json_t *v);

static zc_status walk_member(walk_ctx *c, const char *canon, const char *written,
                             const char *name, const json_t *val, bool skip_params)
{
    char cpath[256], wpath[256];
    join(cpath, sizeof cpath, canon, name);
    join(wpath, sizeof wpath, written, name);
    zc_cfg_diag *d = c->d;

    if (!canon[0] && !strcmp(name, "bfloat16")) {
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, "bfloat16", "bfloat16 is the old name of bf16; use bf16");
        return walk(c, "bf16", "bfloat16", val);
    }
    if (zc__cfg_is_block(cpath) || (!strcmp(cpath, "zero_optimization") && json_is_boolean(val))) {
        if (skip_params && !strcmp(name, "params"))
            return ZC_OK;
        return walk(c, cpath, wpath, val);
    }
    if (!strcmp(cpath, "optimizer.params.max_grad_norm")) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, wpath,
                     "not an optimizer parameter; DeepSpeed clips with the top-level "
                     "gradient_clipping key: move the value there");
        return ZC_OK;
    }
    int k = zc__cfg_key_find(cpath);
    if (k >= 0) {
        if (c->seen[k]) {
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, wpath, "given twice (also as %s)",
                         c->seen_as[k]);
            return ZC_OK;
        }
        c->seen[k] = 1;
        snprintf(c->seen_as[k], sizeof c->seen_as[k], "%.63s", wpath);
        zc_cfg_origin o = strcmp(canon, written) ? ZC_ORIGIN_ALIAS : c->origin;
        size_t before = (size_t)d->nerr;
        ZC_CHECK(zc__cfg_assign(c->cfg, k, val, o, wpath, d));
        if (o == ZC_ORIGIN_ALIAS && (size_t)d->nerr == before &&
            c->cfg->meta->origin[k] == ZC_ORIGIN_ALIAS)
            zc__cfg_set_origin(c->cfg, k, ZC_ORIGIN_ALIAS, "from %s", wpath);
        return ZC_OK;
    }
    int dep = zc__cfg_deprecated_find(cpath, NULL);
    if (dep >= 0)
        return zc__cfg_apply_deprecated(c->cfg, dep, val, d);

    char hint[200];
    zc__cfg_hint(cpath, hint, sizeof hint);
    if (!canon[0]) {
        if (zc__cfg_is_ignored_feature(name))
            ZC_LOGD("config", "%s: DeepSpeed feature not used by zeroc; ignored", wpath);
        else {
            /* An unknown wrapper around top-level keys ("log": {"steps_per_print": 50}). */
            const char *inner;
            json_t *iv;
            if (!hint[0] && json_is_object(val)) {
                json_object_foreach((json_t *)val, inner, iv) {
                    int ik = zc__cfg_key_find(inner);
                    if (ik >= 0 || zc__cfg_is_block(inner)) {
                        snprintf(hint, sizeof hint,
                                 "; its key %s belongs at the top level (it is ignored here)",
                                 inner);
                        break;
                    }
                }
            }
            zc__diag_add(d, ZC_SEV_WARN, ZC_OK, wpath,
                         "unknown top-level key, ignored as DeepSpeed does%s", hint);
        }
    } else if (!strcmp(canon, "aio")) {
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, wpath, "unknown aio key, ignored%s", hint);
    } else if (c->flags & ZC_CONFIG_LENIENT) {
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, wpath, "unknown key, ignored (lenient)%s", hint);
    } else {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, wpath, "unknown key%s", hint);
    }
    return ZC_OK;
}

static zc_status walk(walk_ctx *c, const char *canon, const char *written, const json_t *v)
{
    zc_cfg_diag *d = c->d;
    if (!strcmp(canon, "zero_optimization") && json_is_boolean(v)) {
        /* DeepSpeed's oldest form: "zero_optimization": true means stage 1. */
        int k = zc__cfg_key_find("zero_optimization.stage");
        c->cfg->zero.stage = json_is_true(v) ? 1 : 0;
        zc__cfg_set_origin(c->cfg, k, ZC_ORIGIN_ALIAS, "from zero_optimization: %s",
                           json_is_true(v) ? "true" : "false");
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, written,
                     "a boolean zero_optimization is deprecated; use {\"stage\": %d}",
                     c->cfg->zero.stage);
        return ZC_OK;
    }
    if (json_is_null(v) && strstr(canon, "offload_"))
        return ZC_OK; /* DeepSpeed: None = no offload */
    if (!json_is_object(v)) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, written[0] ? written : "(document)",
                     "expected an object");
        return ZC_OK;
    }
    block_conflicts(canon, written, v, d);
    bool skip_params = false;
    if (!strcmp(canon, "optimizer")) {
        skip_params = !optimizer_type_ok(v, written, d);
        c->cfg->optimizer.present = true;
    }
    if (!strcmp(canon, "scheduler") && !has(v, "type")) {
        char p[256];
        join(p, sizeof p, written, "type");
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, p,
                     "missing; one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
                     "LRRangeTest");
    }
    const char *name;
    json_t *val;
    json_object_foreach((json_t *)v, name, val) {
        if (skip_params && !strcmp(name, "type"))
            continue;
        ZC_CHECK(walk_member(c, canon, written, name, val, skip_params));
    }
    return ZC_OK;
}

zc_status zc__cfg_walk_block(zc_config *cfg, const char *path, const json_t *v,
                             zc_cfg_origin origin, unsigned flags, zc_cfg_diag *d)
{
    walk_ctx *c = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(*c), "config walk", (void **)&c));
    c->cfg = cfg;
    c->origin = origin;
    c->flags = flags;
    c->d = d;
    zc_status rc;
    if (!strcmp(path, "bfloat16")) {
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, "bfloat16", "bfloat16 is the old name of bf16; use bf16");
        rc = walk(c, "bf16", "bfloat16", v);
    } else {
        rc = walk(c, path, path, v);
    }
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof(*c));
    return rc;
}

zc_status zc__config_load_text(zc_config **out, const char *text, size_t len, const char *name,
                               unsigned flags, zc_cfg_diag *d)
{
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                     "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
        return ZC_ERR_CONFIG;
    }
    zc_status rc = ZC_OK;
    zc_config *cfg = NULL;
    if (!json_is_object(root)) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                     "the document must be a JSON object, not %s",
                     json_is_array(root) ? "an array" : "a scalar");
        rc = ZC_ERR_CONFIG;
        goto out;
    }
    ZC_CHECK_GOTO(zc_config_create(&cfg), rc, out);
    ZC_CHECK_GOTO(zc__cfg_walk_block(cfg, "", root, ZC_ORIGIN_FILE, flags, d), rc, out);
    zc__cfg_semantic(cfg, flags, d);
    if (d->nerr) {
        rc = zc__diag_first_error(d)->status;
        goto out;
    }
    *out = cfg;
    cfg = NULL;
out:
    zc_config_destroy(cfg);
    json_decref(root);
    (void)name;
    return rc;
}

ZC_API zc_status zc_config_load_string(zc_config **out, const char *json_text, const char *name,
                                       unsigned flags)
{
    zc__error_clear();
    if (!out || !json_text)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load_string: NULL argument");
    *out = NULL;
    if (!name)
        name = "<string>";
    zc_cfg_diag d = {0};
    zc_status rc = zc__config_load_text(out, json_text, strlen(json_text), name, flags, &d);
    zc_status rep = zc__diag_report(&d, name);
    if (rc == ZC_OK && rep != ZC_OK) { /* out of memory recording messages */
        zc_config_destroy(*out);
        *out = NULL;
        rc = rep;
    } else if (rc != ZC_OK && rep == ZC_OK) {
        rc = ZC_ERR(rc, "%s: could not load the configuration", name);
    }
    zc__diag_free(&d);
    return rc;
}

/* Reads a whole file through the counting allocator. */
zc_status zc__cfg_read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ZC_ERR(ZC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    zc_status rc = ZC_OK;
    char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = ZC_ERR(ZC_ERR_IO, "%s: cannot determine the size: %s", path, strerror(errno));
        goto out;
    }
    if (size > (64L << 20)) {
        rc = ZC_ERR(ZC_ERR_CONFIG, "%s: %ld bytes is too large for a config (limit 64 MiB)", path,
                    size);
        goto out;
    }
    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)size + 1, "config text",
                                 (void **)&buf),
                  rc, out);
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        rc = ZC_ERR(ZC_ERR_IO, "%s: short read", path);
        zc__host_free(NULL, ZC_MEM_OTHER, buf, (size_t)size + 1);
        buf = NULL;
        goto out;
    }
    buf[size] = 0;
    *text = buf;
    *len = (size_t)size;
out:
    fclose(f);
    return rc;
}

ZC_API zc_status zc_config_load_ex(zc_config **out, const char *json_path, unsigned flags)
{
    zc__error_clear();
    if (!out || !json_path)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load: NULL argument");
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ZC_CHECK(zc__cfg_read_file(json_path, &text, &len));
    zc_cfg_diag d = {0};
    zc_status rc = zc__config_load_text(out, text, len, json_path, flags, &d);
    zc_status rep = zc__diag_report(&d, json_path);
    if (rc == ZC_OK && rep != ZC_OK) {
        zc_config_destroy(*out);
        *out = NULL;
        rc = rep;
    } else if (rc != ZC_OK && rep == ZC_OK) {
        rc = ZC_ERR(rc, "%s: could not load the configuration", json_path);
    }
    zc__diag_free(&d);
    zc__host_free(NULL, ZC_MEM_OTHER, text, len + 1);
    return rc;
}

ZC_API zc_status zc_config_load(zc_config **out, const char *json_path)
{
    return zc_config_load_ex(out, json_path, 0);
}
