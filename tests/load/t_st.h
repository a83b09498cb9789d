/* Writing safetensors files for the import's tests (t_ prefix), straight
 * from the format's definition: an 8-byte little-endian header length, the
 * JSON header padded with spaces to a multiple of 8, the tensors' bytes back
 * to back in the order given. */
#ifndef ZC_TESTS_T_ST_H
#define ZC_TESTS_T_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

typedef struct t_st_tensor {
    const char *name;
    zc_dtype dtype;          /* F32, BF16 or F16: values are rounded to it */
    const char *dtype_name;  /* instead of dtype's name, for a bad or other dtype
                                (its bytes are then raw: 2 bytes per element) */
    int ndim;
    int64_t shape[4];
    const float *values;     /* numel values in the file's order */
} t_st_tensor;

/* Writes the file; returns its size (asserts success). */
int64_t t_st_write(const char *path, const t_st_tensor *t, int n);
/* A file of the given header text (the length prefix computed from it, or
 * header_len when >= 0) followed by `data` (len bytes). */
void t_st_write_raw(const char *path, const char *header, int64_t header_len, const void *data,
                    size_t len);
/* The transpose of a [rows, cols] array into out ([cols, rows]). */
void t_transpose(const float *in, int64_t rows, int64_t cols, float *out);

#endif
