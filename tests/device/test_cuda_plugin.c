/* The CUDA plugin, libzeroc_cuda.so, and its loading (src/cuda_plugin): a
 * CPU run maps no CUDA library; the plugin this build made loads and shakes
 * hands (its version, the struct sizes, the CUDA runtime's and NCCL's
 * versions); a plugin of another build is refused; and every way of failing
 * to load names the library and how to get it. No GPU is needed: the plugin
 * loads without a driver, it only finds no device. Criterion runs each test
 * in its own process, so what one test maps is not seen by another. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cuda_plugin/load.h"
#include "helpers.h"

#define PLUGIN_PATH ZC_CUDA_PLUGIN_BUILD_DIR "/" ZC_CUDA_PLUGIN_FILE

/* The first line of /proc/self/maps that maps a CUDA library or the plugin,
 * copied to line (empty when there is none). */
static void cuda_mapping(char *line, size_t cap)
{
    static const char *const names[] = {"libzeroc_cuda", "libcudart", "libnccl", "libcublas",
                                        "libcuda.so"};
    line[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f, "cannot read /proc/self/maps");
    char buf[4096];
    while (!line[0] && fgets(buf, sizeof buf, f))
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strstr(buf, names[i])) {
                snprintf(line, cap, "%s", buf);
                break;
            }
    fclose(f);
}

static bool driver_present(void) { return dlopen("libcuda.so.1", RTLD_LAZY) != NULL; }

/* A few steps of a host engine, everything a CPU run of the examples does
 * with the library: nothing of CUDA may be mapped afterwards. This is the
 * claim the plugin exists for; it fails whenever libzeroc links a CUDA
 * library again. */
Test(cuda_plugin, host_run_maps_no_cuda_library)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 2), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", "\"cpu\""),
                 ZC_OK, "%s", zc_last_error());
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t n = 1000;
    zc_param *p = zc_param_add(e, "w", &n, 1, 0);
    cr_assert(p);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    for (int step = 0; step < 3; step++) {
        cr_assert(zc_param_acquire(e, p, NULL));
        cr_assert_eq(zc_param_release(e, p, NULL), ZC_OK);
        float *g = zc_grad_buffer(e, p);
        cr_assert(g);
        for (int64_t i = 0; i < n; i++)
            g[i] = (float)(i % 7) - 3.0f;
        cr_assert_eq(zc_grad_ready(e, p), ZC_OK, "%s", zc_last_error());
        zc_step_info info;
        cr_assert_eq(zc_step(e, &info), ZC_OK, "%s", zc_last_error());
    }
    char line[4096];
    cuda_mapping(line, sizeof line);
    cr_assert_eq(line[0], '\0', "a host run maps %s", line);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

/* Without the NVIDIA driver there is no device to find: counting devices
 * (ZC_DEVICE_AUTO, zc_comm_init_env) loads nothing, and asking for CUDA says
 * what is missing. */
Test(cuda_plugin, no_driver_loads_nothing_and_says_so)
{
    if (driver_present())
        cr_skip_test("this machine has the NVIDIA driver's libcuda.so.1");
    cr_assert_eq(zc__device_cuda_count(), 0);
    zc_device *d = NULL;
    cr_assert_eq(zc__device_open(ZC_DEVICE_AUTO, -1, &d), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d, zc__device_host());
    char line[4096];
    cuda_mapping(line, sizeof line);
    cr_assert_eq(line[0], '\0', "counting devices mapped %s", line);
    cr_assert_eq(zc__device_open(ZC_DEVICE_CUDA, 0, &d), ZC_ERR_UNSUPPORTED);
    const char *m = zc_last_error();
    cr_assert(strstr(m, "libcuda.so.1 cannot be found") && strstr(m, "NVIDIA driver"), "%s", m);
    char why[1024];
    zc__cuda_unusable_reason(why, sizeof why);
    cr_assert(strstr(why, "libcuda.so.1"), "%s", why);
    int ordinal = 7;
    cr_assert_eq(zc_cuda_device_index(-1, &ordinal), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(ordinal, -1);
    cr_assert(strstr(zc_last_error(), "libcuda.so.1"), "%s", zc_last_error());
}

/* The plugin of this build: it loads, agrees with libzeroc, reports the
 * versions of the libraries it was loaded with, and answers. */
Test(cuda_plugin, this_builds_plugin_loads)
{
    const zc_cuda_plugin_ops *ops = NULL;
    char why[1024] = "";
    cr_assert_eq(zc__cuda_plugin_load_path(PLUGIN_PATH, &ops, why, sizeof why), 0, "%s", why);
    cr_assert(ops);
    cr_assert_str_eq(ops->version, ZC_CUDA_PLUGIN_VERSION);
    zc_cuda_plugin_shape shape = zc__cuda_plugin_shape();
    cr_assert_eq(memcmp(&ops->shape, &shape, sizeof shape), 0);
    /* CUDA 13's runtime (kernels/meson.build builds for it) and the NCCL
     * floor of the non-blocking communicators. */
    cr_assert_geq(ops->cudart_version, 13000);
    if (ZC_HAVE_NCCL) {
        cr_assert_geq(ops->nccl_version, 21403);
        cr_assert(ops->nccl_create && ops->nccl_from_env && ops->nccl_stall);
    } else {
        cr_assert_eq(ops->nccl_version, 0);
        cr_assert_null(ops->nccl_create);
    }
    cr_assert(ops->device_open && ops->host_register && ops->host_unregister);
    cr_assert_eq(ops->device_cpuset != NULL, ZC_HAVE_HWLOC != 0);
    /* The plugin is now mapped, with the libraries it needs. */
    char line[4096];
    cuda_mapping(line, sizeof line);
    cr_assert(strstr(line, "libzeroc_cuda") || strstr(line, "libcudart") ||
              strstr(line, "libnccl"), "the loaded plugin is not in /proc/self/maps");
    int n = ops->device_count();
    cr_assert_geq(n, 0);
    if (n == 0) {
        ops->unusable_reason(why, sizeof why);
        cr_assert(why[0], "no device and no reason");
        /* Its device opening fails the way the loader's does. */
        zc_device *d = NULL;
        cr_assert_eq(ops->device_open(0, &d), ZC_ERR_UNSUPPORTED);
        cr_assert(strstr(zc_last_error(), "device 'cuda' requested but unusable"), "%s",
                  zc_last_error());
        cr_assert_null(d);
    }
}

/* The entry refuses a libzeroc of another version or build (the sizes of
 * the structs the two share), naming both. */
Test(cuda_plugin, handshake_refuses_another_build)
{
    void *h = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "%s", dlerror());
    void *sym = dlsym(h, ZC_CUDA_PLUGIN_ENTRY);
    cr_assert(sym, "no %s in %s", ZC_CUDA_PLUGIN_ENTRY, PLUGIN_PATH);
    zc_cuda_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    zc_cuda_host_calls host = {.version = "9.9.9", .shape = zc__cuda_plugin_shape()};
    const zc_cuda_plugin_ops *ops = (const void *)&host;
    char why[1024] = "";
    cr_assert_eq(entry(&host, &ops, why, sizeof why), -1);
    cr_assert_null(ops);
    cr_assert(strstr(why, "9.9.9") && strstr(why, ZC_CUDA_PLUGIN_VERSION) &&
              strstr(why, "same build"), "%s", why);
    host.version = ZC_CUDA_PLUGIN_VERSION;
    host.shape.device_ops += sizeof(void *);
    cr_assert_eq(entry(&host, &ops, why, sizeof why), -1);
    cr_assert(strstr(why, "another build"), "%s", why);
}

Test(cuda_plugin, missing_plugin_is_named_with_the_remedy)
{
    const zc_cuda_plugin_ops *ops = (const void *)&ops;
    char why[1024];
    cr_assert_eq(zc__cuda_plugin_load_path("/nonexistent-zc-dir/" ZC_CUDA_PLUGIN_FILE, &ops, why,
                                           sizeof why), -1);
    cr_assert_null(ops);
    cr_assert(strstr(why, ZC_CUDA_PLUGIN_FILE " cannot be found") &&
              strstr(why, "meson install"), "%s", why);
}

Test(cuda_plugin, a_file_that_is_not_a_library_is_refused)
{
    char dir[] = "/tmp/zc-plugin-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/%s", dir, ZC_CUDA_PLUGIN_FILE);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "not an ELF file\n", 16), 16);
    close(fd);
    const zc_cuda_plugin_ops *ops = NULL;
    char why[1024];
    int rc = zc__cuda_plugin_load_path(path, &ops, why, sizeof why);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(why, path) && strstr(why, "cannot be loaded"), "%s", why);
}

/* What the loader says when the plugin needs a library the dynamic loader
 * cannot find, from the loader's own words for a missing library. */
static void expect_named(const char *lib, const char *what)
{
    cr_assert_null(dlopen(lib, RTLD_NOW | RTLD_LOCAL), "%s exists here", lib);
    char msg[1024];
    zc__cuda_describe_dlerror("/x/" ZC_CUDA_PLUGIN_FILE, dlerror(), msg, sizeof msg);
    char want[128];
    snprintf(want, sizeof want, "%s cannot be found", lib);
    cr_assert(strstr(msg, want) && strstr(msg, what), "%s: %s", lib, msg);
}

Test(cuda_plugin, a_missing_cuda_library_is_named_with_the_remedy)
{
    expect_named("libcudart.so.99", "the CUDA runtime");
    expect_named("libnccl.so.99", "NCCL 2");
    expect_named("libcuda.so.99", "NVIDIA driver");
    /* Another library: named, and the plugin that needs it. */
    cr_assert_null(dlopen("libzc_absent_dependency.so.1", RTLD_NOW));
    char msg[1024];
    zc__cuda_describe_dlerror("/x/" ZC_CUDA_PLUGIN_FILE, dlerror(), msg, sizeof msg);
    cr_assert(strstr(msg, "/x/" ZC_CUDA_PLUGIN_FILE " needs libzc_absent_dependency.so.1") &&
              strstr(msg, "LD_LIBRARY_PATH"), "%s", msg);
}
