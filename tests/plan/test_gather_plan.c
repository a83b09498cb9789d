/* The stage-3 gather plan (zc__gather_plan, src/plan/estimate.c), which the
 * engine's reserve and `zeroc estimate` share: the same slots as the rule
 * written out plainly (each persistent chunk a slot, in chunk order; each
 * other size, at its first chunk, min(count, working set / size) slots),
 * and one pass over the chunks. The plain rule below is the quadratic
 * algorithm the plan used to be; the plan must match it on random layouts
 * and must finish on millions of chunks, where the quadratic one took a
 * minute for `--params 1T` (60k chunks) and would take hours here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "plan/plan.h"
#include "helpers.h"

typedef struct slots {
    int64_t *elems;
    int *count;
    int n, cap;
    int64_t calls;
} slots;

static zc_status record(void *arg, int64_t elems, int count)
{
    slots *s = arg;
    s->calls++;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->elems = realloc(s->elems, (size_t)s->cap * sizeof *s->elems);
        s->count = realloc(s->count, (size_t)s->cap * sizeof *s->count);
        cr_assert(s->elems && s->count);
    }
    s->elems[s->n] = elems;
    s->count[s->n++] = count;
    return ZC_OK;
}

static void slots_free(slots *s)
{
    free(s->elems);
    free(s->count);
    memset(s, 0, sizeof *s);
}

/* The rule, plainly: O(chunks^2). */
static void plain_plan(const int64_t *padded, const bool *pers, int n, int64_t max_live,
                       int64_t prefetch, slots *out)
{
    int64_t largest = 0;
    for (int k = 0; k < n; k++)
        largest = padded[k] > largest ? padded[k] : largest;
    int64_t ws = largest > INT64_MAX / 2 ? INT64_MAX : 2 * largest;
    ws = ws > INT64_MAX - prefetch ? INT64_MAX : ws + prefetch;
    if (ws > max_live)
        ws = max_live;
    for (int k = 0; k < n; k++) {
        const int64_t s = padded[k];
        if (s > max_live)
            continue;
        if (pers && pers[k]) {
            record(out, s, 1);
            continue;
        }
        int count = 0;
        bool earlier = false;
        for (int j = 0; j < n; j++)
            if (padded[j] == s && !(pers && pers[j])) {
                count++;
                earlier |= j < k;
            }
        if (earlier)
            continue;
        const int64_t fit = ws / s > 0 ? ws / s : 1;
        record(out, s, (int)(count < fit ? count : fit));
    }
}

Test(gather_plan, same_slots_as_the_rule_on_random_layouts)
{
    uint64_t st = t_seed("gather_plan");
    for (int trial = 0; trial < 400; trial++) {
        const int n = 1 + (int)(t_rand_u64(&st) % 300);
        /* Few distinct sizes (as real layouts have) or many (up to every
         * chunk its own), some persistent, some above the live bound. */
        const int nsizes = 1 + (int)(t_rand_u64(&st) % (trial % 2 ? 4 : 400));
        int64_t *padded = malloc((size_t)n * sizeof *padded);
        bool *pers = malloc((size_t)n * sizeof *pers);
        for (int k = 0; k < n; k++) {
            padded[k] = 64 * (1 + (int64_t)(t_rand_u64(&st) % (uint64_t)nsizes));
            pers[k] = t_rand_u64(&st) % 5 == 0;
        }
        const int64_t max_live = trial % 3 ? 64 * (1 + (int64_t)(t_rand_u64(&st) % 500))
                                           : INT64_MAX;
        const int64_t prefetch = (int64_t)(t_rand_u64(&st) % 4096);
        slots want = {0}, got = {0};
        plain_plan(padded, trial % 4 ? pers : NULL, n, max_live, prefetch, &want);
        cr_assert_eq(zc__gather_plan(padded, trial % 4 ? pers : NULL, n, max_live, prefetch,
                                     record, &got),
                     ZC_OK, "%s", zc_last_error());
        cr_assert_eq(got.n, want.n, "trial %d: %d slot classes, want %d", trial, got.n, want.n);
        for (int i = 0; i < want.n; i++) {
            cr_assert_eq(got.elems[i], want.elems[i], "trial %d class %d", trial, i);
            cr_assert_eq(got.count[i], want.count[i], "trial %d class %d", trial, i);
        }
        slots_free(&want);
        slots_free(&got);
        free(padded);
        free(pers);
    }
    t_assert_no_leaks();
}

/* A stop from emit ends the plan with its status, nothing leaked. */
static zc_status refuse_third(void *arg, int64_t elems, int count)
{
    (void)elems;
    (void)count;
    return ++*(int *)arg == 3 ? ZC_ERR(ZC_ERR_NO_MEMORY, "third class refused") : ZC_OK;
}

Test(gather_plan, an_emit_failure_is_returned)
{
    int64_t padded[8] = {64, 128, 192, 256, 320, 384, 448, 512};
    int calls = 0;
    cr_assert_eq(zc__gather_plan(padded, NULL, 8, INT64_MAX, 0, refuse_third, &calls),
                 ZC_ERR_NO_MEMORY);
    cr_assert_eq(calls, 3);
    t_assert_no_leaks();
}

/* 2^21 chunks, in the two shapes that made the old plan quadratic: all of
 * one size (the --params layout: every chunk the 2^24-element cap), and
 * 2^20 sizes each twice. Each chunk is planned once: one emit per distinct
 * size, and the whole within the test's timeout (no timing is asserted; a
 * quadratic plan would need ~2^42 steps here, hours). */
Test(gather_plan, one_pass_over_millions_of_chunks, .timeout = 120)
{
    const int n = 1 << 21;
    int64_t *padded = malloc((size_t)n * sizeof *padded);
    cr_assert_not_null(padded);
    for (int k = 0; k < n; k++)
        padded[k] = (int64_t)1 << 24;
    slots got = {0};
    cr_assert_eq(zc__gather_plan(padded, NULL, n, INT64_MAX, 0, record, &got), ZC_OK);
    cr_assert_eq(got.n, 1);
    cr_assert_eq(got.elems[0], (int64_t)1 << 24);
    cr_assert_eq(got.count[0], 2, "the working set is two chunks of the largest size");
    slots_free(&got);

    for (int k = 0; k < n; k++)
        padded[k] = 64 * (int64_t)(1 + k / 2);
    cr_assert_eq(zc__gather_plan(padded, NULL, n, INT64_MAX, 0, record, &got), ZC_OK);
    cr_assert_eq(got.n, n / 2, "one class per size");
    cr_assert_eq(got.calls, n / 2);
    for (int i = 0; i < got.n; i++) {
        cr_assert_eq(got.elems[i], 64 * (int64_t)(1 + i));
        cr_assert_eq(got.count[i], 2);
    }
    slots_free(&got);
    free(padded);
    t_assert_no_leaks();
}
