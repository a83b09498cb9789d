/* The host Lion and Adagrad benchmark (bench/cpu_adam/ew.c), callable from
 * the zeroc CLI (`zeroc bench adam --optimizer lion|adagrad`). */
#ifndef ZC_BENCH_CPU_ADAM_EW_H
#define ZC_BENCH_CPU_ADAM_EW_H

/* Runs the benchmark; argv[0] is the program or subcommand name. Prints one
 * JSON object per case and a summary line to stdout. Returns 0, 1 on
 * failure, 2 on a usage error. */
int zc__bench_cpu_ew(int argc, char **argv);

#endif
