/* The engine's side of the activation store (src/act/act.h, act_state.c):
 * the bound read at zc_engine_create, the store made at zc_engine_build, and
 * what the public calls (loop/act_calls.c) need of it. */
#ifndef ZC_CORE_ACT_STATE_H
#define ZC_CORE_ACT_STATE_H

#include <stdbool.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

/* zc_engine_create: reads zc_engine_options' act_checkpoints,
 * act_checkpoint_bytes and act_mp_comm (opts may be NULL or short) with the
 * activation_checkpointing section into e->act_spec (zc__act_spec_from: the
 * planner's rule), and binds the model-parallel communicator to the engine's
 * device. Its errors: the spec's, and the communicator's own (a world that
 * does not hold this process's rank, a failed bind). */
zc_status zc__act_setup(zc_engine *e, const zc_engine_options *o, bool has_fields);
/* zc_engine_build, after the pre-flight planned it: the store (nothing
 * without one). */
zc_status zc__act_build(zc_engine *e);
/* zc_engine_destroy: the store, then the communicator's binding. */
void zc__act_free(zc_engine *e);
/* A micro-step ended (zc_micro_step_end, or zc_step's window): what was not
 * restored is forgotten. */
void zc__act_micro_done(zc_engine *e);

#endif
