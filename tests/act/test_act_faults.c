/* Faults in the activation store's NVMe I/O, injected on one rank of two at
 * every position of a short run (2 steps of 6 checkpoints through 2 pinned
 * buffers, so most are read back from the file):
 *   - ZC_FAULTS io:RANK:K (a read or write that fails, not retried): every
 *     rank's restore fails with ZC_ERR_IO and the same message, naming the
 *     failing rank and the slot, and every engine is broken after it -
 *     never one rank failing while the other goes on (a split), never a
 *     hang (the local communicator's timeout would fail the run); past the
 *     last I/O nothing fires and every byte comes back;
 *   - a one-off EIO of one store request (ZC_NVME_FAULTS eio=K): retried,
 *     every byte comes back;
 *   - ENOSPC on a write (enospc=K): like an io item, agreed at the next
 *     restore. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_act.h"
#include "t_offload.h"

#define W 2

static t_swapdir dir;

static void setup(void)
{
    t_swapdir_make(&dir, "zc-act-faults");
    unsetenv("ZC_FAULTS");
    unsetenv("ZC_NVME_FAULTS");
}

static void teardown(void)
{
    unsetenv("ZC_FAULTS");
    unsetenv("ZC_NVME_FAULTS");
    t_swapdir_remove(&dir);
}

static ta_run run(void)
{
    ta_run r;
    ta_run_init(&r, "nvme", W);
    r.buffer_count = 2;
    r.nvme_json = dir.json;
    ta_run_go(&r);
    return r;
}

static bool clean(const ta_run *r)
{
    for (int t = 0; t < W; t++)
        if (r->rc[t] != ZC_OK || r->bad_bytes[t] || r->restores[t] != r->steps * r->slots)
            return false;
    return true;
}

/* Every rank failed alike: ZC_ERR_IO, one message naming the rank that
 * failed, engines broken. */
static void agreed_failure(const ta_run *r, int rank, const char *what)
{
    char who[64];
    snprintf(who, sizeof who, "failed on rank %d of %d", rank, W);
    for (int t = 0; t < W; t++) {
        cr_assert_eq(r->rc[t], ZC_ERR_IO, "%s: rank %d: %s (%s)", what, t,
                     zc_status_str(r->rc[t]), r->err[t]);
        cr_assert_not_null(strstr(r->err[t], "zc_act_restore"), "%s: %s", what, r->err[t]);
        cr_assert_not_null(strstr(r->err[t], who), "%s: rank %d: %s", what, t, r->err[t]);
        cr_assert(r->broken_after[t], "%s: rank %d's engine is not broken", what, t);
        cr_assert_eq(r->bad_bytes[t], 0, "%s: rank %d restored wrong bytes", what, t);
    }
    /* The same text on both (past the call site's file:line prefix). */
    const char *a = strstr(r->err[0], "zc_act_restore failed"),
               *b = strstr(r->err[1], "zc_act_restore failed");
    cr_assert(a && b && !strcmp(a, b), "%s: the ranks disagree:\n%s\n%s", what, r->err[0],
              r->err[1]);
}

Test(act_faults, io_items_everywhere, .init = setup, .fini = teardown)
{
    const ta_run ref = run();
    cr_assert(clean(&ref), "fault-free run: %s / %s", ref.err[0], ref.err[1]);
    for (int rank = 0; rank < W; rank++) {
        int failed = 0, k = 1;
        for (;; k++) {
            char spec[64];
            snprintf(spec, sizeof spec, "io:%d:%d", rank, k);
            setenv("ZC_FAULTS", spec, 1);
            const ta_run r = run();
            if (clean(&r))
                break; /* past the last I/O of the rank */
            agreed_failure(&r, rank, spec);
            cr_assert_not_null(strstr(r.err[0], "slot"), "%s: %s", spec, r.err[0]);
            failed++;
            cr_assert_lt(k, 200, "io item %d still fires", k);
        }
        /* 12 writes, and at least the reads of the checkpoints the two
         * buffers did not hold. */
        cr_assert_geq(failed, 12 + 2 * (6 - 2), "rank %d: only %d positions", rank, failed);
    }
}

Test(act_faults, transient_eio_is_retried, .init = setup, .fini = teardown)
{
    for (int k = 1; k <= 20; k += 3) {
        char spec[32];
        snprintf(spec, sizeof spec, "eio=%d", k);
        setenv("ZC_NVME_FAULTS", spec, 1);
        const ta_run r = run();
        cr_assert(clean(&r), "%s: %s / %s", spec, r.err[0], r.err[1]);
    }
}

Test(act_faults, enospc_is_agreed, .init = setup, .fini = teardown)
{
    /* Both ranks' stores read ZC_NVME_FAULTS: the write fails on each, and
     * the agreement names the lowest rank. */
    for (int k = 1; k <= 12; k += 5) {
        char spec[32];
        snprintf(spec, sizeof spec, "enospc=%d", k);
        setenv("ZC_NVME_FAULTS", spec, 1);
        const ta_run r = run();
        agreed_failure(&r, 0, spec);
    }
}

/* partition_activations: a failed write on one rank of a model-parallel
 * group whose data-parallel group is that rank alone - the only ranks that
 * learn of it through their engine's agreement is itself - still fails its
 * model-parallel peer (another engine, another data-parallel group) at the
 * same restore, through the group's exchange before the gather: both
 * ZC_ERR_IO, both engines broken, no hang. */
Test(act_faults, partition_peer_learns, .init = setup, .fini = teardown)
{
    ta_run r;
    ta_run_init(&r, "nvme", 1);
    r.mp = 2;
    r.bytes = 8192;
    r.buffer_count = 2;
    r.nvme_json = dir.json;
    r.fault_thread = 0;
    r.fault.enospc_write_at = 2;
    ta_run_go(&r);
    cr_assert_eq(r.rc[0], ZC_ERR_IO, "rank 0: %s", r.err[0]);
    cr_assert_eq(r.rc[1], ZC_ERR_IO, "its peer: %s (%s)", zc_status_str(r.rc[1]), r.err[1]);
    cr_assert_not_null(strstr(r.err[1], "model-parallel group"), "%s", r.err[1]);
    cr_assert(r.broken_after[0] && r.broken_after[1]);
    cr_assert_eq(r.bad_bytes[0] + r.bad_bytes[1], 0);
}
