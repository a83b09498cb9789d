/* Logging (internal): levels, subsystems, rank prefix.
 *
 * The level is checked before formatting, so disabled log lines cost one load
 * and a compare. The level comes from ZC_LOG (off|error|warn|info|debug|trace,
 * any case, default warn); ZC_LOG_SUBSYS=zero3,offload restricts output to
 * those subsystems (ckpt, comm, config, core, device, load, offload, optim, zero3);
 * ZC_LOG_RANKS=all shows every rank (0, the default: rank 0 and rank-less
 * lines). The rank is thread-local: rank threads call zc__log_set_rank().
 *
 * The variables are read once, at the first log line or check. A line has no
 * status to fail with, so a malformed value leaves that variable's default
 * and is reported by zc__log_env_check, which the calls that begin a
 * program's work call first (zc_config_create, zc_config_load*,
 * zc_comm_local_world, zc_comm_init_env, zc_engine_create; the zeroc CLI
 * before any command): each fails with it. */
#ifndef ZC_BASE_LOG_H
#define ZC_BASE_LOG_H

#include "base/error.h"

extern int zc__log_level_cached; /* -1 until initialised from the environment */

int zc__log_enabled(zc_log_level level);
/* ZC_ERR_CONFIG naming the first malformed ZC_LOG, ZC_LOG_RANKS or
 * ZC_LOG_SUBSYS (its value and what is accepted), else ZC_OK. */
zc_status zc__log_env_check(void);
/* Test hook: forget what was read, so the next line or check reads the
 * variables again (and the level set by zc_log_set_level is forgotten). */
void zc__log_env_reset(void);
void zc__log(zc_log_level level, const char *subsys, const char *fmt, ...) ZC_PRINTF(3, 4);
void zc__log_set_rank(int rank);
int zc__log_rank(void);

#define ZC_LOG_AT(level, subsys, ...)              \
    do {                                           \
        if (zc__log_enabled(level))                \
            zc__log((level), (subsys), __VA_ARGS__); \
    } while (0)

#define ZC_LOGE(subsys, ...) ZC_LOG_AT(ZC_LOG_ERROR, subsys, __VA_ARGS__)
#define ZC_LOGW(subsys, ...) ZC_LOG_AT(ZC_LOG_WARN, subsys, __VA_ARGS__)
#define ZC_LOGI(subsys, ...) ZC_LOG_AT(ZC_LOG_INFO, subsys, __VA_ARGS__)
#define ZC_LOGD(subsys, ...) ZC_LOG_AT(ZC_LOG_DEBUG, subsys, __VA_ARGS__)
#define ZC_LOGT(subsys, ...) ZC_LOG_AT(ZC_LOG_TRACE, subsys, __VA_ARGS__)

#endif
