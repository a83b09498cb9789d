/* The comms logger (DeepSpeed's comms_logger), from the collectives'
 * records (trace.h).
 *
 * A row per collective (and caller, with `debug`) and message size, as
 * DeepSpeed's CommsLogger keeps them: count and total latency; the summary
 * prints them per collective, sizes ascending, with the mean latency and the
 * bandwidths nccl-tests defines (doc/PERFORMANCE.md):
 *
 *   algbw = S / t            S: nccl-tests' size - the buffer of an
 *                            all-reduce or broadcast, the full buffer (over
 *                            the communicator's ranks) of a reduce-scatter
 *                            or all-gather
 *   busbw = algbw x factor   all-reduce 2(n-1)/n, reduce-scatter and
 *                            all-gather (n-1)/n, broadcast 1, n the ranks
 *                            of the communicator it ran on (the world, or a
 *                            hybrid-sharding group: a row per size)
 *
 * in GB/s (10^9 bytes), t the row's mean latency. (DeepSpeed prints Gbit/s
 * and counts an all-reduce's "tput" as 2S/t; the bus bandwidth is the same
 * quantity.) Collectives issued inside a communicator group are launched
 * together by its end: the group is one operation of each kind it holds,
 * "<kind>_coalesced", its size the sum of theirs, its time the launch's,
 * shared among the kinds by bytes. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "trace/tl_internal.h"

double zc__tl_busbw_factor(int kind, int n)
{
    if (n < 1)
        return 0.0;
    switch (kind) {
    case ZC_COLL_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ZC_COLL_REDUCE_SCATTER:
    case ZC_COLL_ALL_GATHER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

bool zc__tl_comms_profiles(const zc_tl *t, int kind)
{
    return t && t->comms.enabled && kind >= 0 && kind < ZC_COLL__COUNT &&
           (t->comms.prof_all || (t->comms.prof_ops >> kind) & 1u);
}

static const char *coalesced_name(int kind)
{
    switch (kind) {
    case ZC_COLL_ALL_REDUCE: return "all_reduce_coalesced";
    case ZC_COLL_REDUCE_SCATTER: return "reduce_scatter_coalesced";
    case ZC_COLL_ALL_GATHER: return "all_gather_coalesced";
    default: return "broadcast_coalesced";
    }
}

static void fmt_size(char *buf, size_t cap, int64_t b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (b < 0) {
        snprintf(buf, cap, "other sizes");
        return;
    }
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lld B", (long long)b);
    else
        snprintf(buf, cap, "%.2f %s", v, unit[u]);
}

/* GB/s of `bytes` moved `count` times in total_ns. */
static double gbps(int64_t bytes, int64_t count, int64_t total_ns)
{
    return total_ns > 0 && bytes > 0 ? (double)bytes * (double)count / (double)total_ns : 0.0;
}

static bool same_site(const zc_tl_row *r, const char *site)
{
    if (!r->site || !site)
        return !r->site && !site;
    return !strncmp(r->site_buf, site, ZC_TL_TEXT - 1);
}

/* The row of (op, site, bytes, ranks): found, made in a free slot, or the
 * op's overflow row (made in one of the slots kept for them). */
static zc_tl_row *row_for(zc_tl *t, const char *op, int kind, const char *site, int64_t bytes,
                          int ranks)
{
    zc_tl_row *free_row = NULL;
    for (int i = 0; i < ZC_TL_COMMS_ROWS; i++) {
        zc_tl_row *r = &t->rows[i];
        if (!r->op) {
            if (!free_row)
                free_row = r;
            continue;
        }
        if (r->op == op && r->bytes == bytes && r->ranks == ranks && same_site(r, site))
            return r;
    }
    /* The last 2 x ZC_COLL__COUNT slots are kept for overflow rows. */
    const int used = (int)(free_row ? free_row - t->rows : ZC_TL_COMMS_ROWS);
    if (free_row && used >= ZC_TL_COMMS_ROWS - 2 * ZC_COLL__COUNT) {
        for (int i = 0; i < ZC_TL_COMMS_ROWS; i++)
            if (t->rows[i].op == op && t->rows[i].bytes == -1)
                return &t->rows[i];
        bytes = -1;
        site = NULL;
        ranks = 0; /* every size and communicator: busbw over the world */
    }
    if (!free_row)
        return NULL;
    free_row->op = op;
    free_row->kind = kind;
    free_row->bytes = bytes;
    free_row->ranks = ranks;
    free_row->site = site ? free_row->site_buf : NULL;
    if (site)
        snprintf(free_row->site_buf, sizeof free_row->site_buf, "%s", site);
    return free_row;
}

/* The n of a row's bus bandwidth: its communicator's ranks, the world's
 * for the overflow row. */
static int busbw_ranks(const zc_tl *t, int ranks) { return ranks > 0 ? ranks : t->world; }

static void log_op(const zc_tl *t, const char *op, const char *site, int kind, int64_t bytes,
                   int64_t ns, int ranks)
{
    char sz[32];
    fmt_size(sz, sizeof sz, bytes);
    const double alg = gbps(bytes, 1, ns);
    ZC_LOGI("comm", "comm op: %s%s%s%s | time (ms): %.3f | msg size: %s | algbw (GB/s): %.2f | "
            "busbw (GB/s): %.2f",
            op, site ? " | [Caller: " : "", site ? site : "", site ? "]" : "", (double)ns / 1e6,
            sz, alg, alg * zc__tl_busbw_factor(kind, busbw_ranks(t, ranks)));
}

void zc__tl_comms_add(zc_tl *t, int kind, int64_t bytes, const char *site, unsigned flags,
                      int64_t ns, int ranks)
{
    t->kind_ops[kind]++;
    t->kind_bytes[kind] += bytes;
    t->kind_bus[kind] += (double)bytes * zc__tl_busbw_factor(kind, busbw_ranks(t, ranks));
    if (flags & ZC_TLF_COUNTED)
        t->kind_payload[kind] += bytes;
    if (flags & ZC_TLF_BATCHED)
        return; /* timed with its group */
    t->kind_ns[kind] += ns;
    const char *s = t->comms.debug ? site : NULL;
    zc_tl_row *r = row_for(t, zc__tl_coll_name(kind), kind, s, bytes, ranks);
    if (r) {
        r->count++;
        r->total_ns += ns;
    }
    if (t->comms.verbose)
        log_op(t, zc__tl_coll_name(kind), s, kind, bytes, ns, ranks);
}

void zc__tl_comms_group(zc_tl *t, int64_t ns)
{
    int64_t total = 0;
    for (int k = 0; k < ZC_COLL__COUNT; k++)
        if (zc__tl_comms_profiles(t, k))
            total += t->group.bytes[k];
    for (int k = 0; k < ZC_COLL__COUNT; k++) {
        if (!t->group.ops[k] || !zc__tl_comms_profiles(t, k))
            continue;
        const int64_t b = t->group.bytes[k];
        const int64_t share = total > 0 ? (int64_t)((double)ns * (double)b / (double)total) : 0;
        t->kind_ns[k] += share;
        zc_tl_row *r = row_for(t, coalesced_name(k), k, NULL, b, t->group.ranks);
        if (r) {
            r->count++;
            r->total_ns += share;
        }
        if (t->comms.verbose)
            log_op(t, coalesced_name(k), NULL, k, b, share, t->group.ranks);
    }
}

void zc__tl_comms_stats(const zc_tl *t, zc_comms_stats *out)
{
    const size_t size = out->size;
    memset(out, 0, size);
    out->size = size;
    if (!t)
        return;
    out->enabled = t->comms.enabled;
    out->world = t->world;
    for (int k = 0; k < ZC_COLL__COUNT; k++) {
        out->ops[k] = t->kind_ops[k];
        out->bytes[k] = t->kind_bytes[k];
        out->payload_bytes[k] = t->kind_payload[k];
        out->latency_s[k] = (double)t->kind_ns[k] / 1e9;
        out->algbw[k] = out->latency_s[k] > 0 ? (double)out->bytes[k] / out->latency_s[k] : 0.0;
        out->busbw[k] = out->latency_s[k] > 0 ? t->kind_bus[k] / out->latency_s[k] : 0.0;
    }
}

/* Appends to buf at *len (the length the whole text needs), keeping what
 * fits up to the last whole line. */
typedef struct text {
    char *buf;
    size_t cap, len, kept;
} text;

static void line(text *x, const char *fmt, ...) ZC_PRINTF(2, 3);
static void line(text *x, const char *fmt, ...)
{
    char l[320];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l, sizeof l, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof l)
        n = (int)sizeof l - 1;
    if (x->buf && x->kept == x->len && x->len + (size_t)n + 2 <= x->cap) {
        memcpy(x->buf + x->len, l, (size_t)n);
        x->buf[x->len + (size_t)n] = '\n';
        x->buf[x->len + (size_t)n + 1] = '\0';
        x->kept += (size_t)n + 1;
    }
    x->len += (size_t)n + 1;
}

size_t zc__tl_comms_table(const zc_tl *t, char *buf, size_t cap)
{
    text x = {.buf = buf, .cap = cap};
    if (buf && cap)
        buf[0] = '\0';
    line(&x, "%-28s%-16s%-10s%-20s%-18s%-14s%-14s", "Comm. Op", "Message Size", "Count",
         "Total Latency(ms)", "Avg Latency(ms)", "algbw (GB/s)", "busbw (GB/s)");
    if (!t)
        return x.len + 1;
    /* Ops in a fixed order, each (op, caller) with its sizes ascending
     * (the overflow row last). */
    bool done[ZC_TL_COMMS_ROWS] = {false};
    for (int k = 0; k < ZC_COLL__COUNT; k++) {
        const char *ops[2] = {zc__tl_coll_name(k), coalesced_name(k)};
        for (int o = 0; o < 2; o++) {
            for (;;) {
                /* The first row of this op not printed yet names the group. */
                int lead = -1;
                for (int i = 0; i < ZC_TL_COMMS_ROWS && lead < 0; i++)
                    if (!done[i] && t->rows[i].op == ops[o])
                        lead = i;
                if (lead < 0)
                    break;
                const zc_tl_row *L = &t->rows[lead];
                if (L->site)
                    line(&x, "%s | [Caller: %s]", L->op, L->site);
                else
                    line(&x, "%s", L->op);
                for (;;) {
                    int best = -1;
                    for (int i = 0; i < ZC_TL_COMMS_ROWS; i++) {
                        const zc_tl_row *r = &t->rows[i];
                        if (done[i] || r->op != L->op || !same_site(r, L->site ? L->site_buf
                                                                                : NULL))
                            continue;
                        const uint64_t rb = (uint64_t)r->bytes, bb = best >= 0
                                                ? (uint64_t)t->rows[best].bytes : 0;
                        if (best < 0 || rb < bb) /* -1 sorts last */
                            best = i;
                    }
                    if (best < 0)
                        break;
                    done[best] = true;
                    const zc_tl_row *r = &t->rows[best];
                    char sz[48];
                    fmt_size(sz, sizeof sz, r->bytes);
                    /* A sub-group's collective (hybrid sharding) says over how many. */
                    if (r->ranks > 0 && r->ranks != t->world)
                        snprintf(sz + strlen(sz), sizeof sz - strlen(sz), " (%d ranks)",
                                 r->ranks);
                    const double alg = r->bytes >= 0 ? gbps(r->bytes, r->count, r->total_ns)
                                                     : 0.0;
                    line(&x, "%-28s%-16s%-10lld%-20.3f%-18.3f%-14.2f%-14.2f", "", sz,
                         (long long)r->count, (double)r->total_ns / 1e6,
                         r->count ? (double)r->total_ns / 1e6 / (double)r->count : 0.0, alg,
                         alg * zc__tl_busbw_factor(r->kind, busbw_ranks(t, r->ranks)));
                }
            }
        }
    }
    return x.len + 1;
}
