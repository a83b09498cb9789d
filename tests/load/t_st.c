#include "t_st.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"

static size_t esz(const t_st_tensor *t)
{
    return t->dtype_name || t->dtype != ZC_DTYPE_F32 ? 2 : 4;
}

static int64_t numel(const t_st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

int64_t t_st_write(const char *path, const t_st_tensor *t, int n)
{
    char *h = malloc(1 << 20);
    cr_assert(h);
    size_t at = (size_t)sprintf(h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t bytes = (uint64_t)numel(&t[i]) * esz(&t[i]);
        at += (size_t)sprintf(h + at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                              t[i].dtype_name ? t[i].dtype_name
                              : t[i].dtype == ZC_DTYPE_F32 ? "F32"
                              : t[i].dtype == ZC_DTYPE_BF16 ? "BF16" : "F16");
        for (int d = 0; d < t[i].ndim; d++)
            at += (size_t)sprintf(h + at, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        at += (size_t)sprintf(h + at, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                              (unsigned long long)(off + bytes));
        off += bytes;
    }
    at += (size_t)sprintf(h + at, "}");
    while (at % 8)
        h[at++] = ' ';
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s", path);
    uint64_t len = at;
    cr_assert_eq(fwrite(&len, 8, 1, f), 1);
    cr_assert_eq(fwrite(h, 1, at, f), at);
    for (int i = 0; i < n; i++) {
        const int64_t m = numel(&t[i]);
        const size_t e = esz(&t[i]);
        unsigned char *b = malloc((size_t)m * e + 1);
        cr_assert(b);
        for (int64_t k = 0; k < m; k++) {
            if (e == 4) {
                memcpy(b + 4 * k, &t[i].values[k], 4);
            } else {
                const uint16_t v = t[i].dtype == ZC_DTYPE_BF16 ? zc__f32_to_bf16(t[i].values[k])
                                                                : zc__f32_to_f16(t[i].values[k]);
                memcpy(b + 2 * k, &v, 2);
            }
        }
        cr_assert_eq(fwrite(b, e, (size_t)m, f), (size_t)m);
        free(b);
    }
    cr_assert_eq(fclose(f), 0);
    free(h);
    return (int64_t)(8 + len + off);
}

void t_st_write_raw(const char *path, const char *header, int64_t header_len, const void *data,
                    size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s", path);
    uint64_t n = header_len >= 0 ? (uint64_t)header_len : strlen(header);
    cr_assert_eq(fwrite(&n, 8, 1, f), 1);
    cr_assert_eq(fwrite(header, 1, strlen(header), f), strlen(header));
    if (len)
        cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

void t_transpose(const float *in, int64_t rows, int64_t cols, float *out)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[j * rows + i] = in[i * cols + j];
}
