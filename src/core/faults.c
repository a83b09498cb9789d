/* ZC_FAULTS: parsing and counting (see faults.h and docs/faults.md). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/faults.h"

/* A decimal integer in [lo, hi]: digits only (no sign, space or suffix), so a
 * typo cannot silently become another number. */
static bool parse_i64(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out)
{
    if (len == 0 || len > 19)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        int d = s[i] - '0';
        if (v > (INT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* One KIND:RANK:K item of length len at it. */
static zc_status parse_item(const char *spec, const char *it, size_t len, int index, int rank,
                            int world, zc_faults *out)
{
    const char *c1 = memchr(it, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - it)) : NULL;
    if (!c1 || !c2)
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%.*s' is not KIND:RANK:K (e.g. alloc:1:3, the "
                      "3rd allocation after zc_engine_build on rank 1 fails)",
                      spec, index, (int)len, it);
    const size_t klen = (size_t)(c1 - it);
    zc_fault_kind kind;
    if (klen == 5 && !memcmp(it, "alloc", 5)) {
        kind = ZC_FAULT_ALLOC;
    } else if (klen == 2 && !memcmp(it, "io", 2)) {
        kind = ZC_FAULT_IO;
    } else {
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d: unknown kind '%.*s' (known: alloc, io)", spec,
                      index, (int)klen, it);
    }
    int64_t r = 0, k = 0;
    if (!parse_i64(c1 + 1, (size_t)(c2 - c1 - 1), 0, (int64_t)world - 1, &r))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%.*s': RANK '%.*s' is not an integer in [0, %d] "
                      "(the world has %d ranks)",
                      spec, index, (int)len, it, (int)(c2 - c1 - 1), c1 + 1, world - 1, world);
    const size_t kl = len - (size_t)(c2 + 1 - it);
    if (!parse_i64(c2 + 1, kl, 1, INT64_MAX, &k))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%.*s': K '%.*s' is not an integer >= 1 (the "
                      "K-th event fails, counted from 1)",
                      spec, index, (int)len, it, (int)kl, c2 + 1);
    if (r != rank)
        return ZC_OK;
    if (out->n >= ZC_FAULTS_MAX)
        return ZC_ERR(ZC_ERR_CONFIG, "ZC_FAULTS='%s': more than %d items for rank %d", spec,
                      ZC_FAULTS_MAX, rank);
    out->kind[out->n] = kind;
    out->at[out->n] = k;
    out->n++;
    return ZC_OK;
}

zc_status zc__faults_parse(const char *spec, int rank, int world, zc_faults *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return ZC_OK;
    const char *it = spec;
    for (int index = 1;; index++) {
        const char *comma = strchr(it, ',');
        size_t len = comma ? (size_t)(comma - it) : strlen(it);
        zc_status rc = parse_item(spec, it, len, index, rank, world, out);
        if (rc != ZC_OK) {
            memset(out, 0, sizeof *out);
            return rc;
        }
        if (!comma)
            return ZC_OK;
        it = comma + 1;
    }
}

bool zc__faults_hit(zc_faults *f, zc_fault_kind kind, int64_t *nth)
{
    /* Counted even without items, so a test can learn from a clean run how
     * many events there are to sweep. */
    const int64_t n = ++f->seen[kind];
    for (int i = 0; i < f->n; i++)
        if (f->kind[i] == kind && f->at[i] == n) {
            *nth = n;
            return true;
        }
    return false;
}
