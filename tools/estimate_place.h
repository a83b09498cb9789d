/* `zeroc estimate --max-memory`: the placement the engine would choose under
 * per-rank budgets (tools/estimate_place.c). */
#ifndef ZC_TOOLS_ESTIMATE_PLACE_H
#define ZC_TOOLS_ESTIMATE_PLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

/* The model and options of one `zeroc estimate` call. */
typedef struct ep_model {
    const int64_t *numel;
    const bool *boundary; /* NULL: no zc_chunk_boundary */
    int n;
} ep_model;

/* Sets zero_optimization.max_memory from "device=70GiB,cpu=200GiB,nvme=1TiB"
 * (each kind once; a size or auto) and, with nvme_path, the optimizer
 * block's swap directory. 0, or 2 after a message on stderr. */
int zc__ep_set_budgets(zc_config *cfg, const char *spec, const char *nvme_path);

/* Prints the placement of each stage (1-3, or the configuration's when
 * only_cfg_stage) under cfg's budgets: per kind the bytes and the chunks (as
 * ranges), the budgets' use, the bytes per step crossing each link and the
 * link expected to bound the step, and the keys that pin the plan down; or
 * the refusal. One JSON line per stage with json. 0, or 1 when no stage
 * fits. */
int zc__ep_print(const zc_config *cfg, const ep_model *m, int world, int dtype, bool host,
                 bool only_cfg_stage, bool json);

#endif
