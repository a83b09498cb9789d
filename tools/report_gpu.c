/* `zeroc report`: CUDA, NCCL and MPI as this process finds them at run time
 * (report.h).
 *
 * The CLI links no CUDA library, so each one is opened here by its name
 * through the dynamic loader's search (LD_LIBRARY_PATH, the cache, the
 * RUNPATH) - the way the CUDA plugin finds them - and asked its version
 * through its own entry point, declared here without its headers. A library
 * that is not found says why (dlerror). */
#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"
#include "zc_build_config.h"

#if ZC_HAVE_CUDA
#include "cuda_plugin/load.h"
#endif
#if ZC_HAVE_MPI
#include <mpi.h>
#endif

/* Opens the first of names that loads: its handle, and in o "path" or
 * "error". */
static void *open_first(json_t *o, const char *const *names, int n)
{
    const char *last = "not found";
    char errbuf[512] = "";
    for (int i = 0; i < n; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            struct link_map *lm = NULL;
            if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
                json_object_set_new(o, "path", json_string(lm->l_name));
            else
                json_object_set_new(o, "path", json_string(names[i]));
            json_object_set_new(o, "found", json_true());
            return h;
        }
        const char *e = dlerror();
        if (e) {
            snprintf(errbuf, sizeof errbuf, "%s", e);
            last = errbuf;
        }
    }
    json_object_set_new(o, "found", json_false());
    json_object_set_new(o, "error", json_string(last));
    return NULL;
}

/* An entry point of h as a function pointer (object to function pointer, as
 * dlsym's users do). */
static void *sym(void *h, const char *name) { return h ? dlsym(h, name) : NULL; }

static void cuda_version(json_t *o, int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d.%d", v / 1000, (v % 1000) / 10);
    json_object_set_new(o, "version", json_string(s));
}

json_t *zc__report_cuda(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "built", json_boolean(ZC_HAVE_CUDA));
    /* The driver: version and devices through the driver API. */
    json_t *drv = json_object();
    static const char *const drv_names[] = {"libcuda.so.1"};
    void *hd = open_first(drv, drv_names, 1);
    json_t *devs = json_array();
    if (hd) {
        int (*init)(unsigned) = NULL, (*ver)(int *) = NULL, (*count)(int *) = NULL;
        int (*get)(int *, int) = NULL, (*name)(char *, int, int) = NULL;
        int (*attr)(int *, int, int) = NULL, (*mem)(size_t *, int) = NULL;
        void *p;
        if ((p = sym(hd, "cuInit"))) memcpy(&init, &p, sizeof p);
        if ((p = sym(hd, "cuDriverGetVersion"))) memcpy(&ver, &p, sizeof p);
        if ((p = sym(hd, "cuDeviceGetCount"))) memcpy(&count, &p, sizeof p);
        if ((p = sym(hd, "cuDeviceGet"))) memcpy(&get, &p, sizeof p);
        if ((p = sym(hd, "cuDeviceGetName"))) memcpy(&name, &p, sizeof p);
        if ((p = sym(hd, "cuDeviceGetAttribute"))) memcpy(&attr, &p, sizeof p);
        if ((p = sym(hd, "cuDeviceTotalMem_v2"))) memcpy(&mem, &p, sizeof p);
        int v = 0, n = 0;
        if (ver && ver(&v) == 0)
            cuda_version(drv, v);
        const int irc = init ? init(0) : -1;
        if (irc != 0) {
            char e[96];
            snprintf(e, sizeof e, "cuInit returned %d%s", irc,
                     irc == 100 ? " (CUDA_ERROR_NO_DEVICE: no GPU, or CUDA_VISIBLE_DEVICES "
                                  "hides them)" : "");
            json_object_set_new(drv, "error", json_string(e));
        } else if (count && count(&n) == 0) {
            for (int i = 0; i < n; i++) {
                int dev = 0, major = 0, minor = 0;
                char nm[256] = "";
                size_t bytes = 0;
                json_t *d = json_object();
                if (get && get(&dev, i) == 0) {
                    if (name)
                        name(nm, (int)sizeof nm, dev);
                    if (attr) {
                        attr(&major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
                        attr(&minor, 76, dev); /* ..._MINOR */
                    }
                    if (mem)
                        mem(&bytes, dev);
                }
                char cc[16];
                snprintf(cc, sizeof cc, "%d.%d", major, minor);
                json_object_set_new(d, "index", json_integer(i));
                json_object_set_new(d, "name", json_string(nm));
                json_object_set_new(d, "memory_bytes", json_integer((json_int_t)bytes));
                json_object_set_new(d, "compute_capability", json_string(cc));
                json_array_append_new(devs, d);
            }
        }
    }
    json_object_set_new(o, "driver", drv);
    json_object_set_new(o, "devices", devs);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    json_object_set_new(o, "CUDA_VISIBLE_DEVICES", vis ? json_string(vis) : json_null());
    /* The runtime, cuBLAS and NCCL, by the names the plugin links. */
    json_t *rt = json_object();
    static const char *const rt_names[] = {"libcudart.so.13", "libcudart.so.12",
                                           "libcudart.so.11.0", "libcudart.so"};
    void *hr = open_first(rt, rt_names, 4);
    if (hr) {
        int (*rv)(int *) = NULL;
        void *p = sym(hr, "cudaRuntimeGetVersion");
        int v = 0;
        if (p) {
            memcpy(&rv, &p, sizeof p);
            if (rv(&v) == 0)
                cuda_version(rt, v);
        }
    }
    json_object_set_new(o, "runtime", rt);
    json_t *bl = json_object();
    static const char *const bl_names[] = {"libcublas.so.13", "libcublas.so.12",
                                           "libcublas.so.11", "libcublas.so"};
    void *hb = open_first(bl, bl_names, 4);
    if (hb) {
        int (*prop)(int, int *) = NULL; /* cublasGetProperty(libraryPropertyType, int *) */
        void *p = sym(hb, "cublasGetProperty");
        int ma = 0, mi = 0, pa = 0;
        if (p) {
            memcpy(&prop, &p, sizeof p);
            if (prop(0, &ma) == 0 && prop(1, &mi) == 0 && prop(2, &pa) == 0) {
                char s[32];
                snprintf(s, sizeof s, "%d.%d.%d", ma, mi, pa);
                json_object_set_new(bl, "version", json_string(s));
            }
        }
    }
    json_object_set_new(o, "cublas", bl);
    json_t *nc = json_object();
    static const char *const nc_names[] = {"libnccl.so.2", "libnccl.so"};
    void *hn = open_first(nc, nc_names, 2);
    if (hn) {
        int (*gv)(int *) = NULL;
        void *p = sym(hn, "ncclGetVersion");
        int v = 0;
        if (p) {
            memcpy(&gv, &p, sizeof p);
            if (gv(&v) == 0) {
                char s[32];
                snprintf(s, sizeof s, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
                json_object_set_new(nc, "version", json_string(s));
            }
        }
    }
    json_object_set_new(o, "nccl", nc);
    /* Whether the engine's CUDA plugin would load, and if not why. */
    json_t *pl = json_object();
#if ZC_HAVE_CUDA
    const bool ok = zc__cuda_plugin() != NULL;
    json_object_set_new(pl, "loads", json_boolean(ok));
    if (!ok) {
        char why[1024];
        zc__cuda_unusable_reason(why, sizeof why);
        json_object_set_new(pl, "reason", json_string(why));
    }
#else
    json_object_set_new(pl, "loads", json_false());
    json_object_set_new(pl, "reason", json_string("this build has no CUDA (-Dcuda=disabled or no "
                                                  "CUDA toolkit when it was configured)"));
#endif
    json_object_set_new(o, "plugin", pl);
    return o;
}

/* The first executable `name` on PATH, or NULL. */
static bool on_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        const char *c = strchr(p, ':');
        const size_t n = c ? (size_t)(c - p) : strlen(p);
        snprintf(out, cap, "%.*s/%s", (int)n, p, name);
        struct stat st;
        if (n && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

json_t *zc__report_mpi(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "built", json_boolean(ZC_HAVE_MPI));
#if ZC_HAVE_MPI
    char v[32];
    snprintf(v, sizeof v, "%d.%d", MPI_VERSION, MPI_SUBVERSION);
    json_object_set_new(o, "headers", json_string(v));
    /* Allowed before MPI_Init (MPI 3.0). */
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\n")] = '\0';
        json_object_set_new(o, "library", json_string(lib));
    }
#endif
    char p[1024];
    json_object_set_new(o, "mpirun", on_path("mpirun", p, sizeof p) ? json_string(p)
                                                                   : json_null());
    /* Which launcher's variables this process sees (zc_comm_init_env's). */
    const char *env = getenv("OMPI_COMM_WORLD_SIZE") ? "mpirun (Open MPI)"
                      : getenv("PMI_SIZE")          ? "PMI (MPICH, Slurm)"
                      : getenv("SLURM_NTASKS")      ? "Slurm"
                      : getenv("WORLD_SIZE")        ? "torchrun / deepspeed"
                                                    : "none";
    json_object_set_new(o, "launcher_env", json_string(env));
    return o;
}
