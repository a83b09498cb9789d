/* The host Adam benchmark (bench/cpu_adam), callable from the zeroc CLI. */
#ifndef ZC_BENCH_CPU_ADAM_H
#define ZC_BENCH_CPU_ADAM_H

/* Runs the benchmark; argv[0] is the program or subcommand name. Prints one
 * JSON object per case and a summary line to stdout. Returns 0, 1 on
 * failure, 2 on a usage error. */
int zc__bench_cpu_adam(int argc, char **argv);

#endif
