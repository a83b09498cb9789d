/* `zeroc bench adam --device cuda ...`: the GPU Adam bench (bench/gpu_adam).
 * Compiled in every build; the body exists only with CUDA, so the CLI's weak
 * reference stays unresolved (and says so) in a build without it. */
#include "zc_build_config.h"

#if ZC_HAVE_CUDA
#include "bench/gpu_adam/bench_gpu_adam.h"

int zc__cmd_bench_adam_cuda(int argc, char **argv);

/* argv[0] is "adam"; cmd_bench_adam.c has already taken --device out. */
int zc__cmd_bench_adam_cuda(int argc, char **argv)
{
    return zc__bench_gpu_adam_main(argc, argv);
}
#else
typedef int zc__cmd_bench_adam_cuda_unused; /* ISO C: no empty translation unit */
#endif
