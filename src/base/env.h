/* Environment variables (internal): the one strict reader behind every
 * variable zeroc reads (ZC_*, the launchers' RANK, WORLD_SIZE, ..., SLURM_*,
 * OMPI_COMM_WORLD_*, PMI_*, MASTER_ADDR/PORT).
 *
 * The rule is the command line's (tools/cliarg.h): an unset or empty
 * variable is "not given" and its default applies (so `ZC_LOG= prog` runs
 * with the default); a set value is the whole text (no blanks, no trailing
 * junk, no "inf", "nan" or hex), finite and inside the stated range. Nothing
 * is clamped or replaced by a default: a bad value is ZC_ERR_CONFIG with a
 * message that names the variable, repeats its value (at most 64 bytes,
 * other than printable ASCII as \xNN) and states what is accepted, e.g.
 *   ZC_COMM_TIMEOUT='inf': want a finite number of seconds in [0.001, 604800]
 * Each function leaves *out unchanged unless it returns ZC_OK with the
 * variable set, and sets *set (when not NULL) to whether it was. Thread-safe
 * as getenv (the program must not setenv while zeroc's threads run). */
#ifndef ZC_BASE_ENV_H
#define ZC_BASE_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* The value of `name`, or NULL when it is unset or empty. */
const char *zc__env(const char *name);

/* A whole number in [lo, hi]: an optional '-' and decimal digits. `note`
 * (may be NULL) follows the value in the message, e.g. "(set by slurm)". */
zc_status zc__env_i64(const char *name, int64_t lo, int64_t hi, const char *note, bool *set,
                      int64_t *out);
zc_status zc__env_int(const char *name, int lo, int hi, const char *note, bool *set, int *out);

/* A finite decimal number of seconds in [lo, hi] (digits, an optional
 * fraction and exponent; read in the C locale whatever the program's). */
zc_status zc__env_seconds(const char *name, double lo, double hi, bool *set, double *out);

/* One of choices[0..n), exactly, or ignoring case with ZC_ENV_NOCASE; *out is
 * its index. The message lists the choices. */
enum { ZC_ENV_NOCASE = 1u << 0 };
zc_status zc__env_choice(const char *name, const char *const *choices, int n, unsigned flags,
                         bool *set, int *out);

/* The parsers under the functions above, for variables with a grammar of
 * their own (ZC_FAULTS, ZC_LOG_SUBSYS): s[0..len) whole, true when it is a
 * number in range (*out set), false otherwise (*out unchanged). */
bool zc__parse_i64(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out);
bool zc__parse_seconds(const char *s, size_t len, double lo, double hi, double *out);

/* s made safe to print (see above) in buf; returns buf. */
const char *zc__env_shown(const char *s, char *buf, size_t cap);
/* Room zc__env_shown needs for any s. */
#define ZC_ENV_SHOWN_MAX (64 * 4 + 8)

#endif
