/* Helpers for the config tests: a text snapshot of every key (to prove a
 * failed call changed nothing) and a log sink that records warnings. */
#ifndef ZC_TESTS_CONFIG_HELPERS_H
#define ZC_TESTS_CONFIG_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/schema.h"
#include "zeroc/zeroc.h"

/* Every key's value as read by zc_config_get, one "path=value" per line.
 * Caller frees. */
static inline char *t_cfg_snapshot(const zc_config *cfg)
{
    size_t cap = 32768, n = 0;
    char *out = calloc(1, cap);
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        if (zc__cfg_keys[i].type == ZC_KT_IGNORED)
            continue;
        char v[256];
        if (zc_config_get(cfg, zc__cfg_keys[i].path, v, sizeof v) != ZC_OK)
            snprintf(v, sizeof v, "<get failed>");
        n += (size_t)snprintf(out + n, cap - n, "%s=%s\n", zc__cfg_keys[i].path, v);
    }
    return out;
}

/* Collected log lines of WARN level (for deprecation warnings). */
typedef struct t_log_capture {
    char text[8192];
} t_log_capture;

static inline void t_log_sink(zc_log_level level, const char *subsys, int rank, const char *line,
                              void *user)
{
    (void)subsys;
    (void)rank;
    t_log_capture *c = user;
    if (level != ZC_LOG_WARN)
        return;
    size_t n = strlen(c->text);
    snprintf(c->text + n, sizeof c->text - n, "%s\n", line);
}

#endif
