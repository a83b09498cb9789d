/* The step's buffers that zc_engine_build allocates (step.c). */
#ifndef ZC_CORE_STEP_H
#define ZC_CORE_STEP_H

#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

/* The norm partials' buffers, allocated at build after the layout;
 * freed before zc__layout_free (sized by nchunks). */
zc_status zc__partials_alloc(zc_engine *e);
void zc__partials_free(zc_engine *e);
/* The Adam calls one optimizer step makes on this rank (segments, cut in
 * pieces where the home moves its I/O along between them): what the
 * timeline's bound counts (engine/trace_build.c). After the homes are
 * built. */
int64_t zc__step_adam_calls(const zc_engine *e);

#endif
