/* The buffer pool: classes planned and reserved once, slots taken by best
 * fit without allocating, zeroed on request, accounted as reserved while idle
 * and as buffers while in use, and running out as a plain error. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/common/bufpool.h"
#include "helpers.h"

static zc_mem_account acct;

static void setup(zc_bufpool *bp)
{
    memset(&acct, 0, sizeof acct);
    zc__bufpool_init(bp, "test pool", ZC_MEM_BUFFERS, zc__device_host(), &acct);
}

Test(bufpool, plan_reserve_get_put_and_accounting)
{
    zc_bufpool bp;
    setup(&bp);
    /* 100 and 200 bytes round to one 256-byte class of 3 slots; 1000 bytes
     * to a 1024-byte class of 1. */
    cr_assert_eq(zc__bufpool_plan(&bp, 100, 2), ZC_OK);
    cr_assert_eq(zc__bufpool_plan(&bp, 1000, 1), ZC_OK);
    cr_assert_eq(zc__bufpool_plan(&bp, 200, 1), ZC_OK);
    cr_assert_eq(zc__bufpool_plan(&bp, 5, 0), ZC_OK); /* nothing */
    cr_assert_eq(bp.ncls, 2);
    cr_assert_eq(zc__bufpool_reserve(&bp), ZC_OK);
    /* Each class carries ZC_BUFPOOL_ALIGN bytes of slack to align its slots. */
    const int64_t slack = 2 * ZC_BUFPOOL_ALIGN;
    cr_assert_eq(zc__bufpool_bytes(&bp), 3 * 256 + 1024 + slack);
    cr_assert_eq(acct.bytes[ZC_MEM_RESERVED], 3 * 256 + 1024 + slack);
    cr_assert_eq(acct.bytes[ZC_MEM_BUFFERS], 0);
    cr_assert_eq(zc__bufpool_plan(&bp, 10, 1), ZC_ERR_INTERNAL, "planned after reserve");

    const int64_t host_allocs = zc__mem_global_count(ZC_MEMKIND_HOST);
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL, *x = NULL;
    cr_assert_eq(zc__bufpool_get(&bp, 256, false, NULL, &a), ZC_OK);
    cr_assert_eq(((uintptr_t)a) % ZC_BUFPOOL_ALIGN, 0, "slot %p is not aligned", a);
    memset(a, 0x5a, 256);
    cr_assert_eq(zc__bufpool_get(&bp, 1, false, NULL, &b), ZC_OK);
    cr_assert_eq(zc__bufpool_get(&bp, 200, false, NULL, &c), ZC_OK);
    /* The small class is full: a small request takes the larger slot. */
    cr_assert_eq(zc__bufpool_get(&bp, 8, false, NULL, &d), ZC_OK);
    cr_assert_eq(((uintptr_t)d) % ZC_BUFPOOL_ALIGN, 0, "slot %p is not aligned", d);
    cr_assert_eq(acct.bytes[ZC_MEM_BUFFERS], 3 * 256 + 1024);
    cr_assert_eq(acct.bytes[ZC_MEM_RESERVED], slack);
    cr_assert_eq(acct.peak[ZC_MEM_BUFFERS], 3 * 256 + 1024);
    cr_assert_eq(zc__bufpool_in_use(&bp), 4);
    /* Exhausted: an error naming the pool, and nothing allocated. */
    cr_assert_eq(zc__bufpool_get(&bp, 8, false, NULL, &x), ZC_ERR_NO_MEMORY);
    cr_assert_null(x);
    cr_assert(strstr(zc_last_error(), "test pool") && strstr(zc_last_error(), "4 slots in use"),
              "%s", zc_last_error());
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_HOST), host_allocs, "get allocated");

    /* A returned slot is reused, zeroed when asked for. */
    void *keep = a;
    zc__bufpool_put(&bp, &a);
    cr_assert_null(a);
    cr_assert_eq(acct.bytes[ZC_MEM_BUFFERS], 2 * 256 + 1024);
    cr_assert_eq(acct.bytes[ZC_MEM_RESERVED], 256 + slack);
    cr_assert_eq(zc__bufpool_get(&bp, 256, true, NULL, &a), ZC_OK);
    cr_assert_eq(a, keep);
    for (int i = 0; i < 256; i++)
        cr_assert_eq(((unsigned char *)a)[i], 0, "byte %d not zeroed", i);
    /* Too large for every class. */
    zc__bufpool_put(&bp, &d);
    cr_assert_eq(zc__bufpool_get(&bp, 1025, false, NULL, &x), ZC_ERR_NO_MEMORY);
    void *null_slot = NULL;
    zc__bufpool_put(&bp, &null_slot); /* no-op */

    /* Destroy reclaims slots still held and returns every byte. */
    zc__bufpool_destroy(&bp);
    for (int k = 0; k < ZC_MEM__COUNT; k++)
        cr_assert_eq(acct.bytes[k], 0, "category %d holds %lld bytes", k,
                     (long long)acct.bytes[k]);
    t_assert_no_leaks();
}

Test(bufpool, empty_pool_and_oversized_plans)
{
    zc_bufpool bp;
    setup(&bp);
    zc__bufpool_destroy(&bp); /* never reserved */
    setup(&bp);
    cr_assert_eq(zc__bufpool_plan(&bp, SIZE_MAX - 10, 1), ZC_ERR_NO_MEMORY);
    cr_assert_eq(zc__bufpool_plan(&bp, (size_t)1 << 62, 8), ZC_ERR_NO_MEMORY);
    cr_assert_eq(zc__bufpool_reserve(&bp), ZC_OK);
    void *x = NULL;
    cr_assert_eq(zc__bufpool_get(&bp, 1, false, NULL, &x), ZC_ERR_NO_MEMORY);
    zc__bufpool_destroy(&bp);
    t_assert_no_leaks();
}

/* A failed reservation leaves what it allocated to destroy. */
Test(bufpool, failed_reserve_is_released_by_destroy)
{
    zc_bufpool bp;
    setup(&bp);
    cr_assert_eq(zc__bufpool_plan(&bp, 512, 2), ZC_OK);
    cr_assert_eq(zc__bufpool_plan(&bp, 4096, 1), ZC_OK);
    /* Allocations: class table, then flags and memory per class. */
    zc__mem_fail_after(ZC_MEMKIND_HOST, 3);
    cr_assert_eq(zc__bufpool_reserve(&bp), ZC_ERR_NO_MEMORY);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    zc__bufpool_destroy(&bp);
    for (int k = 0; k < ZC_MEM__COUNT; k++)
        cr_assert_eq(acct.bytes[k], 0);
    t_assert_no_leaks();
}

/* A slot just returned may still be read by work queued on another stream
 * (a reduction on the communication stream): with other slots free it is
 * taken last, and zc__bufpool_slot names each slot by a stable index. */
Test(bufpool, returned_slot_is_taken_last_and_slots_are_indexed)
{
    zc_bufpool bp;
    setup(&bp);
    cr_assert_eq(zc__bufpool_plan(&bp, 512, 2), ZC_OK);
    cr_assert_eq(zc__bufpool_plan(&bp, 2048, 1), ZC_OK);
    cr_assert_eq(zc__bufpool_reserve(&bp), ZC_OK);
    void *a = NULL, *b = NULL, *big = NULL;
    cr_assert_eq(zc__bufpool_get(&bp, 512, false, NULL, &a), ZC_OK);
    void *first = a;
    zc__bufpool_put(&bp, &a);
    cr_assert_eq(zc__bufpool_get(&bp, 512, false, NULL, &b), ZC_OK);
    cr_assert_neq(b, first, "the slot just returned was taken while another was free");
    cr_assert_eq(zc__bufpool_get(&bp, 512, false, NULL, &a), ZC_OK);
    cr_assert_eq(a, first, "the only free slot was not taken");
    cr_assert_eq(zc__bufpool_get(&bp, 1024, false, NULL, &big), ZC_OK);
    /* Indices: the 512-byte class first (plan order), then the 2048-byte one. */
    cr_assert_eq(zc__bufpool_slot(&bp, first), 0);
    cr_assert_eq(zc__bufpool_slot(&bp, b), 1);
    cr_assert_eq(zc__bufpool_slot(&bp, big), 2);
    cr_assert_eq(zc__bufpool_slot(&bp, (char *)b + 1), -1, "inside a slot is not a slot");
    cr_assert_eq(zc__bufpool_slot(&bp, &bp), -1);
    cr_assert_eq(zc__bufpool_slot(&bp, NULL), -1);
    zc__bufpool_put(&bp, &a);
    zc__bufpool_put(&bp, &b);
    zc__bufpool_put(&bp, &big);
    zc__bufpool_destroy(&bp);
    t_assert_no_leaks();
}
