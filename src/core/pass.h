/* Evaluation passes (pass.c): the check that the calls of a training pass
 * make. */
#ifndef ZC_CORE_PASS_H
#define ZC_CORE_PASS_H

#include "base/error.h"
#include "zeroc/zeroc.h"

/* ZC_OK outside an evaluation pass; inside one ZC_ERR_INVALID_STATE naming
 * `fn`, a call that computes gradients or changes parameters. Changes
 * nothing. */
zc_status zc__pass_train_only(const zc_engine *e, const char *fn);

#endif
