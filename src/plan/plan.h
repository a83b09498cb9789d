/* The memory planner and the placement (src/plan's seam header): what an
 * engine of a given model and configuration will allocate, by memory kind
 * and category, where each chunk's state goes when budgets decide it, and
 * whether that fits the machine. It describes an engine that does not exist
 * yet, so it includes nothing of src/core: the engine (src/core), the stage
 * modules and `zeroc estimate` (tools/) all reach the planner through this
 * header, and the engine applies the sizing rules defined here.
 *
 * Files: estimate.c (the bytes of a layout, DeepSpeed's estimators),
 * placement.c (the placement from budgets), plan.c (zc_plan_memory: a model
 * planned before any engine exists), machine.c (what the machine has: the
 * "auto" budgets, the checks of a plan against device, NVMe and host memory,
 * and their test overrides).
 *
 * The planner shares its rules with the engine: the chunking rule
 * (zc__chunk_starts, zc__chunk_padded) is the one core/engine/layout.c
 * applies, the stage-3 gather working set (zc__gather_plan) is the one
 * core/engine/reserve.c reserves, and the per-chunk and per-home sizes follow
 * core/state/chunk_mem.c and the homes of src/offload: opt_home_device.c,
 * opt_home_cpu.c, opt_home_nvme.c and, for stage-3 parameter offload,
 * param_home_cpu.c and param_home_nvme.c (each of those files names the
 * planner where a size is coupled).
 *
 * What it leaves out: ZC_MEM_OTHER of host memory (chunk tables, Adam
 * segments, norm partials, agreement records, the stage-3 trace:
 * O(parameters + chunks * world) bytes of bookkeeping), and the pinned
 * pools' slab slack. The NVMe store's round-up of the swap files to whole
 * stripes is planned, as NVMe ZC_MEM_OTHER like the engine counts it; the
 * parameter store's round-up is planned as NVMe ZC_MEM_PARAMS, as
 * param_home_nvme.c counts its whole file. */
#ifndef ZC_PLAN_PLAN_H
#define ZC_PLAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "act/act.h"
#include "config/config.h"
#include "device/device.h"

/* ---- the sizing rules the engine applies -------------------------------- */

/* Most dimensions of a parameter (zc_param_add, zc_plan_memory). */
#define ZC_PARAM_MAX_NDIM 8
/* Chunks are padded to a multiple of world * ZC_CHUNK_ALIGN elements, so every
 * shard starts 64-element (>= 128-byte) aligned. */
#define ZC_CHUNK_ALIGN 64
/* Default chunk size cap when reduce_bucket_size (DeepSpeed default 5e8
 * elements) is larger: a chunk is the unit of the transient gradient buffer
 * and of the stage-3 gather buffer, so 2^24 elements (32 MiB in bf16) keeps
 * those bounded while collectives stay large. zc_engine_options.bucket_elems
 * overrides it. */
#define ZC_CHUNK_CAP_ELEMS ((int64_t)1 << 24)
/* Stage 2/3 transient gradient buffers reserved at build: two sets, each
 * able to hold the buffers of the largest unit (the chunks between two
 * zc_chunk_boundary calls, or one chunk without boundaries; reserve.c), like
 * DeepSpeed's pair of reduce buckets with overlap_comm and FSDP's unsharded
 * gradient of the unit in backward beside the one still being reduced: one
 * unit's gradients are written while the previous unit's are reduced. A
 * backward pass that holds more at once gets ZC_ERR_NO_MEMORY from
 * zc_grad_buffer on every rank alike. */
#define ZC_GRAD_SETS 2
/* Buffer pool slots (core/common/bufpool.c) start 256-byte aligned, as
 * cudaMalloc'd memory does. */
#define ZC_BUFPOOL_ALIGN 256
/* One rank's status record of the engine's agreement (core/common/agree.c)
 * in device memory; the planner counts W + 1 of them. */
#define ZC_AGREE_RECORD_BYTES 1024


/* Whether parameter i (numel elements, boundary: zc_chunk_boundary was called
 * before it) starts a new chunk when the current one holds cur_used
 * elements. The rule of layout.c. */
static inline bool zc__chunk_starts(int i, bool boundary, int64_t cur_used, int64_t numel,
                                    int64_t bucket)
{
    if (i == 0 || boundary)
        return true;
    return cur_used > 0 && cur_used + numel > bucket;
}

/* A chunk of `used` elements padded to a multiple of world * 64. */
static inline int64_t zc__chunk_padded(int64_t used, int world)
{
    const int64_t align = (int64_t)world * ZC_CHUNK_ALIGN;
    return (used + align - 1) / align * align;
}

/* Stage 3's persistence rule (zero3.c): a chunk whose parameters all have
 * at most thr elements (thr > 0) stays gathered while the persistent total
 * *total plus its padded size stays within model_thr (< 0: no bound); adds it
 * to *total when it does. */
static inline bool zc__chunk_persists(int64_t max_numel, int64_t padded, int64_t thr,
                                      int64_t model_thr, int64_t *total)
{
    if (model_thr < 0)
        model_thr = INT64_MAX;
    if (thr <= 0 || max_numel > thr || *total > model_thr - padded)
        return false;
    *total += padded;
    return true;
}

/* Stage 3's gather pool, as reserve.c plans it: calls emit(arg, elems,
 * count) for each planned class of `count` slots of `elems` padded elements
 * (persistent chunks one slot each; every other size its working set), in
 * chunk order. One pass over the chunks with a table of their distinct sizes:
 * ZC_ERR_NO_MEMORY when the table cannot be allocated, or emit's failure. */
zc_status zc__gather_plan(const int64_t *padded, const bool *persistent, int nchunks,
                          int64_t max_live, int64_t prefetch_elems,
                          zc_status (*emit)(void *arg, int64_t elems, int count), void *arg);

/* The elements one set of the gradient pool may hold (zc__grad_pool_plan's
 * set_elems): the reduction bucket at stage 2; at stage 3 a unit, since
 * stage 3 is there to bound what a rank holds at once (its gathers by
 * stage3_max_live_parameters), and a pool of the whole model's unsharded
 * gradients would undo that. */
static inline int64_t zc__grad_set_elems(int stage, int64_t bucket)
{
    return stage == 2 ? bucket : 0;
}

/* Stages 2/3's gradient pool, as reserve.c plans it (the design is
 * explained there): calls emit(arg, elems, count) for each class of `count`
 * slots of `elems` padded elements, largest first. A unit is a run of chunks
 * between zc_chunk_boundary calls (what zc_block_span returns): unit_start[k]
 * says a boundary starts one at chunk k (chunk 0 always starts one); NULL
 * when zc_chunk_boundary was never called, which makes every chunk a unit.
 * The pool holds ZC_GRAD_SETS (two) sets of slots, each able to hold the
 * gradient buffers of any k units together, and at most nchunks slots in
 * all: k is as many units as fit in set_elems elements (the reduction
 * bucket, zc__bucket_elems), at least one. *set_units (when not NULL) gets
 * k, or 0 when there are no chunks. */
zc_status zc__grad_pool_plan(const int64_t *padded, const bool *unit_start, int nchunks,
                             int64_t set_elems,
                             zc_status (*emit)(void *arg, int64_t elems, int count), void *arg,
                             int *set_units);

/* ZC_CHUNK_CAP, a switch for tests: the most elements a chunk may hold
 * whatever reduce_bucket_size or zc_engine_options.bucket_elems say, so a
 * small model gets the chunk layout of a large one (several chunks per
 * block). Unset or "": ZC_CHUNK_CAP_ELEMS, which caps only the configured
 * reduce_bucket_size (*forced false). Otherwise a whole decimal number in
 * 1..2^24 (*forced true), else ZC_ERR_CONFIG naming the variable (base/env.h). */
zc_status zc__chunk_cap_env(int64_t *cap, bool *forced);

/* The chunk size target of layout.c: the engine option when > 0, else
 * reduce_bucket_size, capped at `cap` (zc__chunk_cap_env); a forced cap
 * bounds the option too. */
static inline int64_t zc__bucket_elems(int64_t option, int64_t reduce_bucket_size, int64_t cap,
                                       bool forced)
{
    int64_t b = option > 0 ? option : reduce_bucket_size;
    if ((option <= 0 || forced) && (b <= 0 || b > cap))
        b = cap;
    return b;
}

/* The hidden size H of the "auto" rules, as the Hugging Face integration
 * takes it: the largest dimension of the first 2-D tensor of the largest
 * size. Fed the tensors in order (starting from *best = *h = 0). */
static inline void zc__hidden_step(const int64_t *shape, int ndim, int64_t numel, int64_t *best,
                                   int64_t *h)
{
    if (ndim != 2 || numel <= *best)
        return;
    *best = numel;
    *h = shape[0] > shape[1] ? shape[0] : shape[1];
}

/* The memory kinds a placement chooses between, fastest first. */
enum { ZC_PLACE_DEVICE = 0, ZC_PLACE_PINNED = 1, ZC_PLACE_NVME = 2, ZC_PLACE__COUNT = 3 };

/* What the plan needs: the layout and the configuration that sizes memory. */
typedef struct zc_est_in {
    int world, stage;            /* world >= 1, stage 0..3 */
    size_t pesz;                 /* bytes per working-precision element */
    size_t sesz[3];              /* bytes per element of the optimizer's master, m
                                    and v: 4 (fp32) or 2 (bf16); 0 counts as 4 */
    int64_t gas;                 /* gradient_accumulation_steps (>= 1) */
    int64_t bucket;              /* the reduction bucket (zc__bucket_elems): one set of
                                    stages 2/3's gradient pool holds as many units
                                    as fit in it (zc__grad_pool_plan) */
    int offload;                 /* ZC_OFFLOAD_NONE / CPU / NVME (config.h) */
    double ratio;                /* offload_optimizer.ratio, (0, 1] */
    bool staging;                /* a real device: host homes stage through pinned buffers */
    zc_mem_kind dev_kind;        /* the device's memory: HOST on the host path (which
                                    decides budgets and pre-flight checks; "device"
                                    buffers are counted as ZC_MEMKIND_DEVICE either way,
                                    as the host device's allocator counts them) */
    int64_t buffer_count;        /* offload_optimizer.buffer_count (nvme) */
    int64_t nvme_round;          /* the swap store's round-up unit: aio.block_size x
                                    nvme_path directories (0: none) */
    int64_t max_live, prefetch_elems; /* stage 3 (elements; max_live > 0) */
    int nchunks;
    const int64_t *padded;       /* per chunk: padded elements */
    const bool *persistent;      /* per chunk (stage 3), or NULL: none */
    const bool *unit_start;      /* per chunk: a zc_chunk_boundary starts a unit there
                                    (stages 2/3's gradient pool, zc__grad_pool_plan);
                                    NULL: no boundary, every chunk is a unit */
    int view_chunks;             /* zc_engine_options.f32_view_chunks (0..64; its two
                                    pools exist only for 16-bit parameters) */
    /* zero_optimization.offload_param (stage 3; ignored below it, as the
     * engine ignores it): where the non-persistent chunks' shards live. */
    int poffload;                /* ZC_OFFLOAD_NONE / CPU / NVME */
    int64_t pbuffer_count;       /* offload_param.buffer_count (nvme, >= 1) */
    int64_t max_in_cpu;          /* offload_param.max_in_cpu: shard elements cached in
                                    pinned memory (nvme) */
    int64_t pnvme_round;         /* the parameter store's round-up unit: aio.block_size x
                                    offload_param.nvme_path directories (0: none) */
    /* A placement chosen from memory budgets (placement.c), or NULL: the
     * rules of the keys above. opt_place[k] (ZC_PLACE_*): where chunk k's
     * optimizer state lives (offload, ratio are then ignored; stage 0 only
     * ZC_PLACE_DEVICE). param_place[k], stage 3: where its parameter shard
     * lives (poffload, max_in_cpu ignored; a persistent chunk stays on the
     * device whatever it says). The homes follow: pinned chunks go to the cpu
     * home, NVMe ones to the nvme home; pinned parameter shards are the nvme
     * parameter home's cached chunks when any shard is on NVMe. */
    const uint8_t *opt_place, *param_place;
    /* Hybrid sharding (core/common/groups.h); zeros without it. The chunks
     * are padded and sharded over shard_world ranks (0: world; world still
     * sizes the agreement records and norm partials); replicas > 1 at stage
     * 1 adds each chunk's fp32 gradient shard (MiCS's all-reduce across
     * replicas, chunk_mem.c); hpz > 1 at stage 3 adds each non-persistent
     * chunk's secondary partition, padded / hpz working-precision elements;
     * hier_j > 0 adds the hierarchical gather's scratch, hier_j shards of
     * the largest chunk. */
    int shard_world, replicas, hpz, hier_j;
    /* The activation store reserved at build (src/act/act.h; slots 0: none):
     * its bytes come from zc__act_layout, as the store allocates them
     * (act_est.c). */
    zc_act_spec act;
} zc_est_in;

typedef struct zc_est {
    int64_t bytes[ZC_MEMKIND__COUNT][ZC_MEM__COUNT];
    int64_t kind_total[ZC_MEMKIND__COUNT];
    /* Shares of bytes[][] held by the stage-3 parameter home (offload_param),
     * so that a message can name its key rather than offload_optimizer's:
     * its pinned swap buffers (nvme) and its swap file (NVMe PARAMS). */
    int64_t param_buffers, param_nvme;
    /* Stages 2/3's gradient pool (part of the device kind's RESERVED). */
    int64_t grad_pool;
    /* The activation store's swap file (NVMe ACTIVATIONS; act_est.c). */
    int64_t act_nvme;
} zc_est;

/* Consumers as a user changes them: the categories grouped by the setting
 * that shrinks them. */
typedef enum zc_est_part {
    ZC_EST_PARAMS = 0, /* working-precision parameters */
    ZC_EST_GRADS,      /* gradients, accumulators and fp32 gradient shards */
    ZC_EST_OPTIMIZER,  /* master weights, Adam m and v */
    ZC_EST_BUFFERS,    /* buffer pools, staging and swap buffers */
    ZC_EST_ACTIVATIONS, /* the activation store (activation_checkpointing) */
    ZC_EST__PARTS
} zc_est_part;

/* Directories in a configuration's nvme_path (the config keeps a list
 * '\n'-separated), at most 16 as the store takes them; 0 for NULL or "". */
int zc__nvme_path_count(const char *nvme_path);

/* Bytes of a part in one kind of memory. */
int64_t zc__est_part_bytes(const zc_est *e, zc_mem_kind kind, zc_est_part part);
/* Static text: the part's name ("optimizer state (master, Adam m and v)"). */
const char *zc__est_part_name(zc_est_part part);
/* Static text: the configuration key that changes a part's bytes in that
 * kind of memory, for the plan's stage, offload_optimizer and offload_param
 * (in) and its bytes (e: which home holds most of the pinned buffers). */
const char *zc__est_key(const zc_est_in *in, const zc_est *e, zc_mem_kind kind,
                        zc_est_part part);

/* The activation store's share of a plan (act_est.c): in->act's layout
 * (zc__act_layout) added to out->bytes as ZC_MEM_ACTIVATIONS, the swap file
 * in out->act_nvme too. zc__estimate calls it; its errors are the layout's.
 * The key that changes the store's bytes in `kind` (zc__est_key's part
 * ZC_EST_ACTIVATIONS). */
zc_status zc__est_act(const zc_est_in *in, zc_est *out);
const char *zc__est_act_key(const zc_est_in *in, zc_mem_kind kind);

/* Fills *out with the bytes one rank allocates at build (ZC_MEM_OTHER
 * excepted, see above). ZC_ERR_INVALID_ARG on a bad input, ZC_ERR_NO_MEMORY
 * when a byte count overflows int64 or the gather plan's scratch table cannot
 * be allocated. Changes nothing but *out; thread-safe. */
zc_status zc__estimate(const zc_est_in *in, zc_est *out);


/* DeepSpeed's estimate_zero2_model_states_mem_needs (stages 1, 2) and
 * estimate_zero3_model_states_mem_needs (stage 3, zero_init), per GPU and per
 * node, in bytes: P parameters, LL the largest layer's, G GPUs in all, gpn
 * per node, additional_buffer_factor 1.5 (applied as x 3 / 2, rounded down);
 * offload: the optimizer's, offload_params: the parameters' too (stage 3):
 *   stage 1/2  offload: GPU 2P,              CPU P max(4G, 16) 1.5
 *              none:    GPU 2P + 18P/G,      CPU 4P gpn 1.5
 *   stage 3    both:    GPU 4LL,             CPU 18P/N 1.5   (N = G / gpn)
 *              offload: GPU 4LL + 2P/G,      CPU 16P/N 1.5
 *              none:    GPU 4LL + 18P/G,     CPU 4LL gpn 1.5
 * Divisions round down, as DeepSpeed's int() does. ZC_ERR_INVALID_ARG for
 * stage 0 (no estimator), G not a multiple of gpn, or offload_params without
 * the optimizer's offload or below stage 3 (DeepSpeed has no estimator for
 * them); ZC_ERR_NO_MEMORY on overflow. */
zc_status zc__est_deepspeed(int stage, bool offload, bool offload_params, uint64_t P,
                            uint64_t LL, uint64_t G, uint64_t gpn, uint64_t *gpu,
                            uint64_t *cpu);

/* ---- zc_plan_memory with its chunks (plan.c), for `zeroc estimate` ------- */

struct zc_memory_plan;
struct zc_plan_tensor;
struct zc_engine_options;

/* The working precision: zc_engine_options.param_dtype when set (cfg's
 * fp16/bf16 blocks are made to follow it), else cfg's fp16/bf16 blocks;
 * ZC_ERR_CONFIG when both are enabled, ZC_ERR_INVALID_ARG for an option that
 * is not fp32, fp16 or bf16 (plan.c; zc_engine_create and zc_plan_memory). */
zc_status zc__pick_dtype(zc_config *cfg, const struct zc_engine_options *o, zc_dtype *out);

/* The chunks of a plan and where the placement puts them (malloc'd, n
 * entries each; free with zc__plan_chunks_free). */
typedef struct zc_plan_chunks {
    int n;
    int64_t *padded;
    bool *persistent;
    uint8_t *opt, *param;    /* ZC_PLACE_* per chunk */
} zc_plan_chunks;

/* zc_plan_memory, and with chunks != NULL the plan's chunks (filled only on
 * success). */
zc_status zc__plan_memory_placed(const zc_config *cfg, int world,
                                 const struct zc_plan_tensor *tensors, int n,
                                 const struct zc_engine_options *opts,
                                 struct zc_memory_plan *out, zc_plan_chunks *chunks);
void zc__plan_chunks_free(zc_plan_chunks *c);

/* The ranks per node a plan assumes (plan.c), as the engine's node map reads
 * them (core/common/groups.h): ZC_RANKS_PER_NODE, else the launcher's, else
 * the whole world; ZC_ERR_CONFIG for a malformed variable. */
zc_status zc__plan_ranks_per_node(int world, int *out);
/* The nodes a MiCS shard group of shard_world ranks spans for the
 * hierarchical gather (hier_j of zc_est_in), 0 when it spans one node or
 * does not split into whole nodes (the build refuses those). */
int zc__plan_hier_j(int shard_world, int ranks_per_node);

/* The bytes one rank (`rank`) sends per optimizer step in the model's
 * collectives, by link: out[0] to ranks on its node, out[1] to others
 * (links.c), with the formula zc_stats counts them by (comm.h,
 * zc__link_bytes). Nodes are ranks_per_node consecutive ranks. The step:
 * stage 0 all-reduces each chunk; stages 1-3 reduce-scatter it over the
 * shard group (stage 1 once, 2 and 3 every micro-step), MiCS all-reduces
 * the fp32 shard across the replicas once, stages 1-2 gather it once
 * after the update; stage 3 gathers a non-persistent chunk in the forward
 * and the backward of every micro-step (no stage3_max_reuse_distance keep),
 * hpZ all but the first of them from the secondary partition, and a
 * persistent chunk once (the refresh after the update). ZC_ERR_INVALID_ARG
 * for sizes that do not divide the world, ZC_ERR_NO_MEMORY. */
typedef struct zc_link_plan_in {
    int world, stage, ranks_per_node, rank;
    int shard_world;             /* MiCS S; 0 or world: flat */
    bool hier;                   /* mics_hierarchical_params_gather */
    int hpz;                     /* zero_hpz_partition_size (> 1 at stage 3), else 0 */
    size_t pesz;
    int64_t gas;
    int nchunks;
    const int64_t *padded;       /* padded over the shard group (zc__chunk_padded) */
    const bool *persistent;      /* stage 3, or NULL */
} zc_link_plan_in;
zc_status zc__plan_link_bytes(const zc_link_plan_in *in, int64_t out[2]);

/* ---- what the machine has, and whether a plan fits it (machine.c, fit.c) - */

/* Who a plan is checked for, in the messages of zc__plan_fits: the build's
 * rank, stage and number of chunks. */
typedef struct zc_plan_who {
    int rank, stage, nchunks;
} zc_plan_who;

/* Holds a plan (in, est: an engine of configuration cfg on device dev) to
 * what the machine can give: refuses device buffers beyond the device's free
 * memory (zc_device_ops.mem_info; ZC_ERR_NO_MEMORY), NVMe swap beyond the
 * free space of the filesystems under offload_optimizer.nvme_path and
 * offload_param.nvme_path (the two swap stores summed where they share a
 * filesystem; ZC_ERR_IO), then host memory (pageable + pinned) beyond
 * MemAvailable or the cgroup's headroom (ZC_ERR_NO_MEMORY); the message
 * names the biggest consumer and the configuration key that changes it. The
 * test overrides below apply. Reads the machine, changes nothing. */
zc_status zc__plan_fits(const zc_plan_who *who, const zc_config *cfg, zc_device *dev,
                        const zc_est_in *in, const zc_est *est);

/* The figure of an "auto" budget of zero_optimization.max_memory on this
 * rank: device, dev's free memory (dev NULL, a plan with no device opened:
 * the host path's, else ZC_ERR_CONFIG; on the host path this rank's share of
 * the host's); cpu, MemAvailable or the cgroup's headroom (the smaller) over
 * local_ranks, the ranks of this node; both less 10%. nvme, the free space
 * of the filesystems under both blocks' nvme_path less 5%. The test hooks
 * below apply. ZC_ERR_CONFIG / ZC_ERR_DEVICE / ZC_ERR_IO when a figure
 * cannot be read, naming the key. Rank-local. */
zc_status zc__preflight_auto_budget(const zc_config *cfg, zc_device *dev,
                                    int local_ranks, zc_budget_kind kind, int64_t *bytes);

/* The test overrides as set (machine.c): the root of the host limits (NULL:
 * "/"), the device's free bytes and each swap directory's free bytes (< 0:
 * ask the device / statvfs). */
const char *zc__machine_limits_root(void);
int64_t zc__machine_device_free_set(void);
int64_t zc__machine_nvme_free_set(void);

/* Tests: read the host limits under root (a directory of fake proc/sys
 * files, see zc__host_mem_limits_read) instead of "/"; NULL restores. */
void zc__preflight_limits_root(const char *root);
/* Tests: the device has `bytes` free (any backend, the host's included: its
 * "device" buffers are then held to it); < 0 restores asking the device. */
void zc__preflight_device_free(int64_t bytes);
/* Tests: every swap directory's filesystem has `bytes` free; < 0 restores
 * asking statvfs. */
void zc__preflight_nvme_free(int64_t bytes);

/* ---- placement from memory budgets (placement.c) ------------------------ */

/* where every chunk's optimizer
 * state and, at stage 3, parameter shard lives, chosen from the per-rank
 * budgets of zero_optimization.max_memory (device, cpu, nvme) by the
 * planner of estimate.c, fastest memory first.
 *
 * The rule. The placeable items, in order of preference for fast memory:
 * every chunk's parameter shard (stage 3, non-persistent chunks; persistent
 * chunks stay gathered on the device whatever the budgets), then every
 * chunk's optimizer state, each in chunk order. Each goes to the fastest kind
 * - device, then pinned host, then NVMe - that keeps every budget, counting
 * every byte the build allocates (the plan of zc__estimate: the homes' swap
 * and staging buffers, the gradient and gather pools, included):
 *
 *   1. every item starts on the device;
 *   2. while a kind is over its budget, the least preferred item in it moves
 *      down one kind (the fastest kind over budget first; done in batches of
 *      as many items as must move for the most they can free to cover the
 *      excess, which moves what one at a time would);
 *   3. then each item on a slower kind, most preferred first, moves to the
 *      fastest kind where it fits, until none moves.
 *
 * So no item sits on a slower kind while a faster one has room for it (the
 * plan with it moved up passes a budget), and the plan is a pure function of
 * the layout, the configuration and the budgets: the same on every rank that
 * has the same inputs (the engine agrees the budgets first). Cost: a plan
 * (O(chunks)) per demotion batch and per promotion tried; a promotion is
 * not tried where the kind's room is below the item's own state bytes, so a
 * model of 60 000 chunks plans in well under a second.
 *
 * Keys the user set are kept: an explicit offload_optimizer.device (or, at
 * stage 3, offload_param.device) places by its own rule (ratio, max_in_cpu)
 * and only the other part is chosen; a plan over budget with nothing left to
 * move names the key that holds it there. */
typedef struct zc_place_in {
    zc_est_in est;          /* the layout and configuration (its placement arrays
                               are ignored: the planner fills them) */
    int64_t budget[ZC_BUDGET__COUNT]; /* bytes of each kind (0: none may be used) */
    bool opt_free, param_free; /* the planner chooses the optimizer state's / the
                                  parameter shards' kinds (else the keys' rules) */
    bool opt_nvme, param_nvme; /* an nvme_path exists for that home's swap files */
} zc_place_in;

/* The bytes a plan takes from each budget: device is the engine's device
 * memory kind (on the host path the host memory that stands for it), cpu the
 * pinned and (on a GPU) pageable host memory, nvme the swap files. */
void zc__place_usage(const zc_est_in *in, const zc_est *est, int64_t used[ZC_BUDGET__COUNT]);

/* The placement the offload keys' own rules make (what zc__estimate and the
 * homes do without a placement), into opt[] and param[]. */
void zc__place_rules(const zc_est_in *in, uint8_t *opt, uint8_t *param);

/* Chooses the placement: fills opt[k] and param[k] (nchunks entries each,
 * ZC_PLACE_*; the parts the planner does not choose are left as the keys'
 * rules make them and reported as such) and *est with the plan's bytes.
 * ZC_ERR_NO_MEMORY when no placement keeps every budget, the message naming
 * the kind that is short, by how much, and the smallest changes that would
 * fit (a larger budget of that kind, NVMe, a higher stage, or the explicit
 * key to let go); the estimator's errors as they are. Thread-safe. */
zc_status zc__place_plan(const zc_place_in *in, uint8_t *opt, uint8_t *param, zc_est *est);

/* The nvme_path a home's swap files go under when the planner puts state on
 * NVMe: its own block's, else the other block's (either serves both). */
const char *zc__place_nvme_path(const zc_config *cfg, bool param);

/* The nvme_path the activation store's swap files go under: its section's
 * (activation_checkpointing.nvme_path), else offload_param's, else
 * offload_optimizer's; NULL when none is set. */
const char *zc__act_nvme_path(const zc_config *cfg);

/* The activation store a build reserves (act_est.c): from the bound the
 * program states (zc_engine_options.act_checkpoints, 0: the config's
 * number_checkpoints; act_checkpoint_bytes, 0: no store) and the
 * activation_checkpointing section - the home, the NVMe buffers, the
 * partition over a model-parallel group of mp_world ranks (0: none given) -
 * on a device with memory of its own or not (the host path). *out has slots
 * 0 when there is no store. ZC_ERR_INVALID_ARG for a bound out of range,
 * ZC_ERR_CONFIG for partition_activations without a group. The one rule of
 * the engine (zc_engine_create), zc_plan_memory and `zeroc estimate`. */
zc_status zc__act_spec_from(const zc_config *cfg, int64_t slots, int64_t bytes, int mp_world,
                            bool device_memory, zc_act_spec *out);

/* Whether the planner may put that home's state on NVMe: an nvme_path
 * (zc__place_nvme_path) and the aio and buffer_count values an NVMe home
 * needs (otherwise it stays off NVMe). */
bool zc__place_nvme_ok(const zc_config *cfg, bool param);

/* Tests: builds and plans with budgets of nchunks chunks take this
 * placement (arrays of ZC_PLACE_* kept by the caller until reset with NULL)
 * instead of the planner's; the pre-flight still checks its plan against the
 * machine. zc__place_forced copies it into opt / param when one of nchunks
 * chunks is set, else returns false. */
void zc__place_force(const uint8_t *opt, const uint8_t *param, int nchunks);
bool zc__place_forced(int nchunks, uint8_t *opt, uint8_t *param);

/* Text of a kind for messages ("device", "pinned host", "NVMe"). */
const char *zc__place_kind_name(int place);

#endif
