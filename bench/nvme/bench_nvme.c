/* bench_nvme executable: see bench_nvme_core.c. */
#include "bench/nvme/bench_nvme.h"

int main(int argc, char **argv) { return zc__bench_nvme_main(argc, argv); }
