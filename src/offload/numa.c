/* NUMA placement through hwloc (see numa.h). */
#include <errno.h>
#include <string.h>

#include "zc_build_config.h"

#include "base/alloc.h"
#include "base/log.h"
#include "offload/numa.h"

#if ZC_HAVE_HWLOC
#include <hwloc.h>
#if ZC_HAVE_CUDA
#include "cuda_plugin/load.h" /* hwloc_cudart_get_device_cpuset, in the CUDA plugin */
#endif

struct zc_numa {
    hwloc_topology_t topo;
};

zc_status zc__numa_open(zc_numa **out, int cuda_dev, int forced, int *node)
{
    *out = NULL;
    *node = -1;
    zc_numa *n;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *n, "numa topology", (void **)&n));
    if (hwloc_topology_init(&n->topo) != 0 || hwloc_topology_load(n->topo) != 0) {
        ZC_LOGW("offload", "hwloc could not load the topology (%s): pinned memory is not "
                "placed on a NUMA node", strerror(errno));
        zc__host_free(NULL, ZC_MEM_OTHER, n, sizeof *n);
        return ZC_OK;
    }
    int nnodes = hwloc_get_nbobjs_by_type(n->topo, HWLOC_OBJ_NUMANODE);
    zc_status rc = ZC_OK;
    if (forced >= 0) {
        hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(n->topo, (unsigned)forced);
        if (!o) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG,
                        "pinned pool: NUMA node %d does not exist (this machine has %d node%s)",
                        forced, nnodes, nnodes == 1 ? "" : "s");
            goto fail;
        }
        *node = forced;
        *out = n;
        return ZC_OK;
    }
    if (nnodes <= 1) {
        /* One node: there is nothing to choose and binding would only add a
         * syscall that containers sometimes forbid. */
        hwloc_topology_destroy(n->topo);
        zc__host_free(NULL, ZC_MEM_OTHER, n, sizeof *n);
        *node = nnodes == 1 ? 0 : -1;
        return ZC_OK;
    }
    hwloc_cpuset_t cs = hwloc_bitmap_alloc();
    hwloc_nodeset_t ns = hwloc_bitmap_alloc();
    int got = -1;
#if ZC_HAVE_CUDA
    if (cuda_dev >= 0)
        got = zc__cuda_device_cpuset(n->topo, cuda_dev, cs);
#else
    (void)cuda_dev;
#endif
    if (got != 0 || hwloc_bitmap_iszero(cs))
        got = hwloc_get_last_cpu_location(n->topo, cs, HWLOC_CPUBIND_THREAD);
    if (got == 0) {
        hwloc_cpuset_to_nodeset(n->topo, cs, ns);
        *node = hwloc_bitmap_first(ns);
    }
    hwloc_bitmap_free(cs);
    hwloc_bitmap_free(ns);
    *out = n;
    return ZC_OK;
fail:
    hwloc_topology_destroy(n->topo);
    zc__host_free(NULL, ZC_MEM_OTHER, n, sizeof *n);
    return rc;
}

void zc__numa_bind(zc_numa *n, void *addr, size_t len, int node)
{
    if (!n || node < 0)
        return;
    hwloc_nodeset_t ns = hwloc_bitmap_alloc();
    hwloc_bitmap_only(ns, (unsigned)node);
    if (hwloc_set_area_membind(n->topo, addr, len, ns, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET) != 0)
        ZC_LOGD("offload", "binding %zu bytes to NUMA node %d failed: %s", len, node,
                strerror(errno));
    hwloc_bitmap_free(ns);
}

void zc__numa_close(zc_numa *n)
{
    if (!n)
        return;
    hwloc_topology_destroy(n->topo);
    zc__host_free(NULL, ZC_MEM_OTHER, n, sizeof *n);
}

#else /* !ZC_HAVE_HWLOC */

zc_status zc__numa_open(zc_numa **out, int cuda_dev, int forced, int *node)
{
    (void)cuda_dev;
    *out = NULL;
    *node = -1;
    if (forced >= 0)
        ZC_LOGW("offload", "pinned pool: NUMA node %d requested but this build has no hwloc; "
                "memory is not bound", forced);
    return ZC_OK;
}

void zc__numa_bind(zc_numa *n, void *addr, size_t len, int node)
{
    (void)n, (void)addr, (void)len, (void)node;
}

void zc__numa_close(zc_numa *n) { (void)n; }

#endif
