/* What host memory the machine can give: MemAvailable, the cgroup limit and
 * RLIMIT_MEMLOCK, checked before a large allocation so that an offload
 * configuration that cannot fit fails with a message instead of being killed
 * by the OOM killer half-way through the first step. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/regfile.h"
#include "offload/offload.h"
#include "offload/offload_internal.h"

/* Values at or above this are "unlimited" in cgroup v1 (PAGE_COUNTER_MAX
 * rounded to pages, printed as 9223372036854771712). */
#define CG_V1_UNLIMITED (UINT64_C(1) << 62)

const char *zc__offload_fmt_bytes(char buf[32], uint64_t b)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b == UINT64_MAX) {
        snprintf(buf, 32, "unlimited");
        return buf;
    }
    if (b < 1024) {
        snprintf(buf, 32, "%" PRIu64 " B", b);
        return buf;
    }
    double v = (double)b / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.2f %s", v, units[u]);
    return buf;
}

size_t zc__offload_page_size(void)
{
    static size_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    return ps;
}

/* The kernel's figures are regular files (their st_size is 0, which the
 * readers below do not use); anything else under a test root is refused
 * without blocking, and the figure counts as unknown. */
static FILE *read_open(const char *path)
{
    char why[640];
    return zc__fopen_regular(path, NULL, why, sizeof why);
}

static void join(char *out, size_t cap, const char *root, const char *path)
{
    if (!root || !*root || !strcmp(root, "/"))
        snprintf(out, cap, "%s", path);
    else
        snprintf(out, cap, "%s%s", root, path);
}

/* Reads the first line of a file holding one number (or "max"). Returns 0 on
 * success; "max" gives UINT64_MAX. */
static int read_u64_file(const char *path, uint64_t *v)
{
    FILE *f = read_open(path);
    if (!f)
        return -1;
    char line[128];
    int rc = -1;
    if (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "max", 3)) {
            *v = UINT64_MAX;
            rc = 0;
        } else if (isdigit((unsigned char)line[0])) {
            *v = strtoull(line, NULL, 10);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* Value of `key` in a "key value" file (memory.stat). */
static int read_keyed(const char *path, const char *key, uint64_t *v)
{
    FILE *f = read_open(path);
    if (!f)
        return -1;
    char line[256];
    size_t kl = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            *v = strtoull(line + kl + 1, NULL, 10);
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

static uint64_t read_mem_available(const char *root)
{
    char p[512];
    join(p, sizeof p, root, "/proc/meminfo");
    FILE *f = read_open(p);
    if (!f)
        return UINT64_MAX;
    char line[256];
    uint64_t v = UINT64_MAX;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            v = (uint64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* Walks from the process's cgroup up to the hierarchy's root and keeps the
 * smallest limit: a parent's limit binds its children too. */
static void cgroup_walk(const char *mount, const char *cgpath, const char *limit_file,
                        const char *usage_file, const char *stat_key, uint64_t unlimited_from,
                        zc_host_mem_limits *out)
{
    char dir[512], p[640];
    snprintf(dir, sizeof dir, "%s", cgpath);
    /* In a cgroup namespace the path may not exist under the mount: then the
     * mount root is the process's own cgroup. */
    snprintf(p, sizeof p, "%s%s/%s", mount, dir, limit_file);
    if (access(p, R_OK) != 0)
        snprintf(dir, sizeof dir, "/");
    bool leaf = true;
    for (;;) {
        size_t dl = strlen(dir);
        const char *sep = (dl && dir[dl - 1] == '/') ? "" : "/";
        snprintf(p, sizeof p, "%s%s%s%s", mount, dir, sep, limit_file);
        uint64_t lim;
        if (read_u64_file(p, &lim) == 0 && lim < unlimited_from && lim < out->cgroup_limit) {
            out->cgroup_limit = lim;
            snprintf(out->cgroup_path, sizeof out->cgroup_path, "%s", p);
        }
        if (leaf) {
            /* Usage of the process's own cgroup, less the page cache that can
             * be reclaimed (inactive file pages). */
            uint64_t use, inactive = 0;
            snprintf(p, sizeof p, "%s%s%s%s", mount, dir, sep, usage_file);
            if (read_u64_file(p, &use) == 0) {
                snprintf(p, sizeof p, "%s%s%smemory.stat", mount, dir, sep);
                if (read_keyed(p, stat_key, &inactive) == 0 && inactive < use)
                    use -= inactive;
                out->cgroup_usage = use;
            }
            leaf = false;
        }
        if (!strcmp(dir, "/") || !*dir)
            break;
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        if (slash == dir)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
}

static void read_cgroup(const char *root, zc_host_mem_limits *out)
{
    char p[512];
    join(p, sizeof p, root, "/proc/self/cgroup");
    FILE *f = read_open(p);
    if (!f)
        return;
    char line[1024];
    char v1path[512] = "", v2path[512] = "";
    bool have_v1 = false, have_v2 = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2)
            continue;
        *c1 = *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*ctrls) {
            snprintf(v2path, sizeof v2path, "%s", path);
            have_v2 = true;
            continue;
        }
        /* v1: the controller list is comma separated ("memory" alone here). */
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", ctrls);
        for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!strcmp(t, "memory")) {
                snprintf(v1path, sizeof v1path, "%s", path);
                have_v1 = true;
            }
    }
    fclose(f);
    char mount[512];
    if (have_v1) {
        join(mount, sizeof mount, root, "/sys/fs/cgroup/memory");
        cgroup_walk(mount, v1path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                    "total_inactive_file", CG_V1_UNLIMITED, out);
    }
    if (have_v2) {
        /* Pure v2 mounts at /sys/fs/cgroup; hybrid systems at .../unified. */
        const char *cands[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (int i = 0; i < 2; i++) {
            join(mount, sizeof mount, root, cands[i]);
            char probe[640];
            snprintf(probe, sizeof probe, "%s/cgroup.controllers", mount);
            if (access(probe, R_OK) == 0) {
                cgroup_walk(mount, v2path, "memory.max", "memory.current", "inactive_file",
                            UINT64_MAX, out);
                break;
            }
        }
    }
}

static void read_memlock(const char *root, zc_host_mem_limits *out)
{
    char p[512];
    bool real = !root || !*root || !strcmp(root, "/");
    if (real) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
            out->memlock_limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    } else {
        join(p, sizeof p, root, "/proc/self/limits");
        FILE *f = read_open(p);
        if (f) {
            char line[256];
            while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "Max locked memory", 17))
                    continue;
                char soft[64];
                if (sscanf(line + 17, " %63s", soft) == 1)
                    out->memlock_limit =
                        !strcmp(soft, "unlimited") ? UINT64_MAX : strtoull(soft, NULL, 10);
            }
            fclose(f);
        }
    }
    /* CAP_IPC_LOCK (bit 14 of CapEff) lifts RLIMIT_MEMLOCK for mlock and for
     * io_uring buffer registration alike. */
    join(p, sizeof p, root, "/proc/self/status");
    FILE *f = read_open(p);
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long caps;
            if (sscanf(line, "CapEff: %llx", &caps) == 1) {
                out->can_lock_unlimited = (caps >> 14) & 1ull;
                break;
            }
        }
        fclose(f);
    }
}

void zc__host_mem_limits_read(const char *root, zc_host_mem_limits *out)
{
    memset(out, 0, sizeof *out);
    out->mem_available = UINT64_MAX;
    out->cgroup_limit = UINT64_MAX;
    out->cgroup_usage = UINT64_MAX;
    out->memlock_limit = UINT64_MAX;
    out->mem_available = read_mem_available(root);
    read_cgroup(root, out);
    read_memlock(root, out);
}

zc_status zc__host_mem_check(const zc_host_mem_limits *lim, uint64_t bytes, bool need_lock,
                             const char *what)
{
    char a[32], b[32], c[32], d[32];
    if (!what)
        what = "host memory";
    if (lim->mem_available != UINT64_MAX && bytes > lim->mem_available)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: asked for %s of host memory but only %s is available (MemAvailable "
                      "in /proc/meminfo); ask for less (smaller offload buffers, fewer "
                      "parameters offloaded to CPU, or offload to NVMe) or free memory",
                      what, zc__offload_fmt_bytes(a, bytes),
                      zc__offload_fmt_bytes(b, lim->mem_available));
    if (lim->cgroup_limit != UINT64_MAX) {
        uint64_t used = lim->cgroup_usage == UINT64_MAX ? 0 : lim->cgroup_usage;
        uint64_t room = used < lim->cgroup_limit ? lim->cgroup_limit - used : 0;
        if (bytes > room)
            return ZC_ERR(ZC_ERR_NO_MEMORY,
                          "%s: asked for %s of host memory but the cgroup limit leaves %s "
                          "(limit %s in %s, %s in use); raise the container's memory limit "
                          "(docker --memory, Kubernetes resources.limits.memory, systemd "
                          "MemoryMax=) or ask for less",
                          what, zc__offload_fmt_bytes(a, bytes), zc__offload_fmt_bytes(b, room),
                          zc__offload_fmt_bytes(c, lim->cgroup_limit), lim->cgroup_path,
                          zc__offload_fmt_bytes(d, used));
    }
    if (need_lock && !lim->can_lock_unlimited && lim->memlock_limit != UINT64_MAX &&
        bytes > lim->memlock_limit)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: asked to lock %s of host memory but RLIMIT_MEMLOCK is %s; raise it "
                      "(ulimit -l unlimited, LimitMEMLOCK=infinity for a systemd unit, memlock "
                      "in /etc/security/limits.conf, docker --ulimit memlock=-1) or grant "
                      "CAP_IPC_LOCK",
                      what, zc__offload_fmt_bytes(a, bytes),
                      zc__offload_fmt_bytes(b, lim->memlock_limit));
    return ZC_OK;
}
