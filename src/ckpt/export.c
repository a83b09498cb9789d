/* zc_checkpoint_export_fd: the full model as a safetensors file.
 *
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets":
 * [begin, end)}} (offsets relative to the data, which follows; tensors back to
 * back in header order), padded with spaces to a multiple of 8 as the
 * reference writer does. Values come from the fp32 master, one bounded block
 * at a time, converted with round-to-nearest-even. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "ckpt/fsio.h"
#include "ckpt/source.h"

#define BLOCK ((int64_t)1 << 20) /* elements per read */

static const char *st_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 ? "F32" : dt == ZC_DTYPE_BF16 ? "BF16" : "F16";
}

static zc_status header(const zc_ck_manifest *m, zc_dtype dt, char **out, size_t *len)
{
    const size_t esz = zc_dtype_size(dt);
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < m->nparams; i++) {
        const zc_ck_param *p = &m->params[i];
        if (!strcmp(p->name, "__metadata__")) {
            json_decref(root);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "tensor '__metadata__': the name is reserved by "
                          "the safetensors format");
        }
        /* A JSON object keeps one value per key: a second tensor of the same
         * name would replace the first in the header while its bytes stay
         * in the data (the manifest's validation refuses it already). */
        if (json_object_get(root, p->name)) {
            json_decref(root);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "tensor name '%s' appears twice: a safetensors "
                          "file names each tensor once", p->name);
        }
        json_t *t = json_object(), *sh = json_array(), *off = json_array();
        for (int d = 0; d < p->ndim; d++)
            json_array_append_new(sh, json_integer(p->shape[d]));
        json_array_append_new(off, json_integer((json_int_t)at));
        at += (uint64_t)p->numel * esz;
        json_array_append_new(off, json_integer((json_int_t)at));
        json_object_set_new(t, "dtype", json_string(st_dtype(dt)));
        json_object_set_new(t, "shape", sh);
        json_object_set_new(t, "data_offsets", off);
        json_object_set_new(root, p->name, t);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors header");
    const size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    *out = malloc(8 + padded);
    if (!*out) {
        free(text);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors header");
    }
    uint64_t le = padded; /* little-endian hosts only (x86-64, aarch64) */
    memcpy(*out, &le, 8);
    memcpy(*out + 8, text, n);
    memset(*out + 8 + n, ' ', padded - n);
    free(text);
    *len = 8 + padded;
    return ZC_OK;
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
    const size_t esz = zc_dtype_size(dtype);
    char *head = NULL;
    size_t hlen = 0;
    float *buf = malloc((size_t)BLOCK * sizeof(float));
    zc_status rc = buf ? header(&s.m, dtype, &head, &hlen)
                       : ZC_ERR(ZC_ERR_NO_MEMORY, "export buffer");
    uint64_t at = 0;
    if (rc == ZC_OK)
        rc = zc__ck_pwrite(fd, head, hlen, 0, "safetensors output");
    at = hlen;
    for (int i = 0; i < s.m.nparams && rc == ZC_OK; i++) {
        const zc_ck_param *p = &s.m.params[i];
        for (int64_t a = 0; a < p->numel && rc == ZC_OK; a += BLOCK) {
            const int64_t b = a + BLOCK < p->numel ? a + BLOCK : p->numel;
            rc = zc__ck_source_read(&s, i, ZC_CK_MASTER, a, b, buf);
            if (rc != ZC_OK)
                break;
            /* Converted in place: element j's narrow value lands at or
             * before element j's float, which is read first. */
            for (int64_t j = 0; dtype != ZC_DTYPE_F32 && j < b - a; j++)
                zc__store_f32(buf, dtype, (size_t)j, buf[j]);
            rc = zc__ck_pwrite(fd, buf, (size_t)(b - a) * esz, at, "safetensors output");
            at += (uint64_t)(b - a) * esz;
        }
    }
    free(head);
    free(buf);
    zc__ck_source_close(&s);
    return rc;
}
