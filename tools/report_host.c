/* `zeroc report`: the build, the host Adam, the CPU, the topology and the
 * memory (report.h). */
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/regfile.h"
#include "optim/adam.h"
#include "optim/adam_pace.h"
#include "report.h"
#include "zc_build_config.h"
#include "zeroc/zeroc.h"

#if ZC_HAVE_HWLOC
#include <hwloc.h>
#endif

#ifndef ZC_REPORT_BUILDTYPE
#define ZC_REPORT_BUILDTYPE "unknown"
#endif
#ifndef ZC_REPORT_GPU_ARCH
#define ZC_REPORT_GPU_ARCH ""
#endif
#ifndef ZC_REPORT_SANITIZE
#define ZC_REPORT_SANITIZE "none"
#endif

json_t *zc__report_build(void)
{
    json_t *o = json_object();
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", ZEROC_VERSION_MAJOR, ZEROC_VERSION_MINOR,
             ZEROC_VERSION_PATCH);
    json_object_set_new(o, "version", json_string(v));
    json_object_set_new(o, "build_type", json_string(ZC_REPORT_BUILDTYPE));
    json_object_set_new(o, "sanitize", json_string(ZC_REPORT_SANITIZE));
#ifdef __VERSION__
    json_object_set_new(o, "compiler", json_string(__VERSION__));
#endif
    json_t *opt = json_object();
    json_object_set_new(opt, "cuda", json_boolean(ZC_HAVE_CUDA));
    json_object_set_new(opt, "gpu_arch", json_string(ZC_HAVE_CUDA ? ZC_REPORT_GPU_ARCH : ""));
    json_object_set_new(opt, "nccl", json_boolean(ZC_HAVE_NCCL));
    json_object_set_new(opt, "mpi", json_boolean(ZC_HAVE_MPI));
    json_object_set_new(opt, "io_uring", json_boolean(ZC_HAVE_URING));
    json_object_set_new(opt, "hwloc", json_boolean(ZC_HAVE_HWLOC));
    json_object_set_new(opt, "xxhash_dispatch", json_boolean(ZC_HAVE_XXH_DISPATCH));
    json_object_set_new(o, "options", opt);
    /* The file that holds the library's code (libzeroc.so, or this program
     * when it linked the static archive). */
    Dl_info info;
    void *sym = NULL;
    zc_status (*fn)(zc_config **) = zc_config_create;
    memcpy(&sym, &fn, sizeof sym);
    if (dladdr(sym, &info) && info.dli_fname)
        json_object_set_new(o, "library", json_string(info.dli_fname));
    return o;
}

json_t *zc__report_adam(void)
{
    json_t *o = json_object(), *built = json_array(), *usable = json_array();
    json_t *why_not = json_object();
    for (int i = 0; i < zc__adam_isa_count(); i++) {
        bool compiled = false, runs = false;
        const char *why = NULL;
        const char *name = zc__adam_isa_name(i, &compiled, &runs, &why);
        if (compiled)
            json_array_append_new(built, json_string(name));
        if (runs)
            json_array_append_new(usable, json_string(name));
        else
            json_object_set_new(why_not, name, json_string(why ? why : "not usable"));
    }
    json_object_set_new(o, "compiled", built);
    json_object_set_new(o, "usable", usable);
    json_object_set_new(o, "not_usable", why_not);
    const int sel = zc__adam_isa_selected();
    if (sel >= 0) {
        bool c, u;
        const char *why;
        json_object_set_new(o, "selected", json_string(zc__adam_isa_name(sel, &c, &u, &why)));
    } else {
        json_object_set_new(o, "selected", json_null());
        json_object_set_new(o, "error", json_string(zc_last_error()));
    }
    json_object_set_new(o, "forced_by", json_string(getenv("ZC_CPU_ISA") ? "ZC_CPU_ISA" : ""));
    zc_adam_pace pace;
    if (zc__adam_pace_begin(&pace) == ZC_OK)
        json_object_set_new(o, "threads", json_integer(pace.max_threads));
    else
        json_object_set_new(o, "threads_error", json_string(zc_last_error()));
    return o;
}

/* A line's value after "key" and ':' in a /proc file, in buf; false if none. */
static bool proc_field(const char *path, const char *key, char *buf, size_t cap)
{
    char err[160], line[512];
    FILE *f = zc__fopen_regular(path, "a /proc file", err, sizeof err);
    if (!f)
        return false;
    bool found = false;
    const size_t kl = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) || (line[kl] != ':' && line[kl] != ' ' && line[kl] != '\t'))
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(buf, cap, "%s", v);
        buf[strcspn(buf, "\n")] = '\0';
        found = true;
    }
    fclose(f);
    return found;
}

json_t *zc__report_cpu(void)
{
    json_t *o = json_object();
    char model[256];
    if (proc_field("/proc/cpuinfo", "model name", model, sizeof model))
        json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "cpus_online", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        json_object_set_new(o, "cpus_allowed", json_integer(CPU_COUNT(&set)));
    __builtin_cpu_init();
    json_t *isa = json_object();
    static const char *const feats[] = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f",
                                        "avx512bw", "avx512bf16"};
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++) {
        bool has = false;
        /* __builtin_cpu_supports takes a literal: one call per name. */
        switch (i) {
        case 0: has = __builtin_cpu_supports("sse4.2"); break;
        case 1: has = __builtin_cpu_supports("avx"); break;
        case 2: has = __builtin_cpu_supports("avx2"); break;
        case 3: has = __builtin_cpu_supports("fma"); break;
        case 4: has = __builtin_cpu_supports("f16c"); break;
        case 5: has = __builtin_cpu_supports("avx512f"); break;
        case 6: has = __builtin_cpu_supports("avx512bw"); break;
        default: has = __builtin_cpu_supports("avx512bf16"); break;
        }
        json_object_set_new(isa, feats[i], json_boolean(has));
    }
    json_object_set_new(o, "isa", isa);
    double peak = 0;
    char how[160] = "";
    if (zc_host_peak_flops(&peak, how, sizeof how) == ZC_OK) {
        json_object_set_new(o, "peak_flops", json_real(peak));
        json_object_set_new(o, "peak_flops_how", json_string(how));
    } else {
        json_object_set_new(o, "peak_flops", json_null());
        json_object_set_new(o, "peak_flops_how", json_string(zc_last_error()));
    }
    return o;
}

json_t *zc__report_topology(void)
{
    json_t *o = json_object();
#if ZC_HAVE_HWLOC
    const unsigned v = hwloc_get_api_version();
    char ver[32];
    snprintf(ver, sizeof ver, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
    json_object_set_new(o, "hwloc", json_string(ver));
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
        json_object_set_new(o, "error", json_string("hwloc_topology_load failed"));
        return o;
    }
    json_object_set_new(o, "packages",
                        json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE)));
    json_object_set_new(o, "cores", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE)));
    json_object_set_new(o, "pus", json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU)));
    json_object_set_new(o, "l3_caches",
                        json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE)));
    const int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    json_t *nodes = json_array();
    for (int i = 0; i < nn; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
        json_t *x = json_object();
        char cpus[256] = "";
        if (n->cpuset)
            hwloc_bitmap_list_snprintf(cpus, sizeof cpus, n->cpuset);
        json_object_set_new(x, "os_index", json_integer(n->os_index));
        json_object_set_new(x, "memory_bytes", json_integer((json_int_t)n->attr->numanode.local_memory));
        json_object_set_new(x, "cpus", json_string(cpus));
        json_array_append_new(nodes, x);
    }
    json_object_set_new(o, "numa_nodes", nodes);
    hwloc_topology_destroy(topo);
#else
    json_object_set_new(o, "error", json_string("built without hwloc (-Dhwloc=disabled or "
                                                "libhwloc-dev missing)"));
#endif
    return o;
}

/* A byte count from a /proc/meminfo line ("123456 kB"), or -1. */
static json_t *meminfo(const char *key)
{
    char v[64];
    long long kb = -1;
    if (proc_field("/proc/meminfo", key, v, sizeof v) && sscanf(v, "%lld", &kb) == 1)
        return json_integer((json_int_t)kb * 1024);
    return json_null();
}

/* The first line of a small file, or NULL. */
static bool first_line(const char *path, char *buf, size_t cap)
{
    char err[160];
    FILE *f = zc__fopen_regular(path, "a cgroup file", err, sizeof err);
    if (!f)
        return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* A cgroup limit: its bytes, null for "max" (none), absent when missing. */
static void cg_limit(json_t *o, const char *dir, const char *file, const char *key)
{
    char p[700], v[128];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (!first_line(p, v, sizeof v)) {
        /* No such file: the root cgroup, or the controller is off; either
         * way nothing limits this process there. */
        json_object_set_new(o, key, json_null());
        return;
    }
    long long n;
    if (!strcmp(v, "max"))
        json_object_set_new(o, key, json_null());
    else if (sscanf(v, "%lld", &n) == 1 && !strchr(v, ' '))
        json_object_set_new(o, key, json_integer(n));
    else
        json_object_set_new(o, key, json_string(v));
}

json_t *zc__report_memory(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "mem_total", meminfo("MemTotal"));
    json_object_set_new(o, "mem_available", meminfo("MemAvailable"));
    json_object_set_new(o, "swap_total", meminfo("SwapTotal"));
    json_object_set_new(o, "hugepages_total", meminfo("HugePages_Total"));
    /* The cgroup (v2: "0::/path") this process is in, and its limits. */
    json_t *cg = json_object();
    char line[600] = "", dir[700] = "";
    char err[160];
    FILE *f = zc__fopen_regular("/proc/self/cgroup", "the process's cgroup", err, sizeof err);
    if (f) {
        char l[600];
        while (fgets(l, sizeof l, f))
            if (!strncmp(l, "0::", 3)) {
                snprintf(line, sizeof line, "%s", l + 3);
                line[strcspn(line, "\n")] = '\0';
            }
        fclose(f);
    }
    if (line[0]) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(line, "/") ? line : "");
        json_object_set_new(cg, "version", json_integer(2));
        json_object_set_new(cg, "path", json_string(line));
        cg_limit(cg, dir, "memory.max", "memory_max");
        cg_limit(cg, dir, "memory.high", "memory_high");
        cg_limit(cg, dir, "memory.swap.max", "memory_swap_max");
        char cpu[128];
        char p[760];
        snprintf(p, sizeof p, "%s/cpu.max", dir);
        if (first_line(p, cpu, sizeof cpu))
            json_object_set_new(cg, "cpu_max", json_string(cpu));
    } else {
        json_object_set_new(cg, "version", json_integer(1));
        cg_limit(cg, "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory_max");
    }
    json_object_set_new(o, "cgroup", cg);
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
        json_object_set_new(o, "memlock_limit", rl.rlim_cur == RLIM_INFINITY
                                                     ? json_null()
                                                     : json_integer((json_int_t)rl.rlim_cur));
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0)
        json_object_set_new(o, "dev_shm_bytes",
                            json_integer((json_int_t)((uint64_t)sv.f_blocks * sv.f_frsize)));
    return o;
}
