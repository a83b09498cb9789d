/* The checkpoint manifest: JSON in, JSON out (jansson), validated strictly.
 *
 * Numbers that must survive a round trip bit for bit (the loss scale, the
 * checksums) are written so that they do: reals with 17 significant digits,
 * 64-bit checksums as 16 hex digits (a JSON integer is signed). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/regfile.h"
#include "ckpt/dirwrite.h"
#include "ckpt/format.h"

/* The most elements a tensor or a chunk may have, and the largest element
 * offset: sums of two of them (an offset plus a tensor's size, a chunk plus
 * its padding) stay far from overflowing int64_t. */
#define ELEMS_MAX ((int64_t)1 << 50)

static const char *const kind_names[ZC_CK__KINDS] = {"master", "exp_avg", "exp_avg_sq"};

const char *zc__ck_kind_name(int kind)
{
    return kind >= 0 && kind < ZC_CK__KINDS ? kind_names[kind] : "unknown";
}

void zc__ck_file_name(int rank, char out[32]) { snprintf(out, 32, "rank_%05d.bin", rank); }

int64_t zc__ck_padded(int64_t used, int world)
{
    const int64_t q = (int64_t)world * ZC_CK_CHUNK_ALIGN;
    return (used + q - 1) / q * q;
}

void zc__ck_manifest_free(zc_ck_manifest *m)
{
    for (int i = 0; m->params && i < m->nparams; i++)
        free(m->params[i].name);
    free(m->params);
    free(m->chunks);
    free(m->files);
    free(m->entries);
    free(m->first_entry);
    memset(m, 0, sizeof *m);
}

/* ---- write --------------------------------------------------------------- */

static json_t *hex64(uint64_t x)
{
    char b[17];
    snprintf(b, sizeof b, "%016" PRIx64, x);
    return json_string(b);
}

static json_t *to_json(const zc_ck_manifest *m)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(ZC_CK_FORMAT));
    json_object_set_new(root, "version", json_integer(m->version));
    json_object_set_new(root, "tag", json_string(m->tag));
    json_object_set_new(root, "world_size", json_integer(m->world));
    json_object_set_new(root, "stage", json_integer(m->stage));
    json_object_set_new(root, "dtype", json_string(zc_dtype_name(m->dtype)));
    if (m->version >= 3) {
        json_t *sd = json_object();
        for (int k = 0; k < ZC_CK__KINDS; k++)
            json_object_set_new(sd, kind_names[k], json_string(zc_dtype_name(m->kdt[k])));
        json_object_set_new(root, "state_dtypes", sd);
    }
    json_object_set_new(root, "step", json_integer(m->steps));
    json_object_set_new(root, "skipped_steps", json_integer(m->skipped));
    json_object_set_new(root, "config_digest", hex64(m->config_digest));
    json_t *ls = json_object();
    json_object_set_new(ls, "dynamic", json_boolean(m->scaler.dynamic));
    json_object_set_new(ls, "scale", json_real(m->scaler.scale));
    json_object_set_new(ls, "cur_hysteresis", json_integer(m->scaler.cur_hysteresis));
    json_object_set_new(ls, "cur_iter", json_integer(m->scaler.cur_iter));
    json_object_set_new(ls, "last_overflow_iter", json_integer(m->scaler.last_overflow_iter));
    json_object_set_new(root, "loss_scaler", ls);
    json_t *sc = json_object();
    /* DeepSpeed's scheduler state: last_batch_iteration = updates - 1. */
    json_object_set_new(sc, "optimizer_steps", json_integer(m->adam_steps));
    json_object_set_new(sc, "last_batch_iteration", json_integer(m->adam_steps - 1));
    json_object_set_new(sc, "lr", json_real(m->lr));
    json_object_set_new(root, "scheduler", sc);

    json_t *chunks = json_array();
    for (int k = 0; k < m->nchunks; k++) {
        json_t *c = json_object();
        json_object_set_new(c, "first", json_integer(m->chunks[k].first));
        json_object_set_new(c, "count", json_integer(m->chunks[k].count));
        json_object_set_new(c, "used", json_integer(m->chunks[k].used));
        json_array_append_new(chunks, c);
    }
    json_object_set_new(root, "chunks", chunks);

    json_t *params = json_array();
    for (int i = 0; i < m->nparams; i++) {
        const zc_ck_param *p = &m->params[i];
        json_t *o = json_object(), *sh = json_array();
        for (int d = 0; d < p->ndim; d++)
            json_array_append_new(sh, json_integer(p->shape[d]));
        json_object_set_new(o, "name", json_string(p->name));
        json_object_set_new(o, "shape", sh);
        json_object_set_new(o, "dtype", json_string(zc_dtype_name(m->kdt[ZC_CK_MASTER])));
        json_object_set_new(o, "group", json_integer(p->group));
        json_object_set_new(o, "chunk", json_integer(p->chunk));
        json_object_set_new(o, "offset", json_integer(p->offset));
        json_array_append_new(params, o);
    }
    json_object_set_new(root, "params", params);

    json_t *files = json_array();
    for (int f = 0; f < m->nfiles; f++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(m->files[f].name));
        json_object_set_new(o, "rank", json_integer(m->files[f].rank));
        json_object_set_new(o, "bytes", json_integer((json_int_t)m->files[f].bytes));
        json_array_append_new(files, o);
    }
    json_object_set_new(root, "files", files);

    /* Entries as compact rows: [param, kind, file, begin, end, offset, xxh3]. */
    json_t *ents = json_array();
    for (int64_t i = 0; i < m->nentries; i++) {
        const zc_ck_entry *t = &m->entries[i];
        json_t *row = json_array();
        json_array_append_new(row, json_integer(t->param));
        json_array_append_new(row, json_string(zc__ck_kind_name(t->kind)));
        json_array_append_new(row, json_integer(t->file));
        json_array_append_new(row, json_integer(t->begin));
        json_array_append_new(row, json_integer(t->end));
        json_array_append_new(row, json_integer((json_int_t)t->offset));
        json_array_append_new(row, hex64(t->xxh3));
        json_array_append_new(ents, row);
    }
    json_object_set_new(root, "tensors", ents);
    return root;
}

/* write(2) until all is written (fd may be a pipe: no pwrite). */
static int write_all(int fd, const char *buf, size_t size)
{
    while (size) {
        ssize_t w = write(fd, buf, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        size -= (size_t)w;
    }
    return 0;
}

/* The text is made in memory, with its newline, and written in one go:
 * jansson's callback writer hands over every token on its own, a write system
 * call each (a manifest has several per entry). */
zc_status zc__ck_manifest_write(const zc_ck_manifest *m, int fd, const char *path)
{
    json_t *root = to_json(m);
    if (!root)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: building the manifest", path);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    const size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL;
    if (!line) {
        free(text);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: writing the manifest: out of memory", path);
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    errno = 0;
    const int r = write_all(fd, line, n + 1);
    const int err = errno;
    free(line);
    if (r != 0)
        return ZC_ERR(ZC_ERR_IO, "%s: writing the manifest: %s", path,
                      err ? strerror(err) : "no progress");
    return ZC_OK;
}

/* ---- read ---------------------------------------------------------------- */

typedef struct rd {
    const char *path;
    zc_status rc;
} rd;

static zc_status bad(rd *r, const char *what)
{
    if (r->rc == ZC_OK)
        r->rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %s", r->path, what);
    return r->rc;
}

static bool get_int(rd *r, json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char b[200];
        snprintf(b, sizeof b, "\"%s\" must be an integer in [%" PRId64 ", %" PRId64 "]", key, lo,
                 hi);
        bad(r, b);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static bool get_hex64(rd *r, json_t *v, const char *what, uint64_t *out)
{
    const char *s = json_string_value(v);
    char *end = NULL;
    if (!s || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16) {
        char b[160];
        snprintf(b, sizeof b, "%s must be 16 lower-case hex digits", what);
        bad(r, b);
        return false;
    }
    *out = strtoull(s, &end, 16);
    return true;
}

static int kind_of(const char *s)
{
    for (int k = 0; s && k < ZC_CK__KINDS; k++)
        if (!strcmp(s, kind_names[k]))
            return k;
    return -1;
}

static int cmp_entry(const void *a, const void *b)
{
    const zc_ck_entry *x = a, *y = b;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Each kind's stored dtype: "state_dtypes" from version 3 on, fp32 before. */
static void parse_state_dtypes(rd *r, json_t *root, zc_ck_manifest *m)
{
    for (int k = 0; k < ZC_CK__KINDS; k++)
        m->kdt[k] = ZC_DTYPE_F32;
    if (m->version < 3)
        return;
    json_t *sd = json_object_get(root, "state_dtypes");
    if (!json_is_object(sd) || json_object_size(sd) != ZC_CK__KINDS) {
        bad(r, "\"state_dtypes\" must be an object of \"master\", \"exp_avg\" and "
            "\"exp_avg_sq\" (version 3)");
        return;
    }
    for (int k = 0; k < ZC_CK__KINDS; k++) {
        const char *dt = json_string_value(json_object_get(sd, kind_names[k]));
        if (dt && !strcmp(dt, "fp32")) {
            m->kdt[k] = ZC_DTYPE_F32;
        } else if (dt && !strcmp(dt, "bf16")) {
            m->kdt[k] = ZC_DTYPE_BF16;
        } else {
            char b[160];
            snprintf(b, sizeof b, "\"state_dtypes\".\"%s\" must be \"fp32\" or \"bf16\"",
                     kind_names[k]);
            bad(r, b);
            return;
        }
    }
}

static void parse_head(rd *r, json_t *root, zc_ck_manifest *m)
{
    int64_t v;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, ZC_CK_FORMAT)) {
        bad(r, "not a zeroc checkpoint manifest (\"format\" is not \"" ZC_CK_FORMAT "\")");
        return;
    }
    if (!get_int(r, root, "version", 1, INT32_MAX, &v))
        return;
    if (v > ZC_CK_VERSION) {
        char b[160];
        snprintf(b, sizeof b, "format version %" PRId64 " is newer than this zeroc reads (%d); "
                 "use a newer zeroc", v, ZC_CK_VERSION);
        bad(r, b);
        return;
    }
    m->version = (int)v;
    parse_state_dtypes(r, root, m);
    if (r->rc != ZC_OK)
        return;
    const char *tag = json_string_value(json_object_get(root, "tag"));
    if (!tag || !zc__ck_tag_valid(tag)) {
        bad(r, "\"tag\" is missing or not a valid tag");
        return;
    }
    snprintf(m->tag, sizeof m->tag, "%s", tag);
    if (!get_int(r, root, "world_size", 1, ZC_CK_MAX_WORLD, &v))
        return;
    m->world = (int)v;
    if (!get_int(r, root, "stage", 0, 3, &v))
        return;
    m->stage = (int)v;
    const char *dt = json_string_value(json_object_get(root, "dtype"));
    m->dtype = ZC_DTYPE_INVALID;
    for (int d = 0; dt && d < ZC_DTYPE__COUNT; d++)
        if (!strcmp(dt, zc_dtype_name((zc_dtype)d)))
            m->dtype = (zc_dtype)d;
    if (m->dtype != ZC_DTYPE_F32 && m->dtype != ZC_DTYPE_F16 && m->dtype != ZC_DTYPE_BF16) {
        bad(r, "\"dtype\" must be \"fp32\", \"fp16\" or \"bf16\"");
        return;
    }
    if (!get_int(r, root, "step", 0, ZC_STEPS_MAX, &m->steps) ||
        !get_int(r, root, "skipped_steps", 0, m->steps, &m->skipped) ||
        !get_hex64(r, json_object_get(root, "config_digest"), "\"config_digest\"",
                   &m->config_digest))
        return;
    json_t *ls = json_object_get(root, "loss_scaler");
    json_t *sc = json_object_get(root, "scheduler");
    if (!json_is_object(ls) || !json_is_object(sc)) {
        bad(r, "\"loss_scaler\" and \"scheduler\" must be objects");
        return;
    }
    json_t *dyn = json_object_get(ls, "dynamic"), *scale = json_object_get(ls, "scale");
    /* A loss scale multiplies fp32 values: at most FLT_MAX. */
    if (!json_is_boolean(dyn) || !json_is_number(scale) || !(json_number_value(scale) > 0) ||
        json_number_value(scale) > 3.4028234663852886e38) {
        bad(r, "\"loss_scaler\" needs \"dynamic\" (boolean) and \"scale\" (> 0, at most "
            "3.4028234663852886e38)");
        return;
    }
    m->scaler.dynamic = json_is_true(dyn);
    m->scaler.scale = json_number_value(scale);
    if (!get_int(r, ls, "cur_hysteresis", 0, ZC_STEPS_MAX, &m->scaler.cur_hysteresis) ||
        !get_int(r, ls, "cur_iter", 0, ZC_STEPS_MAX, &m->scaler.cur_iter) ||
        !get_int(r, ls, "last_overflow_iter", -1, m->scaler.cur_iter - 1,
                 &m->scaler.last_overflow_iter) ||
        !get_int(r, sc, "optimizer_steps", 0, m->steps, &m->adam_steps))
        return;
    json_t *lr = json_object_get(sc, "lr");
    m->lr = json_is_number(lr) ? json_number_value(lr) : 0.0;
}

static void parse_params(rd *r, json_t *root, zc_ck_manifest *m)
{
    json_t *ps = json_object_get(root, "params"), *cs = json_object_get(root, "chunks");
    if (!json_is_array(ps) || !json_array_size(ps) || json_array_size(ps) > INT32_MAX ||
        !json_is_array(cs) || json_array_size(cs) > json_array_size(ps)) {
        bad(r, "\"params\" must be a non-empty array and \"chunks\" an array of at most as many");
        return;
    }
    m->nparams = (int)json_array_size(ps);
    m->nchunks = (int)json_array_size(cs);
    m->params = calloc((size_t)m->nparams, sizeof *m->params);
    m->chunks = calloc((size_t)m->nchunks + 1, sizeof *m->chunks);
    if (!m->params || !m->chunks) {
        r->rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %d parameters", r->path, m->nparams);
        return;
    }
    for (int i = 0; i < m->nparams; i++) {
        json_t *o = json_array_get(ps, (size_t)i), *sh = json_object_get(o, "shape");
        zc_ck_param *p = &m->params[i];
        const char *name = json_string_value(json_object_get(o, "name"));
        char b[200];
        snprintf(b, sizeof b, "params[%d] needs a \"name\" and a \"shape\" of 1..8 positive "
                 "dimensions", i);
        if (!name || !*name || !json_is_array(sh) || !json_array_size(sh) ||
            json_array_size(sh) > ZC_CK_MAX_NDIM) {
            bad(r, b);
            return;
        }
        p->name = strdup(name);
        if (!p->name) {
            r->rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: parameter names", r->path);
            return;
        }
        p->ndim = (int)json_array_size(sh);
        p->numel = 1;
        for (int d = 0; d < p->ndim; d++) {
            json_t *x = json_array_get(sh, (size_t)d);
            int64_t n = json_is_integer(x) ? json_integer_value(x) : 0;
            if (n <= 0 || __builtin_mul_overflow(p->numel, n, &p->numel) ||
                p->numel > ELEMS_MAX) {
                snprintf(b, sizeof b, "tensor '%s': shape dimension %d is not a positive "
                         "integer, or the tensor is too large", name, d);
                bad(r, b);
                return;
            }
            p->shape[d] = n;
        }
        int64_t v;
        if (!get_int(r, o, "group", 0, INT32_MAX, &v))
            return;
        p->group = (int)v;
        if (!get_int(r, o, "chunk", 0, m->nchunks - 1, &v))
            return;
        p->chunk = (int)v;
        if (!get_int(r, o, "offset", 0, ELEMS_MAX, &p->offset))
            return;
    }
    for (int k = 0; k < m->nchunks; k++) {
        json_t *o = json_array_get(cs, (size_t)k);
        int64_t first, count, used;
        if (!get_int(r, o, "first", 0, m->nparams - 1, &first) ||
            !get_int(r, o, "count", 1, m->nparams - first, &count) ||
            !get_int(r, o, "used", 1, ELEMS_MAX, &used))
            return;
        m->chunks[k] = (zc_ck_chunk){(int)first, (int)count, used};
    }
}

static void parse_files(rd *r, json_t *root, zc_ck_manifest *m)
{
    json_t *fs = json_object_get(root, "files");
    if (!json_is_array(fs)) {
        bad(r, "\"files\" must be an array of one file per rank");
        return;
    }
    if (!json_array_size(fs)) {
        bad(r, "\"files\" is empty; it lists one file per rank");
        return;
    }
    if (json_array_size(fs) > ZC_CK_MAX_WORLD) {
        char b[160];
        snprintf(b, sizeof b, "\"files\" has %zu entries, more than the %d (2^20) ranks a "
                 "checkpoint may have", json_array_size(fs), ZC_CK_MAX_WORLD);
        bad(r, b);
        return;
    }
    m->nfiles = (int)json_array_size(fs);
    m->files = calloc((size_t)m->nfiles, sizeof *m->files);
    if (!m->files) {
        r->rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: files", r->path);
        return;
    }
    for (int f = 0; f < m->nfiles; f++) {
        json_t *o = json_array_get(fs, (size_t)f);
        int64_t rank, bytes;
        if (!get_int(r, o, "rank", 0, INT32_MAX, &rank) ||
            !get_int(r, o, "bytes", 0, INT64_MAX, &bytes))
            return;
        char want[32];
        zc__ck_file_name((int)rank, want);
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name || strcmp(name, want)) {
            char b[160];
            snprintf(b, sizeof b, "files[%d]: the file of rank %d must be named %s", f, (int)rank,
                     want);
            bad(r, b);
            return;
        }
        snprintf(m->files[f].name, sizeof m->files[f].name, "%s", want);
        m->files[f].rank = (int)rank;
        m->files[f].bytes = (uint64_t)bytes;
    }
}

static void parse_entries(rd *r, json_t *root, zc_ck_manifest *m)
{
    json_t *es = json_object_get(root, "tensors");
    if (!json_is_array(es)) {
        bad(r, "\"tensors\" must be an array");
        return;
    }
    m->nentries = (int64_t)json_array_size(es);
    m->entries = calloc((size_t)m->nentries + 1, sizeof *m->entries);
    m->first_entry = calloc((size_t)m->nparams * ZC_CK__KINDS + 1, sizeof *m->first_entry);
    if (!m->entries || !m->first_entry) {
        r->rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %" PRId64 " tensor entries", r->path, m->nentries);
        return;
    }
    char b[256];
    for (int64_t i = 0; i < m->nentries; i++) {
        json_t *row = json_array_get(es, (size_t)i);
        zc_ck_entry *t = &m->entries[i];
        snprintf(b, sizeof b, "tensors[%" PRId64 "] must be [param, kind, file, begin, end, "
                 "offset, xxh3] with values in range", i);
        if (!json_is_array(row) || json_array_size(row) != 7) {
            bad(r, b);
            return;
        }
        int64_t v[6] = {0};
        for (int j = 0; j < 6; j++) {
            json_t *x = json_array_get(row, (size_t)j);
            if (j == 1)
                continue;
            if (!json_is_integer(x) || json_integer_value(x) < 0) {
                bad(r, b);
                return;
            }
            v[j] = json_integer_value(x);
        }
        t->kind = kind_of(json_string_value(json_array_get(row, 1)));
        if (v[0] >= m->nparams || t->kind < 0 || v[2] >= m->nfiles || v[3] >= v[4] ||
            /* 4: the widest stored element, so the end fits whatever the kind */
            v[4] > m->params[v[0]].numel || v[5] > INT64_MAX - 4 * (v[4] - v[3])) {
            bad(r, b);
            return;
        }
        t->param = (int)v[0];
        t->file = (int)v[2];
        t->begin = v[3];
        t->end = v[4];
        t->offset = (uint64_t)v[5];
        snprintf(b, sizeof b, "tensors[%" PRId64 "] checksum", i);
        if (!get_hex64(r, json_array_get(row, 6), b, &t->xxh3))
            return;
    }
    qsort(m->entries, (size_t)m->nentries, sizeof *m->entries, cmp_entry);
    /* Coverage: the entries of each (param, kind) tile [0, numel). */
    int64_t i = 0;
    for (int p = 0; p < m->nparams; p++) {
        for (int k = 0; k < ZC_CK__KINDS; k++) {
            m->first_entry[p * ZC_CK__KINDS + k] = i;
            int64_t at = 0;
            for (; i < m->nentries && m->entries[i].param == p && m->entries[i].kind == k; i++) {
                if (m->entries[i].begin != at)
                    break;
                at = m->entries[i].end;
            }
            if (at != m->params[p].numel) {
                snprintf(b, sizeof b, "tensor '%s' (%s): the entries do not cover its %" PRId64
                         " elements exactly once (a gap or overlap at element %" PRId64 ")",
                         m->params[p].name, kind_names[k], m->params[p].numel, at);
                bad(r, b);
                return;
            }
        }
    }
    m->first_entry[(size_t)m->nparams * ZC_CK__KINDS] = i;
}

/* The file's bytes, as many as fstat said it had (a file that shrank while
 * read is parsed as far as it goes: its JSON is then incomplete). */
static zc_status read_whole(int fd, const struct stat *st, const char *path, char **text,
                            size_t *len)
{
    const size_t size = (size_t)st->st_size;
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %zu bytes for the manifest", path, size);
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return ZC_ERR(ZC_ERR_IO, "%s: cannot read the manifest: %s", path, strerror(errno));
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    *text = buf;
    *len = got;
    return ZC_OK;
}

zc_status zc__ck_manifest_read(const char *path, zc_ck_manifest *m)
{
    return zc__ck_manifest_read_at(AT_FDCWD, path, path, m);
}

zc_status zc__ck_manifest_read_at(int dfd, const char *name, const char *path, zc_ck_manifest *m)
{
    memset(m, 0, sizeof *m);
    json_error_t je;
    int fd;
    struct stat st;
    char why[ZC_CK_PATH_MAX + 128];
    if (zc__open_regular_at(dfd, name, dfd == AT_FDCWD ? 0 : O_NOFOLLOW, path,
                            "a checkpoint manifest (a regular JSON file)", &fd, &st, why,
                            sizeof why) != ZC_OPEN_OK)
        return ZC_ERR(ZC_ERR_IO, "%s", why);
    /* Read whole, then parsed: jansson's reader from a descriptor reads one
     * byte per system call, and the manifest of a large model is large (a
     * row per entry). */
    size_t len = 0;
    char *text = NULL;
    zc_status rc = read_whole(fd, &st, path, &text, &len);
    close(fd);
    if (rc != ZC_OK)
        return rc;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        if (je.line < 0 || je.position == 0)
            return ZC_ERR(ZC_ERR_IO, "%s: cannot read the manifest: %s", path, je.text);
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s:%d:%d: malformed manifest: %s", path, je.line,
                      je.column, je.text);
    }
    rd r = {path, ZC_OK};
    if (!json_is_object(root))
        bad(&r, "the manifest must be a JSON object");
    if (r.rc == ZC_OK)
        parse_head(&r, root, m);
    if (r.rc == ZC_OK)
        parse_params(&r, root, m);
    if (r.rc == ZC_OK)
        parse_files(&r, root, m);
    if (r.rc == ZC_OK)
        parse_entries(&r, root, m);
    json_decref(root);
    if (r.rc == ZC_OK)
        r.rc = zc__ck_manifest_check(m, path);
    if (r.rc != ZC_OK)
        zc__ck_manifest_free(m);
    return r.rc;
}
