/* Inside libzeroc_cuda.so: the internal functions of libzeroc that the
 * plugin's code (src/device/cuda.c, src/comm/nccl.c, optrack.c) calls,
 * defined under their usual names and forwarded to libzeroc through the
 * table the entry received (abi.h). Those files therefore compile unchanged
 * into either object, and whatever state these functions keep - the thread's
 * last error, the log level and sink, the memory counters and their fault
 * injection, the host device singleton - is libzeroc's one copy.
 *
 * The plugin never links libzeroc: a test or tool that links zeroc's static
 * archive would then hold two copies of the library. Nothing here is
 * exported (exports.map keeps only the entry), so these definitions bind
 * inside the plugin and never interpose on libzeroc's. */
#include <stdarg.h>
#include <stdio.h>

#include "cuda_plugin/host_calls.h"

#include "base/alloc.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "comm/rendezvous.h"
#include "device/device.h"

/* Set once by the entry before any other plugin code runs; never changes. */
static const zc_cuda_host_calls *host;

void zc__cuda_plugin_set_host(const zc_cuda_host_calls *h) { host = h; }

/* Room for one formatted message; libzeroc's own buffer is no larger. */
#define MSG_MAX 2048

zc_status zc__error(zc_status s, const char *file, int line, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->error(s, file, line, "%s", msg);
}

void zc__error_context(const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    host->error_context("%s", msg);
}

const char *zc_last_error(void) { return host->last_error(); }

int zc__log_enabled(zc_log_level level) { return host->log_enabled(level); }

void zc__log(zc_log_level level, const char *subsys, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    host->log(level, subsys, "%s", msg);
}

zc_status zc__host_alloc(zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                         const char *what, void **out)
{
    return host->host_alloc(acct, cat, bytes, what, out);
}

void zc__host_free(zc_mem_account *acct, zc_mem_category cat, void *p, size_t bytes)
{
    host->host_free(acct, cat, p, bytes);
}

void zc__mem_count(zc_mem_account *acct, zc_mem_kind kind, zc_mem_category cat, int64_t delta)
{
    host->mem_count(acct, kind, cat, delta);
}

int zc__mem_should_fail(zc_mem_kind kind) { return host->mem_should_fail(kind); }

const char *zc_dtype_name(zc_dtype dt) { return host->dtype_name(dt); }

size_t zc_dtype_size(zc_dtype dt) { return host->dtype_size(dt); }

const char *zc__env(const char *name) { return host->env(name); }

const char *zc__env_shown(const char *s, char *buf, size_t cap)
{
    return host->env_shown(s, buf, cap);
}

zc_status zc__device_pick_from_env(int visible, int *index, char *why, size_t why_len)
{
    return host->device_pick_from_env(visible, index, why, why_len);
}

zc_device *zc__device_host(void) { return host->device_host(); }

zc_status zc__comm_timeout_env(double *out) { return host->comm_timeout_env(out); }

zc_status zc__bootstrap_mode(const zc_launch_env *env, zc_boot_mode *out)
{
    return host->bootstrap_mode(env, out);
}

zc_status zc__bootstrap_timeout(double *out) { return host->bootstrap_timeout(out); }

zc_status zc__rendezvous(const zc_rdv_opts *o, void *blob, size_t len)
{
    return host->rendezvous(o, blob, len);
}

#if ZC_HAVE_MPI
zc_status zc__mpi_bcast_blob(const zc_launch_env *env, void *blob, size_t len, double timeout_s)
{
    return host->mpi_bcast_blob(env, blob, len, timeout_s);
}
#endif
