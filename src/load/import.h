/* The import's pieces (internal to src/load): matching the set's tensors to
 * the engine's parameters (match.c), the bytes this rank reads (plan.c) and
 * reading them through the staging ring (reader.c). import.c drives them. */
#ifndef ZC_LOAD_IMPORT_H
#define ZC_LOAD_IMPORT_H

#include "core/engine.h"
#include "load/load.h"

/* Which tensor fills each parameter: tensor[i] (an index into the set) and
 * transposed[i] for engine parameter i; every parameter has one. */
typedef struct zc_ld_match {
    int64_t *tensor;
    bool *transposed;
    int64_t loaded, skipped; /* tensors of the set */
} zc_ld_match;

/* Maps every tensor of the set through opts (names, map, exact names,
 * allow_extra) and checks the result: the refusals of zc_load_safetensors
 * that concern names, shapes and dtypes, naming the tensor and its file.
 * `where` names the set (its path) in messages. Frees nothing on failure
 * but what it allocated (m is zeroed then). */
zc_status zc__ld_match(const zc_engine *e, const zc_st_set *set, const zc_load_options *opts,
                       const char *where, zc_ld_match *m);
void zc__ld_match_free(zc_ld_match *m);

/* A piece: a run of elements of one tensor, contiguous in its file, and
 * where they go. File elements [y0, y1) of tensor `tensor` are engine
 * elements x = y (or, transposed, the transpose's: the file is [cols, rows]
 * of the parameter's [rows, cols]); those with x in [a, b) land at
 * element x + dst_off of the chunk range being filled. */
typedef struct zc_ld_piece {
    int64_t tensor;
    int file;
    uint64_t off, len;        /* bytes in the file */
    int64_t y0, y1;
    int64_t a, b;             /* the parameter's elements this rank fills */
    int64_t dst_off;          /* parameter element -> range element */
    int64_t rows, cols;       /* the parameter's 2-D shape (transposed pieces) */
    bool transposed;
    zc_dtype dtype;
} zc_ld_piece;

/* An aligned byte range of one file read as one run of the ring. */
typedef struct zc_ld_extent {
    int file;
    uint64_t off, len;
} zc_ld_extent;

/* What this rank reads: for each chunk (in chunk order) its pieces, sorted
 * by file and offset, and the extents they are read through. */
typedef struct zc_ld_plan {
    zc_ld_piece *pieces;
    int64_t npieces;
    int64_t *chunk_first;     /* nchunks + 1: chunk k's pieces */
    int64_t *piece_ext;       /* each piece's (first) extent */
    zc_ld_extent *ext;
    int64_t n_ext;            /* extents */
    uint64_t *aligned_end;    /* per file: the end of the last whole block (what
                                 O_DIRECT reads); the bytes after it, the tail,
                                 are read by pread */
    bool *tail_needed;        /* per file */
    bool *used;               /* per file: some piece reads it */
} zc_ld_plan;

/* The elements [*q0, *q1) of chunk k whose values this rank reads: its
 * shard (a 1/W slice of the chunk at stage 0 too). */
void zc__ld_range(const zc_engine *e, int k, int64_t *q0, int64_t *q1);

/* Builds the pieces for this rank, then the extents for O_DIRECT blocks of
 * `align` bytes (zc__ld_plan_extents may be called again with a larger
 * alignment). */
zc_status zc__ld_plan_make(const zc_engine *e, const zc_st_set *set, const zc_ld_match *m,
                           zc_ld_plan *p);
zc_status zc__ld_plan_extents(zc_ld_plan *p, const zc_st_set *set, size_t align);
void zc__ld_plan_free(zc_ld_plan *p);

/* The reader: opens the files the plan reads (O_DIRECT through the NVMe
 * store's io_uring engine unless buffered), maps the ring (ring_bytes,
 * counted in e's account) and reads the tails. Everything that can fail
 * before the payload is read happens here. Each read of the payload is an
 * event of e's ZC_FAULTS load items (docs/faults.md). */
typedef struct zc_ld_reader zc_ld_reader;
zc_status zc__ld_reader_open(zc_ld_reader **out, const zc_st_set *set, zc_ld_plan *plan,
                             size_t ring_bytes, bool buffered, zc_engine *e);
/* Converts the next piece of the plan (which must be `piece`) into dst, the
 * fp32 values of the chunk range being filled, reading ahead. Errors:
 * ZC_ERR_IO naming the file, the tensor and the offset; ZC_ERR_INVALID_ARG
 * for a NaN or an infinity among the values (naming the element). */
zc_status zc__ld_reader_next(zc_ld_reader *r, int64_t piece, float *dst);
/* Bytes read so far (extents and tails; not the headers), whether O_DIRECT
 * is in use, the ring's bytes. */
void zc__ld_reader_stats(const zc_ld_reader *r, int64_t *bytes, bool *direct,
                         int64_t *ring_bytes);
/* Cancels reads in flight, closes, unmaps. NULL is a no-op. */
void zc__ld_reader_close(zc_ld_reader *r);

#endif
