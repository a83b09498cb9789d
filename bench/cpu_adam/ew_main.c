#include "bench/cpu_adam/ew.h"

int main(int argc, char **argv) { return zc__bench_cpu_ew(argc, argv); }
