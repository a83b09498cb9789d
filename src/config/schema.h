/* The key schema (internal): one table describes every DeepSpeed key zeroc
 * reads — its dotted path, type, range, default, accepted synonym and where it
 * lives in struct zc_config. zc_config_create, zc_config_set/get, the JSON
 * loader, "auto" resolution and `zeroc config check` all walk this one table,
 * so a key added here is settable, loadable, printable and documented at once.
 */
#ifndef ZC_CONFIG_SCHEMA_H
#define ZC_CONFIG_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config/config.h"

typedef enum zc_cfg_ktype {
    ZC_KT_BOOL,   /* bool */
    ZC_KT_TRI,    /* int: -1 unset (null), 0, 1 */
    ZC_KT_I32,    /* int */
    ZC_KT_I64,    /* int64_t; "2e8" and "1.000000e+09" accepted when integral */
    ZC_KT_F64,    /* double */
    ZC_KT_STR,    /* char * (owned, NULL = unset) */
    ZC_KT_ENUM,   /* one of enums[] (case-insensitive), stored as int or bool (esz) */
    ZC_KT_BETAS,  /* [b1, b2] into two doubles (off, off2) */
    ZC_KT_DTYPE,  /* "fp16"|"bf16"|"fp32" (+ DeepSpeed's synonyms) into int zc_dtype, -1 unset */
    ZC_KT_IGNORED /* a DeepSpeed key zeroc accepts and does not use (any JSON type) */
} zc_cfg_ktype;

enum {
    ZC_KF_NULL = 1u << 0,         /* JSON null means "unset" (-1 / NULL) */
    ZC_KF_AUTO_PROGRAM = 1u << 1, /* "auto" resolved from zc_program_values */
    ZC_KF_AUTO_MODEL = 1u << 2,   /* "auto" resolved from the model's hidden size */
    ZC_KF_MUST_RESOLVE = 1u << 3, /* an unresolved "auto" is an error (batch keys) */
    ZC_KF_EXMIN = 1u << 4,        /* F64: the minimum is exclusive */
    ZC_KF_WARN_SET = 1u << 5,     /* asking for something zeroc does not implement: warn */
    ZC_KF_SCHED = 1u << 6,        /* a scheduler parameter (sched_mask says which types) */
    ZC_KF_PATH_LIST = 1u << 7,    /* STR: also a JSON list of 1..16 paths (a zeroc
                                     extension), stored joined with '\n' */
    ZC_KF_SIZE = 1u << 8,         /* I64: also a size string ("44GiB", zc__parse_size) */
    ZC_KF_AUTO_PLAN = 1u << 9,    /* "auto" resolved by the memory planner at build
                                     (zero_optimization.max_memory, src/plan/placement.c) */
    ZC_KF_NAME_LIST = 1u << 10,   /* STR: a JSON list of 0..16 names (comms_logger.prof_ops),
                                     stored joined with '\n'; [] is unset */
};

typedef struct zc_cfg_enum {
    const char *name;
    int value;
} zc_cfg_enum;

typedef struct zc_cfg_key {
    const char *path;  /* canonical dotted path */
    zc_cfg_ktype type;
    unsigned flags;
    size_t off, off2;  /* offsets into struct zc_config (off2: BETAS' second value) */
    int64_t imin, imax;
    double dmin, dmax;
    int64_t idef;      /* default of BOOL/TRI/I32/I64/ENUM/DTYPE */
    double ddef, ddef2;/* default of F64 / BETAS */
    const zc_cfg_enum *enums;
    int esz;           /* ENUM storage: sizeof(bool) or sizeof(int) */
    const char *alias; /* full path of an accepted synonym (no warning), or NULL */
    unsigned sched_mask; /* ZC_KF_SCHED: bit (1 << zc_sched_type) per type using it */
    unsigned opt_mask; /* optimizer.params: bit (1 << zc_opt_type) per type taking it
                          (0: not an optimizer parameter) */
    const char *doc;   /* one line for docs and `config check` */
} zc_cfg_key;

/* Where a value came from (config check prints it). */
typedef enum zc_cfg_origin {
    ZC_ORIGIN_DEFAULT = 0,
    ZC_ORIGIN_FILE,
    ZC_ORIGIN_ALIAS,        /* written under a deprecated name */
    ZC_ORIGIN_SET,          /* zc_config_set */
    ZC_ORIGIN_AUTO_PENDING, /* "auto", not resolved yet (struct holds the default) */
    ZC_ORIGIN_AUTO,         /* "auto", resolved (note says by what) */
    ZC_ORIGIN_DERIVED       /* derived by DeepSpeed's batch rules */
} zc_cfg_origin;

#define ZC_CFG_MAX_KEYS 160
#define ZC_CFG_NOTE_LEN 96

struct zc_config_meta {
    uint8_t origin[ZC_CFG_MAX_KEYS];
    char note[ZC_CFG_MAX_KEYS][ZC_CFG_NOTE_LEN];
};

/* The table. */
extern const zc_cfg_key zc__cfg_keys[];
extern const int zc__cfg_nkeys;

/* Index of a key by canonical path or synonym; -1 if none. */
int zc__cfg_key_find(const char *path);

/* A parsed, validated value ready to be stored. s points into the JSON value. */
typedef struct zc_cfg_val {
    bool null;
    int64_t i;
    double d, d2;
    const char *s;
    const json_t *list; /* ZC_KF_PATH_LIST given as a list (points into the JSON value) */
} zc_cfg_val;

/* Parses and validates a JSON value for key k. On failure writes a message
 * (value and allowed range, no path) into err and returns false. "auto" is
 * not handled here. */
bool zc__cfg_parse(const zc_cfg_key *k, const json_t *v, zc_cfg_val *out, char *err, size_t cap);

/* The key's numeric range as messages write it: "[1, 2147483647]",
 * "(0, inf) (finite)". */
void zc__cfg_range_text(const zc_cfg_key *k, char *buf, size_t cap);

/* Stores a parsed value (strings are copied). ZC_ERR_NO_MEMORY on failure. */
zc_status zc__cfg_store(zc_config *cfg, const zc_cfg_key *k, const zc_cfg_val *v);

/* Stores the key's default. */
zc_status zc__cfg_store_default(zc_config *cfg, const zc_cfg_key *k);

/* True when the stored value differs from the default. */
bool zc__cfg_is_default(const zc_config *cfg, const zc_cfg_key *k);

/* The stored value as JSON text ("null" when unset). Returns bytes needed. */
int zc__cfg_format(const zc_config *cfg, const zc_cfg_key *k, char *buf, size_t cap);

/* Origin bookkeeping. */
void zc__cfg_set_origin(zc_config *cfg, int key, zc_cfg_origin o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Owned-string helpers (counted allocator). */
zc_status zc__cfg_strdup(const char *s, char **out);
void zc__cfg_strfree(char *s);

/* Levenshtein distance, capped (returns cap+1 when larger). */
int zc__edit_distance(const char *a, const char *b, int cap);

/* Name of an enum value of key k ("AdamW", "WarmupLR", "cpu", ...). */
const char *zc__cfg_enum_name(const zc_cfg_key *k, int value);

#endif
