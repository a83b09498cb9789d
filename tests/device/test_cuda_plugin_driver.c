/* The CUDA plugin on a machine whose NVIDIA driver library is present but
 * finds no GPU (a stand-in libcuda.so.1 on LD_LIBRARY_PATH: fake_driver/):
 * counting devices - ZC_DEVICE_AUTO, zc_comm_init_env's choice - loads the
 * plugin, found the way a program of the build tree finds it, and the
 * answers are the CUDA runtime's own; a host run still maps nothing of
 * CUDA. Each test runs in its own process (Criterion). */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cuda_plugin/load.h"
#include "helpers.h"

Test(cuda_plugin_driver, counting_devices_loads_the_plugin)
{
    cr_assert_not(t_mapped("libzeroc_cuda.so"));
    cr_assert_eq(zc__device_cuda_count(), 0, "the stand-in driver has no device");
    /* Loaded from the build tree (this program links the static archive and
     * lives in it), with the runtime and NCCL it links. */
    cr_assert(t_mapped(ZC_CUDA_PLUGIN_BUILD_DIR "/" ZC_CUDA_PLUGIN_FILE),
              "the plugin was not loaded from the build tree");
    cr_assert(t_mapped("libcudart.so"));
    cr_assert(zc__cuda_plugin());
    /* Now the reasons are the runtime's, not a missing library's. */
    char why[1024];
    zc__cuda_unusable_reason(why, sizeof why);
    cr_assert(why[0] && !strstr(why, "cannot be found"), "%s", why);
    zc_device *d = NULL;
    cr_assert_eq(zc__device_open(ZC_DEVICE_AUTO, -1, &d), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d, zc__device_host());
    cr_assert_eq(zc__device_open(ZC_DEVICE_CUDA, 0, &d), ZC_ERR_UNSUPPORTED);
    cr_assert(strstr(zc_last_error(), "device 'cuda' requested but unusable") &&
                  strstr(zc_last_error(), why),
              "%s", zc_last_error());
}

/* A driver does not change what a host run maps: nothing of CUDA. */
Test(cuda_plugin_driver, host_run_maps_no_cuda_library)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t n = 256;
    zc_param *p = zc_param_add(e, "w", &n, 1, 0);
    cr_assert(p);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    cr_assert(zc_grad_buffer(e, p));
    cr_assert_eq(zc_grad_ready(e, p), ZC_OK, "%s", zc_last_error());
    zc_step_info info;
    cr_assert_eq(zc_step(e, &info), ZC_OK, "%s", zc_last_error());
    cr_assert_not(t_mapped("libzeroc_cuda.so"));
    cr_assert_not(t_mapped("libcudart.so"));
    cr_assert_not(t_mapped("libnccl.so"));
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}
