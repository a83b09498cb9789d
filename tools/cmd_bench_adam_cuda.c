/* `zeroc bench adam --device cuda ...`: the GPU Adam bench (bench/gpu_adam).
 * Compiled in every build; the body exists only with CUDA, so the CLI's weak
 * reference stays unresolved (and says so) in a build without it. */
#include "zc_build_config.h"

#if ZC_HAVE_CUDA
#include "bench/gpu_adam/bench_gpu_adam.h"

int zc__cmd_bench_adam_cuda(int argc, char **argv);

/* argv[0] is "adam"; "--device cuda" may still be among the options: drop it. */
int zc__cmd_bench_adam_cuda(int argc, char **argv)
{
    char *args[64];
    int n = 0;
    for (int i = 0; i < argc && n < 63; i++) {
        if (i > 0 && !__builtin_strcmp(argv[i], "--device") && i + 1 < argc &&
            !__builtin_strcmp(argv[i + 1], "cuda")) {
            i++;
            continue;
        }
        args[n++] = argv[i];
    }
    args[n] = 0;
    return zc__bench_gpu_adam_main(n, args);
}
#else
typedef int zc__cmd_bench_adam_cuda_unused; /* ISO C: no empty translation unit */
#endif
