/* The engine's lifecycle (src/core/engine): the steps engine.c takes at
 * zc_engine_create, zc_engine_build and zc_engine_destroy - the chunk layout
 * (layout.c), the registry (registry.c), the reserved pools (reserve.c), the
 * placement from budgets (place_build.c), the pre-flight (preflight.c), the
 * cross-rank check of the model (build_agree.c) and the stage policies
 * (stages.c). */
#ifndef ZC_CORE_BUILD_H
#define ZC_CORE_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "config/config.h"
#include "zeroc/zeroc.h"

/* Packs parameters into chunks, pads them and computes Adam segments. */
zc_status zc__layout_build(zc_engine *e);
void zc__layout_free(zc_engine *e);
/* The registry (registry.c): group 0 at zc_engine_create; at destroy the
 * parameters and groups registered. */
zc_status zc__registry_init(zc_engine *e);
void zc__registry_free(zc_engine *e);
/* Plans and reserves the buffer pools and the stage-3 trace from the layout
 * and the configuration (reserve.c); zc__reserve_free releases them. */
zc_status zc__reserve_build(zc_engine *e);
void zc__reserve_free(zc_engine *e);
/* The units of the gradient pool (plan/plan.h, zc__grad_pool_plan): *out gets
 * nchunks flags, true where a zc_chunk_boundary starts a unit (counted on the
 * engine's account; the caller frees nchunks bytes), or NULL when no
 * boundary was registered. After the layout. */
zc_status zc__grad_units(zc_engine *e, bool **out);


/* Placement from memory budgets (place_build.c, rule in plan/plan.h).
 * place_agree: collective, at zc_engine_build after the layout is agreed:
 * reads the "auto" budgets of zero_optimization.max_memory on this rank
 * (zc__preflight_auto_budget), agrees on the outcome and takes each kind's
 * smallest budget over the ranks into e->budget (e->budgets true); nothing
 * without max_memory. place_build: rank-local, from the pre-flight, given
 * its plan input: chooses e->opt_place / e->param_place (nchunks each) and
 * logs the placement at INFO; ZC_ERR_NO_MEMORY naming what is short when
 * nothing fits (the same on every rank). place_free: at destroy. */
struct zc_est_in;
struct zc_est;
zc_status zc__place_agree(zc_engine *e);
zc_status zc__place_build(zc_engine *e, const struct zc_est_in *base);
void zc__place_log(const zc_engine *e, const struct zc_est_in *in, const struct zc_est *est);
void zc__place_free(zc_engine *e);
/* zero_optimization.stage "auto" (place_build.c, from the pre-flight):
 * tries stages 1, 2, 3 in turn - the engine made that stage, the plan input
 * in and its persistence flags pers updated - and keeps the first whose
 * placement fits (zc__place_build); ZC_ERR_NO_MEMORY with stage 3's reason
 * when none does. Deterministic, so the same on every rank. */
zc_status zc__place_stage(zc_engine *e, struct zc_est_in *in, bool *pers);
/* The policy of a stage 0-3 (stages.c), NULL for another number. */
const struct zc_stage_policy *zc__stage_policy(int stage);

/* zc_engine_build's pre-flight (preflight.c): plans the built engine's
 * memory from its layout (after zc__layout_build and the stage's persistence
 * marks, before any buffer), choosing the placement first when budgets or
 * stage "auto" ask for one, and holds the plan to the machine
 * (plan/plan.h: zc__plan_fits, whose errors it returns). */
zc_status zc__preflight(zc_engine *e);

/* Compares, across ranks, a digest of the registered model and the settings
 * that must match (build_agree.c); collective, at zc_engine_build after the
 * layout. A mismatch is ZC_ERR_CONFIG on every rank, with the same message
 * naming the first difference and the ranks involved. */
zc_status zc__build_agree(zc_engine *e);

/* The timeline and the comms logger (trace_build.c): from trace.* /
 * ZC_TRACE / ZC_TRACE_STEPS and comms_logger.*, the buffer sized to the
 * most records the window can need and the files created. Rank-local, at
 * the end of the build's local part (its outcome is agreed with it).
 * ZC_ERR_CONFIG naming the key (a window too long, trace.max_events too
 * small, a file that cannot be created). */
zc_status zc__trace_build(zc_engine *e);

#endif
