/* Internals shared by the config module and `zeroc config check`.
 *
 * Validation collects every problem of a file, not only the first: a
 * zc_cfg_diag holds {severity, JSON path, message} entries. Public entry
 * points report the first error through zc_last_error(), log warnings, and
 * the CLI prints them all. */
#ifndef ZC_CONFIG_INTERNAL_H
#define ZC_CONFIG_INTERNAL_H

#include <jansson.h>

#include "config/config.h"
#include "config/schema.h"

typedef enum zc_cfg_sev { ZC_SEV_ERROR = 0, ZC_SEV_WARN, ZC_SEV_INFO } zc_cfg_sev;

typedef struct zc_cfg_msg {
    zc_cfg_sev sev;
    zc_status status; /* for errors: ZC_ERR_CONFIG, ZC_ERR_UNSUPPORTED, ... */
    char *path;       /* whole, never truncated: a key name round-trips into --json */
    char *msg;
} zc_cfg_msg;

/* At most this many messages of each severity are kept; the rest are only
 * counted ("... and N more"). A file of a million unknown keys must not cost a
 * message, and a hint search, per key. */
#define ZC_CFG_DIAG_KEEP 64

typedef struct zc_cfg_diag {
    zc_cfg_msg *v;      /* kept messages, in the order they were found */
    int n, cap;
    int nerr, nwarn;    /* all errors / warnings, kept or not */
    int count[3];       /* all messages per severity */
    int kept[3];        /* kept messages per severity */
    zc_status err_status; /* the first error's status, kept or not */
    bool oom;           /* a message could not be recorded */
} zc_cfg_diag;

void zc__diag_add(zc_cfg_diag *d, zc_cfg_sev sev, zc_status st, const char *path,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* True when a message of this severity would be kept: callers skip costly
 * work (the "did you mean" search) for one that would only be counted. */
bool zc__diag_keeps(const zc_cfg_diag *d, zc_cfg_sev sev);
/* Messages of this severity that were counted but not kept. */
int zc__diag_dropped(const zc_cfg_diag *d, zc_cfg_sev sev);
void zc__diag_free(zc_cfg_diag *d);
/* First error (or NULL). */
const zc_cfg_msg *zc__diag_first_error(const zc_cfg_diag *d);
/* Logs warnings/infos and, when there is an error, records every kept error in
 * one message (as many as zc_last_error holds, then "(and N more errors)"),
 * prefixed by `what` (e.g. the file name), and returns the first one's
 * status. */
zc_status zc__diag_report(const zc_cfg_diag *d, const char *what);

/* Loader flags beyond the public ZC_CONFIG_LENIENT. */
#define ZC__CFG_SKIP_PATH_CHECK 0x100u /* do not touch the file system (fuzzing) */
/* semantic.c: an nvme_path checked for a section that has no stage rule
 * (activation_checkpointing), not for a zero_optimization offload block. */
#define ZC__CFG_NO_STAGE 0x200u

/* Assigns one JSON value to key index `key` (handles "auto"). Errors go to d.
 * `written_as` is the name the user wrote (for origins), NULL = canonical.
 * Returns ZC_ERR_NO_MEMORY only; validation errors are in d. */
zc_status zc__cfg_assign(zc_config *cfg, int key, const json_t *v, zc_cfg_origin origin,
                         const char *written_as, zc_cfg_diag *d);

/* Applies a JSON object at the top level (the loader's walk); lenient turns
 * unknown nested keys into warnings. */
zc_status zc__cfg_apply_json(zc_config *cfg, const json_t *root, unsigned flags, zc_cfg_diag *d);

/* Applies one dotted key (zc_config_set's logic, aliases included). */
zc_status zc__cfg_apply_key(zc_config *cfg, const char *dotted, const json_t *v,
                            zc_cfg_origin origin, zc_cfg_diag *d);

/* Cross-key checks (fp16+bf16, offload vs stage, nvme_path, buffer_count,
 * allgather_bucket_size, scheduler parameters vs type, ...). */
void zc__cfg_semantic(const zc_config *cfg, unsigned flags, zc_cfg_diag *d);
/* trace.steps and comms_logger.prof_ops (observe_keys.c). */
void zc__cfg_check_observe(const zc_config *cfg, zc_cfg_diag *d);

/* optimizer.c: the type's consequences. Called by zc__cfg_store when
 * optimizer.type is stored: sets adamw_type and, where the config did not
 * give them, lr and eps to the type's DeepSpeed defaults. */
void zc__cfg_optimizer_type_stored(zc_config *cfg);
/* A parameter set in optimizer.params that the type's optimizer does not
 * take (the loader's semantic pass). */
void zc__cfg_check_optimizer(const zc_config *cfg, zc_cfg_diag *d);
/* The types the engine's step does not run yet (zc__cfg_engine_support). */
void zc__cfg_rule_optimizer(const zc_config *cfg, zc_cfg_diag *d);

/* What this build's engine refuses in a configuration that is otherwise
 * valid (offload today): one error per refused block. `zeroc config check`
 * runs it so its verdict is the engine's. */
void zc__cfg_engine_support(const zc_config *cfg, zc_cfg_diag *d);
/* offload_optimizer.buffer_count with NVMe (support.c; the loader's semantic
 * check and the NVMe home apply it). */
void zc__cfg_rule_opt_buffers(int64_t buffer_count, zc_cfg_diag *d);
/* The optimizer's state precision (precision.c): DeepSpeed's refusals of
 * bf16_master_weights_and_grads / bf16_optimizer_states and zeroc's of its
 * moment dtypes. stage as zc__cfg_engine_support reads it. */
void zc__cfg_rule_state_precision(const zc_config *cfg, int stage, bool stage_auto,
                                  zc_cfg_diag *d);

/* "auto" from program values, then DeepSpeed's batch rules for `world`
 * ranks (0 = unknown: the product check is skipped). With preview set,
 * "auto" keys that only the program can resolve are warnings, not errors
 * (config check of a Hugging Face template). */
zc_status zc__cfg_resolve(zc_config *cfg, int world, bool preview, zc_cfg_diag *d);

/* Loads from text into a new config, collecting every message. On error
 * *out is NULL. */
zc_status zc__config_load_text(zc_config **out, const char *text, size_t len, const char *name,
                               unsigned flags, zc_cfg_diag *d);

/* The largest config document accepted, file or string. Real DeepSpeed
 * configs are a few KiB; the limit is checked before anything is parsed, so
 * a huge or endless input costs neither memory nor time. */
#define ZC_CFG_MAX_BYTES ((size_t)16 << 20)
#define ZC_CFG_MAX_BYTES_TEXT "16 MiB"

/* The most JSON values a config may hold (a real one has under a hundred):
 * with the size limit, this bounds the memory of the parsed tree to a few MB
 * whatever the text is made of. */
#define ZC_CFG_MAX_VALUES 65536

/* An upper bound of the number of JSON values in text (every value but the
 * root follows '[', '{' or ',' outside a string); counting stops once it
 * passes `stop`. */
size_t zc__cfg_count_values(const char *text, size_t len, size_t stop);

/* jansson refused `text` with "too big integer" (jerr): adds errors that name
 * the key, the value and the range, where they can be found. */
void zc__cfg_explain_big_integer(const char *text, size_t len, unsigned flags, zc_cfg_diag *d,
                                 const json_error_t *jerr);

/* Reads a whole regular file of at most ZC_CFG_MAX_BYTES (counted allocation
 * of len + 1 bytes, NUL-terminated). A directory, FIFO, device or socket is
 * refused by what it is, without reading from it (a FIFO is opened
 * non-blocking, so no writer is waited for). */
zc_status zc__cfg_read_file(const char *path, char **text, size_t *len);

/* The zc_program_values field that resolves key_path's "auto" ("lr",
 * "micro_batch_per_gpu", ...), or NULL. */
const char *zc__cfg_program_field(const char *key_path);

/* Swap the contents of two configs (used to commit a validated copy). */
void zc__config_swap(zc_config *a, zc_config *b);

#endif
