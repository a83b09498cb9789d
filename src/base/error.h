/* Error recording and propagation (internal).
 *
 * Every failure site records a message with its file:line through zc__error(),
 * which returns the status so the call site can `return zc__error(...)`.
 * Messages are thread-local (zc_last_error). ZC_CHECK propagates a status
 * without overwriting the original message. */
#ifndef ZC_BASE_ERROR_H
#define ZC_BASE_ERROR_H

#include <stddef.h>

#include "zeroc/zeroc.h"

#define ZC_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))

/* Records "file:line message" as the thread's last error and returns s. */
zc_status zc__error(zc_status s, const char *file, int line, const char *fmt, ...) ZC_PRINTF(4, 5);

/* Clears the thread's last error (public entry points call it first). */
void zc__error_clear(void);

/* Makes msg the thread's last error, verbatim: puts back a message saved
 * (a copy of zc_last_error()) before work that may record one of its own. */
void zc__error_restore(const char *msg);

/* Prefixes the existing last error with "context: " (keeps the original text). */
void zc__error_context(const char *fmt, ...) ZC_PRINTF(1, 2);

#define ZC_ERR(status, ...) zc__error((status), __FILE__, __LINE__, __VA_ARGS__)

/* The checks of an output struct the caller sizes (zc_stats, zc_timers,
 * zc_offload_stats, zc_memory_plan): size is &out->size, or NULL when out is
 * NULL; need is sizeof the struct, named `type`. ZC_ERR_INVALID_ARG naming
 * `fn` when out is NULL or out->size is smaller. */
zc_status zc__out_check(const char *fn, const char *type, const size_t *size, size_t need);

/* An error kept for later: asynchronous work (an I/O request that fails
 * while the caller goes on) is reported by a later call, so its status and a
 * copy of its message wait here. The first failure wins, since later ones are
 * often its consequences. Zero-initialised it holds nothing. */
typedef struct zc_kept_error {
    zc_status rc;
    char msg[1024];
} zc_kept_error;

/* Keeps rc and the thread's last error message, unless rc is ZC_OK or an
 * error is kept already. Returns rc. */
zc_status zc__kept_error_keep(zc_kept_error *ke, zc_status rc);

/* Forgets the kept error. */
void zc__kept_error_clear(zc_kept_error *ke);

/* Records the kept error again as the thread's last error (prefixed with the
 * raising call site's file:line, like every ZC_ERR) and evaluates to its
 * status; the error stays kept. */
#define ZC_KEPT_RAISE(ke) ZC_ERR((ke)->rc, "%s", (ke)->msg)

/* Propagate a failing status unchanged. */
#define ZC_CHECK(call)                   \
    do {                                 \
        zc_status zc__rc_ = (call);      \
        if (zc__rc_ != ZC_OK)            \
            return zc__rc_;              \
    } while (0)

/* Propagate into `rc` and jump to `label` (one cleanup path per function). */
#define ZC_CHECK_GOTO(call, rc, label)   \
    do {                                 \
        (rc) = (call);                   \
        if ((rc) != ZC_OK)               \
            goto label;                  \
    } while (0)

#endif
