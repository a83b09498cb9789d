/* Logging: level and subsystem filters from the environment, rank prefix,
 * a user-installable sink. */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/env.h"
#include "base/log.h"

static _Atomic int log_level = -1;      /* -1: not yet read from ZC_LOG */
static int log_all_ranks;               /* ZC_LOG_RANKS=all */
static unsigned log_subsys_mask;        /* ZC_LOG_SUBSYS, one bit per known name; 0 = all */
static zc_kept_error log_env_err;       /* the first malformed logging variable */
static zc_log_sink log_sink;
static void *log_sink_user;
/* The variables are read once (log_env_read), under log_env_mu; a test can
 * have them read again (zc__log_env_reset). */
static pthread_mutex_t log_env_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool log_env_read;
static _Thread_local int log_rank = -1;

/* Every subsystem a log line names (the second argument of ZC_LOG*): the
 * names ZC_LOG_SUBSYS accepts. A line of a subsystem missing here is always
 * shown, so a forgotten name loses no output. */
static const char *const subsys_names[] = {"ckpt",    "comm",  "config", "core",
                                           "device",  "load",  "offload", "optim",
                                           "zero3"};
enum { NSUBSYS = (int)(sizeof subsys_names / sizeof subsys_names[0]) };

static int subsys_index(const char *s, size_t len)
{
    for (int i = 0; i < NSUBSYS; i++)
        if (strlen(subsys_names[i]) == len && !strncmp(s, subsys_names[i], len))
            return i;
    return -1;
}

/* ZC_LOG_SUBSYS: known names separated by commas, no empty item. */
static zc_status parse_subsys(unsigned *mask)
{
    const char *v = zc__env("ZC_LOG_SUBSYS");
    *mask = 0;
    if (!v)
        return ZC_OK;
    unsigned m = 0;
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const int i = subsys_index(p, len);
        if (i < 0) {
            char shown[ZC_ENV_SHOWN_MAX], list[128] = "";
            for (int k = 0; k < NSUBSYS; k++) {
                const size_t used = strlen(list);
                snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", subsys_names[k]);
            }
            return ZC_ERR(ZC_ERR_CONFIG, "ZC_LOG_SUBSYS='%s': want a comma-separated list of "
                          "subsystems, each one of %s (no empty item)",
                          zc__env_shown(v, shown, sizeof shown), list);
        }
        m |= 1u << i;
        if (!comma)
            break;
        p = comma + 1;
    }
    *mask = m;
    return ZC_OK;
}

/* Reads the three variables once. A malformed one leaves its default (warn,
 * rank 0, every subsystem) and is kept for zc__log_env_check, since a log
 * line has no status to fail with; the thread's last error is left as it
 * was, because logging runs in the middle of other calls. */
static void log_init_env_locked(void)
{
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", zc_last_error());
    static const char *const levels[] = {"off", "error", "warn", "info", "debug", "trace",
                                         "warning"};
    int level = ZC_LOG_WARN, pick = ZC_LOG_WARN;
    if (zc__kept_error_keep(&log_env_err, zc__env_choice("ZC_LOG", levels, 7, ZC_ENV_NOCASE,
                                                         NULL, &pick)) == ZC_OK)
        level = pick == 6 ? ZC_LOG_WARN : pick;
    int expected = -1;
    atomic_compare_exchange_strong(&log_level, &expected, level);
    static const char *const ranks[] = {"0", "all"};
    int r = 0;
    if (zc__kept_error_keep(&log_env_err, zc__env_choice("ZC_LOG_RANKS", ranks, 2, 0, NULL,
                                                         &r)) == ZC_OK)
        log_all_ranks = r == 1;
    unsigned mask = 0;
    if (zc__kept_error_keep(&log_env_err, parse_subsys(&mask)) == ZC_OK)
        log_subsys_mask = mask;
    zc__error_restore(saved);
}

static void log_init_env(void)
{
    if (atomic_load(&log_env_read))
        return;
    pthread_mutex_lock(&log_env_mu);
    if (!atomic_load(&log_env_read)) {
        log_init_env_locked();
        atomic_store(&log_env_read, true);
    }
    pthread_mutex_unlock(&log_env_mu);
}

void zc__log_env_reset(void)
{
    pthread_mutex_lock(&log_env_mu);
    atomic_store(&log_env_read, false);
    atomic_store(&log_level, -1);
    log_all_ranks = 0;
    log_subsys_mask = 0;
    zc__kept_error_clear(&log_env_err);
    pthread_mutex_unlock(&log_env_mu);
}

zc_status zc__log_env_check(void)
{
    log_init_env();
    if (log_env_err.rc != ZC_OK)
        return ZC_KEPT_RAISE(&log_env_err);
    return ZC_OK;
}

int zc__log_enabled(zc_log_level level)
{
    int lv = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (lv < 0) {
        log_init_env();
        lv = atomic_load(&log_level);
    }
    return (int)level <= lv;
}

void zc_log_set_level(zc_log_level level)
{
    log_init_env();
    atomic_store(&log_level, (int)level);
}

void zc_log_set_sink(zc_log_sink sink, void *user)
{
    log_sink = sink;
    log_sink_user = user;
}

void zc__log_set_rank(int rank) { log_rank = rank; }
int zc__log_rank(void) { return log_rank; }

static int subsys_selected(const char *subsys)
{
    if (!log_subsys_mask)
        return 1;
    const int i = subsys_index(subsys, strlen(subsys));
    return i < 0 || (log_subsys_mask >> i & 1u);
}

void zc__log(zc_log_level level, const char *subsys, const char *fmt, ...)
{
    log_init_env();
    if (log_rank > 0 && !log_all_ranks)
        return;
    if (!subsys_selected(subsys))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_sink) {
        log_sink(level, subsys, log_rank, line, log_sink_user);
        return;
    }
    static const char *tags[] = {"", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
    if (log_rank >= 0)
        fprintf(stderr, "[zeroc %s rank %d %s] %s\n", tags[level], log_rank, subsys, line);
    else
        fprintf(stderr, "[zeroc %s %s] %s\n", tags[level], subsys, line);
}
