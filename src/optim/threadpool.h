/* The host thread pool (internal): persistent workers for the optimizer and
 * other host kernels that stream through memory.
 *
 * Sized from hwloc's physical cores that the thread starting it may run on
 * (its CPU affinity, which the workers inherit: under mpirun, which binds
 * each rank to a core, that is one; the CPUs of the affinity mask without
 * hwloc), ZC_CPU_THREADS overrides.
 * Workers sleep between jobs after a spin of 20 us; the calling thread runs
 * part 0 of a job itself. Workers are bound to the cores of the NUMA node that holds the
 * job's memory (hwloc, machines with more than one node). The pool needs no
 * heap memory of its own, is torn down by a library destructor (or
 * zc__pool_shutdown) and restarts on the next job. */
#ifndef ZC_OPTIM_THREADPOOL_H
#define ZC_OPTIM_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

#define ZC_POOL_MAX_THREADS 256

/* One part of a job: part k of nparts. Must not call into the pool. */
typedef void (*zc_pool_fn)(void *arg, int part, int nparts);

/* The default number of threads: ZC_CPU_THREADS when set (a whole number in
 * [1, ZC_POOL_MAX_THREADS]; anything else is ZC_ERR_CONFIG naming it), else
 * zc__pool_physical_cores(). */
zc_status zc__pool_default_threads(int *out);

/* Number of physical cores the thread that first asks may run on (without
 * the ZC_CPU_THREADS override), at least 1; read once. */
int zc__pool_physical_cores(void);

/* Runs fn(arg, k, nparts) for k = 0..nparts-1 and returns when all are done.
 * Part 0 runs on the calling thread. `near` (may be NULL) is an address in the
 * memory the job streams through: workers are moved to the cores of its NUMA
 * node. nparts is clamped to [1, ZC_POOL_MAX_THREADS]. When another thread is
 * using the pool, or the workers cannot be started, the parts run one after
 * the other on the calling thread (same results, no parallelism). Returns
 * ZC_OK; thread-safe. */
zc_status zc__pool_run(int nparts, zc_pool_fn fn, void *arg, const void *near);

/* Stops and joins every worker (the next zc__pool_run starts them again).
 * Must not race with zc__pool_run. */
void zc__pool_shutdown(void);

/* Number of running worker threads (for tests of the teardown). */
int zc__pool_live_workers(void);
/* Workers asleep on the pool's condition variable, waiting for a job, and
 * in *idle_woken (may be NULL) how many times a worker woke there with no
 * job to take (tests: idle workers sleep rather than spin or poll). */
int zc__pool_sleeping_workers(uint64_t *idle_woken);

#endif
