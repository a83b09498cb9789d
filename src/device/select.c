/* Choosing the device backend at run time. */
#include <pthread.h>

#include "core/log.h"
#include "device/device.h"

static pthread_once_t choice_logged = PTHREAD_ONCE_INIT;
static const char *choice_text = "host";

static void log_choice(void)
{
    ZC_LOGI("device", "device backend: %s", choice_text);
}

zc_status zc__device_open(zc_device_kind kind, int index, zc_device **out)
{
    *out = NULL;
    switch (kind) {
    case ZC_DEVICE_HOST:
        *out = zc__device_host();
        return ZC_OK;
    case ZC_DEVICE_CUDA:
        return zc__device_cuda_open(index, out);
    case ZC_DEVICE_AUTO:
        if (zc__device_cuda_count() > 0) {
            ZC_CHECK(zc__device_cuda_open(index, out));
            choice_text = "cuda";
        } else {
            *out = zc__device_host();
            choice_text = "host (no CUDA device)";
        }
        pthread_once(&choice_logged, log_choice);
        return ZC_OK;
    default:
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.device: unknown device kind %d",
                      (int)kind);
    }
}
