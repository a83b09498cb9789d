/* `zeroc bench io ...`: the NVMe store bench (bench/nvme) as a subcommand. */
#include "bench/nvme/bench_nvme.h"

int zc__cmd_bench_io(int argc, char **argv);

int zc__cmd_bench_io(int argc, char **argv)
{
    /* argv[0] is "io": the bench's parser skips it like a program name. */
    return zc__bench_nvme_main(argc, argv);
}
