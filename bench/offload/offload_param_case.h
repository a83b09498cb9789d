/* bench_offload's offload_param cases (offload_param_case.c). */
#ifndef ZC_BENCH_OFFLOAD_PARAM_CASE_H
#define ZC_BENCH_OFFLOAD_PARAM_CASE_H

/* Prints one JSON line with prefetch and one without; `iters` <= 64 steps
 * each after two warm-up steps. Exits the process on an engine error. */
void zc_bench_offload_param(const char *dir, long long params, long long chunk, long long buffers,
                            int iters);

#endif
