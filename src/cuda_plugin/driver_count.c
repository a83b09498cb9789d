/* Counting CUDA devices through the driver's own API (driver_count.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/log.h"
#include "cuda_plugin/driver_count.h"

/* The driver API's results and calls used here (cuda.h's values: CUresult
 * is an int-sized enum, and these numbers are part of its ABI). */
#define CU_SUCCESS 0
#define CU_ERROR_NO_DEVICE 100
typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_device_get_count_fn)(int *count);
typedef int (*cu_get_error_name_fn)(int error, const char **name);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int count = -1;
static char reason[512];

static void ask_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h)
        return; /* the plugin's loader says why (load.c) */
    /* Object pointers copied into function pointers, as dlsym's users do. */
    void *init_p = dlsym(h, "cuInit"), *count_p = dlsym(h, "cuDeviceGetCount"),
         *name_p = dlsym(h, "cuGetErrorName");
    if (!init_p || !count_p) {
        ZC_LOGD("device", "libcuda.so.1 has no cuInit/cuDeviceGetCount: the runtime decides");
        return;
    }
    cu_init_fn cu_init;
    cu_device_get_count_fn cu_count;
    memcpy(&cu_init, &init_p, sizeof cu_init);
    memcpy(&cu_count, &count_p, sizeof cu_count);
    int n = 0, r = cu_init(0);
    if (r == CU_SUCCESS)
        r = cu_count(&n);
    if (r != CU_SUCCESS && r != CU_ERROR_NO_DEVICE) {
        ZC_LOGD("device", "the driver's cuInit/cuDeviceGetCount failed (%d): the runtime decides",
                r);
        return;
    }
    if (r == CU_SUCCESS && n > 0) {
        count = n;
        return;
    }
    const char *name = r == CU_SUCCESS ? "a count of 0" : "CUDA_ERROR_NO_DEVICE";
    if (r != CU_SUCCESS && name_p) {
        cu_get_error_name_fn cu_name;
        memcpy(&cu_name, &name_p, sizeof cu_name);
        const char *s = NULL;
        if (cu_name(r, &s) == CU_SUCCESS && s)
            name = s;
    }
    /* Set and empty is the usual way to hide every device, so presence
     * counts here (zc__env treats empty as unset); only shown, never parsed. */
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char shown[ZC_ENV_SHOWN_MAX];
    if (visible)
        snprintf(reason, sizeof reason, "the NVIDIA driver reports no CUDA device (%s) with "
                 "CUDA_VISIBLE_DEVICES='%s'", name, zc__env_shown(visible, shown, sizeof shown));
    else
        snprintf(reason, sizeof reason, "the NVIDIA driver reports no CUDA device (%s)", name);
    count = 0;
}

int zc__cuda_driver_device_count(char *why, size_t cap)
{
    pthread_once(&once, ask_driver);
    if (count == 0 && why && cap)
        snprintf(why, cap, "%s", reason);
    return count;
}
