/* `zeroc config check FILE [--world N] [--lenient] [--json]`
 *
 * Loads a DeepSpeed config the way the library does, resolves what can be
 * resolved without a program ("auto" that only the training program can
 * answer is reported, not failed), and prints either every error or the
 * effective configuration with the origin of each value. "Valid" is what
 * zc_engine_create will accept: the engine's own rule (src/config/support.c)
 * runs after DeepSpeed's. Exit status: 0 valid, 1 invalid (or unreadable),
 * 2 usage error. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/internal.h"
#include "base/alloc.h"
#include "base/error.h"

int zc__cmd_config(int argc, char **argv);
static json_t *json_text(const char *s);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zeroc config check FILE [--world N] [--lenient] [--json]\n"
            "       zeroc config keys      (the key table as Markdown, for docs/config.md)\n"
            "  Validates a DeepSpeed JSON config and prints the effective values and where\n"
            "  each came from (file, default, alias, auto, derived), or every error.\n"
            "  --world N   data-parallel world size for the batch rules (default: not checked\n"
            "              beyond what the three batch keys imply)\n"
            "  --lenient   unknown keys inside blocks are warnings, not errors\n"
            "  --json      one JSON object: {valid, deepspeed_valid, errors, warnings, notes,\n"
            "              not_listed, program_must_provide, effective}\n"
            "  FILE is a regular file of at most 16 MiB and 65536 JSON values. Valid means\n"
            "  zc_engine_create accepts it (a valid DeepSpeed file the engine refuses, e.g.\n"
            "  with offload, is invalid).\n"
            "Exit status: 0 valid, 1 invalid, 2 usage error.\n");
}

static const char *origin_name(zc_cfg_origin o)
{
    switch (o) {
    case ZC_ORIGIN_DEFAULT: return "default";
    case ZC_ORIGIN_FILE: return "file";
    case ZC_ORIGIN_ALIAS: return "alias";
    case ZC_ORIGIN_SET: return "set";
    case ZC_ORIGIN_AUTO_PENDING:
    case ZC_ORIGIN_AUTO: return "auto";
    case ZC_ORIGIN_DERIVED: return "derived";
    }
    return "default";
}

/* Detail shown next to the origin. */
static void origin_detail(const zc_config *cfg, int k, char *buf, size_t cap)
{
    const zc_cfg_key *key = &zc__cfg_keys[k];
    zc_cfg_origin o = (zc_cfg_origin)cfg->meta->origin[k];
    const char *note = cfg->meta->note[k];
    buf[0] = 0;
    if (o == ZC_ORIGIN_AUTO_PENDING) {
        if (key->flags & ZC_KF_AUTO_MODEL)
            snprintf(buf, cap, "resolved at engine build from the model's hidden size");
        else if (key->flags & ZC_KF_AUTO_PLAN)
            snprintf(buf, cap, "resolved at engine build from max_memory and the machine");
        else
            snprintf(buf, cap, "to be resolved from the program's values");
    } else if (o == ZC_ORIGIN_AUTO) {
        snprintf(buf, cap, "%s", note);
    } else if (o == ZC_ORIGIN_DEFAULT && !strcmp(key->path, "zero_optimization.overlap_comm")) {
        snprintf(buf, cap, "unset: true iff stage 3");
    } else {
        snprintf(buf, cap, "%s", note);
    }
}

/* The value as JSON text, whole (a string key may be long): caller frees. */
static char *value_json(const zc_config *cfg, int k)
{
    if (!strcmp(zc__cfg_keys[k].path, "zero_optimization.overlap_comm"))
        return strdup(zc__cfg_overlap_comm(cfg) ? "true" : "false");
    int n = zc__cfg_format(cfg, &zc__cfg_keys[k], NULL, 0);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf)
        zc__cfg_format(cfg, &zc__cfg_keys[k], buf, (size_t)n + 1);
    return buf;
}

/* The value for the text listing (caller frees). */
static char *value_text(const zc_config *cfg, int k)
{
    char *v = value_json(cfg, k);
    if (!v || cfg->meta->origin[k] != ZC_ORIGIN_AUTO_PENDING)
        return v;
    size_t n = strlen(v) + 32;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "\"auto\" (until then %s)", v);
    free(v);
    return out;
}

/* The value as a JSON value; a string key's value is built from the string
 * itself, never re-parsed from formatted text, so it always round-trips. */
static json_t *value_node(const zc_config *cfg, int k)
{
    const zc_cfg_key *key = &zc__cfg_keys[k];
    if (cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING)
        return json_string("auto");
    if (key->type == ZC_KT_STR) {
        const char *sv = *(char *const *)((const char *)cfg + key->off);
        return sv ? json_text(sv) : json_null();
    }
    char *text = value_json(cfg, k);
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    free(text);
    return v;
}

/* Program-resolved "auto" keys still open after the preview resolve: a
 * template the engine accepts only once the program gives these. */
static int pending_program_keys(const zc_config *cfg)
{
    int n = 0;
    for (int k = 0; cfg && k < zc__cfg_nkeys; k++)
        n += cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING &&
             zc__cfg_keys[k].flags & ZC_KF_AUTO_PROGRAM;
    return n;
}

/* ds_errors: errors before the engine's own check; when it is 0 and there are
 * errors, the file is valid DeepSpeed that this build's engine refuses. The
 * effective configuration is shown for any file DeepSpeed would accept. */
static void print_text(const char *file, int world, const zc_cfg_diag *d, int ds_errors,
                       const zc_config *cfg)
{
    bool valid = d->nerr == 0;
    printf("%s: %s", file,
           valid ? "valid" : ds_errors ? "INVALID" : "INVALID for zeroc (valid DeepSpeed)");
    if (world > 0)
        printf(" (world %d)", world);
    else
        printf(" (world size not given: batch product not checked)");
    printf("\n");
    int pending = valid ? pending_program_keys(cfg) : 0;
    if (pending)
        printf("a template: zc_engine_create refuses it until the program gives the %d "
               "\"auto\" value%s listed under warnings (zc_config_set_program_values)\n",
               pending, pending > 1 ? "s" : "");
    static const char *const heads[] = {"errors", "warnings", "notes"};
    for (int sev = 0; sev < 3; sev++) {
        if (!d->count[sev])
            continue;
        printf("%s:\n", heads[sev]);
        for (int i = 0; i < d->n; i++)
            if (d->v[i].sev == (zc_cfg_sev)sev)
                printf("  %s%s%s\n", d->v[i].path, d->v[i].path[0] ? ": " : "", d->v[i].msg);
        int more = zc__diag_dropped(d, (zc_cfg_sev)sev);
        if (more)
            printf("  \u2026 and %d more %s (only the first %d are kept)\n", more, heads[sev],
                   ZC_CFG_DIAG_KEEP);
    }
    if (ds_errors || !cfg)
        return;
    printf("effective configuration:\n");
    for (int k = 0; k < zc__cfg_nkeys; k++) {
        if (zc__cfg_keys[k].type == ZC_KT_IGNORED)
            continue;
        char det[160];
        char *val = value_text(cfg, k);
        origin_detail(cfg, k, det, sizeof det);
        printf("  %-58s %-24s %s%s%s%s\n", zc__cfg_keys[k].path, val ? val : "?",
               origin_name((zc_cfg_origin)cfg->meta->origin[k]), det[0] ? " (" : "", det,
               det[0] ? ")" : "");
        free(val);
    }
}

/* A JSON string for any C string. Text from the file is UTF-8 (jansson
 * checked it), but a FILE argument, or zc_last_error cut at its buffer size,
 * may not be: each byte that does not start a valid sequence becomes U+FFFD,
 * so the field is never null. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    size_t n = strlen(s);
    char *fixed = malloc(3 * n + 1), *o = fixed;
    if (!fixed)
        return json_null();
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                  : (c & 0xF8) == 0xF0 ? 4 : 0;
        json_t *one = NULL;
        if (len && i + len <= n) {
            char tmp[5] = {0};
            memcpy(tmp, s + i, len);
            one = json_string(tmp); /* validates overlongs and surrogates too */
        }
        if (one) {
            memcpy(o, s + i, len);
            o += len;
            i += len;
            json_decref(one);
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    j = json_string(fixed);
    free(fixed);
    return j ? j : json_null();
}

static int print_json(const char *file, int world, const zc_cfg_diag *d, int ds_errors,
                      const zc_config *cfg)
{
    json_t *root = json_object();
    json_t *lists[3] = {json_array(), json_array(), json_array()};
    json_object_set_new(root, "file", json_text(file));
    json_object_set_new(root, "valid", json_boolean(d->nerr == 0));
    /* valid for DeepSpeed: only the engine's own check (support.c) failed. */
    json_object_set_new(root, "deepspeed_valid", json_boolean(ds_errors == 0));
    json_object_set_new(root, "world", world > 0 ? json_integer(world) : json_null());
    for (int i = 0; i < d->n; i++) {
        json_t *m = json_object();
        json_object_set_new(m, "path", json_text(d->v[i].path));
        json_object_set_new(m, "message", json_text(d->v[i].msg));
        json_array_append_new(lists[d->v[i].sev], m);
    }
    json_object_set_new(root, "errors", lists[0]);
    json_object_set_new(root, "warnings", lists[1]);
    json_object_set_new(root, "notes", lists[2]);
    /* Messages counted but not listed (only ZC_CFG_DIAG_KEEP per kind are kept). */
    json_object_set_new(root, "not_listed",
                        json_pack("{s:i, s:i, s:i}", "errors", zc__diag_dropped(d, ZC_SEV_ERROR),
                                  "warnings", zc__diag_dropped(d, ZC_SEV_WARN), "notes",
                                  zc__diag_dropped(d, ZC_SEV_INFO)));
    json_t *needs = json_array();
    for (int k = 0; cfg && ds_errors == 0 && k < zc__cfg_nkeys; k++)
        if (cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING &&
            zc__cfg_keys[k].flags & ZC_KF_AUTO_PROGRAM)
            json_array_append_new(needs, json_string(zc__cfg_keys[k].path));
    json_object_set_new(root, "program_must_provide", needs);
    json_t *eff = json_object();
    if (cfg && ds_errors == 0) {
        for (int k = 0; k < zc__cfg_nkeys; k++) {
            if (zc__cfg_keys[k].type == ZC_KT_IGNORED)
                continue;
            char det[160];
            json_t *e = json_object(), *v = value_node(cfg, k);
            origin_detail(cfg, k, det, sizeof det);
            json_object_set_new(e, "value", v ? v : json_null());
            json_object_set_new(e, "origin",
                                json_string(origin_name((zc_cfg_origin)cfg->meta->origin[k])));
            if (det[0])
                json_object_set_new(e, "detail", json_text(det));
            json_object_set_new(eff, zc__cfg_keys[k].path, e);
        }
    }
    json_object_set_new(root, "effective", eff);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) {
        fprintf(stderr, "zeroc config check: out of memory formatting JSON\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

static const char *type_name(const zc_cfg_key *k)
{
    switch (k->type) {
    case ZC_KT_BOOL: return "bool";
    case ZC_KT_TRI: return "bool or null";
    case ZC_KT_I32: return "integer";
    case ZC_KT_I64: return k->flags & ZC_KF_SIZE ? "size (bytes or \"44GiB\")" : "integer";
    case ZC_KT_F64: return "number";
    case ZC_KT_STR: return k->flags & ZC_KF_NAME_LIST ? "list of strings" : "string";
    case ZC_KT_ENUM: return "string";
    case ZC_KT_BETAS: return "[number, number]";
    case ZC_KT_DTYPE: return "dtype";
    case ZC_KT_IGNORED: return "any";
    }
    return "?";
}

static void range_text(const zc_cfg_key *k, char *buf, size_t cap)
{
    buf[0] = 0;
    if (k->type == ZC_KT_I32 || k->type == ZC_KT_I64) {
        if (k->imax == INT64_MAX)
            snprintf(buf, cap, ">= %lld", (long long)k->imin);
        else
            snprintf(buf, cap, "%lld..%lld", (long long)k->imin, (long long)k->imax);
    } else if (k->type == ZC_KT_F64) {
        if (k->dmax == INFINITY)
            snprintf(buf, cap, "%s %g", k->flags & ZC_KF_EXMIN ? ">" : ">=", k->dmin);
        else
            snprintf(buf, cap, "%g..%g", k->dmin, k->dmax);
    } else if (k->type == ZC_KT_BETAS) {
        snprintf(buf, cap, "each in [0, 1)");
    } else if (k->type == ZC_KT_ENUM) {
        for (const zc_cfg_enum *e = k->enums; e->name; e++) {
            size_t n = strlen(buf);
            snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", e->name);
        }
    } else if (k->type == ZC_KT_DTYPE) {
        snprintf(buf, cap, "fp16, bf16, fp32");
    }
}

/* The key table as Markdown: docs/config.md embeds this output. */
static int keys_markdown(void)
{
    zc_config *cfg;
    if (zc_config_create(&cfg) != ZC_OK) {
        fprintf(stderr, "zeroc config keys: %s\n", zc_last_error());
        return 1;
    }
    printf("| key | type | default | allowed | \"auto\" | meaning |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        const zc_cfg_key *k = &zc__cfg_keys[i];
        char def[96] = "", range[160], name[200];
        if (k->type != ZC_KT_IGNORED)
            zc_config_get(cfg, k->path, def, sizeof def);
        range_text(k, range, sizeof range);
        if (k->alias)
            snprintf(name, sizeof name, "`%s` (also `%s`)", k->path, strrchr(k->alias, '.') + 1);
        else
            snprintf(name, sizeof name, "`%s`", k->path);
        const char *aut = k->type == ZC_KT_IGNORED ? "accepted, unused"
                          : k->flags & ZC_KF_AUTO_MODEL ? "model (engine build)"
                          : k->flags & ZC_KF_MUST_RESOLVE ? "program (required)"
                          : k->flags & ZC_KF_AUTO_PROGRAM ? "program, else default"
                                                          : "default";
        printf("| %s | %s | %s%s%s | %s | %s | %s |\n", name, type_name(k), def[0] ? "`" : "",
               def, def[0] ? "`" : "", range, aut, k->doc);
    }
    zc_config_destroy(cfg);
    return 0;
}

static int check(const char *file, int world, bool lenient, bool as_json)
{
    char *text = NULL;
    size_t len = 0;
    if (zc__cfg_read_file(file, &text, &len) != ZC_OK) {
        if (as_json) {
            zc_cfg_diag d = {0};
            zc__diag_add(&d, ZC_SEV_ERROR, ZC_ERR_IO, "", "%s", zc_last_error());
            print_json(file, world, &d, d.nerr, NULL);
            zc__diag_free(&d);
        } else {
            fprintf(stderr, "zeroc config check: %s\n", zc_last_error());
        }
        return 1;
    }
    zc_cfg_diag d = {0};
    zc_config *cfg = NULL;
    zc_status rc = zc__config_load_text(&cfg, text, len, file, lenient ? ZC_CONFIG_LENIENT : 0, &d);
    if (rc == ZC_OK)
        rc = zc__cfg_resolve(cfg, world, true, &d);
    if (rc != ZC_OK && d.nerr == 0)
        zc__diag_add(&d, ZC_SEV_ERROR, rc, "", "%s", zc_last_error());
    /* What zc_engine_create would refuse, by the engine's own rule. */
    int ds_errors = d.nerr;
    if (rc == ZC_OK && ds_errors == 0)
        zc__cfg_engine_support(cfg, &d);
    int out = d.nerr ? 1 : 0;
    if (as_json) {
        if (print_json(file, world, &d, ds_errors, cfg))
            out = 1;
    } else {
        print_text(file, world, &d, ds_errors, cfg);
    }
    zc_config_destroy(cfg);
    zc__diag_free(&d);
    zc__host_free(NULL, ZC_MEM_OTHER, text, len + 1);
    return out;
}

int zc__cmd_config(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "keys"))
        return keys_markdown();
    if (strcmp(argv[1], "check")) {
        fprintf(stderr, "zeroc config: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    const char *file = NULL;
    int world = 0;
    bool lenient = false, as_json = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--lenient")) {
            lenient = true;
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (!strcmp(a, "--world") || !strncmp(a, "--world=", 8)) {
            const char *v = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            errno = 0;
            long w = v ? strtol(v, &end, 10) : 0;
            if (!v || !*v || *end || errno || w <= 0 || w > INT_MAX) {
                fprintf(stderr, "zeroc config check: --world needs a positive integer, got '%s'\n",
                        v ? v : "(nothing)");
                return 2;
            }
            world = (int)w;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zeroc config check: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (file) {
            fprintf(stderr, "zeroc config check: one FILE only (got '%s' and '%s')\n", file, a);
            return 2;
        } else {
            file = a;
        }
    }
    if (!file) {
        fprintf(stderr, "zeroc config check: FILE is missing\n");
        usage(stderr);
        return 2;
    }
    return check(file, world, lenient, as_json);
}
