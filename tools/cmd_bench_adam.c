/* `zeroc bench adam [--device cpu|cuda] [--optimizer adam|lion|adagrad]
 * [options]`: the optimizer step benchmarks. The CPU ones are bench/cpu_adam
 * (cpu_adam.c for Adam, ew.c for Lion and Adagrad); the CUDA one lives in
 * cmd_bench_adam_cuda.c and is linked only in CUDA builds (weak symbol). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cpu_adam/cpu_adam.h"
#include "bench/cpu_adam/ew.h"

int zc__cmd_bench_adam(int argc, char **argv);
int zc__cmd_bench_adam_cuda(int argc, char **argv) __attribute__((weak));

int zc__cmd_bench_adam(int argc, char **argv)
{
    const char *device = "cpu", *optimizer = "adam";
    /* Every argument but --device and --optimizer goes on to the bench: as
     * many as were given (a fixed array would drop the excess without a
     * word); two more slots for the --optimizer the Lion/Adagrad bench
     * takes. */
    char **rest = calloc((size_t)argc + 4, sizeof *rest);
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
        } else if (!strcmp(argv[i], "--optimizer")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zeroc bench adam: --optimizer needs adam, lion or adagrad\n");
                goto out;
            }
            optimizer = argv[++i];
        } else if (!strncmp(argv[i], "--optimizer=", 12)) {
            optimizer = argv[i] + 12;
        } else {
            help = help || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    const bool ew = !strcmp(optimizer, "lion") || !strcmp(optimizer, "adagrad");
    if (!ew && strcmp(optimizer, "adam")) {
        fprintf(stderr, "zeroc bench adam: --optimizer '%s': expected adam, lion or adagrad\n",
                optimizer);
        goto out;
    }
    if (ew && strcmp(device, "cpu")) {
        fprintf(stderr, "zeroc bench adam: --optimizer %s: only with --device cpu (the GPU "
                "bench runs Adam)\n", optimizer);
        goto out;
    }
    if (!strcmp(device, "cpu") && ew) {
        /* The Lion/Adagrad bench runs both by default: name the one asked. */
        rest[nrest++] = "--optimizer";
        rest[nrest++] = (char *)optimizer;
        rest[nrest] = NULL;
        rc = zc__bench_cpu_ew(nrest, rest);
    } else if (!strcmp(device, "cpu")) {
        rc = zc__bench_cpu_adam(nrest, rest);
    } else if (!strcmp(device, "cuda")) {
        if (!zc__cmd_bench_adam_cuda)
            fprintf(stderr, "zeroc bench adam: --device cuda is not part of this build\n");
        else
            rc = zc__cmd_bench_adam_cuda(nrest, rest);
    } else {
        fprintf(stderr, "zeroc bench adam: --device '%s': expected cpu or cuda\n", device);
    }
    /* The benches' usage knows nothing of the CLI's choice of device and
     * optimizer. */
    if (help && rc == 0 && !strcmp(device, "cpu"))
        printf("--device cpu|cuda: cpu is this bench (the default), cuda the GPU Adam bench\n"
               "(bench_gpu_adam; its flags: zeroc bench adam --device cuda --help).\n"
               "--optimizer adam|lion|adagrad: adam (the default) is bench_cpu_adam, lion and\n"
               "adagrad bench_cpu_ew with that optimizer (CPU only).\n");
out:
    free(rest);
    return rc;
}
