/* Saving and restoring a thread's CUDA context (cuda_guard.h). */
#include "device/cuda_guard.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* CUresult cuCtxGetCurrent(CUcontext *) and cuCtxSetCurrent(CUcontext),
 * CUDA 4.0 ABI; CUresult is an int enum and CUcontext a pointer. */
typedef int (*ctx_get_fn)(void **ctx);
typedef int (*ctx_set_fn)(void *ctx);

static pthread_once_t looked_up = PTHREAD_ONCE_INIT;
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;

static void lookup(void)
{
    void *g = NULL, *s = NULL;
    enum cudaDriverEntryPointQueryResult qg = cudaDriverEntryPointSymbolNotFound, qs = qg;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &g, 4000, cudaEnableDefault, &qg) ==
            cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &s, 4000, cudaEnableDefault, &qs) ==
            cudaSuccess &&
        qg == cudaDriverEntryPointSuccess && qs == cudaDriverEntryPointSuccess && g && s) {
        /* Object to function pointer: memcpy, as dlsym's users do. */
        memcpy(&ctx_get, &g, sizeof g);
        memcpy(&ctx_set, &s, sizeof s);
    } else {
        (void)cudaGetLastError(); /* no driver: nothing will be switched either */
    }
}

void zc__cuda_guard_enter(zc_cuda_guard *g, int device)
{
    pthread_once(&looked_up, lookup);
    g->saved = NULL;
    g->valid = ctx_get && ctx_get(&g->saved) == 0;
    (void)cudaSetDevice(device);
}

void zc__cuda_guard_leave(zc_cuda_guard *g)
{
    if (!g->valid || !g->saved)
        return;
    void *now = NULL;
    if (ctx_get(&now) == 0 && now == g->saved)
        return;
    (void)ctx_set(g->saved);
}
