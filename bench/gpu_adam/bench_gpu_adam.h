/* The GPU Adam bench, shared by the bench_gpu_adam executable and
 * `zeroc bench adam --device cuda`. */
#ifndef ZC_BENCH_GPU_ADAM_H
#define ZC_BENCH_GPU_ADAM_H

/* argv[0] is skipped like a program name. Returns a process exit code. */
int zc__bench_gpu_adam_main(int argc, char **argv);

#endif
