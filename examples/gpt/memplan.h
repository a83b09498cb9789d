/* train_gpt's memory pre-check: what one process needs, planned before any
 * rank starts, from the library's own planner (zc_plan_memory: the numbers
 * `zeroc estimate` prints and zc_engine_build's pre-flight checks) for the
 * engine of each rank, plus what the example allocates itself. */
#ifndef GPT_MEMPLAN_H
#define GPT_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zeroc/zeroc.h>

#include "options.h"

typedef struct gpt_mem_plan {
    zc_memory_plan engine;   /* one rank's engine (zc_plan_memory) */
    int local;               /* ranks (engines) in this process */
    bool host_model;         /* the model runs on the CPU: its memory is host memory */
    uint64_t acts;           /* one rank's activations and backward scratch
                                (model.c's gpt_acts_create, exactly; plus the
                                B = 1 model of --sample); with
                                --checkpoint-activations block one block's, the
                                blocks' inputs being the engine's activation
                                store (engine: ZC_MEM_ACTIVATIONS) */
    uint64_t bufs;           /* one rank's fp32 weight and gradient copies of one
                                block and of the embedding and final LayerNorm,
                                and its token buffers */
    uint64_t master;         /* the gathered fp32 master (params_sha256), once */
    uint64_t import_ring;    /* --init-from: the ranks' staging rings of
                                zc_load_safetensors (32 MiB each), alive only
                                during the import, before the model's buffers */
    uint64_t engine_host;    /* local x the engine's pinned + pageable host bytes
                                (its "device" bytes too on the host path) */
    uint64_t host;           /* the process's peak host bytes: while training,
                                engines + the example's bytes + the master; at
                                the end, the master and its hashed copy; with
                                --init-from at least the engines + the rings */
} gpt_mem_plan;

/* Plans one process of train_gpt: `local` of `world` ranks registering the
 * model of o under cfg, on the CPU or (o->cuda) a GPU. false with err set
 * when the library refuses the plan (its message) or a size overflows. */
bool gpt_mem_plan_make(const gpt_opts *o, const zc_config *cfg, int world, int local,
                       gpt_mem_plan *out, char *err, size_t errlen);

/* Whether the plan's host bytes fit `avail` (MemAvailable); when not, err
 * says how many bytes each part needs - the engine's by kind and the
 * example's activations and buffers - and what shrinks them. NVMe swap and
 * device memory hold nothing of the example's: zc_engine_build's pre-flight
 * refuses those from the same plan, naming the directory or the device. */
bool gpt_mem_plan_fits(const gpt_mem_plan *p, uint64_t avail, char *err, size_t errlen);

/* One JSON object of the plan (bytes), for --json: {"plan": {...}}. */
void gpt_mem_plan_json(const gpt_mem_plan *p, char *buf, size_t cap);

#endif
