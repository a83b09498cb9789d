/* Checkpoint format (internal): the manifest in memory and the names on disk.
 *
 * A checkpoint is a directory DIR/TAG holding manifest.json (written by rank
 * 0) and one shard file per saving rank, rank_NNNNN.bin; DIR/latest names the
 * newest complete tag. docs/checkpoint.md is the reference.
 *
 * The data is world-independent: a shard file is a sequence of *entries*,
 * each "elements [begin, end) of parameter P's tensor K" (K: the master,
 * Adam's exp_avg or exp_avg_sq) as little-endian values of K's stored dtype
 * (fp32, or bf16 for the engine's bf16 state: zc_ck_manifest.kdt), with its
 * byte offset and its XXH3-64 checksum recorded in the manifest. Rank r of a W-rank save
 * writes the parts of its chunk shards that hold parameters (padding is not
 * stored), so any reader - another world size, another stage, the exporter -
 * finds a parameter's values by name and element range, never by rank. */
#ifndef ZC_CKPT_FORMAT_H
#define ZC_CKPT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

#define ZC_CK_FORMAT "zeroc-checkpoint"
#define ZC_CK_VERSION 3
/* Version 2: every run of entries starts at a multiple of ZC_CK_ALIGN bytes
 * and a shard file's size is one (O_DIRECT). Version 1 (entries back to back)
 * is still read. Version 3: version 2 plus "state_dtypes", each kind's stored
 * dtype; written only when one of them is not fp32 (zc__ck_version_for), so a
 * checkpoint of fp32 state stays version 2, readable by an older zeroc, and an
 * older zeroc refuses a bf16 one by its version instead of misreading it.
 * Versions 1 and 2 hold fp32 only. */
#define ZC_CK_ALIGN 4096
#define ZC_CK_MANIFEST "manifest.json"
#define ZC_CK_LATEST "latest"
#define ZC_CK_TAG_MAX 128
#define ZC_CK_MAX_NDIM 8
/* The most ranks (and so shard files) a checkpoint may have: the manifest's
 * world_size and "files", and zc_checkpoint_reshard's world. */
#define ZC_CK_MAX_WORLD (1 << 20)
/* Chunk padding rule, repeated from src/core/engine/layout.c (zc__chunk_padded):
 * a chunk is padded to a multiple of world * 64 elements. The reshard tool
 * uses it to cut shards for another world size. */
#define ZC_CK_CHUNK_ALIGN 64

typedef enum zc_ck_kind {
    ZC_CK_MASTER = 0, /* master weights */
    ZC_CK_EXP_AVG,    /* Adam m */
    ZC_CK_EXP_AVG_SQ, /* Adam v */
    ZC_CK__KINDS
} zc_ck_kind;

/* "master", "exp_avg", "exp_avg_sq". */
const char *zc__ck_kind_name(int kind);

typedef struct zc_ck_param {
    char *name;
    int ndim;
    int64_t shape[ZC_CK_MAX_NDIM];
    int64_t numel;
    int group;
    int chunk;      /* the saving engine's chunk */
    int64_t offset; /* element offset inside it */
} zc_ck_param;

typedef struct zc_ck_chunk {
    int first, count; /* parameters [first, first + count) */
    int64_t used;     /* sum of their numel */
} zc_ck_chunk;

typedef struct zc_ck_file {
    char name[32]; /* rank_NNNNN.bin */
    int rank;
    uint64_t bytes;
} zc_ck_file;

typedef struct zc_ck_entry {
    int param, kind, file;
    int64_t begin, end; /* elements of the parameter */
    uint64_t offset;    /* byte offset in the file */
    uint64_t xxh3;     /* of its zc__ck_entry_bytes bytes */
} zc_ck_entry;

/* The dynamic part of the loss scaler (its settings come from the config). */
typedef struct zc_ck_scaler {
    bool dynamic;
    double scale;
    int64_t cur_hysteresis, cur_iter, last_overflow_iter;
} zc_ck_scaler;

typedef struct zc_ck_manifest {
    int version;
    char tag[ZC_CK_TAG_MAX + 1];
    int world, stage;
    zc_dtype dtype;             /* the working precision of the saving engine */
    zc_dtype kdt[ZC_CK__KINDS]; /* each kind's stored dtype: ZC_DTYPE_F32 or
                                   ZC_DTYPE_BF16 (all fp32 before version 3) */
    int64_t steps, skipped, adam_steps;
    double lr;                  /* the lr of the next update (information) */
    uint64_t config_digest;     /* XXH3-64 of the optimizer / scheduler / precision
                                   settings: a mismatch on load is a warning */
    zc_ck_scaler scaler;
    zc_ck_param *params;
    int nparams;
    zc_ck_chunk *chunks;
    int nchunks;
    zc_ck_file *files;
    int nfiles;
    zc_ck_entry *entries;       /* sorted by (param, kind, begin) after reading */
    int64_t nentries;
    int64_t *first_entry;       /* nparams * ZC_CK__KINDS + 1: the entries of
                                   (param, kind) are [first_entry[i], first_entry[i+1]) */
} zc_ck_manifest;

void zc__ck_manifest_free(zc_ck_manifest *m);

/* Bytes of one stored element of dtype dt (fp32 or bf16). */
static inline size_t zc__ck_elem_bytes(zc_dtype dt) { return dt == ZC_DTYPE_BF16 ? 2 : 4; }

/* Bytes entry e's values take in its file. */
static inline uint64_t zc__ck_entry_bytes(const zc_ck_manifest *m, const zc_ck_entry *e)
{
    return (uint64_t)(e->end - e->begin) * zc__ck_elem_bytes(m->kdt[e->kind]);
}

/* The version to write for state of dtypes kdt: 2 when all are fp32, else 3. */
static inline int zc__ck_version_for(const zc_dtype kdt[ZC_CK__KINDS])
{
    for (int k = 0; k < ZC_CK__KINDS; k++)
        if (kdt[k] != ZC_DTYPE_F32)
            return 3;
    return 2;
}

/* Writes m as JSON to an open file (rank 0 at save, reshard). */
zc_status zc__ck_manifest_write(const zc_ck_manifest *m, int fd, const char *path);

/* Reads and validates path strictly: a regular file (base/regfile.h), the
 * format name and a version this build reads, every field's type and range,
 * that the entries of every (parameter, kind) cover its elements exactly
 * once, and zc__ck_manifest_check. This is the one validation every reader
 * shares. Errors name the path and the field or tensor. On failure *m is
 * empty. */
zc_status zc__ck_manifest_read(const char *path, zc_ck_manifest *m);
/* The same for `name` in directory dfd (opened with O_NOFOLLOW); path names
 * it in messages. */
zc_status zc__ck_manifest_read_at(int dfd, const char *name, const char *path,
                                  zc_ck_manifest *m);

/* The checks between fields, once every field is read and in range (called
 * by zc__ck_manifest_read; manifest_check.c): the step counters add up, the
 * chunks tile the parameters as the layout packs them, tensor names are
 * unique, there is one file per saving rank, and every entry lies inside its
 * file. ZC_ERR_INVALID_ARG naming path and the field or tensor. */
zc_status zc__ck_manifest_check(const zc_ck_manifest *m, const char *path);

/* Whether tag is a valid tag: 1-128 of [A-Za-z0-9._-], not starting with '.'. */
bool zc__ck_tag_valid(const char *tag);

/* Resolves tag NULL to the tag in DIR/latest; out holds ZC_CK_TAG_MAX + 1. */
zc_status zc__ck_resolve_tag(const char *dir, const char *tag, char *out);

/* The shard file name of rank r. */
void zc__ck_file_name(int rank, char out[32]);

/* Chunk padding for a world of w ranks (layout.c's rule). */
int64_t zc__ck_padded(int64_t used, int world);

/* XXH64 digest of the settings that decide the update (config digest). */
struct zc_config;
uint64_t zc__ck_config_digest(const struct zc_config *cfg);

#endif
