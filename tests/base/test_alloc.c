/* src/base/alloc.c: host allocations of ZC_HOST_HUGE_BYTES and more start on
 * a 2 MiB boundary and carry the kernel's huge-page advice (a checkpoint
 * writes an engine's state from them with O_DIRECT: ckpt/shard_write.h);
 * smaller ones stay 64-byte aligned. Both are zero-filled and counted. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"

/* The VmFlags of the mapping holding p (/proc/self/smaps), or "" if none. */
static void vm_flags(const void *p, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f);
    char line[512];
    bool inside = false;
    out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, cap, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

Test(base_alloc, large_host_buffers_start_on_a_huge_page_and_ask_for_huge_pages)
{
    const size_t sizes[] = {ZC_HOST_HUGE_BYTES, ZC_HOST_HUGE_BYTES + 3, (size_t)5 << 20};
    const bool thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        zc_mem_account acct;
        memset(&acct, 0, sizeof acct);
        void *p = NULL;
        cr_assert_eq(zc__host_alloc(&acct, ZC_MEM_OTHER, sizes[i], "test", &p), ZC_OK);
        cr_assert_eq((uintptr_t)p % ((uintptr_t)2 << 20), 0, "%zu bytes at %p", sizes[i], p);
        cr_assert(all_zero(p, sizes[i]));
        cr_assert_eq(atomic_load(&acct.bytes[ZC_MEM_OTHER]), (int64_t)sizes[i]);
        if (thp) {
            char flags[512];
            vm_flags(p, flags, sizeof flags);
            cr_assert_not_null(strstr(flags, " hg"), "%zu bytes: VmFlags%s", sizes[i], flags);
        }
        zc__host_free(&acct, ZC_MEM_OTHER, p, sizes[i]);
        cr_assert_eq(atomic_load(&acct.bytes[ZC_MEM_OTHER]), 0);
    }
}

Test(base_alloc, smaller_host_buffers_stay_64_byte_aligned_and_zeroed)
{
    const size_t sizes[] = {1, 100, ZC_HOST_HUGE_BYTES - 64};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        cr_assert_eq(zc__host_alloc(NULL, ZC_MEM_OTHER, sizes[i], "test", &p), ZC_OK);
        cr_assert_eq((uintptr_t)p % 64, 0);
        cr_assert(all_zero(p, sizes[i]));
        zc__host_free(NULL, ZC_MEM_OTHER, p, sizes[i]);
    }
}
