/* `zeroc bench adam [--device cpu|cuda] [options]`: the optimizer step
 * benchmarks. The CPU one is bench/cpu_adam; the CUDA one lives in
 * cmd_bench_adam_cuda.c and is linked only in CUDA builds (weak symbol). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cpu_adam/cpu_adam.h"

int zc__cmd_bench_adam(int argc, char **argv);
int zc__cmd_bench_adam_cuda(int argc, char **argv) __attribute__((weak));

int zc__cmd_bench_adam(int argc, char **argv)
{
    const char *device = "cpu";
    /* Every argument but --device goes on to the bench: as many as were
     * given (a fixed array would drop the excess without a word). */
    char **rest = calloc((size_t)argc + 2, sizeof *rest);
    if (!rest) {
        fprintf(stderr, "zeroc bench adam: out of memory\n");
        return 1;
    }
    int nrest = 0, rc = 2;
    bool help = false;
    rest[nrest++] = "zeroc bench adam"; /* the bench names itself by argv[0] */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zeroc bench adam: --device needs cpu or cuda\n");
                goto out;
            }
            device = argv[++i];
        } else if (!strncmp(argv[i], "--device=", 9)) {
            device = argv[i] + 9;
        } else {
            help = help || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    if (!strcmp(device, "cpu")) {
        rc = zc__bench_cpu_adam(nrest, rest);
        /* The bench's usage knows nothing of the CLI's choice of device. */
        if (help && rc == 0)
            printf("--device cpu|cuda: cpu is this bench (the default), cuda the GPU Adam bench\n"
                   "(bench_gpu_adam; its flags: zeroc bench adam --device cuda --help).\n");
    } else if (!strcmp(device, "cuda")) {
        if (!zc__cmd_bench_adam_cuda)
            fprintf(stderr, "zeroc bench adam: --device cuda is not part of this build\n");
        else
            rc = zc__cmd_bench_adam_cuda(nrest, rest);
    } else {
        fprintf(stderr, "zeroc bench adam: --device '%s': expected cpu or cuda\n", device);
    }
out:
    free(rest);
    return rc;
}
