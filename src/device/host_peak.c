/* zc_host_peak_flops: an estimate of the host's peak FLOP/s, the
 * denominator of MFU on the host path (zeroc.h states the formula).
 *
 * Cores: the physical cores (distinct package and core ids in
 * /sys/devices/system/cpu/cpuN/topology) among the CPUs this process may
 * run on, so two hyperthreads of a core count once. Clock: the highest
 * cpuinfo_max_freq of those CPUs, else the highest "cpu MHz" of
 * /proc/cpuinfo (a virtual machine without cpufreq reports its nominal
 * clock there). FLOPs per cycle: two FMA pipes of the widest vector unit,
 * 2 x 2 x lanes of fp32: 64 (AVX-512), 32 (AVX2 with FMA), 8 (SSE). A
 * CPU that has fewer FMA pipes, or lowers its clock under wide vectors,
 * reaches less: the estimate is a ceiling. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/regfile.h"
#include "zeroc/zeroc.h"

/* One integer from a small sysfs file, or -1. */
static long long read_ll(const char *path)
{
    char err[128];
    FILE *f = zc__fopen_regular(path, "a sysfs value", err, sizeof err);
    if (!f)
        return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* The highest "cpu MHz" of /proc/cpuinfo, or 0. */
static double cpuinfo_mhz(void)
{
    char err[128], line[256];
    FILE *f = zc__fopen_regular("/proc/cpuinfo", "the CPU table", err, sizeof err);
    if (!f)
        return 0;
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        double mhz;
        if (!strncmp(line, "cpu MHz", 7) && sscanf(strchr(line, ':') ? strchr(line, ':') + 1
                                                                     : line, "%lf", &mhz) == 1 &&
            mhz > best)
            best = mhz;
    }
    fclose(f);
    return best;
}

ZC_API zc_status zc_host_peak_flops(double *flops, char *how, size_t cap)
{
    if (!flops)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_host_peak_flops: flops is NULL");
    *flops = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "zc_host_peak_flops: sched_getaffinity failed");
    /* Physical cores: distinct (package, core) pairs among the allowed CPUs. */
    long long seen[CPU_SETSIZE][2];
    int cores = 0, cpus = 0;
    double max_khz = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        cpus++;
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        const long long pkg = read_ll(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        const long long core = read_ll(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", c);
        const long long khz = read_ll(p);
        if ((double)khz > max_khz)
            max_khz = (double)khz;
        bool dup = false;
        for (int i = 0; i < cores && !dup && core >= 0; i++)
            dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) {
            seen[cores][0] = pkg;
            seen[cores][1] = core;
            cores++;
        }
    }
    const char *clock_src = "cpuinfo_max_freq";
    double hz = max_khz * 1e3;
    if (!(hz > 0)) {
        hz = cpuinfo_mhz() * 1e6;
        clock_src = "/proc/cpuinfo cpu MHz";
    }
    if (!(hz > 0) || cores < 1)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_host_peak_flops: the CPU clock is not readable (no cpuinfo_max_freq "
                      "and no \"cpu MHz\" in /proc/cpuinfo); state the peak instead");
    __builtin_cpu_init();
    int per_cycle = 8;
    const char *isa = "SSE";
    if (__builtin_cpu_supports("avx512f")) {
        per_cycle = 64;
        isa = "AVX-512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        per_cycle = 32;
        isa = "AVX2+FMA";
    }
    *flops = (double)cores * hz * per_cycle;
    if (how && cap)
        snprintf(how, cap, "%d cores x %.2f GHz (%s) x %d fp32 FLOP/cycle (%s, 2 FMA pipes)",
                 cores, hz / 1e9, clock_src, per_cycle, isa);
    (void)cpus;
    return ZC_OK;
}
