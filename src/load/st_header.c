/* One safetensors file's header, read and validated (load.h).
 *
 * The format: an 8-byte little-endian length N, N bytes of UTF-8 JSON that
 * is one object (right-padded with spaces), then the data. Each key but
 * "__metadata__" (an object of strings) names a tensor:
 * {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]},
 * the offsets relative to the data. As the reference implementation
 * requires, the tensors tile the data: sorted by offset, each begins where
 * the one before ends, the first at 0, and the file ends with the last. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/regfile.h"
#include "load/st_internal.h"

/* The safetensors dtypes, with their width in bits (F4 and the F6 formats
 * pack below a byte). Only F32, BF16 and F16 load into parameters; the rest
 * are known, so a file holding them is valid and those tensors can be
 * skipped. */
static const struct {
    const char *name;
    int bits;
    zc_dtype dt;
} dtypes[] = {
    {"F32", 32, ZC_DTYPE_F32}, {"BF16", 16, ZC_DTYPE_BF16}, {"F16", 16, ZC_DTYPE_F16},
    {"F64", 64, (zc_dtype)-1}, {"I64", 64, (zc_dtype)-1}, {"U64", 64, (zc_dtype)-1},
    {"C64", 64, (zc_dtype)-1}, {"I32", 32, (zc_dtype)-1}, {"U32", 32, (zc_dtype)-1},
    {"I16", 16, (zc_dtype)-1}, {"U16", 16, (zc_dtype)-1}, {"I8", 8, (zc_dtype)-1},
    {"U8", 8, (zc_dtype)-1}, {"BOOL", 8, (zc_dtype)-1}, {"F8_E5M2", 8, (zc_dtype)-1},
    {"F8_E4M3", 8, (zc_dtype)-1}, {"F8_E8M0", 8, (zc_dtype)-1},
    {"F8_E4M3FNUZ", 8, (zc_dtype)-1}, {"F8_E5M2FNUZ", 8, (zc_dtype)-1},
    {"F6_E2M3", 6, (zc_dtype)-1}, {"F6_E3M2", 6, (zc_dtype)-1}, {"F4", 4, (zc_dtype)-1},
};

static zc_status bad(const char *path, const char *tensor, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static zc_status bad(const char *path, const char *tensor, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (tensor)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s': %s", path, tensor, why);
    return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %s", path, why);
}

static zc_status grow(zc_st_set *set)
{
    if (set->ntensors % 64)
        return ZC_OK;
    zc_st_tensor *t = realloc(set->tensors, (size_t)(set->ntensors + 64) * sizeof *t);
    if (!t)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors: a table of %" PRId64 " tensors",
                      set->ntensors + 64);
    set->tensors = t;
    return ZC_OK;
}

/* A JSON integer in [0, max], or false. */
static bool uint_of(const json_t *v, uint64_t max, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) > max)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* One tensor entry into t (name set by the caller); offsets still relative. */
static zc_status entry(const char *path, const char *name, const json_t *v, zc_st_tensor *t)
{
    if (!json_is_object(v))
        return bad(path, name, "the header's entry is not an object");
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
    const json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off))
        return bad(path, name, "the entry needs \"dtype\" (a string), \"shape\" and "
                   "\"data_offsets\" (arrays)");
    int bits = 0;
    t->dtype = (zc_dtype)-1;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0] && !bits; i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            bits = dtypes[i].bits;
            t->dtype = dtypes[i].dt;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[i].name);
        }
    if (!bits)
        return bad(path, name, "unknown dtype '%.32s' (safetensors names F32, BF16, F16, "
                   "F64, I64, ... ; F32, BF16 and F16 load)", json_string_value(dt));
    if (json_array_size(sh) > ZC_ST_MAX_NDIM)
        return bad(path, name, "%zu dimensions, more than %d", json_array_size(sh),
                   ZC_ST_MAX_NDIM);
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t n;
        if (!uint_of(json_array_get(sh, (size_t)d), (uint64_t)INT64_MAX, &n))
            return bad(path, name, "shape[%d] is not a whole number >= 0", d);
        t->shape[d] = (int64_t)n;
        if (__builtin_mul_overflow(numel, n, &numel) || numel > (uint64_t)INT64_MAX / 8)
            return bad(path, name, "the shape has more than 2^60 elements");
    }
    t->numel = (int64_t)numel;
    uint64_t b, e;
    if (json_array_size(off) != 2 || !uint_of(json_array_get(off, 0), UINT64_MAX / 2, &b) ||
        !uint_of(json_array_get(off, 1), UINT64_MAX / 2, &e) || e < b)
        return bad(path, name, "data_offsets must be [begin, end], whole numbers with "
                   "begin <= end");
    const uint64_t want = (numel * (uint64_t)bits + 7) / 8;
    if (e - b != want)
        return bad(path, name, "data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64
                   " bytes; %s of %" PRIu64 " elements take %" PRIu64, b, e, e - b,
                   t->dtype_name, numel, want);
    t->begin = b;
    t->end = e;
    return ZC_OK;
}

static zc_status metadata(const char *path, const json_t *v)
{
    if (json_is_null(v))
        return ZC_OK;
    if (!json_is_object(v))
        return bad(path, NULL, "\"__metadata__\" is not an object of strings");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) if (!json_is_string(x)) return bad(
        path, NULL, "\"__metadata__\" value of '%.64s' is not a string", k);
    return ZC_OK;
}

static int by_begin(const void *a, const void *b)
{
    const zc_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors [first, set->ntensors) of one file tile its data, and the
 * file ends with them. Sorts them by offset and makes offsets absolute. */
static zc_status tile(zc_st_set *set, int64_t first, const zc_st_file *f)
{
    zc_st_tensor *t = set->tensors + first;
    const int64_t n = set->ntensors - first;
    qsort(t, (size_t)n, sizeof *t, by_begin);
    uint64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t[i].begin < at)
            return bad(f->path, t[i].name, "its bytes [%" PRIu64 ", %" PRIu64 ") overlap "
                       "tensor '%s'", t[i].begin, t[i].end, t[i - 1].name);
        if (t[i].begin > at)
            return bad(f->path, t[i].name, "%" PRIu64 " bytes of the data before it belong "
                       "to no tensor (data_offsets must tile the data)", t[i].begin - at);
        at = t[i].end;
    }
    const uint64_t data = f->bytes - f->header_bytes;
    if (at > data)
        return bad(f->path, n ? t[n - 1].name : NULL, "truncated: the tensors need %" PRIu64
                   " bytes of data after the %" PRIu64 "-byte header, the file holds %" PRIu64,
                   at, f->header_bytes, data);
    if (at < data)
        return bad(f->path, NULL, "%" PRIu64 " bytes after the last tensor's data "
                   "(data_offsets must end where the file does)", data - at);
    for (int64_t i = 0; i < n; i++) {
        t[i].begin += f->header_bytes;
        t[i].end += f->header_bytes;
    }
    return ZC_OK;
}

/* Reads len bytes at off, all of them. */
static zc_status read_at(int fd, const char *path, void *buf, size_t len, uint64_t off)
{
    for (size_t done = 0; done < len;) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ZC_ERR(ZC_ERR_IO, "%s: reading the header: %s", path,
                          r < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)r;
    }
    return ZC_OK;
}

zc_status zc__st_read_header(zc_st_set *set, int fi)
{
    zc_st_file *f = &set->files[fi];
    char err[600];
    int fd = -1;
    struct stat st;
    if (zc__open_regular(f->path, 0, "a safetensors file", &fd, &st, err, sizeof err) !=
        ZC_OPEN_OK)
        return ZC_ERR(ZC_ERR_IO, "%s", err);
    f->bytes = (uint64_t)st.st_size;
    unsigned char len8[8];
    char *text = NULL;
    json_t *root = NULL;
    zc_status rc = ZC_OK;
    if (f->bytes < 8) {
        rc = bad(f->path, NULL, "%" PRIu64 " bytes: shorter than the 8-byte header length "
                 "(not a safetensors file)", f->bytes);
        goto out;
    }
    ZC_CHECK_GOTO(read_at(fd, f->path, len8, 8, 0), rc, out);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n > f->bytes - 8) {
        rc = bad(f->path, NULL, "its header length says %" PRIu64 " bytes, more than the file's "
                 "%" PRIu64 " after the length (not a safetensors file, or truncated)", n,
                 f->bytes - 8);
        goto out;
    }
    if (n < 2 || n > ZC_ST_HEADER_MAX) {
        rc = bad(f->path, NULL, "a header of %" PRIu64 " bytes (safetensors allows 2 to %llu)",
                 n, (unsigned long long)ZC_ST_HEADER_MAX);
        goto out;
    }
    f->header_bytes = 8 + n;
    text = malloc((size_t)n);
    if (!text) {
        rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: a header of %" PRIu64 " bytes", f->path, n);
        goto out;
    }
    ZC_CHECK_GOTO(read_at(fd, f->path, text, (size_t)n, 8), rc, out);
    json_error_t je;
    root = text[0] == '{' ? json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!root || !json_is_object(root)) {
        rc = bad(f->path, NULL, "the header is not one JSON object%s%s", root || text[0] != '{'
                 ? "" : ": ", root || text[0] != '{' ? "" : je.text);
        goto out;
    }
    const int64_t first = set->ntensors;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "__metadata__")) {
            ZC_CHECK_GOTO(metadata(f->path, v), rc, out);
            continue;
        }
        ZC_CHECK_GOTO(grow(set), rc, out);
        zc_st_tensor *t = &set->tensors[set->ntensors];
        memset(t, 0, sizeof *t);
        t->file = fi;
        ZC_CHECK_GOTO(entry(f->path, key, v, t), rc, out);
        if (!(t->name = strdup(key))) {
            rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: tensor names", f->path);
            goto out;
        }
        set->ntensors++;
    }
    rc = tile(set, first, f);
out:
    json_decref(root);
    free(text);
    close(fd);
    return rc;
}
