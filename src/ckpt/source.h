/* Reading a saved checkpoint (internal): the manifest and the values of any
 * parameter's tensor by element range, each entry checked against its
 * checksum before its bytes are used. Used by the engine's load, the
 * reshard and the exporter, so every reader reports damage the same way:
 * the file, the tensor, the element range. */
#ifndef ZC_CKPT_SOURCE_H
#define ZC_CKPT_SOURCE_H

#include "ckpt/dirwrite.h"
#include "ckpt/format.h"

typedef struct zc_ck_source {
    char dir[ZC_CK_PATH_MAX]; /* DIR/TAG */
    zc_ck_manifest m;
    int *fds;                 /* per file */
    unsigned char *verified;  /* per entry: its checksum was checked */
    char *buf;                /* verification buffer */
} zc_ck_source;

/* Resolves tag (NULL: DIR/latest), reads the manifest and opens every shard
 * file, checking its size against the manifest: a missing or truncated file
 * is an error naming it and a tensor it holds. */
zc_status zc__ck_source_open(zc_ck_source *s, const char *dir, const char *tag);
void zc__ck_source_close(zc_ck_source *s);

/* The error for entry e whose bytes do not match its checksum: ZC_ERR_IO
 * naming the file, the tensor, its element range and byte offset (every
 * reader reports damage with it). */
zc_status zc__ck_source_mismatch(const zc_ck_source *s, const zc_ck_entry *e);

/* Checks entry i's checksum (once; later calls return at once). */
zc_status zc__ck_source_verify(zc_ck_source *s, int64_t i);

/* Verifies every entry that elements [a, b) of (param, kind) come from. */
zc_status zc__ck_source_verify_range(zc_ck_source *s, int param, int kind, int64_t a, int64_t b);

/* Reads elements [a, b) of (param, kind) into dst (host memory), verifying
 * the entries first: the bytes as stored, in the kind's dtype
 * (s->m.kdt[kind]: (b - a) * 2 bytes for bf16, * 4 for fp32). */
zc_status zc__ck_source_read(zc_ck_source *s, int param, int kind, int64_t a, int64_t b,
                             void *dst);

/* The same widened to fp32 (exactly: a bf16 value is the top half of its
 * fp32), dst holding (b - a) floats. */
zc_status zc__ck_source_read_f32(zc_ck_source *s, int param, int kind, int64_t a, int64_t b,
                                 float *dst);

/* Widens n bf16 values at the start of buf in place to n floats (buf holds
 * n * 4 bytes). */
void zc__ck_widen_bf16(void *buf, int64_t n);

#endif
