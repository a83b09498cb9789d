/* The typed parse, store and format of one value of the key table
 * (schema.c): the checks every value passes on its way in (type, range,
 * "auto", DeepSpeed's spellings), the store into struct zc_config, the
 * default, the text `zeroc config check` prints, and where a value came
 * from. */
#include "config/schema.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "config/internal.h"

static const struct {
    const char *name;
    int dt;
} dtype_names[] = {
    /* DeepSpeed's spellings (DtypeEnum and get_communication_data_type). */
    {"fp16", ZC_DTYPE_F16},         {"float16", ZC_DTYPE_F16},
    {"half", ZC_DTYPE_F16},         {"torch.float16", ZC_DTYPE_F16},
    {"bf16", ZC_DTYPE_BF16},        {"bfloat16", ZC_DTYPE_BF16},
    {"torch.bfloat16", ZC_DTYPE_BF16}, {"fp32", ZC_DTYPE_F32},
    {"float32", ZC_DTYPE_F32},      {"float", ZC_DTYPE_F32},
    {"torch.float32", ZC_DTYPE_F32},
};

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* Short JSON rendering of a value for messages. */
static void json_brief(const json_t *v, char *buf, size_t cap)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 60) {
        /* Cut on a character boundary: half a UTF-8 sequence would make the
         * whole message invalid UTF-8 (and null in `config check --json`). */
        int cut = 57;
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
            cut--;
        snprintf(buf, cap, "%.*s...", cut, s);
    } else
        snprintf(buf, cap, "%s", s);
    free(s);
}

static void fmt_i64(int64_t v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lld", (long long)v);
}

void zc__cfg_range_text(const zc_cfg_key *k, char *buf, size_t cap)
{
    if (k->type == ZC_KT_F64) {
        /* An unbounded maximum still excludes inf and nan. */
        if (isinf(k->dmax))
            snprintf(buf, cap, "%s%g, inf) (finite)", k->flags & ZC_KF_EXMIN ? "(" : "[",
                     k->dmin);
        else
            snprintf(buf, cap, "%s%g, %.17g]", k->flags & ZC_KF_EXMIN ? "(" : "[", k->dmin,
                     k->dmax);
    } else if (k->type == ZC_KT_I32 || k->type == ZC_KT_I64) {
        snprintf(buf, cap, "[%lld, %lld]", (long long)k->imin, (long long)k->imax);
    } else {
        snprintf(buf, cap, "(no numeric range)");
    }
}

static bool parse_number(const json_t *v, double *out)
{
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return true;
    }
    return false;
}

bool zc__cfg_parse(const zc_cfg_key *k, const json_t *v, zc_cfg_val *out, char *err, size_t cap)
{
    char shown[80];
    memset(out, 0, sizeof(*out));
    json_brief(v, shown, sizeof(shown));
    if (json_is_null(v)) {
        if (k->flags & ZC_KF_NULL || k->type == ZC_KT_IGNORED) {
            out->null = true;
            return true;
        }
        snprintf(err, cap, "null is not allowed here (expected %s)",
                 k->type == ZC_KT_BOOL ? "true or false" : "a value");
        return false;
    }
    switch (k->type) {
    case ZC_KT_IGNORED:
        return true;
    case ZC_KT_BOOL:
    case ZC_KT_TRI:
        if (!json_is_boolean(v)) {
            snprintf(err, cap, "expected true or false, got %s (%s)", json_type_name(v), shown);
            return false;
        }
        out->i = json_is_true(v);
        return true;
    case ZC_KT_I32:
    case ZC_KT_I64: {
        char lo[32], hi[32];
        fmt_i64(k->imin, lo, sizeof lo);
        fmt_i64(k->imax, hi, sizeof hi);
        if (json_is_integer(v)) {
            out->i = json_integer_value(v);
        } else if (k->flags & ZC_KF_SIZE && json_is_string(v)) {
            if (!zc__parse_size(json_string_value(v), &out->i, err, cap))
                return false;
        } else if (json_is_real(v)) {
            /* DeepSpeed configs write sizes as 2e8 or 1.000000e+09: accept a real
             * that is an exact integer in int64 range, nothing else. */
            double d = json_real_value(v);
            if (!(d == floor(d))) {
                snprintf(err, cap, "expected an integer in [%s, %s], got %s", lo, hi, shown);
                return false;
            }
            /* 2^63 itself is out: the cast is defined only below it. */
            if (!(fabs(d) < 9223372036854775808.0)) {
                snprintf(err, cap, "%s is out of range [%s, %s]", shown, lo, hi);
                return false;
            }
            out->i = (int64_t)d;
        } else {
            snprintf(err, cap, "expected an integer in [%s, %s], got %s (%s)", lo, hi,
                     json_type_name(v), shown);
            return false;
        }
        if (out->i < k->imin || out->i > k->imax) {
            snprintf(err, cap, "%s is out of range [%s, %s]", shown, lo, hi);
            return false;
        }
        return true;
    }
    case ZC_KT_F64: {
        double d;
        if (!parse_number(v, &d)) {
            char range[64];
            zc__cfg_range_text(k, range, sizeof range);
            snprintf(err, cap, "expected a number in %s, got %s (%s)", range, json_type_name(v),
                     shown);
            return false;
        }
        bool lo_ok = k->flags & ZC_KF_EXMIN ? d > k->dmin : d >= k->dmin;
        if (!isfinite(d) || !lo_ok || d > k->dmax) {
            char range[64];
            zc__cfg_range_text(k, range, sizeof range);
            snprintf(err, cap, "%s is out of range %s", shown, range);
            return false;
        }
        out->d = d;
        return true;
    }
    case ZC_KT_BETAS: {
        double b[2];
        if (!json_is_array(v) || json_array_size(v) != 2 ||
            !parse_number(json_array_get(v, 0), &b[0]) ||
            !parse_number(json_array_get(v, 1), &b[1])) {
            snprintf(err, cap, "expected [beta1, beta2] (two numbers in [0, 1)), got %s", shown);
            return false;
        }
        for (int i = 0; i < 2; i++) {
            if (!(b[i] >= 0 && b[i] < 1)) {
                snprintf(err, cap, "beta%d = %g is out of range [0, 1)", i + 1, b[i]);
                return false;
            }
        }
        out->d = b[0];
        out->d2 = b[1];
        return true;
    }
    case ZC_KT_STR:
        if (k->flags & ZC_KF_NAME_LIST) {
            size_t n = json_is_array(v) ? json_array_size(v) : 0;
            if (!json_is_array(v) || n > 16) {
                snprintf(err, cap, "expected a list of at most 16 names, got %s (%s)",
                         json_type_name(v), shown);
                return false;
            }
            for (size_t i = 0; i < n; i++) {
                const json_t *it = json_array_get(v, i);
                const char *p = json_is_string(it) ? json_string_value(it) : NULL;
                if (!p || !*p || strchr(p, '\n') || strlen(p) > 64) {
                    snprintf(err, cap, "entry %zu of the list must be a non-empty name of at "
                             "most 64 bytes without a newline", i);
                    return false;
                }
            }
            out->list = v;
            out->null = n == 0;
            return true;
        }
        if ((k->flags & ZC_KF_PATH_LIST) && json_is_array(v)) {
            size_t n = json_array_size(v);
            if (n < 1 || n > 16) {
                snprintf(err, cap, "a list of paths must hold 1 to 16 entries, got %zu", n);
                return false;
            }
            for (size_t i = 0; i < n; i++) {
                const json_t *it = json_array_get(v, i);
                const char *p = json_is_string(it) ? json_string_value(it) : NULL;
                if (!p || !*p || strchr(p, '\n') || strlen(p) > 400) {
                    snprintf(err, cap, "entry %zu of the list must be a non-empty path of at "
                             "most 400 bytes without a newline", i);
                    return false;
                }
            }
            out->list = v;
            return true;
        }
        if (!json_is_string(v)) {
            snprintf(err, cap, "expected a string, got %s (%s)", json_type_name(v), shown);
            return false;
        }
        out->s = json_string_value(v);
        if (!*out->s) {
            snprintf(err, cap, "must not be empty");
            return false;
        }
        if ((k->flags & ZC_KF_PATH_LIST) && strchr(out->s, '\n')) {
            snprintf(err, cap, "a path must not contain a newline");
            return false;
        }
        return true;
    case ZC_KT_ENUM: {
        char names[160] = "";
        for (const zc_cfg_enum *e = k->enums; e->name; e++) {
            if (json_is_string(v) && !strcasecmp(json_string_value(v), e->name)) {
                out->i = e->value;
                return true;
            }
            size_t n = strlen(names);
            snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "", e->name);
        }
        snprintf(err, cap, "%s is not one of: %s", shown, names);
        return false;
    }
    case ZC_KT_DTYPE:
        if (json_is_string(v)) {
            for (size_t i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++) {
                if (!strcmp(json_string_value(v), dtype_names[i].name)) {
                    out->i = dtype_names[i].dt;
                    return true;
                }
            }
        }
        snprintf(err, cap, "%s is not a dtype; use \"fp16\", \"bf16\" or \"fp32\"", shown);
        return false;
    }
    snprintf(err, cap, "internal: unknown key type");
    return false;
}

zc_status zc__cfg_strdup(const char *s, char **out)
{
    size_t n = strlen(s) + 1;
    void *p;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, n, "config string", &p));
    memcpy(p, s, n);
    *out = p;
    return ZC_OK;
}

void zc__cfg_strfree(char *s)
{
    if (s)
        zc__host_free(NULL, ZC_MEM_OTHER, s, strlen(s) + 1);
}

zc_status zc__cfg_store(zc_config *cfg, const zc_cfg_key *k, const zc_cfg_val *v)
{
    char *base = (char *)cfg;
    switch (k->type) {
    case ZC_KT_IGNORED:
        break;
    case ZC_KT_BOOL:
        *(bool *)(base + k->off) = v->null ? (bool)k->idef : v->i != 0;
        break;
    case ZC_KT_TRI:
    case ZC_KT_DTYPE:
        *(int *)(base + k->off) = v->null ? -1 : (int)v->i;
        break;
    case ZC_KT_I32:
        *(int *)(base + k->off) = v->null ? (int)k->idef : (int)v->i;
        break;
    case ZC_KT_I64:
        *(int64_t *)(base + k->off) = v->null ? -1 : v->i;
        break;
    case ZC_KT_F64:
        *(double *)(base + k->off) = v->null ? -1.0 : v->d;
        break;
    case ZC_KT_BETAS:
        *(double *)(base + k->off) = v->d;
        *(double *)(base + k->off2) = v->d2;
        break;
    case ZC_KT_ENUM: {
        int val = v->null ? (int)k->idef : (int)v->i;
        if (k->esz == (int)sizeof(bool))
            *(bool *)(base + k->off) = val != 0;
        else
            *(int *)(base + k->off) = val;
        if (k->off == offsetof(struct zc_config, optimizer.type))
            zc__cfg_optimizer_type_stored(cfg); /* the type's defaults follow it */
        break;
    }
    case ZC_KT_STR: {
        char **slot = (char **)(base + k->off);
        char *copy = NULL;
        if (!v->null && v->list) {
            /* A list of paths is kept as one string joined with '\n' (parse
             * refused newlines inside entries). */
            size_t n = json_array_size(v->list), len = 0;
            for (size_t i = 0; i < n; i++)
                len += strlen(json_string_value(json_array_get(v->list, i))) + 1;
            void *mem;
            ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, len, "config string", &mem));
            copy = mem;
            size_t at = 0;
            for (size_t i = 0; i < n; i++) {
                const char *p = json_string_value(json_array_get(v->list, i));
                size_t l = strlen(p);
                memcpy(copy + at, p, l);
                at += l;
                copy[at++] = i + 1 < n ? '\n' : '\0';
            }
        } else if (!v->null && v->s) {
            ZC_CHECK(zc__cfg_strdup(v->s, &copy));
        }
        zc__cfg_strfree(*slot);
        *slot = copy;
        break;
    }
    }
    return ZC_OK;
}

zc_status zc__cfg_store_default(zc_config *cfg, const zc_cfg_key *k)
{
    zc_cfg_val v = {.i = k->idef, .d = k->ddef, .d2 = k->ddef2};
    char *base = (char *)cfg;
    switch (k->type) {
    case ZC_KT_I64:
        *(int64_t *)(base + k->off) = k->idef;
        return ZC_OK;
    case ZC_KT_F64:
        *(double *)(base + k->off) = k->ddef;
        return ZC_OK;
    case ZC_KT_TRI:
    case ZC_KT_DTYPE:
        *(int *)(base + k->off) = (int)k->idef;
        return ZC_OK;
    case ZC_KT_STR:
        v.null = true;
        break;
    default:
        break;
    }
    return zc__cfg_store(cfg, k, &v);
}

bool zc__cfg_is_default(const zc_config *cfg, const zc_cfg_key *k)
{
    const char *base = (const char *)cfg;
    switch (k->type) {
    case ZC_KT_IGNORED: return true;
    case ZC_KT_BOOL: return *(const bool *)(base + k->off) == (bool)k->idef;
    case ZC_KT_TRI:
    case ZC_KT_DTYPE:
    case ZC_KT_I32: return *(const int *)(base + k->off) == (int)k->idef;
    case ZC_KT_I64: return *(const int64_t *)(base + k->off) == k->idef;
    case ZC_KT_F64: return *(const double *)(base + k->off) == k->ddef;
    case ZC_KT_BETAS:
        return *(const double *)(base + k->off) == k->ddef &&
               *(const double *)(base + k->off2) == k->ddef2;
    case ZC_KT_ENUM:
        if (k->esz == (int)sizeof(bool))
            return *(const bool *)(base + k->off) == (k->idef != 0);
        return *(const int *)(base + k->off) == (int)k->idef;
    case ZC_KT_STR: return *(char *const *)(base + k->off) == NULL;
    }
    return true;
}

/* Shortest text that reads back as the same double. */
static int fmt_double(double d, char *buf, size_t cap)
{
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    /* Keep it a JSON real when it looks like an integer (1 -> 1.0). */
    if (!strpbrk(tmp, ".eEni"))
        strcat(tmp, ".0");
    return snprintf(buf, cap, "%s", tmp);
}

int zc__cfg_format(const zc_config *cfg, const zc_cfg_key *k, char *buf, size_t cap)
{
    const char *base = (const char *)cfg;
    switch (k->type) {
    case ZC_KT_IGNORED: return snprintf(buf, cap, "null");
    case ZC_KT_BOOL: return snprintf(buf, cap, *(const bool *)(base + k->off) ? "true" : "false");
    case ZC_KT_TRI: {
        int t = *(const int *)(base + k->off);
        return snprintf(buf, cap, t < 0 ? "null" : t ? "true" : "false");
    }
    case ZC_KT_DTYPE: {
        int t = *(const int *)(base + k->off);
        return t < 0 ? snprintf(buf, cap, "null")
                     : snprintf(buf, cap, "\"%s\"", zc_dtype_name((zc_dtype)t));
    }
    case ZC_KT_I32: return snprintf(buf, cap, "%d", *(const int *)(base + k->off));
    case ZC_KT_I64: {
        int64_t v = *(const int64_t *)(base + k->off);
        if (v < 0 && k->flags & ZC_KF_NULL)
            return snprintf(buf, cap, "null");
        return snprintf(buf, cap, "%lld", (long long)v);
    }
    case ZC_KT_F64: {
        double d = *(const double *)(base + k->off);
        if (d < 0 && k->flags & ZC_KF_NULL)
            return snprintf(buf, cap, "null");
        return fmt_double(d, buf, cap);
    }
    case ZC_KT_BETAS: {
        char a[40], b[40];
        fmt_double(*(const double *)(base + k->off), a, sizeof a);
        fmt_double(*(const double *)(base + k->off2), b, sizeof b);
        return snprintf(buf, cap, "[%s, %s]", a, b);
    }
    case ZC_KT_ENUM: {
        int val = k->esz == (int)sizeof(bool) ? *(const bool *)(base + k->off)
                                              : *(const int *)(base + k->off);
        if (k->flags & ZC_KF_NULL && val == (int)k->idef && !strcmp(k->path, "scheduler.type"))
            return snprintf(buf, cap, "null");
        return snprintf(buf, cap, "\"%s\"", zc__cfg_enum_name(k, val));
    }
    case ZC_KT_STR: {
        const char *s = *(char *const *)(base + k->off);
        if (!s)
            return snprintf(buf, cap, "null");
        json_t *j = NULL;
        if (((k->flags & ZC_KF_PATH_LIST) && strchr(s, '\n')) ||
            (k->flags & ZC_KF_NAME_LIST)) {
            j = json_array();
            for (const char *p = s; j && p;) {
                const char *nl = strchr(p, '\n');
                json_array_append_new(j, json_stringn(p, nl ? (size_t)(nl - p) : strlen(p)));
                p = nl ? nl + 1 : NULL;
            }
        } else {
            j = json_string(s);
        }
        char *d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
        int n = snprintf(buf, cap, "%s", d ? d : "null");
        free(d);
        json_decref(j);
        return n;
    }
    }
    return snprintf(buf, cap, "null");
}

void zc__cfg_set_origin(zc_config *cfg, int key, zc_cfg_origin o, const char *fmt, ...)
{
    if (!cfg->meta || key < 0)
        return;
    cfg->meta->origin[key] = (uint8_t)o;
    cfg->meta->note[key][0] = 0;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cfg->meta->note[key], ZC_CFG_NOTE_LEN, fmt, ap);
        va_end(ap);
    }
}

int zc__edit_distance(const char *a, const char *b, int cap)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127)
        return cap + 1;
    int prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        int rowmin = cur[0];
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) !=
                                     tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            int m = sub < del ? sub : del;
            cur[j] = m < ins ? m : ins;
            if (cur[j] < rowmin)
                rowmin = cur[j];
        }
        if (rowmin > cap)
            return cap + 1;
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb] > cap ? cap + 1 : prev[lb];
}
