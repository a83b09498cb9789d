/* Logging (internal): levels, subsystems, rank prefix.
 *
 * The level is checked before formatting, so disabled log lines cost one load
 * and a compare. The level comes from ZC_LOG (error|warn|info|debug|trace,
 * default warn); ZC_LOG_SUBSYS=zero3,offload restricts output to those
 * subsystems; ZC_LOG_RANKS=all shows every rank (default: rank 0 and rank-less
 * lines). The rank is thread-local: rank threads call zc__log_set_rank(). */
#ifndef ZC_BASE_LOG_H
#define ZC_BASE_LOG_H

#include "base/error.h"

extern int zc__log_level_cached; /* -1 until initialised from the environment */

int zc__log_enabled(zc_log_level level);
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
