#include "bench/cpu_adam/cpu_adam.h"

int main(int argc, char **argv) { return zc__bench_cpu_adam(argc, argv); }
