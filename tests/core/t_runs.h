/* Trained runs of the engine harness (t_engine.h), named and compared: the
 * equivalence tests train a reference and variants of one configuration and
 * assert that the variants' numbers are the reference's, bit for bit.
 * Assertions are Criterion's: call from the test's own thread. */
#ifndef ZC_TESTS_T_RUNS_H
#define ZC_TESTS_T_RUNS_H

#include <stddef.h>

#include "t_engine.h"

/* Trains a heap copy of cfg (a t_run_init'ed configuration whose outputs are
 * unset) with t_engine_run and returns it; asserts that every rank
 * succeeded, naming the configuration. Free with t_run_free. */
t_run *t_run_trained(const t_run *cfg);
/* Frees a run from t_run_trained and its master (NULL: no-op). */
void t_run_free(t_run *r);

/* Writes what sets a run apart, for messages: "stage 3 world 2 bf16 accum 4"
 * and the offload and schedule settings that differ from t_run_init's. */
void t_run_describe(const t_run *r, char *buf, size_t cap);

/* Asserts that the run trained: at least one of its steps was not skipped. */
void t_assert_trained(const t_run *r);

/* Asserts that r's training is ref's, bitwise: every fp32 master element,
 * and at each of ref's steps the grad norm, whether it was skipped and the
 * loss scale. what names r in the messages. */
void t_assert_same_training(const t_run *r, const t_run *ref, const char *what);

#endif
