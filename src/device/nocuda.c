/* Built when zeroc has no CUDA backend: the CUDA device is simply absent. */
#include "device/device.h"

int zc__device_cuda_count(void) { return 0; }

zc_status zc__device_cuda_open(int index, zc_device **out)
{
    (void)index;
    *out = NULL;
    return ZC_ERR(ZC_ERR_UNSUPPORTED,
                  "device 'cuda' requested but this zeroc was built without CUDA "
                  "(reconfigure with -Dcuda=enabled)");
}
