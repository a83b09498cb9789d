/* What the optimizer pass asks between Adam pieces: whether the store and the
 * nvme home still have I/O in flight (zc__nvme_busy, the home's progress).
 * Adam's threads depend on it (optim/adam_pace.h): a serial pass has nothing
 * in flight while Adam runs, a pipelined one has the next chunk's read.
 * Small queues make the answers independent of the disk's speed: a read of
 * more pieces than one progress call can issue is still in flight after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "offload/homes.h"
#include "offload/offload.h"
#include "ot.h"

#define KiB ((size_t)1 << 10)

static char tdir[512];
static void setup(void) { ot_mkdtemp(tdir); }
static void teardown(void) { ot_rmtree(tdir); }
TestSuite(opt_progress, .init = setup, .fini = teardown, .timeout = 120);

Test(opt_progress, store_is_busy_from_submission_until_every_request_is_done)
{
    cr_expect(!zc__nvme_busy(NULL));
    const char *dirs[1] = {tdir};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "optimizer";
    o.capacity = 1 << 20;
    o.block_size = 64 * KiB;
    o.queue_depth = 2;
    zc_nvme_store *st = NULL;
    cr_assert_eq(zc__nvme_open(&st, &o), ZC_OK, "%s", zc_last_error());
    cr_expect(!zc__nvme_busy(st), "a fresh store has nothing in flight");
    void *buf = aligned_alloc(4096, 1 << 20); /* O_DIRECT: page-aligned */
    cr_assert(buf);
    zc_nvme_ticket t;
    /* 16 pieces, 2 in the kernel at a time: nothing reaps before a call. */
    cr_assert_eq(zc__nvme_read(st, 0, buf, 1 << 20, &t), ZC_OK, "%s", zc_last_error());
    cr_expect(zc__nvme_busy(st), "a read just submitted is in flight");
    (void)zc__nvme_done(st, t); /* reaps at most 2, issues at most 4 of 16 */
    cr_expect(zc__nvme_busy(st), "14 pieces left after one call");
    cr_assert_eq(zc__nvme_wait_all(st), ZC_OK, "%s", zc_last_error());
    cr_expect(!zc__nvme_busy(st), "nothing in flight once every ticket is waited for");
    free(buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK, "%s", zc_last_error());
    t_assert_no_leaks();
}

/* A home of 3 chunks of 2^18 fp32 elements (1 MiB a tensor), 64 KiB requests,
 * 2 in the kernel at a time. */
static zc_opt_home *make_home(zc_mem_account *acct, bool pipeline)
{
    const char *dirs[1] = {tdir};
    zc_opt_home_params hp = {
        .env = {.acct = acct, .rank = 0, .nchunks = 3, .param_bytes = 2, .device_index = -1,
                .aio_block_size = 64 * KiB, .aio_queue_depth = 2, .aio_intra_op = 1},
        .pin_memory = false,
        .dirs = dirs,
        .ndirs = 1,
        .buffer_count = pipeline ? 12 : 4,
        .pipeline_read = pipeline,
        .pipeline_write = pipeline,
        .fast_init = true,
        .aio_overlap_events = true,
        .state_bytes = {4, 4, 4},
    };
    zc_opt_home *h = NULL;
    cr_assert_eq(zc__opt_home_nvme_create(&hp, &h), ZC_OK, "%s", zc_last_error());
    for (int k = 0; k < 3; k++)
        cr_assert_eq(h->ops->add_chunk(h, k, (size_t)1 << 18), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(h->ops->prepare(h), ZC_OK, "%s", zc_last_error());
    return h;
}

Test(opt_progress, pipelined_pass_has_the_next_read_in_flight_serial_pass_nothing)
{
    zc_mem_account acct;
    memset(&acct, 0, sizeof acct);
    const int ks[3] = {0, 1, 2};
    for (int pipeline = 0; pipeline < 2; pipeline++) {
        zc_opt_home *h = make_home(&acct, pipeline);
        cr_assert(h->ops->progress, "the nvme home moves its I/O along");
        cr_assert_eq(h->ops->pass_begin(h, ks, 3), ZC_OK, "%s", zc_last_error());
        for (int k = 0; k < 3; k++) {
            zc_opt_view v;
            cr_assert_eq(h->ops->acquire(h, k, &v), ZC_OK, "%s", zc_last_error());
            /* Pipelined: chunk k+1's read (48 pieces) started at this
             * acquire, so it is in flight after one call; chunk 2 has
             * chunk 1's write behind it (pipeline_write). Serial: chunk
             * k's read was waited for and k-1's write too. */
            const bool busy = h->ops->progress(h);
            if (pipeline)
                cr_expect(busy || k == 2, "pipelined, chunk %d: nothing in flight", k);
            else
                cr_expect(!busy, "serial, chunk %d: I/O in flight while Adam runs", k);
            if (pipeline && k < 2)
                cr_expect(busy, "pipelined, chunk %d: the next read is not in flight", k);
            cr_assert_eq(h->ops->release(h, k, true), ZC_OK, "%s", zc_last_error());
        }
        cr_assert_eq(h->ops->pass_end(h), ZC_OK, "%s", zc_last_error());
        cr_expect(!h->ops->progress(h), "nothing in flight after the pass");
        zc__opt_home_destroy(h);
    }
    t_assert_no_leaks();
}
