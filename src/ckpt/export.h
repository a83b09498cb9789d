/* Writing a checkpoint's master as safetensors (internal; export.c):
 * the public zc_checkpoint_export_fd writes every parameter under its own
 * name; the CLI's export also renames tensors (Hugging Face's names),
 * writes 2-D ones transposed and cuts the model into shards of a bounded
 * size (zeroc ckpt export --names, --map, --max-shard-size). */
#ifndef ZC_CKPT_EXPORT_H
#define ZC_CKPT_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/source.h"

/* One tensor of the file: parameter `param` of the manifest, written under
 * `name`; transposed: a 2-D [rows, cols] parameter as [cols, rows]. */
typedef struct zc_ck_export_item {
    int param;
    const char *name;
    bool transposed;
} zc_ck_export_item;

/* Writes items[0..n) of s, in that order, as one safetensors file to fd (an
 * empty file the caller opened for writing), converted from the master
 * (fp32, or bf16: widened exactly, or copied for BF16) to dtype (F32, BF16 or
 * F16, round to nearest even), with metadata
 * {"format": "pt"}; checksums are verified as the entries are read. A
 * tensor is read in blocks of 1 Mi elements, a transposed one whole.
 * ZC_ERR_INVALID_ARG for a name given twice, "__metadata__", or a
 * transposed parameter that is not 2-D. On failure the file holds a partial
 * write: the caller removes it. */
zc_status zc__ck_export_items(zc_ck_source *s, const zc_ck_export_item *items, int n,
                              zc_dtype dtype, int fd);

#endif
