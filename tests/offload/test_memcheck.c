/* Host memory limits: parsing of meminfo, cgroup v1/v2 and limits files (from
 * a fake root written here), and the verdicts and messages of the check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "offload/offload.h"
#include "ot.h"

static char root[512];

static void put(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s%s", root, rel);
    /* mkdir -p of the parent */
    for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
}

static void setup(void) { ot_mkdtemp(root); }
static void teardown(void) { ot_rmtree(root); }

TestSuite(memcheck, .init = setup, .fini = teardown);

#define GiB (1024ull * 1024 * 1024)
#define MiB (1024ull * 1024)

Test(memcheck, meminfo_and_cgroup_v1_smallest_along_the_path)
{
    put("/proc/meminfo", "MemTotal:       24684096 kB\nMemFree:  1 kB\nMemAvailable:   4194304 kB\n");
    put("/proc/self/cgroup", "9:name=systemd:/\n4:cpu,memory:/a/b\n0::/\n");
    /* The parent's limit (3 GiB) is smaller than the leaf's (5 GiB). */
    put("/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "5368709120\n");
    put("/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "3221225472\n");
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/a/b/memory.usage_in_bytes", "1073741824\n");
    put("/sys/fs/cgroup/memory/a/b/memory.stat", "cache 5\ntotal_inactive_file 268435456\n");
    put("/proc/self/limits", "Max cpu time   unlimited unlimited seconds\n"
                             "Max locked memory         8388608              8388608              bytes\n");
    put("/proc/self/status", "Name: x\nCapEff:\t0000000000000000\n");
    zc_host_mem_limits l;
    zc__host_mem_limits_read(root, &l);
    cr_assert_eq(l.mem_available, 4194304ull * 1024);
    cr_assert_eq(l.cgroup_limit, 3ull * GiB);
    cr_assert_eq(l.cgroup_usage, 1ull * GiB - 256 * MiB, "usage less inactive file pages");
    cr_assert_eq(l.memlock_limit, 8 * MiB);
    cr_assert(!l.can_lock_unlimited);
    cr_assert(strstr(l.cgroup_path, "/a/memory.limit_in_bytes"), "%s", l.cgroup_path);

    /* 3 GiB limit - 0.75 GiB in use leaves 2.25 GiB. */
    cr_assert_eq(zc__host_mem_check(&l, 2 * GiB, false, "t"), ZC_OK);
    cr_assert_eq(zc__host_mem_check(&l, 2 * GiB + 512 * MiB, false, "t"), ZC_ERR_NO_MEMORY);
    const char *m = zc_last_error();
    cr_assert(strstr(m, "2.50 GiB") && strstr(m, "leaves 2.25 GiB") && strstr(m, "--memory"), "%s", m);
    /* Above MemAvailable (4 GiB) the meminfo message wins. */
    cr_assert_eq(zc__host_mem_check(&l, 5 * GiB, false, "slab"), ZC_ERR_NO_MEMORY);
    m = zc_last_error();
    cr_assert(strstr(m, "slab") && strstr(m, "5.00 GiB") && strstr(m, "4.00 GiB") &&
                  strstr(m, "MemAvailable"), "%s", m);
    /* Locking 16 MiB with an 8 MiB memlock limit and no CAP_IPC_LOCK. */
    cr_assert_eq(zc__host_mem_check(&l, 16 * MiB, false, "t"), ZC_OK);
    cr_assert_eq(zc__host_mem_check(&l, 16 * MiB, true, "t"), ZC_ERR_NO_MEMORY);
    m = zc_last_error();
    cr_assert(strstr(m, "16.00 MiB") && strstr(m, "8.00 MiB") && strstr(m, "ulimit -l"), "%s", m);
    cr_assert_eq(zc__host_mem_check(&l, 8 * MiB, true, "t"), ZC_OK);
}

Test(memcheck, cgroup_v2_max_and_cap_ipc_lock)
{
    put("/proc/meminfo", "MemAvailable:   104857600 kB\n");
    put("/proc/self/cgroup", "0::/user.slice/job\n");
    put("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put("/sys/fs/cgroup/user.slice/job/memory.max", "2147483648\n");
    put("/sys/fs/cgroup/user.slice/memory.max", "max\n");
    put("/sys/fs/cgroup/user.slice/job/memory.current", "536870912\n");
    put("/sys/fs/cgroup/user.slice/job/memory.stat", "anon 1\ninactive_file 0\n");
    put("/proc/self/limits", "Max locked memory         65536              unlimited              bytes\n");
    put("/proc/self/status", "CapEff:\t000001ffffffffff\n");
    zc_host_mem_limits l;
    zc__host_mem_limits_read(root, &l);
    cr_assert_eq(l.cgroup_limit, 2 * GiB);
    cr_assert_eq(l.cgroup_usage, 512 * MiB);
    cr_assert_eq(l.memlock_limit, 65536);
    cr_assert(l.can_lock_unlimited);
    cr_assert(strstr(l.cgroup_path, "user.slice/job/memory.max"), "%s", l.cgroup_path);
    /* CAP_IPC_LOCK: the memlock limit does not apply. */
    cr_assert_eq(zc__host_mem_check(&l, 1 * GiB, true, "t"), ZC_OK);
    cr_assert_eq(zc__host_mem_check(&l, 1536 * MiB + 4096, false, "t"), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(zc_last_error(), "memory.max"), "%s", zc_last_error());
}

Test(memcheck, unreadable_files_mean_no_limit)
{
    zc_host_mem_limits l;
    zc__host_mem_limits_read(root, &l); /* empty fake root */
    cr_assert_eq(l.mem_available, UINT64_MAX);
    cr_assert_eq(l.cgroup_limit, UINT64_MAX);
    cr_assert_eq(l.memlock_limit, UINT64_MAX);
    cr_assert_eq(zc__host_mem_check(&l, 1ull << 50, true, "t"), ZC_OK);
}

Test(memcheck, real_system_is_readable)
{
    zc_host_mem_limits l;
    zc__host_mem_limits_read(NULL, &l);
    cr_assert(l.mem_available > 0 && l.mem_available != UINT64_MAX);
    /* A petabyte is more than any machine this runs on has available. */
    cr_assert_eq(zc__host_mem_check(&l, 1ull << 50, false, "huge"), ZC_ERR_NO_MEMORY);
    t_assert_no_leaks();
}
