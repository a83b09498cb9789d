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
                     "missing; zeroc needs \"Adam\", \"AdamW\", \"Lion\" or \"Adagrad\" (or "
                     "remove the optimizer block to get AdamW with DeepSpeed's defaults)");
        return false;
    }
    /* DeepSpeed lowercases the name (runtime/config.py): any case matches. */
    if (json_is_string(t) && strcasecmp(json_string_value(t), "adam") &&
        strcasecmp(json_string_value(t), "adamw") && strcasecmp(json_string_value(t), "lion") &&
        strcasecmp(json_string_value(t), "adagrad")) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_UNSUPPORTED, p,
                     "\"%s\" is not supported by zeroc (supported: Adam, AdamW, Lion, Adagrad)",
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

/* Longest member name that can be a key: longer ones are unknown at once and
 * get no hint (nothing is near them), whatever their length. */
#define NAME_MAX_KNOWN 96

/* Severity of an unknown member of block `canon` (DeepSpeed ignores unknown
 * top-level keys and aio keys; the pydantic blocks refuse them). */
static zc_cfg_sev unknown_sev(const walk_ctx *c, const char *canon)
{
    if (!canon[0] || !strcmp(canon, "aio") || c->flags & ZC_CONFIG_LENIENT)
        return ZC_SEV_WARN;
    return ZC_SEV_ERROR;
}

static void add_unknown(walk_ctx *c, const char *canon, const char *wpath, const char *hint)
{
    zc_cfg_sev sev = unknown_sev(c, canon);
    zc_status st = sev == ZC_SEV_ERROR ? ZC_ERR_CONFIG : ZC_OK;
    if (!canon[0])
        zc__diag_add(c->d, sev, st, wpath, "unknown top-level key, ignored as DeepSpeed does%s",
                     hint);
    else if (!strcmp(canon, "aio"))
        zc__diag_add(c->d, sev, st, wpath, "unknown aio key, ignored%s", hint);
    else if (sev == ZC_SEV_WARN)
        zc__diag_add(c->d, sev, st, wpath, "unknown key, ignored (lenient)%s", hint);
    else
        zc__diag_add(c->d, sev, st, wpath, "unknown key%s", hint);
}

/* A member name with a dot. DeepSpeed never splits names at dots, so
 * {"zero_optimization.stage": 3} is not the stage: it is an unknown key. When
 * the dotted name spells a real path, the message shows the nesting meant;
 * that case is an error even at the top level, where unknown keys only warn,
 * because the value the user asked for would otherwise be silently dropped. */
static void dotted_member(walk_ctx *c, const char *canon, const char *name, const char *cpath,
                          const char *wpath)
{
    bool known = zc__cfg_key_find(cpath) >= 0 || zc__cfg_is_block(cpath) ||
                 zc__cfg_deprecated_find(cpath, NULL) >= 0;
    if (!known) {
        /* "zero_optimization.foo": the block is real, the key is not. */
        const char *dot = strchr(name, '.');
        char head[NAME_MAX_KNOWN + 1];
        snprintf(head, sizeof head, "%.*s", (int)(dot - name), name);
        char hpath[NAME_MAX_KNOWN * 2 + 2];
        join(hpath, sizeof hpath, canon, head);
        known = zc__cfg_is_block(hpath) || (!canon[0] && !strcmp(head, "bfloat16"));
    }
    if (!known) {
        add_unknown(c, canon, wpath, "; DeepSpeed does not split key names at dots");
        return;
    }
    if (!zc__diag_keeps(c->d, ZC_SEV_ERROR)) {
        zc__diag_add(c->d, ZC_SEV_ERROR, ZC_ERR_CONFIG, wpath, "unknown key");
        return;
    }
    /* "a.b.c" -> "a → b → c" and {"a": {"b": {"c": ...}}}. */
    /* Sized for the worst name: every character a dot, 5 bytes each. */
    char arrows[NAME_MAX_KNOWN * 6], nested[NAME_MAX_KNOWN * 6];
    size_t an = 0, nn = 0;
    int depth = 0;
    arrows[0] = nested[0] = 0;
    for (const char *p = name; *p; p++) {
        if (*p == '.') {
            an += (size_t)snprintf(arrows + an, sizeof arrows - an, " \u2192 ");
            nn += (size_t)snprintf(nested + nn, sizeof nested - nn, "\": {\"");
            depth++;
        } else {
            an += (size_t)snprintf(arrows + an, sizeof arrows - an, "%c", *p);
            nn += (size_t)snprintf(nested + nn, sizeof nested - nn, "%c", *p);
        }
    }
    /* One brace per level opened in `nested`, plus the outer one. */
    char closing[NAME_MAX_KNOWN + 2] = "";
    for (int i = 0; i <= depth && i < (int)sizeof closing - 1; i++)
        closing[i] = '}';
    zc__diag_add(c->d, ZC_SEV_ERROR, ZC_ERR_CONFIG, wpath,
                 "unknown key: DeepSpeed does not split key names at dots, so this value would "
                 "be ignored; did you mean %s? Write it nested: {\"%s\": ...%s",
                 arrows, nested, closing);
}

static zc_status walk_member(walk_ctx *c, const char *canon, const char *written,
                             const char *name, const json_t *val, bool skip_params)
{
    zc_cfg_diag *d = c->d;
    size_t nlen = strlen(name);
    if (nlen > NAME_MAX_KNOWN || (nlen > 0 && name[strspn(name, ".")] == 0)) {
        /* Too long to be any key: reported with its whole name, no hint. */
        if (!zc__diag_keeps(d, unknown_sev(c, canon))) {
            add_unknown(c, canon, "", "");
            return ZC_OK;
        }
        size_t plen = strlen(written) + 1 + nlen + 1;
        char *wp;
        ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, plen, "config path", (void **)&wp));
        if (written[0])
            snprintf(wp, plen, "%s.%s", written, name);
        else
            snprintf(wp, plen, "%s", name);
        add_unknown(c, canon, wp, "");
        zc__host_free(NULL, ZC_MEM_OTHER, wp, plen);
        return ZC_OK;
    }
    char cpath[256], wpath[256];
    join(cpath, sizeof cpath, canon, name);
    join(wpath, sizeof wpath, written, name);

    if (strchr(name, '.')) {
        dotted_member(c, canon, name, cpath, wpath);
        return ZC_OK;
    }
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

    if (!canon[0] && zc__cfg_is_ignored_feature(name)) {
        ZC_LOGD("config", "%s: DeepSpeed feature not used by zeroc; ignored", wpath);
        return ZC_OK;
    }
    /* Past the kept-message cap the message is only counted: skip the hint
     * search, which is most of the cost of an unknown key. */
    if (!zc__diag_keeps(d, unknown_sev(c, canon))) {
        add_unknown(c, canon, wpath, "");
        return ZC_OK;
    }
    char hint[200];
    zc__cfg_hint(cpath, hint, sizeof hint);
    if (!canon[0] && !hint[0] && json_is_object(val)) {
        /* An unknown wrapper around top-level keys ("log": {"steps_per_print": 50}). */
        const char *inner;
        json_t *iv;
        json_object_foreach((json_t *)val, inner, iv) {
            if (zc__cfg_key_find(inner) >= 0 || zc__cfg_is_block(inner)) {
                snprintf(hint, sizeof hint,
                         "; its key %.120s belongs at the top level (it is ignored here)", inner);
                break;
            }
        }
    }
    add_unknown(c, canon, wpath, hint);
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
    (void)name;
    if (len > ZC_CFG_MAX_BYTES) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                     "%zu bytes; a config may be at most " ZC_CFG_MAX_BYTES_TEXT " (%zu bytes)",
                     len, ZC_CFG_MAX_BYTES);
        return ZC_ERR_CONFIG;
    }
    size_t values = zc__cfg_count_values(text, len, ZC_CFG_MAX_VALUES);
    if (values > ZC_CFG_MAX_VALUES) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                     "more than %d JSON values; a config may hold at most %d (a DeepSpeed "
                     "config has a few dozen); refused before parsing",
                     ZC_CFG_MAX_VALUES, ZC_CFG_MAX_VALUES);
        return ZC_ERR_CONFIG;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_numeric_overflow &&
            strstr(jerr.text, "integer"))
            zc__cfg_explain_big_integer(text, len, flags, d, &jerr);
        else
            zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                         "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
                         jerr.text);
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
        rc = d->err_status;
        goto out;
    }
    *out = cfg;
    cfg = NULL;
out:
    zc_config_destroy(cfg);
    json_decref(root);
    return rc;
}

ZC_API zc_status zc_config_load_string(zc_config **out, const char *json_text, const char *name,
                                       unsigned flags)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load_string: out is NULL");
    *out = NULL;
    if (!json_text)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load_string: json_text is NULL");
    ZC_CHECK(zc__log_env_check());
    if (!name)
        name = "<string>";
    zc_cfg_diag d = {0};
    /* strnlen: a string far past the limit is refused without walking it all. */
    size_t len = strnlen(json_text, ZC_CFG_MAX_BYTES + 1);
    zc_status rc = zc__config_load_text(out, json_text, len, name, flags, &d);
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

ZC_API zc_status zc_config_load_ex(zc_config **out, const char *json_path, unsigned flags)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load: out is NULL");
    *out = NULL;
    if (!json_path)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_config_load: json_path is NULL");
    ZC_CHECK(zc__log_env_check());
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
