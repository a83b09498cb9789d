/* ZC_FAULTS: parsing and counting (see faults.h and docs/faults.md). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "core/common/faults.h"

/* A decimal integer in [lo, hi], digits only (no sign, space or suffix), so
 * a typo cannot silently become another number: the environment's one
 * integer parser (base/env.h) after the sign is ruled out. */
static bool parse_i64(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out)
{
    return len > 0 && s[0] != '-' && zc__parse_i64(s, len, lo, hi, out);
}

/* s[0..len) made safe to print (base/env.h), in buf of ZC_ENV_SHOWN_MAX. */
static const char *part(const char *s, size_t len, char *buf)
{
    char tmp[72];
    const size_t n = len < sizeof tmp - 1 ? len : sizeof tmp - 1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return zc__env_shown(tmp, buf, ZC_ENV_SHOWN_MAX);
}

/* One KIND:RANK:K item of length len at it. */
static zc_status parse_item(const char *spec, const char *it, size_t len, int index, int rank,
                            int world, zc_faults *out)
{
    char shown[ZC_ENV_SHOWN_MAX], item[ZC_ENV_SHOWN_MAX], sub[ZC_ENV_SHOWN_MAX];
    spec = zc__env_shown(spec, shown, sizeof shown);
    part(it, len, item);
    const char *c1 = memchr(it, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - it)) : NULL;
    if (!c1 || !c2)
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%s' is not KIND:RANK:K (e.g. alloc:1:3, the "
                      "3rd allocation after zc_engine_build on rank 1 fails)",
                      spec, index, item);
    const size_t klen = (size_t)(c1 - it);
    zc_fault_kind kind;
    if (klen == 5 && !memcmp(it, "alloc", 5)) {
        kind = ZC_FAULT_ALLOC;
    } else if (klen == 2 && !memcmp(it, "io", 2)) {
        kind = ZC_FAULT_IO;
    } else if (klen == 4 && !memcmp(it, "load", 4)) {
        kind = ZC_FAULT_LOAD;
    } else {
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d: unknown kind '%s' (known: alloc, io, load)", spec,
                      index, part(it, klen, sub));
    }
    int64_t r = 0, k = 0;
    if (!parse_i64(c1 + 1, (size_t)(c2 - c1 - 1), 0, (int64_t)world - 1, &r))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%s': RANK '%s' is not an integer in [0, %d] "
                      "(the world has %d ranks)",
                      spec, index, item, part(c1 + 1, (size_t)(c2 - c1 - 1), sub), world - 1,
                      world);
    const size_t kl = len - (size_t)(c2 + 1 - it);
    if (!parse_i64(c2 + 1, kl, 1, INT64_MAX, &k))
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_FAULTS='%s': item %d '%s': K '%s' is not an integer in [1, %lld] (the "
                      "K-th event fails, counted from 1)",
                      spec, index, item, part(c2 + 1, kl, sub), (long long)INT64_MAX);
    if (r != rank)
        return ZC_OK;
    if (out->n >= ZC_FAULTS_MAX)
        return ZC_ERR(ZC_ERR_CONFIG, "ZC_FAULTS='%s': more than %d items for rank %d", shown,
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
