/* zc_checkpoint_export_fd: the full model as a safetensors file.
 *
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets":
 * [begin, end)}} (offsets relative to the data, which follows; tensors back to
 * back in header order), padded with spaces to a multiple of 8 as the
 * reference writer does. Values come from the master, one bounded block at a
 * time: an fp32 master converted with round-to-nearest-even, a bf16 master
 * (bf16.bf16_master_weights_and_grads) copied as it is into bf16 and widened
 * exactly for fp32 (fp16: rounded once from that exact value). */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "ckpt/export.h"
#include "ckpt/fsio.h"
#include "ckpt/source.h"

#define BLOCK ((int64_t)1 << 20) /* elements per read */

static const char *st_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 ? "F32" : dt == ZC_DTYPE_BF16 ? "BF16" : "F16";
}

static zc_status header(const zc_ck_manifest *m, const zc_ck_export_item *items, int n,
                        zc_dtype dt, char **out, size_t *len)
{
    const size_t esz = zc_dtype_size(dt);
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const zc_ck_param *p = &m->params[items[i].param];
        const char *name = items[i].name;
        if (!strcmp(name, "__metadata__")) {
            json_decref(root);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "tensor '__metadata__': the name is reserved by "
                          "the safetensors format");
        }
        /* A JSON object keeps one value per key: a second tensor of the same
         * name would replace the first in the header while its bytes stay
         * in the data (the manifest's validation refuses it already). */
        if (json_object_get(root, name)) {
            json_decref(root);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "tensor name '%s' appears twice: a safetensors "
                          "file names each tensor once", name);
        }
        if (items[i].transposed && p->ndim != 2) {
            json_decref(root);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "tensor '%s' (parameter '%s'): only a 2-D "
                          "parameter is written transposed", name, p->name);
        }
        json_t *t = json_object(), *sh = json_array(), *off = json_array();
        for (int d = 0; d < p->ndim; d++)
            json_array_append_new(
                sh, json_integer(p->shape[items[i].transposed ? p->ndim - 1 - d : d]));
        json_array_append_new(off, json_integer((json_int_t)at));
        at += (uint64_t)p->numel * esz;
        json_array_append_new(off, json_integer((json_int_t)at));
        json_object_set_new(t, "dtype", json_string(st_dtype(dt)));
        json_object_set_new(t, "shape", sh);
        json_object_set_new(t, "data_offsets", off);
        json_object_set_new(root, name, t);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors header");
    const size_t hn = strlen(text), padded = (hn + 7) / 8 * 8;
    *out = malloc(8 + padded);
    if (!*out) {
        free(text);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors header");
    }
    uint64_t le = padded; /* little-endian hosts only (x86-64, aarch64) */
    memcpy(*out, &le, 8);
    memcpy(*out + 8, text, hn);
    memset(*out + 8 + hn, ' ', padded - hn);
    free(text);
    *len = 8 + padded;
    return ZC_OK;
}

/* Converted in place: element j's narrow value lands at or before element
 * j's float, which is read first. */
static void narrow(float *buf, zc_dtype dt, int64_t n)
{
    for (int64_t j = 0; dt != ZC_DTYPE_F32 && j < n; j++)
        zc__store_f32(buf, dt, (size_t)j, buf[j]);
}

/* Elements [a, b) of parameter pi's master into buf ((b - a) floats of
 * room) as dtype dt. A bf16 master asked for in bf16 is the stored bytes:
 * no trip through fp32, which would make every NaN the canonical one. */
static zc_status read_master(zc_ck_source *s, int pi, int64_t a, int64_t b, zc_dtype dt,
                             float *buf)
{
    if (s->m.kdt[ZC_CK_MASTER] == ZC_DTYPE_BF16 && dt == ZC_DTYPE_BF16)
        return zc__ck_source_read(s, pi, ZC_CK_MASTER, a, b, buf);
    ZC_CHECK(zc__ck_source_read_f32(s, pi, ZC_CK_MASTER, a, b, buf));
    narrow(buf, dt, b - a);
    return ZC_OK;
}

/* A transposed tensor: the whole parameter, then its transpose written. */
static zc_status write_transposed(zc_ck_source *s, const zc_ck_param *p, int pi, zc_dtype dt,
                                  int fd, uint64_t at)
{
    const size_t n = (size_t)p->numel, esz = zc_dtype_size(dt);
    float *a = malloc(n * sizeof(float));
    char *t = malloc(n * esz);
    zc_status rc = a && t ? ZC_OK
                          : ZC_ERR(ZC_ERR_NO_MEMORY, "export: parameter '%s' (%zu elements)",
                                   p->name, n);
    if (rc == ZC_OK)
        rc = read_master(s, pi, 0, p->numel, dt, a);
    if (rc == ZC_OK) {
        /* Elements of esz bytes moved as they are: converted already. */
        const char *src = (const char *)a;
        const int64_t R = p->shape[0], C = p->shape[1];
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++)
                memcpy(t + (size_t)(j * R + i) * esz, src + (size_t)(i * C + j) * esz, esz);
        rc = zc__ck_pwrite(fd, t, n * esz, at, "safetensors output");
    }
    free(a);
    free(t);
    return rc;
}

zc_status zc__ck_export_items(zc_ck_source *s, const zc_ck_export_item *items, int n,
                              zc_dtype dtype, int fd)
{
    const size_t esz = zc_dtype_size(dtype);
    char *head = NULL;
    size_t hlen = 0;
    float *buf = malloc((size_t)BLOCK * sizeof(float));
    zc_status rc = buf ? header(&s->m, items, n, dtype, &head, &hlen)
                       : ZC_ERR(ZC_ERR_NO_MEMORY, "export buffer");
    if (rc == ZC_OK)
        rc = zc__ck_pwrite(fd, head, hlen, 0, "safetensors output");
    uint64_t at = hlen;
    for (int i = 0; i < n && rc == ZC_OK; i++) {
        const zc_ck_param *p = &s->m.params[items[i].param];
        if (items[i].transposed) {
            rc = write_transposed(s, p, items[i].param, dtype, fd, at);
            at += (uint64_t)p->numel * esz;
            continue;
        }
        for (int64_t a = 0; a < p->numel && rc == ZC_OK; a += BLOCK) {
            const int64_t b = a + BLOCK < p->numel ? a + BLOCK : p->numel;
            rc = read_master(s, items[i].param, a, b, dtype, buf);
            if (rc != ZC_OK)
                break;
            rc = zc__ck_pwrite(fd, buf, (size_t)(b - a) * esz, at, "safetensors output");
            at += (uint64_t)(b - a) * esz;
        }
    }
    free(head);
    free(buf);
    return rc;
}

ZC_API zc_status zc_checkpoint_export_fd(const char *dir, const char *tag, int fd, zc_dtype dtype)
{
    zc__error_clear();
    if (!dir || !*dir || fd < 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_export_fd: dir and fd are needed");
    if (dtype != ZC_DTYPE_F32 && dtype != ZC_DTYPE_BF16 && dtype != ZC_DTYPE_F16)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_export_fd: dtype %s: use fp32, bf16 "
                      "or fp16", zc_dtype_name(dtype));
    zc_ck_source s;
    ZC_CHECK(zc__ck_source_open(&s, dir, tag));
    zc_ck_export_item *items = malloc((size_t)(s.m.nparams ? s.m.nparams : 1) * sizeof *items);
    zc_status rc = items ? ZC_OK : ZC_ERR(ZC_ERR_NO_MEMORY, "export: %d tensors", s.m.nparams);
    for (int i = 0; items && i < s.m.nparams; i++)
        items[i] = (zc_ck_export_item){i, s.m.params[i].name, false};
    if (rc == ZC_OK)
        rc = zc__ck_export_items(&s, items, s.m.nparams, dtype, fd);
    free(items);
    zc__ck_source_close(&s);
    return rc;
}
