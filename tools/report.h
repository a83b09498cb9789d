/* `zeroc report` (cmd_report.c): what was built and what this machine
 * offers it, as DeepSpeed's ds_report does for its stack. Each part is a
 * JSON object (jansson); the command prints them as text or, with --json,
 * as one object. No part fails the report: what cannot be found or probed
 * says why in its "error" (or "reason") member. */
#ifndef ZC_TOOLS_REPORT_H
#define ZC_TOOLS_REPORT_H

#include <jansson.h>

/* "zeroc": version, build type, compiler, build options, the library's
 * file; "host_adam": the variants built, usable here, selected, threads. */
json_t *zc__report_build(void);
json_t *zc__report_adam(void);
/* "cpu" (model, CPUs online and allowed, physical cores, peak FLOP/s),
 * "topology" (hwloc: version, packages, cores, NUMA nodes with their memory
 * and CPUs, caches), "memory" (/proc/meminfo, cgroup limits, RLIMIT_MEMLOCK,
 * /dev/shm). */
json_t *zc__report_cpu(void);
json_t *zc__report_topology(void);
json_t *zc__report_memory(void);
/* "io_uring": built, liburing's version, the kernel, whether a ring can be
 * made and a request completes (a NOP), which operations the kernel has;
 * "nvme_paths": for each directory, through zeroc's own NVMe store (a
 * nameless file: nothing is left behind), whether O_DIRECT and io_uring are
 * taken, the alignment, and a write then read probe of about probe_s
 * seconds each half. */
json_t *zc__report_io_uring(void);
json_t *zc__report_nvme(const char *const *paths, int n, double probe_s);
/* "cuda": the driver, runtime, cuBLAS and NCCL found at run time (version,
 * path, or why not), whether the CUDA plugin loads (and why not), the GPUs;
 * "mpi": built, the headers' and the library's versions, mpirun on PATH,
 * the launcher environment. */
json_t *zc__report_cuda(void);
json_t *zc__report_mpi(void);

#endif
