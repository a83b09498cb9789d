/* One NCCL rank for tests/gpu/test_nccl.c (a separate process per GPU).
 *
 *   zc_nccl_helper skip1
 *
 * Every rank joins with zc_comm_init_env. Rank 0 queues an all-reduce and
 * waits at the barrier; rank 1 skips both and sleeps past ZC_COMM_TIMEOUT.
 * Rank 0 exits 0 only if the barrier failed with the watchdog's message
 * naming the all-reduce; 5 if it succeeded, 2 on a setup failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "device/device.h"

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "skip1"))
        return 4;
    zc_comm *c = NULL;
    zc_device *d = NULL;
    if (zc_comm_init_env(&c) != ZC_OK || zc__device_open(ZC_DEVICE_CUDA, -1, &d) != ZC_OK ||
        c->ops->bind_device(c, d) != ZC_OK) {
        fprintf(stderr, "setup: %s\n", zc_last_error());
        return 2;
    }
    if (zc_comm_rank(c) == 1) {
        sleep(8); /* well past ZC_COMM_TIMEOUT=3 on rank 0 */
        _exit(0); /* no destroy: this rank is the one that went missing */
    }
    float *a = NULL;
    if (d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, 4096 * 4, "a", (void **)&a) != ZC_OK)
        return 2;
    if (zc__all_reduce(c, a, a, 4096, ZC_DTYPE_F32, ZC_RED_SUM, NULL) != ZC_OK) {
        fprintf(stderr, "all_reduce: %s\n", zc_last_error());
        return 2;
    }
    zc_status rc = zc__barrier(c);
    fprintf(stderr, "barrier: %s: %s\n", zc_status_str(rc), zc_last_error());
    int ok = rc == ZC_ERR_COMM && strstr(zc_last_error(), "all_reduce #1") != NULL;
    zc_comm_destroy(c);
    _exit(ok ? 0 : 5);
}
