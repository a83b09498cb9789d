/* zc_gpu_env: what a GPU machine offers this build of zeroc, as one JSON line
 * (scripts/gpu_check.sh's environment part).
 *
 *   {"devices":[{"index":0,"name":...,"memory_bytes":...,"sm_count":...,
 *                "compute_capability":"9.0"}],
 *    "driver_version":"13.0","runtime_version":"13.0","cudart_path":...,
 *    "cublas_version":"13.0.0","cublas_path":...,
 *    "nccl":{"found":true,"version":"2.28.9","path":...,"headers":"2.28.9",
 *            "older_than_headers":false},
 *    "error":null}
 *
 * NCCL is opened at run time (dlopen of libnccl.so.2, the loader's search:
 * LD_LIBRARY_PATH, the cache), so the line names the library the NCCL tests
 * will load and compares its version with the headers this build was
 * compiled against. Exit status: 0 at least one device, 3 no usable device
 * (the reason in "error"), 1 the probe itself failed. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <jansson.h>

#include "zc_build_config.h"
#if ZC_HAVE_NCCL
#include <nccl.h>
#endif

/* CUDA's int versions (major * 1000 + minor * 10) as "13.0". */
static json_t *cuda_version(int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d.%d", v / 1000, (v % 1000) / 10);
    return json_string(s);
}

/* NCCL's version code (major * 10000 + minor * 100 + patch since 2.9). */
static json_t *nccl_version(int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    return json_string(s);
}

/* The file the loaded function `fn` lives in, or null. */
typedef void (*any_fn)(void);
static json_t *path_of(any_fn fn)
{
    Dl_info info;
    void *sym = NULL;
    memcpy(&sym, &fn, sizeof sym); /* function to object pointer, for dladdr */
    if (sym && dladdr(sym, &info) && info.dli_fname)
        return json_string(info.dli_fname);
    return json_null();
}

static json_t *probe_nccl(void)
{
    json_t *n = json_object();
#if ZC_HAVE_NCCL
    json_object_set_new(n, "headers", nccl_version(NCCL_VERSION_CODE));
#else
    json_object_set_new(n, "headers", json_null());
#endif
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        json_object_set_new(n, "found", json_false());
        json_object_set_new(n, "error", json_string(e ? e : "dlopen(libnccl.so.2) failed"));
        return n;
    }
    json_object_set_new(n, "found", json_true());
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        json_object_set_new(n, "path", json_string(lm->l_name));
    int (*get_version)(int *) = NULL;
    void *sym = dlsym(h, "ncclGetVersion");
    memcpy(&get_version, &sym, sizeof sym);
    int v = 0;
    if (get_version && get_version(&v) == 0) {
        json_object_set_new(n, "version", nccl_version(v));
#if ZC_HAVE_NCCL
        json_object_set_new(n, "older_than_headers", json_boolean(v < NCCL_VERSION_CODE));
#endif
    } else {
        json_object_set_new(n, "error", json_string("ncclGetVersion failed"));
    }
    /* The handle stays open: the process ends right after. */
    return n;
}

int main(void)
{
    json_t *o = json_object(), *devs = json_array();
    int driver = 0, runtime = 0, count = 0, rc = 0;
    const char *why = NULL;
    cudaError_t e = cudaDriverGetVersion(&driver);
    if (e == cudaSuccess && driver > 0)
        json_object_set_new(o, "driver_version", cuda_version(driver));
    else
        json_object_set_new(o, "driver_version", json_null());
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
        json_object_set_new(o, "runtime_version", cuda_version(runtime));
    json_object_set_new(o, "cudart_path", path_of((any_fn)cudaRuntimeGetVersion));
    int maj = 0, min = 0, pat = 0;
    if (cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &pat) == CUBLAS_STATUS_SUCCESS) {
        char s[48];
        snprintf(s, sizeof s, "%d.%d.%d", maj, min, pat);
        json_object_set_new(o, "cublas_version", json_string(s));
    }
    json_object_set_new(o, "cublas_path", path_of((any_fn)cublasGetProperty));
    json_object_set_new(o, "nccl", probe_nccl());

    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        why = e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices";
        rc = 3;
    }
    for (int i = 0; i < count && !rc; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            why = "cudaGetDeviceProperties failed";
            rc = 1;
            break;
        }
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", p.major, p.minor);
        json_array_append_new(devs, json_pack("{s:i,s:s,s:I,s:i,s:s,s:I}", "index", i, "name",
                                              p.name, "memory_bytes", (json_int_t)p.totalGlobalMem,
                                              "sm_count", p.multiProcessorCount,
                                              "compute_capability", cc, "l2_bytes",
                                              (json_int_t)p.l2CacheSize));
    }
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "error", why ? json_string(why) : json_null());
    char *line = json_dumps(o, JSON_COMPACT);
    if (!line || printf("%s\n", line) < 0 || fflush(stdout) != 0)
        rc = 1;
    free(line);
    json_decref(o);
    return rc;
}
