/* bench_gpu_adam executable: see bench_gpu_adam_core.c. */
#include "bench/gpu_adam/bench_gpu_adam.h"

int main(int argc, char **argv) { return zc__bench_gpu_adam_main(argc, argv); }
