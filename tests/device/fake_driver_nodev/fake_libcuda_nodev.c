/* A stand-in for the NVIDIA driver's libcuda.so.1 that answers the driver
 * API's first questions and nothing more: cuInit returns FAKE_CUDA_INIT
 * (default 100, CUDA_ERROR_NO_DEVICE: a driver without a GPU, or with every
 * GPU hidden), cuDeviceGetCount reports FAKE_CUDA_COUNT (default 0), and
 * cuGetErrorName names 100. Everything the CUDA runtime would need beyond
 * that is missing, so a runtime loaded beside it finds no usable driver
 * (tests/device/test_cuda_plugin_nodev.c). */
#include <stdlib.h>

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Exported, as the driver's are (the project builds with hidden visibility). */
#define DRIVER_API __attribute__((visibility("default")))
DRIVER_API int cuInit(unsigned flags);
DRIVER_API int cuDeviceGetCount(int *count);
DRIVER_API int cuGetErrorName(int error, const char **name);

int cuInit(unsigned flags)
{
    (void)flags;
    return env_int("FAKE_CUDA_INIT", 100);
}

int cuDeviceGetCount(int *count)
{
    *count = env_int("FAKE_CUDA_COUNT", 0);
    return 0;
}

int cuGetErrorName(int error, const char **name)
{
    if (error != 100)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *name = "CUDA_ERROR_NO_DEVICE";
    return 0;
}
