/* The configuration handle: create/destroy/clone, zc_config_set/get, program
 * values, resolve and the lr query. Every mutation validates into a copy and
 * swaps it in on success, so a failed call leaves the handle untouched. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "config/scheduler.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"

static void config_free(zc_config *c)
{
    if (!c)
        return;
    /* Every string key owns its text. */
    for (int i = 0; i < zc__cfg_nkeys; i++)
        if (zc__cfg_keys[i].type == ZC_KT_STR)
            zc__cfg_strfree(*(char **)((char *)c + zc__cfg_keys[i].off));
    if (c->meta)
        zc__host_free(NULL, ZC_MEM_OTHER, c->meta, sizeof(*c->meta));
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof(*c));
}

static zc_status config_alloc(zc_config **out)
{
    zc_config *c = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(*c), "config", (void **)&c));
    zc_status rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(*c->meta), "config metadata",
                                  (void **)&c->meta);
    if (rc != ZC_OK) {
        zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof(*c));
        return rc;
    }
    *out = c;
    return ZC_OK;
}

ZC_API zc_status zc_config_create(zc_config **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_create: out is NULL");
    *out = NULL;
    ZC_CHECK(zc__log_env_check());
    zc_config *c;
    ZC_CHECK(config_alloc(&c));
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        zc_status rc = zc__cfg_store_default(c, &zc__cfg_keys[i]);
        if (rc != ZC_OK) {
            config_free(c);
            return rc;
        }
    }
    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    c->program = pv;
    c->optimizer.present = false;
    *out = c;
    return ZC_OK;
}

ZC_API void zc_config_destroy(zc_config *cfg) { config_free(cfg); }

zc_status zc__config_clone(const zc_config *src, zc_config **out)
{
    if (!src || !out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__config_clone: NULL argument");
    zc_config *c;
    ZC_CHECK(config_alloc(&c));
    struct zc_config_meta *meta = c->meta;
    *c = *src;
    c->meta = meta;
    if (src->meta)
        *meta = *src->meta;
    /* The copy owns copies of every string key's text. */
    for (int i = 0; i < zc__cfg_nkeys; i++)
        if (zc__cfg_keys[i].type == ZC_KT_STR)
            *(char **)((char *)c + zc__cfg_keys[i].off) = NULL;
    zc_status rc = ZC_OK;
    for (int i = 0; i < zc__cfg_nkeys && rc == ZC_OK; i++) {
        if (zc__cfg_keys[i].type != ZC_KT_STR)
            continue;
        const char *from = *(char *const *)((const char *)src + zc__cfg_keys[i].off);
        if (from)
            rc = zc__cfg_strdup(from, (char **)((char *)c + zc__cfg_keys[i].off));
    }
    if (rc != ZC_OK) {
        config_free(c);
        return rc;
    }
    *out = c;
    return ZC_OK;
}

void zc__config_swap(zc_config *a, zc_config *b)
{
    zc_config t = *a;
    *a = *b;
    *b = t;
}

ZC_API zc_status zc_config_set(zc_config *cfg, const char *dotted_key, const char *json_value)
{
    zc__error_clear();
    if (!cfg || !dotted_key || !json_value)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_set: NULL argument (cfg %p, key %s)",
                      (void *)cfg, dotted_key ? dotted_key : "NULL");
    /* The loader's limit holds for a value set from code too (a whole block
     * can be given here); strnlen stops at the limit. */
    size_t vlen = strnlen(json_value, ZC_CFG_MAX_BYTES + 1);
    if (vlen > ZC_CFG_MAX_BYTES)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_config_set: %s: the value is longer than " ZC_CFG_MAX_BYTES_TEXT
                      " (%zu bytes), the most a config may be",
                      dotted_key, ZC_CFG_MAX_BYTES);
    if (zc__cfg_count_values(json_value, vlen, ZC_CFG_MAX_VALUES) > ZC_CFG_MAX_VALUES)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_config_set: %s: the value holds more than %d JSON values, the most a "
                      "config may",
                      dotted_key, ZC_CFG_MAX_VALUES);
    json_error_t jerr;
    json_t *v = json_loads(json_value, JSON_DECODE_ANY, &jerr);
    if (!v)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_config_set: %s: value is not JSON text: %s (column %d of '%s')",
                      dotted_key, jerr.text, jerr.column, json_value);
    zc_config *copy = NULL;
    zc_cfg_diag d = {0};
    zc_status rc = zc__config_clone(cfg, &copy);
    if (rc == ZC_OK)
        rc = zc__cfg_apply_key(copy, dotted_key, v, ZC_ORIGIN_SET, &d);
    if (rc == ZC_OK)
        rc = zc__diag_report(&d, "zc_config_set");
    if (rc == ZC_OK)
        zc__config_swap(cfg, copy);
    config_free(copy);
    zc__diag_free(&d);
    json_decref(v);
    return rc;
}

ZC_API zc_status zc_config_set_int(zc_config *cfg, const char *dotted_key, int64_t value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)value);
    return zc_config_set(cfg, dotted_key, buf);
}

ZC_API zc_status zc_config_set_double(zc_config *cfg, const char *dotted_key, double value)
{
    zc__error_clear();
    if (!isfinite(value))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_set_double: %s: %g is not finite",
                      dotted_key ? dotted_key : "NULL", value);
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", value);
    return zc_config_set(cfg, dotted_key, buf);
}

ZC_API zc_status zc_config_set_bool(zc_config *cfg, const char *dotted_key, bool value)
{
    return zc_config_set(cfg, dotted_key, value ? "true" : "false");
}

ZC_API zc_status zc_config_set_string(zc_config *cfg, const char *dotted_key, const char *value)
{
    zc__error_clear();
    if (!value)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_set_string: %s: value is NULL",
                      dotted_key ? dotted_key : "NULL");
    json_t *s = json_string(value);
    char *text = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    json_decref(s);
    if (!text)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_set_string: %s: value is not valid UTF-8",
                      dotted_key ? dotted_key : "NULL");
    zc_status rc = zc_config_set(cfg, dotted_key, text);
    free(text);
    return rc;
}

ZC_API zc_status zc_config_get(const zc_config *cfg, const char *dotted_key, char *buf, size_t cap)
{
    zc__error_clear();
    if (!cfg || !dotted_key || !buf || cap == 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_get: NULL argument or zero capacity");
    int k = zc__cfg_key_find(dotted_key);
    if (k < 0 && !strncmp(dotted_key, "bfloat16.", 9)) {
        char alt[128];
        snprintf(alt, sizeof alt, "bf16.%s", dotted_key + 9);
        k = zc__cfg_key_find(alt);
    }
    if (k < 0 || zc__cfg_keys[k].type == ZC_KT_IGNORED)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_get: unknown key '%s'", dotted_key);
    const zc_cfg_key *key = &zc__cfg_keys[k];
    if (cfg->meta && cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING) {
        snprintf(buf, cap, "\"auto\"");
        return ZC_OK;
    }
    /* Keys whose unset value has a dynamic default read back effective. */
    if (!strcmp(key->path, "zero_optimization.overlap_comm")) {
        snprintf(buf, cap, "%s", zc__cfg_overlap_comm(cfg) ? "true" : "false");
        return ZC_OK;
    }
    zc__cfg_format(cfg, key, buf, cap);
    return ZC_OK;
}

ZC_API zc_status zc_config_resolve(zc_config *cfg, int world)
{
    zc__error_clear();
    if (!cfg)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_resolve: cfg is NULL");
    if (world <= 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_resolve: world size %d must be > 0", world);
    zc_config *copy = NULL;
    zc_cfg_diag d = {0};
    zc_status rc = zc__config_clone(cfg, &copy);
    if (rc == ZC_OK)
        rc = zc__cfg_resolve(copy, world, false, &d);
    if (rc == ZC_OK)
        zc__cfg_semantic(copy, 0, &d);
    if (rc == ZC_OK)
        rc = zc__diag_report(&d, "zc_config_resolve");
    if (rc == ZC_OK)
        zc__config_swap(cfg, copy);
    config_free(copy);
    zc__diag_free(&d);
    return rc;
}

ZC_API double zc_config_lr_at(const zc_config *cfg, int64_t step, double *beta1)
{
    if (!cfg) {
        if (beta1)
            *beta1 = 0;
        return 0;
    }
    return zc__sched_lr(&cfg->scheduler, cfg->optimizer.lr, cfg->optimizer.beta1,
                        cfg->optimizer.beta2, step, beta1, NULL);
}
