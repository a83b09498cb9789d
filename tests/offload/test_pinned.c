/* The pinned host pool: sub-allocation, alignment, accounting, slab growth,
 * limits, mlock fallback, fault injection and thread safety. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "offload/offload.h"
#include "ot.h"

#define MiB ((size_t)1 << 20)

static zc_pinned_pool *mkpool(size_t slab, size_t reserve, size_t max, unsigned flags)
{
    zc_pinned_pool_opts o = ZC_PINNED_POOL_OPTS_INIT;
    o.slab_bytes = slab;
    o.reserve_bytes = reserve;
    o.max_bytes = max;
    o.flags = flags | ZC_PINNED_NO_CUDA;
    zc_pinned_pool *p = NULL;
    zc_status rc = zc__pinned_pool_create(&p, &o);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    return p;
}

Test(pinned, allocations_are_aligned_disjoint_and_counted)
{
    zc_pinned_pool *p = mkpool(4 * MiB, 0, 0, 0);
    size_t sizes[] = {1, 4096, 100000, 64, 1 * MiB, 12345, 4096 * 3};
    size_t aligns[] = {0, 4096, 512, 64, 0, 2048, 4096};
    void *ptr[7];
    int64_t sum = 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(zc__pinned_alloc(p, sizes[i], aligns[i], ZC_MEM_BUFFERS, "t", &ptr[i]), ZC_OK,
                     "%s", zc_last_error());
        size_t a = aligns[i] ? aligns[i] : page;
        cr_assert_eq((uintptr_t)ptr[i] % a, 0, "allocation %d not aligned to %zu", i, a);
        memset(ptr[i], i + 1, sizes[i]);
        sum += (int64_t)sizes[i];
    }
    /* No allocation overwrote another. */
    for (int i = 0; i < 7; i++)
        for (size_t j = 0; j < sizes[i]; j += 97)
            cr_assert_eq(((unsigned char *)ptr[i])[j], i + 1, "allocation %d byte %zu", i, j);
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), sum);
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_PINNED), 7);
    zc_pinned_pool_stats s;
    zc__pinned_pool_stats_get(p, &s);
    cr_assert_eq(s.live_allocs, 7);
    cr_assert_eq(s.nslabs, 1, "1.1 MiB of allocations fit one 4 MiB slab");
    cr_assert_eq(s.slab_bytes, 4 * MiB);
    /* Root (CAP_IPC_LOCK) or a memlock limit >= 4 MiB locks; else one warning. */
    cr_assert(s.mode == ZC_PINNED_MLOCKED || s.mode == ZC_PINNED_UNLOCKED);
    for (int i = 0; i < 7; i++)
        zc__pinned_free(p, ptr[i]);
    zc__pinned_pool_stats_get(p, &s);
    cr_assert_eq(s.live_allocs, 0);
    cr_assert_eq(s.used_bytes, 0);
    zc__pinned_pool_destroy(p);
    t_assert_no_leaks();
}

Test(pinned, freed_space_is_reused_and_big_requests_get_their_own_slab)
{
    zc_pinned_pool *p = mkpool(2 * MiB, 0, 0, 0);
    void *a, *b, *c, *big;
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_ADAM, "a", &a), ZC_OK);
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_ADAM, "b", &b), ZC_OK);
    zc__pinned_free(p, a);
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_ADAM, "c", &c), ZC_OK);
    cr_assert_eq(c, a, "first fit reuses the freed first megabyte");
    zc_pinned_pool_stats s;
    zc__pinned_pool_stats_get(p, &s);
    cr_assert_eq(s.nslabs, 1);
    cr_assert_eq(zc__pinned_alloc(p, 5 * MiB + 1, 0, ZC_MEM_MASTER, "big", &big), ZC_OK);
    zc__pinned_pool_stats_get(p, &s);
    cr_assert_eq(s.nslabs, 2);
    cr_assert_eq(s.slab_bytes, 2 * MiB + 5 * MiB + 4096, "the big slab is rounded to a page");
    zc_mem_region r[4];
    cr_assert_eq(zc__pinned_pool_regions(p, r, 4), 2);
    cr_assert((char *)big >= (char *)r[1].base && (char *)big + 5 * MiB + 1 <= (char *)r[1].base + r[1].bytes);
    zc__pinned_free(p, b);
    zc__pinned_free(p, c);
    zc__pinned_free(p, big);
    zc__pinned_pool_destroy(p);
    t_assert_no_leaks();
}

Test(pinned, the_kth_allocation_fails_when_injected)
{
    zc_pinned_pool *p = mkpool(MiB, 0, 0, 0);
    void *v[5] = {0};
    zc__mem_fail_after(ZC_MEMKIND_PINNED, 3);
    for (int i = 0; i < 5; i++) {
        zc_status rc = zc__pinned_alloc(p, 4096, 0, ZC_MEM_BUFFERS, "swap buffer", &v[i]);
        if (i == 2) {
            cr_assert_eq(rc, ZC_ERR_NO_MEMORY);
            cr_assert_null(v[i]);
            cr_assert(strstr(zc_last_error(), "swap buffer") && strstr(zc_last_error(), "injected"),
                      "%s", zc_last_error());
        } else {
            cr_assert_eq(rc, ZC_OK, "allocation %d: %s", i, zc_last_error());
        }
    }
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_PINNED), 4);
    for (int i = 0; i < 5; i++)
        zc__pinned_free(p, v[i]);
    zc__pinned_pool_destroy(p);
    t_assert_no_leaks();
}

Test(pinned, cap_and_machine_limits_are_reported)
{
    zc_pinned_pool *p = mkpool(MiB, 0, 2 * MiB, 0);
    void *a, *b, *c = NULL;
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_BUFFERS, "a", &a), ZC_OK);
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_BUFFERS, "b", &b), ZC_OK);
    cr_assert_eq(zc__pinned_alloc(p, 4096, 0, ZC_MEM_BUFFERS, "third", &c), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(zc_last_error(), "third") && strstr(zc_last_error(), "capped at 2.00 MiB"),
              "%s", zc_last_error());
    zc__pinned_free(p, a);
    zc__pinned_free(p, b);
    zc__pinned_pool_destroy(p);

    /* A reservation no machine has fails before taking anything. */
    zc_pinned_pool_opts o = ZC_PINNED_POOL_OPTS_INIT;
    o.reserve_bytes = (size_t)1 << 50;
    zc_pinned_pool *q = (zc_pinned_pool *)1;
    cr_assert_eq(zc__pinned_pool_create(&q, &o), ZC_ERR_NO_MEMORY);
    cr_assert_null(q);
    cr_assert(strstr(zc_last_error(), "1.00 PiB") && strstr(zc_last_error(), "available"),
              "%s", zc_last_error());
    t_assert_no_leaks();
}

Test(pinned, bad_arguments)
{
    zc_pinned_pool *p = mkpool(MiB, 0, 0, 0);
    void *v = (void *)1;
    cr_assert_eq(zc__pinned_alloc(p, 0, 0, ZC_MEM_BUFFERS, "z", &v), ZC_ERR_INVALID_ARG);
    cr_assert_null(v);
    cr_assert_eq(zc__pinned_alloc(p, 64, 3, ZC_MEM_BUFFERS, "z", &v), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "power of two"), "%s", zc_last_error());
    zc_pinned_pool_opts o = ZC_PINNED_POOL_OPTS_INIT;
    o.flags = ZC_PINNED_NO_LOCK | ZC_PINNED_REQUIRE_LOCK;
    zc_pinned_pool *q;
    cr_assert_eq(zc__pinned_pool_create(&q, &o), ZC_ERR_INVALID_ARG);
    zc__pinned_free(p, NULL);
    zc__pinned_pool_destroy(p);
    zc__pinned_pool_destroy(NULL);
    t_assert_no_leaks();
}

Test(pinned, memlock_limit_falls_back_with_one_warning_or_fails_when_required)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("AddressSanitizer turns mlock into a no-op that succeeds");
#endif
    if (!ot_limit_memlock(1 * MiB))
        cr_skip_test("cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK here");
    ot_capture_logs();
    /* Three 2 MiB slabs, each above the 1 MiB limit: one warning in all. */
    zc_pinned_pool *p = mkpool(2 * MiB, 6 * MiB, 0, 0);
    zc_pinned_pool_stats s;
    zc__pinned_pool_stats_get(p, &s);
    cr_assert_eq(s.nslabs, 3);
    cr_assert_eq(s.mode, ZC_PINNED_UNLOCKED);
    cr_assert_eq(ot_warnings(), 1, "warnings: %d, last: %s", ot_warnings(), ot_last_warning());
    cr_assert(strstr(ot_last_warning(), "ulimit -l"), "%s", ot_last_warning());
    void *v;
    cr_assert_eq(zc__pinned_alloc(p, MiB, 0, ZC_MEM_BUFFERS, "v", &v), ZC_OK);
    memset(v, 0xab, MiB);
    zc__pinned_free(p, v);
    zc__pinned_pool_destroy(p);

    zc_pinned_pool_opts o = ZC_PINNED_POOL_OPTS_INIT;
    o.flags = ZC_PINNED_REQUIRE_LOCK | ZC_PINNED_NO_CUDA;
    o.reserve_bytes = 4 * MiB;
    zc_pinned_pool *q = NULL;
    cr_assert_eq(zc__pinned_pool_create(&q, &o), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(zc_last_error(), "4.00 MiB") && strstr(zc_last_error(), "1.00 MiB") &&
                  strstr(zc_last_error(), "RLIMIT_MEMLOCK"), "%s", zc_last_error());
    /* Within the limit, a required lock succeeds. */
    o.reserve_bytes = 512 * 1024;
    o.slab_bytes = 512 * 1024;
    cr_assert_eq(zc__pinned_pool_create(&q, &o), ZC_OK, "%s", zc_last_error());
    zc__pinned_pool_stats_get(q, &s);
    cr_assert_eq(s.mode, ZC_PINNED_MLOCKED);
    zc__pinned_pool_destroy(q);
    zc_log_set_sink(NULL, NULL);
    t_assert_no_leaks();
}

static zc_pinned_pool *shared;

static void *worker(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    void *held[8] = {0};
    for (int it = 0; it < 2000; it++) {
        int k = it % 8;
        if (held[k]) {
            cr_assert_eq(*(uint32_t *)held[k], (uint32_t)(id * 100000 + k), "buffer overwritten");
            zc__pinned_free(shared, held[k]);
            held[k] = NULL;
        } else {
            size_t sz = 4096 * (1 + (size_t)((it * 7 + id) % 5));
            cr_assert_eq(zc__pinned_alloc(shared, sz, 0, ZC_MEM_BUFFERS, "w", &held[k]), ZC_OK);
            *(uint32_t *)held[k] = (uint32_t)(id * 100000 + k);
        }
    }
    for (int k = 0; k < 8; k++)
        zc__pinned_free(shared, held[k]);
    return NULL;
}

Test(pinned, concurrent_alloc_and_free)
{
    shared = mkpool(MiB, 0, 0, 0);
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    zc_pinned_pool_stats s;
    zc__pinned_pool_stats_get(shared, &s);
    cr_assert_eq(s.live_allocs, 0);
    zc__pinned_pool_destroy(shared);
    t_assert_no_leaks();
}
