/* Stage 1's publish (src/zero1/zero1.c), which stage 2 shares: after the
 * optimizer pass every rank holds the updated working parameters of its own
 * shard only, and the chunks are all-gathered in place. */
#ifndef ZC_ZERO1_ZERO1_H
#define ZC_ZERO1_ZERO1_H

#include "core/engine.h"

/* The policy's publish: all-gathers each chunk's updated working parameters
 * in place, the chunks in one communicator group; nothing when !updated (a
 * skipped step). A failed collective breaks the engine. */
zc_status zc__z1_publish(zc_engine *e, bool updated);

#endif
