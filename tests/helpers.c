#include <ftw.h>
#include <unistd.h>
#include "helpers.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t t_seed(const char *test_name)
{
    const char *env = getenv("ZC_TEST_SEED");
    uint64_t seed;
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    else
        seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    fprintf(stderr, "%s: seed %llu (set ZC_TEST_SEED to reproduce)\n", test_name,
            (unsigned long long)seed);
    return seed;
}

uint64_t t_rand_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double t_rand_unit(uint64_t *s) { return (double)(t_rand_u64(s) >> 11) * 0x1p-53; }

float t_rand_range(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)t_rand_unit(s);
}

static uint64_t t_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

double t_noise(uint64_t salt, int rank, int step, int micro, int param, int64_t i)
{
    uint64_t h = t_mix64(salt ^ (uint64_t)rank);
    h = t_mix64(h ^ ((uint64_t)step << 20) ^ (uint64_t)micro);
    h = t_mix64(h ^ ((uint64_t)param << 40) ^ (uint64_t)i);
    return (double)(h >> 11) * 0x1p-52 - 1.0;
}

uint32_t t_ulp_diff_f32(float a, float b)
{
    if (isnan(a) && isnan(b))
        return 0;
    if (isnan(a) || isnan(b))
        return UINT32_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    /* Map to a monotonic integer line so -0 and +0 meet. */
    if (ia < 0)
        ia = (int32_t)(0x80000000u - (uint32_t)ia);
    if (ib < 0)
        ib = (int32_t)(0x80000000u - (uint32_t)ib);
    int64_t d = (int64_t)ia - (int64_t)ib;
    return (uint32_t)(d < 0 ? -d : d);
}

typedef struct t_rank_arg {
    int rank;
    void (*fn)(int, void *);
    void *arg;
} t_rank_arg;

static void *t_rank_main(void *p)
{
    t_rank_arg *a = p;
    a->fn(a->rank, a->arg);
    return NULL;
}

void t_run_ranks(int world, void (*fn)(int rank, void *arg), void *arg)
{
    pthread_t th[64];
    t_rank_arg args[64];
    cr_assert(world >= 1 && world <= 64, "t_run_ranks: world %d", world);
    for (int r = 0; r < world; r++) {
        args[r] = (t_rank_arg){r, fn, arg};
        cr_assert_eq(pthread_create(&th[r], NULL, t_rank_main, &args[r]), 0);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
}

bool t_mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f, "/proc/self/maps: cannot open");
    char buf[4096];
    bool found = false;
    while (!found && fgets(buf, sizeof buf, f))
        found = strstr(buf, name) != NULL;
    fclose(f);
    return found;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

void t_rm_tree(const char *dir)
{
    cr_assert_eq(nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0, "removing %s", dir);
}
