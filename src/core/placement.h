/* Placement from memory budgets (internal): where every chunk's optimizer
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
#ifndef ZC_CORE_PLACEMENT_H
#define ZC_CORE_PLACEMENT_H

#include "config/config.h"
#include "core/estimate.h"

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
