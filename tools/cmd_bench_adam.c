/* `zeroc bench adam [--device cpu|cuda] [options]`: the optimizer step
 * benchmarks. The CPU one is bench/cpu_adam; the CUDA one lives in
 * cmd_bench_adam_cuda.c and is linked only in CUDA builds (weak symbol). */
#include <stdio.h>
#include <string.h>

#include "bench/cpu_adam/cpu_adam.h"

int zc__cmd_bench_adam(int argc, char **argv);
int zc__cmd_bench_adam_cuda(int argc, char **argv) __attribute__((weak));

int zc__cmd_bench_adam(int argc, char **argv)
{
    const char *device = "cpu";
    char *rest[256];
    int nrest = 0;
    rest[nrest++] = argc > 0 ? argv[0] : "adam";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zeroc bench adam: --device needs cpu or cuda\n");
                return 2;
            }
            device = argv[++i];
        } else if (!strncmp(argv[i], "--device=", 9)) {
            device = argv[i] + 9;
        } else if (nrest < 255) {
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    if (!strcmp(device, "cpu"))
        return zc__bench_cpu_adam(nrest, rest);
    if (!strcmp(device, "cuda")) {
        if (!zc__cmd_bench_adam_cuda) {
            fprintf(stderr, "zeroc bench adam: --device cuda is not part of this build\n");
            return 2;
        }
        return zc__cmd_bench_adam_cuda(argc, argv);
    }
    fprintf(stderr, "zeroc bench adam: --device '%s': expected cpu or cuda\n", device);
    return 2;
}
