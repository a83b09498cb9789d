/* Counting devices on a machine whose NVIDIA driver sees no GPU (a stand-in
 * libcuda.so.1 on LD_LIBRARY_PATH: fake_driver_nodev/, answering cuInit with
 * FAKE_CUDA_INIT and cuDeviceGetCount with FAKE_CUDA_COUNT): the driver is
 * asked directly and nothing of the CUDA runtime, NCCL or the plugin is
 * mapped to learn that there is no device; a driver that reports devices or
 * fails otherwise hands the question to the runtime in the plugin, as
 * before (src/cuda_plugin/driver_count.h). Each test runs in its own
 * process (Criterion), so each asks the driver afresh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cuda_plugin/load.h"
#include "helpers.h"

static void assert_nothing_of_cuda_mapped(void)
{
    cr_assert_not(t_mapped("libzeroc_cuda.so"));
    cr_assert_not(t_mapped("libcudart.so"));
    cr_assert_not(t_mapped("libnccl.so"));
}

/* The driver's CUDA_ERROR_NO_DEVICE: no device, the host path, the reason
 * named - and none of it loads the plugin. */
Test(cuda_plugin_nodev, no_device_by_the_driver_loads_nothing)
{
    unsetenv("CUDA_VISIBLE_DEVICES");
    cr_assert(t_mapped("libcuda.so.1") == false);
    cr_assert_eq(zc__device_cuda_count(), 0);
    cr_assert(t_mapped("libcuda.so.1"), "the stand-in driver was not asked");
    assert_nothing_of_cuda_mapped();
    zc_device *d = NULL;
    cr_assert_eq(zc__device_open(ZC_DEVICE_AUTO, -1, &d), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d, zc__device_host());
    int ordinal = 7;
    cr_assert_eq(zc_cuda_device_index(-1, &ordinal), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(ordinal, -1);
    cr_assert(strstr(zc_last_error(),
                     "the NVIDIA driver reports no CUDA device (CUDA_ERROR_NO_DEVICE)") &&
                  !strstr(zc_last_error(), "CUDA_VISIBLE_DEVICES"),
              "%s", zc_last_error());
    assert_nothing_of_cuda_mapped();
    t_assert_no_leaks();
}

/* Every device hidden (set and empty): the reason says so. */
Test(cuda_plugin_nodev, hidden_devices_are_named_in_the_reason)
{
    cr_assert_eq(setenv("CUDA_VISIBLE_DEVICES", "", 1), 0);
    cr_assert_eq(zc__device_cuda_count(), 0);
    char why[1024];
    zc__cuda_unusable_reason(why, sizeof why);
    cr_assert(strstr(why, "(CUDA_ERROR_NO_DEVICE) with CUDA_VISIBLE_DEVICES=''"), "%s", why);
    assert_nothing_of_cuda_mapped();
}

/* cuInit succeeds and the count is 0: no device either. */
Test(cuda_plugin_nodev, a_count_of_zero_loads_nothing)
{
    cr_assert_eq(setenv("FAKE_CUDA_INIT", "0", 1), 0);
    unsetenv("CUDA_VISIBLE_DEVICES");
    cr_assert_eq(zc__device_cuda_count(), 0);
    char why[1024];
    zc__cuda_unusable_reason(why, sizeof why);
    cr_assert(strstr(why, "the NVIDIA driver reports no CUDA device (a count of 0)"), "%s", why);
    assert_nothing_of_cuda_mapped();
}

/* A driver that reports devices hands the count to the runtime, which
 * finds this stand-in unusable: the plugin is loaded, the count is the
 * runtime's (0), and the reason is no longer the driver's. */
Test(cuda_plugin_nodev, devices_by_the_driver_ask_the_runtime)
{
    cr_assert_eq(setenv("FAKE_CUDA_INIT", "0", 1), 0);
    cr_assert_eq(setenv("FAKE_CUDA_COUNT", "2", 1), 0);
    cr_assert_eq(zc__device_cuda_count(), 0);
    cr_assert(t_mapped("libzeroc_cuda.so"), "the runtime was not asked");
    cr_assert(t_mapped("libcudart.so"));
    char why[1024];
    zc__cuda_unusable_reason(why, sizeof why);
    cr_assert(why[0] && !strstr(why, "the NVIDIA driver reports"), "%s", why);
}

/* Another driver error (999, CUDA_ERROR_UNKNOWN) is not taken as "no
 * device": the runtime decides and gives its own reason. */
Test(cuda_plugin_nodev, another_driver_error_asks_the_runtime)
{
    cr_assert_eq(setenv("FAKE_CUDA_INIT", "999", 1), 0);
    cr_assert_eq(zc__device_cuda_count(), 0);
    cr_assert(t_mapped("libzeroc_cuda.so"), "the runtime was not asked");
}

/* Asking for CUDA explicitly still gets the runtime's whole story. */
Test(cuda_plugin_nodev, an_explicit_cuda_device_gets_the_runtime_reason)
{
    zc_device *d = NULL;
    cr_assert_eq(zc__device_open(ZC_DEVICE_CUDA, 0, &d), ZC_ERR_UNSUPPORTED);
    cr_assert(strstr(zc_last_error(), "device 'cuda' requested but unusable"), "%s",
              zc_last_error());
    cr_assert(t_mapped("libzeroc_cuda.so"));
}
