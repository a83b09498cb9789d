/* Logging: level and subsystem filters from the environment, rank prefix,
 * a user-installable sink. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

static _Atomic int log_level = -1;      /* -1: not yet read from ZC_LOG */
static int log_all_ranks;               /* ZC_LOG_RANKS=all */
static char log_subsys[256];            /* ZC_LOG_SUBSYS, comma separated; empty = all */
static zc_log_sink log_sink;
static void *log_sink_user;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static _Thread_local int log_rank = -1;

static void log_init_env(void)
{
    const char *lv = getenv("ZC_LOG");
    int level = ZC_LOG_WARN;
    if (lv && *lv) {
        static const char *names[] = {"off", "error", "warn", "info", "debug", "trace"};
        for (int i = 0; i < 6; i++)
            if (!strcasecmp(lv, names[i]))
                level = i;
        if (!strcasecmp(lv, "warning"))
            level = ZC_LOG_WARN;
    }
    int expected = -1;
    atomic_compare_exchange_strong(&log_level, &expected, level);
    const char *ranks = getenv("ZC_LOG_RANKS");
    log_all_ranks = ranks && !strcasecmp(ranks, "all");
    const char *ss = getenv("ZC_LOG_SUBSYS");
    if (ss)
        snprintf(log_subsys, sizeof log_subsys, "%s", ss);
}

int zc__log_enabled(zc_log_level level)
{
    int lv = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (lv < 0) {
        pthread_once(&log_once, log_init_env);
        lv = atomic_load(&log_level);
    }
    return (int)level <= lv;
}

void zc_log_set_level(zc_log_level level)
{
    pthread_once(&log_once, log_init_env);
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
    if (!log_subsys[0])
        return 1;
    size_t n = strlen(subsys);
    for (const char *p = log_subsys; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, subsys, n))
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

void zc__log(zc_log_level level, const char *subsys, const char *fmt, ...)
{
    pthread_once(&log_once, log_init_env);
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
