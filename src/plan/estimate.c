/* The memory planner: see plan.h. Every size below names the file whose
 * allocation it predicts; a change to one of those must change this too (the
 * test tests/plan/test_estimate.c compares the two for stages 0-3 x offload
 * none/cpu/nvme at world 1..4). */
#include <string.h>

#include "base/env.h"
#include "config/config.h"
#include "offload/homes.h"
#include "plan/plan.h"

/* The swap layout's alignment, shared with both NVMe homes; EST_MAX_SLOTS
 * must match offload/opt_home_nvme.c's MAX_SLOTS, which it keeps private. */
#define EST_IO_ALIGN ((int64_t)ZC_SWAP_ALIGN)
#define EST_MAX_SLOTS 64

/* The non-persistent chunks of each padded size: how many, and the first
 * one, for zc__gather_plan. An open-addressing table that grows with the
 * number of distinct sizes (a handful in practice, at most the chunks), so a
 * plan is one pass over the chunks whatever their number. */
typedef struct size_class {
    int64_t size, count; /* count 0: an empty entry */
    int first;
} size_class;

typedef struct size_table {
    size_class *v;
    size_t cap, n; /* cap a power of two, n < cap / 2 */
} size_table;

static size_t size_slot(int64_t size, size_t cap)
{
    uint64_t x = (uint64_t)size; /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return (size_t)(x ^ (x >> 31)) & (cap - 1);
}

static size_class *size_find(const size_table *t, int64_t size)
{
    for (size_t i = size_slot(size, t->cap);; i = (i + 1) & (t->cap - 1))
        if (!t->v[i].count || t->v[i].size == size)
            return &t->v[i];
}

static zc_status size_grow(size_table *t)
{
    const size_t cap = t->cap ? t->cap * 2 : 64;
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, cap * sizeof(size_class), "gather plan sizes",
                            &mem));
    size_table g = {.v = mem, .cap = cap, .n = t->n};
    memset(g.v, 0, cap * sizeof(size_class));
    for (size_t i = 0; i < t->cap; i++)
        if (t->v[i].count)
            *size_find(&g, t->v[i].size) = t->v[i];
    zc__host_free(NULL, ZC_MEM_OTHER, t->v, t->cap * sizeof(size_class));
    *t = g;
    return ZC_OK;
}

zc_status zc__gather_plan(const int64_t *padded, const bool *persistent, int nchunks,
                          int64_t max_live, int64_t prefetch_elems,
                          zc_status (*emit)(void *arg, int64_t elems, int count), void *arg)
{
    int64_t largest = 0;
    for (int k = 0; k < nchunks; k++)
        if (padded[k] > largest)
            largest = padded[k];
    /* The working set: the chunks a pass uses at once plus the prefetch
     * window, at most the live bound (reserve.c says why). */
    int64_t ws = 0;
    if (__builtin_mul_overflow(largest, (int64_t)2, &ws) ||
        __builtin_add_overflow(ws, prefetch_elems, &ws) || ws > max_live)
        ws = max_live;
    /* One pass counts the non-persistent chunks of each size (a chunk
     * larger than the live bound is skipped: acquiring it is refused); a
     * second emits, in chunk order, each persistent chunk as one slot and
     * each size at its first chunk as its working set. */
    size_table t = {0};
    zc_status rc = size_grow(&t);
    for (int k = 0; rc == ZC_OK && k < nchunks; k++) {
        if ((persistent && persistent[k]) || padded[k] > max_live)
            continue;
        size_class *c = size_find(&t, padded[k]);
        if (c->count) {
            c->count++;
        } else {
            *c = (size_class){.size = padded[k], .count = 1, .first = k};
            if (++t.n >= t.cap / 2)
                rc = size_grow(&t);
        }
    }
    for (int k = 0; rc == ZC_OK && k < nchunks; k++) {
        const int64_t s = padded[k];
        if (s > max_live)
            continue;
        if (persistent && persistent[k]) {
            rc = emit(arg, s, 1);
            continue;
        }
        const size_class *c = size_find(&t, s);
        if (c->first != k)
            continue; /* this size was planned at its first chunk */
        const int64_t fit = ws / s > 0 ? ws / s : 1;
        rc = emit(arg, s, (int)(c->count < fit ? c->count : fit));
    }
    zc__host_free(NULL, ZC_MEM_OTHER, t.v, t.cap * sizeof(size_class));
    return rc;
}

/* Units per set of the gradient pool: as many units as fit in set_elems
 * elements together, whichever they are (the largest first), and at least
 * one. unit_total[u] holds each unit's padded elements. */
static int units_per_set(int64_t *unit_total, int nunits, int64_t set_elems)
{
    /* Largest first; nunits is small (the model's blocks), so a plain
     * insertion sort does. */
    for (int i = 1; i < nunits; i++) {
        const int64_t v = unit_total[i];
        int j = i;
        for (; j > 0 && unit_total[j - 1] < v; j--)
            unit_total[j] = unit_total[j - 1];
        unit_total[j] = v;
    }
    int k = 0;
    int64_t sum = 0;
    while (k < nunits && !__builtin_add_overflow(sum, unit_total[k], &sum) && sum <= set_elems)
        k++;
    return k > 0 ? k : 1;
}

/* The chunks of at least x elements that the k units with the most of them
 * hold together (each chunk its own unit without boundaries). count[] is
 * scratch of one entry per unit. */
static int64_t units_need(const int64_t *padded, const bool *unit_start, int nchunks, int64_t x,
                          int k, int64_t *count, int nunits)
{
    int u = -1;
    for (int c = 0; c < nchunks; c++) {
        if (c == 0 || !unit_start || unit_start[c])
            count[++u] = 0;
        if (padded[c] >= x)
            count[u]++;
    }
    /* The sum of the k largest counts: k passes of a max, k and the units
     * being few (k counts are taken out by marking them -1). */
    int64_t need = 0;
    for (int i = 0; i < k && i < nunits; i++) {
        int best = 0;
        for (int j = 1; j < nunits; j++)
            if (count[j] > count[best])
                best = j;
        if (count[best] <= 0)
            break;
        need += count[best];
        count[best] = -1;
    }
    return need;
}

zc_status zc__grad_pool_plan(const int64_t *padded, const bool *unit_start, int nchunks,
                             int64_t set_elems,
                             zc_status (*emit)(void *arg, int64_t elems, int count), void *arg,
                             int *set_units)
{
    if (set_units)
        *set_units = 0;
    if (nchunks <= 0)
        return ZC_OK;
    int nunits = 0;
    for (int c = 0; c < nchunks; c++)
        if (c == 0 || !unit_start || unit_start[c])
            nunits++;
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, 2 * (size_t)nunits * sizeof(int64_t),
                            "gradient pool plan", &mem));
    int64_t *unit_total = mem, *count = unit_total + nunits;
    for (int c = 0, u = -1; c < nchunks; c++) {
        if (c == 0 || !unit_start || unit_start[c])
            unit_total[++u] = 0;
        unit_total[u] += padded[c]; /* padded totals fit (zc_param_add bounds them) */
    }
    const int k = units_per_set(unit_total, nunits, set_elems);
    if (set_units)
        *set_units = k;
    /* Sizes are visited from the largest down. A set that holds any k
     * units' buffers needs, for every size x, as many slots of at least x as
     * the k units with the most chunks of at least x have together (Hall's
     * condition for chunks that fit any slot at least their size; the pool's
     * smallest-fit taking then never fails where a fit exists): the slots of
     * exactly x are that count minus the slots planned above x. */
    zc_status rc = ZC_OK;
    int64_t above = 0, prev = INT64_MAX;
    int left = nchunks; /* never more slots than chunks: each holds at most one */
    while (rc == ZC_OK && left > 0) {
        int64_t x = 0;
        for (int c = 0; c < nchunks; c++)
            if (padded[c] < prev && padded[c] > x)
                x = padded[c];
        if (x == 0)
            break;
        const int64_t need = units_need(padded, unit_start, nchunks, x, k, count, nunits);
        const int64_t per_set = need - above;
        int64_t slots = per_set * ZC_GRAD_SETS;
        if (slots > left)
            slots = left;
        if (slots > 0) {
            rc = emit(arg, x, (int)slots);
            left -= (int)slots;
        }
        above = need;
        prev = x;
    }
    zc__host_free(NULL, ZC_MEM_OTHER, mem, 2 * (size_t)nunits * sizeof(int64_t));
    return rc;
}

zc_status zc__chunk_cap_env(int64_t *cap, bool *forced)
{
    *cap = ZC_CHUNK_CAP_ELEMS;
    *forced = false;
    int64_t v = ZC_CHUNK_CAP_ELEMS;
    ZC_CHECK(zc__env_i64("ZC_CHUNK_CAP", 1, ZC_CHUNK_CAP_ELEMS,
                         "(a test switch; unset it to use reduce_bucket_size)", forced, &v));
    *cap = v;
    return ZC_OK;
}

/* ---- checked sums -------------------------------------------------------- */

typedef struct acc {
    zc_est *out;
    zc_status rc;
} acc;

static zc_status too_big(void)
{
    return ZC_ERR(ZC_ERR_NO_MEMORY, "the memory plan overflows 64-bit byte counts");
}

/* out->bytes[kind][cat] += a * b, checked. */
static zc_status add(zc_est *out, zc_mem_kind kind, zc_mem_category cat, int64_t a, int64_t b)
{
    int64_t v = 0;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &v) ||
        __builtin_add_overflow(out->bytes[kind][cat], v, &out->bytes[kind][cat]))
        return too_big();
    return ZC_OK;
}

static int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/* A buffer pool (bufpool.c): slots rounded to ZC_BUFPOOL_ALIGN, merged into
 * classes of equal slot size, each class one allocation of count * slot +
 * ZC_BUFPOOL_ALIGN bytes (the alignment slack). */
typedef struct pool_plan {
    int64_t slot[64];
    int64_t count[64];
    int n;
    bool overflow;
} pool_plan;

static zc_status pool_add(pool_plan *p, int64_t bytes, int count)
{
    const int64_t slot = round_up(bytes, ZC_BUFPOOL_ALIGN);
    for (int i = 0; i < p->n; i++)
        if (p->slot[i] == slot) {
            p->count[i] += count;
            return ZC_OK;
        }
    if (p->n == 64)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "the memory plan has more than 64 buffer sizes");
    p->slot[p->n] = slot;
    p->count[p->n++] = count;
    return ZC_OK;
}

static zc_status pool_sum(const pool_plan *p, const zc_est_in *in, zc_est *out)
{
    for (int i = 0; i < p->n; i++) {
        ZC_CHECK(add(out, ZC_MEMKIND_DEVICE, ZC_MEM_RESERVED, p->slot[i], p->count[i]));
        ZC_CHECK(add(out, ZC_MEMKIND_DEVICE, ZC_MEM_RESERVED, ZC_BUFPOOL_ALIGN, 1));
    }
    return ZC_OK;
}

/* The ranks chunks are sharded over (layout.c: the shard group). */
static int est_shard_world(const zc_est_in *in)
{
    return in->shard_world > 0 ? in->shard_world : in->world;
}

/* The engine's bookkeeping in device memory, which collectives and kernels
 * reach there: agree.c's status records (a send record and one per rank)
 * and step.c's norm partials (send and receive, one double per chunk - at
 * least 3 - and rank) and sumsq scratch for the largest shard. Counted as
 * ZC_MEM_OTHER, as allocated, so budgets hold them. */
static zc_status device_bookkeeping(const zc_est_in *in, zc_est *out)
{
    const int64_t W = in->world, parts = in->nchunks > 3 ? in->nchunks : 3;
    int64_t scratch = 1;
    for (int k = 0; k < in->nchunks; k++) {
        const int64_t s =
            (int64_t)zc__sumsq_scratch_elems((size_t)(in->padded[k] / est_shard_world(in)));
        if (s > scratch)
            scratch = s;
    }
    ZC_CHECK(add(out, ZC_MEMKIND_DEVICE, ZC_MEM_OTHER, ZC_AGREE_RECORD_BYTES, W + 1));
    ZC_CHECK(add(out, ZC_MEMKIND_DEVICE, ZC_MEM_OTHER, parts * 8, W + 1));
    return add(out, ZC_MEMKIND_DEVICE, ZC_MEM_OTHER, scratch, 8);
}

/* A pool class of elements of pesz bytes (the gather and gradient pools). */
typedef struct gather_arg {
    pool_plan *pool;
    size_t pesz;
} gather_arg;

static zc_status gather_emit(void *arg, int64_t elems, int count)
{
    gather_arg *g = arg;
    int64_t bytes = 0;
    if (__builtin_mul_overflow(elems, (int64_t)g->pesz, &bytes))
        return too_big();
    return pool_add(g->pool, bytes, count);
}

/* ---- the plan ------------------------------------------------------------ */

static zc_status check_in(const zc_est_in *in)
{
    if (in->world < 1 || in->stage < 0 || in->stage > 3 || in->nchunks < 1 || !in->padded ||
        (in->pesz != 2 && in->pesz != 4) || in->gas < 1 || in->max_live < 1 ||
        in->view_chunks < 0 || in->view_chunks > 64)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: bad input (world %d, stage %d, %d "
                      "chunks, %zu-byte elements, gas %lld)", in->world, in->stage, in->nchunks,
                      in->pesz, (long long)in->gas);
    for (int i = 0; i < 3; i++)
        if (in->sesz[i] != 0 && in->sesz[i] != 2 && in->sesz[i] != 4)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: sesz[%d] is %zu (0 or 4: fp32, "
                          "2: bf16)", i, in->sesz[i]);
    if (in->offload != ZC_OFFLOAD_NONE && in->stage == 0)
        return ZC_ERR(ZC_ERR_CONFIG, "zc__estimate: stage 0 cannot offload the optimizer");
    if (in->nvme_round < 0 || in->pnvme_round < 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: nvme_round %lld or pnvme_round %lld "
                      "< 0", (long long)in->nvme_round, (long long)in->pnvme_round);
    if (in->stage == 3 && in->poffload == ZC_OFFLOAD_NVME &&
        (in->pbuffer_count < 1 || in->max_in_cpu < 0))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: offload_param buffer_count %lld or "
                      "max_in_cpu %lld out of range", (long long)in->pbuffer_count,
                      (long long)in->max_in_cpu);
    if (in->offload != ZC_OFFLOAD_NONE && !(in->ratio > 0.0 && in->ratio <= 1.0))
        return ZC_ERR(ZC_ERR_CONFIG, "zc__estimate: offload ratio %g is not in (0, 1]",
                      in->ratio);
    for (int k = 0; k < in->nchunks; k++)
        if ((in->opt_place && (in->opt_place[k] >= ZC_PLACE__COUNT ||
                               (in->stage == 0 && in->opt_place[k] != ZC_PLACE_DEVICE))) ||
            (in->param_place && in->param_place[k] >= ZC_PLACE__COUNT))
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: chunk %d: placement %d / %d out of "
                          "range (stage %d)", k, in->opt_place ? in->opt_place[k] : 0,
                          in->param_place ? in->param_place[k] : 0, in->stage);
    const int sw = in->shard_world > 0 ? in->shard_world : in->world;
    if (sw > in->world || in->world % sw || in->replicas < 0 || in->hpz < 0 || in->hier_j < 0 ||
        (in->hpz > 1 && in->world % in->hpz))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: shard world %d, replicas %d, hpz %d, "
                      "hier %d with world %d", in->shard_world, in->replicas, in->hpz,
                      in->hier_j, in->world);
    for (int k = 0; k < in->nchunks; k++)
        if (in->padded[k] < 1 || in->padded[k] % ((int64_t)sw * ZC_CHUNK_ALIGN))
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__estimate: chunk %d has %lld elements, not a "
                          "positive multiple of (shard) world x 64", k, (long long)in->padded[k]);
    return ZC_OK;
}

/* param_state.c: with offload_param at stage 3 every chunk but the
 * persistent ones has its shard in the parameter home. */
static bool param_offloaded(const zc_est_in *in, int k)
{
    const bool off = in->param_place ? in->param_place[k] != ZC_PLACE_DEVICE
                                     : in->poffload != ZC_OFFLOAD_NONE;
    return in->stage == 3 && off && !(in->persistent && in->persistent[k]);
}

/* Whether the parameter home is the nvme one: offload_param "nvme", or a
 * placement with a shard on NVMe (param_state.c). */
static bool param_nvme_home(const zc_est_in *in)
{
    if (!in->param_place)
        return in->poffload == ZC_OFFLOAD_NVME;
    for (int k = 0; k < in->nchunks; k++)
        if (param_offloaded(in, k) && in->param_place[k] == ZC_PLACE_NVME)
            return true;
    return false;
}

/* The parameter home's allocations (offload/param_home_cpu.c, param_home_nvme.c).
 * cpu: every offloaded shard in the pinned pool. nvme: the offloaded chunks
 * first in chunk order whose shards fit max_in_cpu elements together are
 * cached in pinned memory (each rounded to the I/O alignment; a chunk that
 * does not fit is skipped and a later, smaller one may still fit), the others
 * get I/O-aligned extents of the swap file, whose store rounds it up to whole
 * stripes of every directory and counts all of it as NVMe PARAMS; with any
 * extent, buffer_count pinned buffers of the largest swapped shard. */
static zc_status param_home_plan(const zc_est_in *in, zc_est *out)
{
    const int64_t pesz = (int64_t)in->pesz;
    const bool nvme_home = param_nvme_home(in);
    int64_t cached = 0, cap = 0, maxn = 0;
    for (int k = 0; k < in->nchunks; k++) {
        if (!param_offloaded(in, k))
            continue;
        const int64_t shard = in->padded[k] / est_shard_world(in);
        if (!nvme_home) {
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_PARAMS, shard, pesz));
            continue;
        }
        const int64_t tb = round_up(shard * pesz, EST_IO_ALIGN);
        const bool cache = in->param_place ? in->param_place[k] == ZC_PLACE_PINNED
                                           : cached <= in->max_in_cpu - shard;
        if (cache) {
            cached += shard;
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_PARAMS, tb, 1));
            continue;
        }
        if (__builtin_add_overflow(cap, tb, &cap))
            return too_big();
        if (shard > maxn)
            maxn = shard;
    }
    if (!cap)
        return ZC_OK;
    if (in->pnvme_round > 0) {
        if (__builtin_add_overflow(cap, in->pnvme_round - 1, &cap))
            return too_big();
        cap = cap / in->pnvme_round * in->pnvme_round;
    }
    const int64_t buf = round_up(maxn * pesz, EST_IO_ALIGN);
    if (__builtin_mul_overflow(buf, in->pbuffer_count, &out->param_buffers))
        return too_big();
    out->param_nvme = cap;
    ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, out->param_buffers, 1));
    return add(out, ZC_MEMKIND_NVME, ZC_MEM_PARAMS, cap, 1);
}

/* Bytes per element of the optimizer's tensor i (master, m, v). */
static int64_t est_sesz(const zc_est_in *in, int i)
{
    return in->sesz[i] ? (int64_t)in->sesz[i] : 4;
}

static zc_status plan(const zc_est_in *in, zc_est *out)
{
    const int W = est_shard_world(in), st = in->stage;
    const bool full_params = st < 3, full_opt = st == 0, sharded = st >= 2;
    const int64_t pesz = (int64_t)in->pesz;
    const zc_mem_kind dk = ZC_MEMKIND_DEVICE; /* the host device counts its memory so too */
    /* opt_state.c: the offload home takes chunks in order up to ratio x all
     * optimizer elements, or the placement says. cpu_elems and maxn_cpu are
     * the cpu home's chunks, maxn_nvme and nvme_cap the nvme home's. */
    int64_t total = 0, offloaded = 0, big = 0, cpu_elems = 0, maxn_cpu = 0, maxn_nvme = 0,
            nvme_cap = 0;
    for (int k = 0; k < in->nchunks; k++) {
        if (__builtin_add_overflow(total, full_opt ? in->padded[k] : in->padded[k] / W, &total))
            return ZC_ERR(ZC_ERR_NO_MEMORY, "zc__estimate: the chunks hold more than 2^63 "
                          "optimizer elements together");
        if (in->padded[k] > big)
            big = in->padded[k];
    }
    const double want = in->offload != ZC_OFFLOAD_NONE ? in->ratio * (double)total : 0;
    const int nt = sharded && in->gas > 1 ? 4 : 3; /* opt_home_nvme.c */
    /* Bytes per element of master, m, v and the gradient shard (fp32). */
    const int64_t esz[4] = {est_sesz(in, 0), est_sesz(in, 1), est_sesz(in, 2), 4};
    int64_t nv_bytes[4] = {0, 0, 0, 0}; /* the nvme files, by tensor */
    for (int k = 0; k < in->nchunks; k++) {
        const int64_t S = in->padded[k], shard = S / W, n = full_opt ? S : shard;
        int place = ZC_PLACE_DEVICE;
        if (in->opt_place)
            place = in->opt_place[k];
        else if (in->offload != ZC_OFFLOAD_NONE && (double)offloaded < want)
            place = in->offload == ZC_OFFLOAD_CPU ? ZC_PLACE_PINNED : ZC_PLACE_NVME;
        const bool off = place != ZC_PLACE_DEVICE, cpu = place == ZC_PLACE_PINNED,
                   nvme = place == ZC_PLACE_NVME;
        if (off)
            offloaded += n;
        /* chunk_mem.c; an offloaded stage-3 shard lives in its home
         * (param_home_plan below). */
        if (!param_offloaded(in, k))
            ZC_CHECK(add(out, dk, ZC_MEM_PARAMS, full_params ? S : shard, pesz));
        if (!sharded)
            ZC_CHECK(add(out, dk, ZC_MEM_GRADS, S, pesz));
        /* MiCS at stage 1: the fp32 slice all-reduced across the replicas
         * (chunk_mem.c rgrad); hpZ: the secondary partition (sec_bytes). */
        if (st == 1 && in->replicas > 1)
            ZC_CHECK(add(out, dk, ZC_MEM_GRADS, shard, 4));
        if (st == 3 && in->hpz > 1 && !(in->persistent && in->persistent[k]))
            ZC_CHECK(add(out, dk, ZC_MEM_PARAMS, S / in->hpz, pesz));
        const bool acc_host = off && cpu && sharded;
        const bool acc_swap = off && nvme && sharded && in->gas > 1;
        if (!acc_host && !acc_swap)
            ZC_CHECK(add(out, dk, ZC_MEM_GRADS, sharded ? shard : (in->gas > 1 ? S : 0), 4));
        if (!off) { /* opt_home_device.c: master, m, v */
            ZC_CHECK(add(out, dk, ZC_MEM_MASTER, n, esz[0]));
            ZC_CHECK(add(out, dk, ZC_MEM_ADAM, n, esz[1] + esz[2]));
        } else if (cpu) { /* opt_home_cpu.c: master, m, v (, gradient shard) */
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_MASTER, n, esz[0]));
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_ADAM, n, esz[1] + esz[2]));
            if (sharded)
                ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_GRADS, n, 4));
        } else { /* opt_home_nvme.c: nt tensors, each rounded to IO_ALIGN */
            for (int i = 0; i < nt; i++) {
                int64_t t = 0;
                if (__builtin_mul_overflow(n, esz[i], &t) ||
                    __builtin_add_overflow(nv_bytes[i], round_up(t, EST_IO_ALIGN), &nv_bytes[i]) ||
                    __builtin_add_overflow(nvme_cap, round_up(t, EST_IO_ALIGN), &nvme_cap))
                    return too_big();
            }
        }
        if (cpu) {
            cpu_elems += n;
            maxn_cpu = n > maxn_cpu ? n : maxn_cpu;
        }
        if (nvme && n > maxn_nvme)
            maxn_nvme = n;
    }
    if (in->staging && maxn_cpu) {
        /* opt_home_cpu.c: a gradient landing buffer per offloaded chunk (its
         * shard in the working dtype) and two output buffers of the largest */
        ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, cpu_elems, pesz));
        ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, maxn_cpu, 2 * pesz));
    }
    if (maxn_nvme) {
        const int64_t maxn_off = maxn_nvme;
        /* opt_home_nvme.c: the files count master, m and v (and the
         * gradient) a tensor each; the swap ring, staging and the gradient
         * buffer are pinned. */
        /* nvme_store.c: the files hold whole stripes of every directory;
         * opt_home_nvme.c counts the round-up as OTHER. */
        if (in->nvme_round > 0) {
            int64_t rounded = 0;
            if (__builtin_add_overflow(nvme_cap, in->nvme_round - 1, &rounded))
                return too_big();
            rounded = rounded / in->nvme_round * in->nvme_round;
            ZC_CHECK(add(out, ZC_MEMKIND_NVME, ZC_MEM_OTHER, rounded - nvme_cap, 1));
        }
        ZC_CHECK(add(out, ZC_MEMKIND_NVME, ZC_MEM_MASTER, nv_bytes[0], 1));
        ZC_CHECK(add(out, ZC_MEMKIND_NVME, ZC_MEM_ADAM, nv_bytes[1] + nv_bytes[2], 1));
        if (nt == 4)
            ZC_CHECK(add(out, ZC_MEMKIND_NVME, ZC_MEM_GRADS, nv_bytes[3], 1));
        int64_t slots = in->buffer_count / 4;
        slots = slots < 1 ? 1 : slots > EST_MAX_SLOTS ? EST_MAX_SLOTS : slots;
        const int64_t buf = round_up(maxn_off * 4, EST_IO_ALIGN);
        int64_t slot = 0; /* a slot: the largest chunk's nt tensors */
        for (int i = 0; i < nt; i++)
            slot += round_up(maxn_off * esz[i], EST_IO_ALIGN);
        ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, slots, slot));
        if (in->staging)
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, slots * maxn_off, 4 + pesz));
        if (nt == 4) {
            ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, buf, 1));
            if (in->staging)
                ZC_CHECK(add(out, ZC_MEMKIND_PINNED, ZC_MEM_BUFFERS, maxn_off, 4));
        }
    }
    ZC_CHECK(param_home_plan(in, out));
    /* reserve.c: the gradient pool, the stage-3 gather pool, the staging. */
    pool_plan grad = {0}, gather = {0}, stage = {0};
    if (sharded) {
        gather_arg g = {&grad, in->pesz};
        ZC_CHECK(zc__grad_pool_plan(in->padded, in->unit_start, in->nchunks,
                                    zc__grad_set_elems(st, in->bucket), gather_emit, &g, NULL));
    }
    if (st == 3) {
        gather_arg g = {&gather, in->pesz};
        ZC_CHECK(zc__gather_plan(in->padded, in->persistent, in->nchunks, in->max_live,
                                 in->prefetch_elems, gather_emit, &g));
    }
    ZC_CHECK(pool_add(&stage, big * 4, 1));
    const int64_t before = out->bytes[ZC_MEMKIND_DEVICE][ZC_MEM_RESERVED];
    ZC_CHECK(pool_sum(&grad, in, out));
    out->grad_pool = out->bytes[ZC_MEMKIND_DEVICE][ZC_MEM_RESERVED] - before;
    ZC_CHECK(pool_sum(&gather, in, out));
    ZC_CHECK(pool_sum(&stage, in, out));
    /* f32_view.c: fp32 slots of the largest chunk for parameter views and
     * as many for gradient views, a pool each. */
    /* core/common/groups.c: the hierarchical gather's scratch, hier_j shards
     * of the largest chunk (not pooled: one plain allocation). */
    if (in->hier_j > 0)
        ZC_CHECK(add(out, dk, ZC_MEM_BUFFERS, big / W * in->hier_j, pesz));
    if (in->view_chunks > 0 && pesz != 4)
        for (int pool = 0; pool < 2; pool++) {
            pool_plan views = {0};
            ZC_CHECK(pool_add(&views, big * 4, in->view_chunks));
            ZC_CHECK(pool_sum(&views, in, out));
        }
    return device_bookkeeping(in, out);
}

zc_status zc__estimate(const zc_est_in *in, zc_est *out)
{
    memset(out, 0, sizeof *out);
    ZC_CHECK(check_in(in));
    /* Padded totals are below INT64_MAX / 4 elements (zc_param_add), but the
     * CLI plans models it never registers, so every product is checked. */
    ZC_CHECK(plan(in, out));
    ZC_CHECK(zc__est_act(in, out));
    for (int k = 0; k < ZC_MEMKIND__COUNT; k++)
        for (int c = 0; c < ZC_MEM__COUNT; c++)
            if (__builtin_add_overflow(out->kind_total[k], out->bytes[k][c], &out->kind_total[k]))
                return too_big();
    return ZC_OK;
}

int zc__nvme_path_count(const char *nvme_path)
{
    if (!nvme_path || !*nvme_path)
        return 0;
    int n = 1;
    for (const char *p = nvme_path; *p; p++)
        n += *p == '\n' && p[1];
    return n < 16 ? n : 16;
}

int64_t zc__est_part_bytes(const zc_est *e, zc_mem_kind kind, zc_est_part part)
{
    const int64_t *b = e->bytes[kind];
    switch (part) {
    case ZC_EST_PARAMS: return b[ZC_MEM_PARAMS];
    case ZC_EST_GRADS: return b[ZC_MEM_GRADS];
    case ZC_EST_OPTIMIZER: return b[ZC_MEM_MASTER] + b[ZC_MEM_ADAM];
    case ZC_EST_ACTIVATIONS: return b[ZC_MEM_ACTIVATIONS];
    default: return b[ZC_MEM_BUFFERS] + b[ZC_MEM_RESERVED];
    }
}

const char *zc__est_part_name(zc_est_part part)
{
    switch (part) {
    case ZC_EST_PARAMS: return "working-precision parameters";
    case ZC_EST_GRADS: return "gradients";
    case ZC_EST_OPTIMIZER: return "optimizer state (master, Adam m and v)";
    case ZC_EST_ACTIVATIONS: return "activation checkpoints (the activation store)";
    default: return "buffers (gradient, gather and staging pools, swap buffers)";
    }
}

const char *zc__est_key(const zc_est_in *in, const zc_est *e, zc_mem_kind kind,
                        zc_est_part part)
{
    const int stage = in->stage, offload = in->offload;
    const int poff = stage == 3 ? in->poffload : ZC_OFFLOAD_NONE;
    switch (part) {
    case ZC_EST_ACTIVATIONS:
        return zc__est_act_key(in, kind);
    case ZC_EST_OPTIMIZER:
        if (kind == ZC_MEMKIND_NVME)
            return "zero_optimization.offload_optimizer.nvme_path";
        if (kind == ZC_MEMKIND_PINNED)
            return "zero_optimization.offload_optimizer.device (\"nvme\")";
        return stage == 0 ? "zero_optimization.stage"
                          : "zero_optimization.offload_optimizer.device";
    case ZC_EST_GRADS:
        if (kind == ZC_MEMKIND_PINNED || stage >= 2)
            return "zero_optimization.offload_optimizer.device";
        return "zero_optimization.stage";
    case ZC_EST_PARAMS:
        /* Pinned and NVMe parameters are the parameter home's. */
        if (kind == ZC_MEMKIND_NVME)
            return "zero_optimization.offload_param.nvme_path";
        if (kind == ZC_MEMKIND_PINNED)
            return poff == ZC_OFFLOAD_CPU ? "zero_optimization.offload_param.device (\"nvme\")"
                                          : "zero_optimization.offload_param.max_in_cpu";
        if (stage < 3)
            return "zero_optimization.stage";
        return poff == ZC_OFFLOAD_NONE ? "zero_optimization.offload_param.device"
                                       : "zero_optimization.stage3_param_persistence_threshold";
    default:
        if (kind == ZC_MEMKIND_PINNED) {
            /* The home holding most of the pinned buffers names the key. */
            const int64_t all = e->bytes[kind][ZC_MEM_BUFFERS] + e->bytes[kind][ZC_MEM_RESERVED];
            if (e->param_buffers > all - e->param_buffers)
                return "zero_optimization.offload_param.buffer_count";
            return offload == ZC_OFFLOAD_CPU ? "zero_optimization.offload_optimizer.device"
                                             : "zero_optimization.offload_optimizer.buffer_count";
        }
        return stage == 3 ? "zero_optimization.stage3_max_live_parameters"
                          : "zero_optimization.reduce_bucket_size";
    }
}
