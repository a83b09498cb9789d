/* Keeping a caller's thread on its own CUDA context across a call that works
 * on another device (CUDA builds only).
 *
 * The runtime's current device is per thread, and cudaSetDevice(n) makes
 * device n's context current on it: a library call that switched devices
 * and returned would leave the caller's next cudaMalloc or launch on the
 * library's GPU. Restoring with cudaSetDevice(previous) is not right either:
 * a thread that never used CUDA reports device 0, and "restoring" it would
 * create a context on GPU 0 in every process of a job. So the guard saves
 * and restores the thread's current context itself, through the driver's
 * cuCtxGetCurrent / cuCtxSetCurrent reached via the runtime's entry-point
 * query (no link against libcuda). A thread that had no context on entry is
 * left on the device the call used: the GPU it would most likely pick, at
 * no cost to another GPU. */
#ifndef ZC_DEVICE_CUDA_GUARD_H
#define ZC_DEVICE_CUDA_GUARD_H

#include <stdbool.h>

typedef struct zc_cuda_guard {
    void *saved;   /* the CUcontext current on entry (NULL: none) */
    bool valid;    /* whether `saved` was read; false: nothing to restore */
} zc_cuda_guard;

/* Saves the calling thread's current context, then makes `device` current
 * (cudaSetDevice; its error, if any, is left to the caller's next call to
 * find, as before the guard). */
void zc__cuda_guard_enter(zc_cuda_guard *g, int device);
/* Makes the saved context current again (a no-op when it still is, or when
 * the thread had none). */
void zc__cuda_guard_leave(zc_cuda_guard *g);

#endif
