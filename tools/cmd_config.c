/* `zeroc config check FILE [--world N] [--lenient] [--json]`
 *
 * Loads a DeepSpeed config the way the library does, resolves what can be
 * resolved without a program ("auto" that only the training program can
 * answer is reported, not failed), and prints either every error or the
 * effective configuration with the origin of each value. Exit status: 0
 * valid, 1 invalid (or unreadable), 2 usage error. */
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
            "  --json      one JSON object: {valid, errors, warnings, notes, effective}\n"
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

static void value_text(const zc_config *cfg, int k, char *buf, size_t cap)
{
    if (cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING) {
        char v[128];
        zc__cfg_format(cfg, &zc__cfg_keys[k], v, sizeof v);
        snprintf(buf, cap, "\"auto\" (until then %s)", v);
        return;
    }
    if (!strcmp(zc__cfg_keys[k].path, "zero_optimization.overlap_comm")) {
        snprintf(buf, cap, "%s", zc__cfg_overlap_comm(cfg) ? "true" : "false");
        return;
    }
    zc__cfg_format(cfg, &zc__cfg_keys[k], buf, cap);
}

static void print_text(const char *file, int world, const zc_cfg_diag *d, const zc_config *cfg)
{
    bool valid = d->nerr == 0;
    printf("%s: %s", file, valid ? "valid" : "INVALID");
    if (world > 0)
        printf(" (world %d)", world);
    else
        printf(" (world size not given: batch product not checked)");
    printf("\n");
    static const char *const heads[] = {"errors", "warnings", "notes"};
    for (int sev = 0; sev < 3; sev++) {
        int n = 0;
        for (int i = 0; i < d->n; i++)
            n += d->v[i].sev == (zc_cfg_sev)sev;
        if (!n)
            continue;
        printf("%s:\n", heads[sev]);
        for (int i = 0; i < d->n; i++)
            if (d->v[i].sev == (zc_cfg_sev)sev)
                printf("  %s%s%s\n", d->v[i].path, d->v[i].path[0] ? ": " : "", d->v[i].msg);
    }
    if (!valid || !cfg)
        return;
    printf("effective configuration:\n");
    for (int k = 0; k < zc__cfg_nkeys; k++) {
        if (zc__cfg_keys[k].type == ZC_KT_IGNORED)
            continue;
        char val[160], det[160];
        value_text(cfg, k, val, sizeof val);
        origin_detail(cfg, k, det, sizeof det);
        printf("  %-58s %-24s %s%s%s%s\n", zc__cfg_keys[k].path, val,
               origin_name((zc_cfg_origin)cfg->meta->origin[k]), det[0] ? " (" : "", det,
               det[0] ? ")" : "");
    }
}

static int print_json(const char *file, int world, const zc_cfg_diag *d, const zc_config *cfg)
{
    json_t *root = json_object();
    json_t *lists[3] = {json_array(), json_array(), json_array()};
    json_object_set_new(root, "file", json_string(file));
    json_object_set_new(root, "valid", json_boolean(d->nerr == 0));
    json_object_set_new(root, "world", world > 0 ? json_integer(world) : json_null());
    for (int i = 0; i < d->n; i++) {
        json_t *m = json_object();
        json_object_set_new(m, "path", json_string(d->v[i].path));
        json_object_set_new(m, "message", json_string(d->v[i].msg));
        json_array_append_new(lists[d->v[i].sev], m);
    }
    json_object_set_new(root, "errors", lists[0]);
    json_object_set_new(root, "warnings", lists[1]);
    json_object_set_new(root, "notes", lists[2]);
    json_t *eff = json_object();
    if (cfg && d->nerr == 0) {
        for (int k = 0; k < zc__cfg_nkeys; k++) {
            if (zc__cfg_keys[k].type == ZC_KT_IGNORED)
                continue;
            char val[160], det[160];
            json_t *e = json_object(), *v;
            if (cfg->meta->origin[k] == ZC_ORIGIN_AUTO_PENDING) {
                v = json_string("auto");
            } else {
                value_text(cfg, k, val, sizeof val);
                v = json_loads(val, JSON_DECODE_ANY, NULL);
            }
            origin_detail(cfg, k, det, sizeof det);
            json_object_set_new(e, "value", v ? v : json_null());
            json_object_set_new(e, "origin",
                                json_string(origin_name((zc_cfg_origin)cfg->meta->origin[k])));
            if (det[0])
                json_object_set_new(e, "detail", json_string(det));
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
    case ZC_KT_I32:
    case ZC_KT_I64: return "integer";
    case ZC_KT_F64: return "number";
    case ZC_KT_STR: return "string";
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
            print_json(file, world, &d, NULL);
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
    int out = d.nerr ? 1 : 0;
    if (as_json) {
        if (print_json(file, world, &d, cfg))
            out = 1;
    } else {
        print_text(file, world, &d, cfg);
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
