/* Importing pretrained weights (internal; the public call is
 * zc_load_safetensors in zeroc.h, docs/loading.md): the seam of src/load.
 *
 * A safetensors *set* is one .safetensors file or the files a Hugging Face
 * index (model.safetensors.index.json) names, opened and validated whole:
 * every header parsed (an 8-byte little-endian length, then one JSON object
 * {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets"}}), every
 * tensor's byte range checked against its dtype, its shape, the other
 * tensors and the file's size. zc_load_safetensors reads the set on every
 * rank before it plans which bytes the rank reads; the CLI (zeroc ckpt
 * import) reads it to register an engine's parameters from the file.
 *
 * Errors name the file and the tensor ("model.safetensors: tensor 'h.0.w':
 * ...") and leave nothing open. */
#ifndef ZC_LOAD_LOAD_H
#define ZC_LOAD_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

#define ZC_ST_MAX_NDIM 8
/* The reference implementation's limit on a header's length. */
#define ZC_ST_HEADER_MAX 100000000ull

typedef struct zc_st_tensor {
    char *name;
    int file;                      /* index into zc_st_set.files */
    char dtype_name[16];           /* as the file says: "BF16", "I64", ... */
    zc_dtype dtype;                /* F32, BF16 or F16; -1 for any other dtype */
    int ndim;
    int64_t shape[ZC_ST_MAX_NDIM];
    int64_t numel;
    uint64_t begin, end;           /* byte range in the file (absolute) */
} zc_st_tensor;

typedef struct zc_st_file {
    char *path;                    /* as opened (the index's directory joined) */
    uint64_t bytes;                /* its size */
    uint64_t header_bytes;         /* 8 + the header's length: where data starts */
} zc_st_file;

typedef struct zc_st_set {
    char *index_path;              /* the index it was read from, or NULL */
    uint64_t index_bytes;
    zc_st_file *files;
    int nfiles;
    zc_st_tensor *tensors;         /* in file order, then byte order */
    int64_t ntensors;
} zc_st_set;

/* Reads the set at `path`: an index when the name ends in ".json", else one
 * safetensors file. Validates every header (the refusals listed at
 * zc_load_safetensors). On success the caller frees the set with
 * zc__st_set_free; on failure nothing is held and *set is zeroed. */
zc_status zc__st_set_open(zc_st_set *set, const char *path);
void zc__st_set_free(zc_st_set *set);

/* The tensor of that name, or -1. */
int64_t zc__st_find(const zc_st_set *set, const char *name);

/* The bytes of one element of a loadable dtype (F32 4, BF16 and F16 2). */
static inline size_t zc__st_esz(zc_dtype dt) { return dt == ZC_DTYPE_F32 ? 4 : 2; }

#endif
