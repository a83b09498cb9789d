/* The host thread pool: persistent workers, one job at a time.
 *
 * Protocol. A job is published under P.lock with a new generation number and
 * a broadcast on P.wake; worker w (1-based) runs part w when w < nparts and
 * then decrements P.remaining; the last one signals P.done. The submitter runs
 * part 0 itself (no wake-up on its critical path) and waits for remaining to
 * reach zero. Both sides spin briefly (POOL_SPIN_S, timed) before sleeping
 * on their condition variable: the optimizer submits one job per shard back
 * to back, and a sleeping worker costs a futex wake-up per job; a longer spin
 * would hold a core that a rank, or another job on a shared machine, needs.
 * One job at a time (P.submit); a second submitter does not wait for
 * the pool but runs its parts itself, which gives the same result (the parts
 * are a static split) and cannot deadlock.
 *
 * No heap memory: the state is static, so tests that assert the allocator's
 * counters return to zero are unaffected by a pool that outlives them. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "optim/threadpool.h"
#include "zc_build_config.h"

#if ZC_HAVE_HWLOC
#include <hwloc.h>
#endif

#define POOL_SPIN_S 20e-6 /* spin before sleeping: a few back-to-back jobs' gap */

static struct {
    pthread_mutex_t lock;   /* guards the job, nworkers, stop and the condvars */
    pthread_cond_t wake;    /* workers: a new generation is published */
    pthread_cond_t done;    /* submitter: remaining reached zero */
    pthread_mutex_t submit; /* one job at a time */
    pthread_t th[ZC_POOL_MAX_THREADS];
    int nworkers;
    bool stop;
    _Atomic uint64_t gen;
    uint64_t start_gen[ZC_POOL_MAX_THREADS]; /* gen when worker w was created */
    zc_pool_fn fn;
    void *arg;
    int nparts;  /* parts of the job */
    int helpers; /* workers 1..helpers take parts 1..helpers */
    _Atomic int remaining;
    _Atomic int live;
    int sleeping;        /* workers inside pthread_cond_wait on `wake` (under lock) */
    uint64_t idle_woken; /* its returns with no new job and no stop (under lock) */
    int bind_node;              /* NUMA node the workers should run on, -1: any */
    _Atomic uint64_t bind_gen;  /* bumped when bind_node changes */
} P = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .submit = PTHREAD_MUTEX_INITIALIZER,
    .bind_node = -1,
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins while *v == x, at most POOL_SPIN_S (the clock read every 64
 * pauses: a pause takes 10-150 cycles depending on the CPU, so a count of
 * pauses alone is no bound in time). Returns whether *v changed. */
static bool spin_while_u64(_Atomic uint64_t *v, uint64_t x)
{
    const double until = zc__now_s() + POOL_SPIN_S;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) != x)
                return true;
            cpu_relax();
        }
        if (zc__now_s() > until)
            return false;
    }
}

/* The same for a count that must reach zero; returns whether it did. */
static bool spin_while_positive(_Atomic int *v)
{
    const double until = zc__now_s() + POOL_SPIN_S;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) <= 0)
                return true;
            cpu_relax();
        }
        if (zc__now_s() > until)
            return false;
    }
}

/* ---- topology ----------------------------------------------------------- */

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static int topo_cores = 1;
#if ZC_HAVE_HWLOC
static hwloc_topology_t topo;
static bool topo_ok;
static int topo_numa_nodes;
#endif

/* The CPUs the calling thread may run on (its affinity mask, which the
 * workers it starts inherit), or the online ones when the mask cannot be
 * read. */
static int allowed_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

#if ZC_HAVE_HWLOC
/* Physical cores with at least one hardware thread in the calling thread's
 * binding (all of the machine's when the binding cannot be read): mpirun
 * binds each rank to a core by default, and a pool of one worker per core
 * of the machine would then put two threads on that one core, each spinning
 * or waking the other in turn. The thread's binding, not the process's
 * (hwloc's union over all threads): the workers inherit it, and a program
 * may have threads bound elsewhere. */
static int bound_cores(void)
{
    int all = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_bitmap_t bind = hwloc_bitmap_alloc();
    if (!bind || hwloc_get_cpubind(topo, bind, HWLOC_CPUBIND_THREAD) != 0 ||
        hwloc_bitmap_iszero(bind)) {
        hwloc_bitmap_free(bind);
        return all;
    }
    int n = 0;
    for (int i = 0; i < all; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
        if (core && core->cpuset && hwloc_bitmap_intersects(core->cpuset, bind))
            n++;
    }
    hwloc_bitmap_free(bind);
    return n > 0 ? n : all;
}
#endif

static void topo_init(void)
{
    topo_cores = allowed_cpus();
#if ZC_HAVE_HWLOC
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            int cores = bound_cores();
            if (cores > 0)
                topo_cores = cores;
            topo_numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
            topo_ok = true;
        } else {
            hwloc_topology_destroy(topo);
        }
    }
#endif
    if (topo_cores > ZC_POOL_MAX_THREADS)
        topo_cores = ZC_POOL_MAX_THREADS;
}

int zc__pool_physical_cores(void)
{
    pthread_once(&topo_once, topo_init);
    return topo_cores;
}

zc_status zc__pool_default_threads(int *out)
{
    int n = zc__pool_physical_cores();
    ZC_CHECK(zc__env_int("ZC_CPU_THREADS", 1, ZC_POOL_MAX_THREADS, NULL, NULL, &n));
    *out = n;
    return ZC_OK;
}

/* The NUMA node holding the page at `near`, or -1 (one node, no hwloc, page
 * not yet placed). */
static int numa_node_of(const void *near)
{
#if ZC_HAVE_HWLOC
    if (!near || !topo_ok || topo_numa_nodes < 2)
        return -1;
    int node = -1;
    hwloc_nodeset_t ns = hwloc_bitmap_alloc();
    if (ns && hwloc_get_area_memlocation(topo, near, 1, ns, HWLOC_MEMBIND_BYNODESET) == 0 &&
        hwloc_bitmap_weight(ns) == 1)
        node = hwloc_bitmap_first(ns);
    hwloc_bitmap_free(ns);
    return node;
#else
    (void)near;
    return -1;
#endif
}

/* Binds the calling worker to the cores of `node` (all cores when -1). */
static void bind_self(int node)
{
#if ZC_HAVE_HWLOC
    if (!topo_ok || topo_numa_nodes < 2)
        return;
    hwloc_const_cpuset_t set = hwloc_topology_get_allowed_cpuset(topo);
    if (node >= 0) {
        hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node);
        if (o && o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
            set = o->cpuset;
    }
    if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0)
        ZC_LOGD("optim", "binding a pool worker to NUMA node %d failed (errno %d)", node, errno);
#else
    (void)node;
#endif
}

/* ---- workers ------------------------------------------------------------- */

static void *worker_main(void *argp)
{
    int w = (int)(intptr_t)argp;
    /* Not the current gen: the job that made us may already be published. */
    pthread_mutex_lock(&P.lock);
    uint64_t seen = P.start_gen[w];
    pthread_mutex_unlock(&P.lock);
    uint64_t bound = 0;
    for (;;) {
        spin_while_u64(&P.gen, seen);
        pthread_mutex_lock(&P.lock);
        while (atomic_load(&P.gen) == seen && !P.stop) {
            P.sleeping++;
            pthread_cond_wait(&P.wake, &P.lock);
            P.sleeping--;
            P.idle_woken += atomic_load(&P.gen) == seen && !P.stop;
        }
        if (P.stop) {
            pthread_mutex_unlock(&P.lock);
            break;
        }
        seen = atomic_load(&P.gen);
        zc_pool_fn fn = P.fn;
        void *arg = P.arg;
        int nparts = P.nparts;
        int helpers = P.helpers;
        int node = P.bind_node;
        uint64_t bg = atomic_load(&P.bind_gen);
        pthread_mutex_unlock(&P.lock);
        if (w > helpers)
            continue;
        if (bg != bound) {
            bind_self(node);
            bound = bg;
        }
        fn(arg, w, nparts);
        if (atomic_fetch_sub_explicit(&P.remaining, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&P.lock);
            pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.lock);
        }
    }
    atomic_fetch_sub(&P.live, 1);
    return NULL;
}

static void after_fork_child(void)
{
    /* Threads do not survive fork: forget them (the child starts its own). */
    pthread_mutex_init(&P.lock, NULL);
    pthread_mutex_init(&P.submit, NULL);
    pthread_cond_init(&P.wake, NULL);
    pthread_cond_init(&P.done, NULL);
    P.nworkers = 0;
    P.stop = false;
    atomic_store(&P.live, 0);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* Starts workers 1..want; called with P.submit held. Returns how many run. */
static int ensure_workers(int want)
{
    if (want > ZC_POOL_MAX_THREADS - 1)
        want = ZC_POOL_MAX_THREADS - 1;
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&P.lock);
    while (P.nworkers < want) {
        int w = P.nworkers + 1;
        atomic_fetch_add(&P.live, 1);
        P.start_gen[w] = atomic_load(&P.gen);
        int rc = pthread_create(&P.th[P.nworkers], NULL, worker_main, (void *)(intptr_t)w);
        if (rc != 0) {
            atomic_fetch_sub(&P.live, 1);
            ZC_LOGW("optim", "could not start pool worker %d (%s); running with %d", w,
                    rc == EAGAIN ? "EAGAIN" : "error", P.nworkers);
            break;
        }
        P.nworkers++;
    }
    int n = P.nworkers;
    pthread_mutex_unlock(&P.lock);
    return n;
}

zc_status zc__pool_run(int nparts, zc_pool_fn fn, void *arg, const void *near)
{
    if (nparts < 1)
        nparts = 1;
    if (nparts > ZC_POOL_MAX_THREADS)
        nparts = ZC_POOL_MAX_THREADS;
    if (nparts == 1 || pthread_mutex_trylock(&P.submit) != 0) {
        for (int k = 0; k < nparts; k++)
            fn(arg, k, nparts);
        return ZC_OK;
    }
    pthread_once(&topo_once, topo_init);
    int nw = ensure_workers(nparts - 1);
    int helpers = nw < nparts - 1 ? nw : nparts - 1;

    int node = numa_node_of(near);
    pthread_mutex_lock(&P.lock);
    if (node >= 0 && node != P.bind_node) {
        P.bind_node = node;
        atomic_fetch_add(&P.bind_gen, 1);
    }
    P.fn = fn;
    P.arg = arg;
    P.nparts = nparts;
    P.helpers = helpers; /* workers beyond `helpers` sit this job out */
    atomic_store(&P.remaining, helpers);
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.lock);

    fn(arg, 0, nparts);
    for (int k = helpers + 1; k < nparts; k++) /* parts no worker could take */
        fn(arg, k, nparts);

    if (!spin_while_positive(&P.remaining)) {
        pthread_mutex_lock(&P.lock);
        while (atomic_load(&P.remaining) > 0)
            pthread_cond_wait(&P.done, &P.lock);
        pthread_mutex_unlock(&P.lock);
    }
    pthread_mutex_unlock(&P.submit);
    return ZC_OK;
}

void zc__pool_shutdown(void)
{
    pthread_mutex_lock(&P.submit);
    pthread_mutex_lock(&P.lock);
    P.stop = true;
    pthread_cond_broadcast(&P.wake);
    int n = P.nworkers;
    pthread_mutex_unlock(&P.lock);
    for (int i = 0; i < n; i++)
        pthread_join(P.th[i], NULL);
    pthread_mutex_lock(&P.lock);
    P.nworkers = 0;
    P.stop = false;
    pthread_mutex_unlock(&P.lock);
    pthread_mutex_unlock(&P.submit);
}

int zc__pool_live_workers(void) { return atomic_load(&P.live); }

int zc__pool_sleeping_workers(uint64_t *idle_woken)
{
    pthread_mutex_lock(&P.lock);
    int n = P.sleeping;
    if (idle_woken)
        *idle_woken = P.idle_woken;
    pthread_mutex_unlock(&P.lock);
    return n;
}

/* Join the workers before the process image goes away, so leak checkers and
 * valgrind see no live threads and no thread touches unloaded code. */
__attribute__((destructor)) static void pool_fini(void)
{
    zc__pool_shutdown();
#if ZC_HAVE_HWLOC
    if (topo_ok) {
        hwloc_topology_destroy(topo);
        topo_ok = false;
    }
#endif
}
