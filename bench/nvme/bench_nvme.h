/* bench_nvme: sequential NVMe store throughput next to fio (io_uring and
 * libaio engines) on the same file, in the same run. */
#ifndef ZC_BENCH_NVME_H
#define ZC_BENCH_NVME_H

/* Runs the bench with command-line arguments (argv[0] is the program or
 * subcommand name). Prints one JSON object per case on stdout; progress and
 * errors on stderr. Returns 0 on success, 1 on failure, 2 on a usage error. */
int zc__bench_nvme_main(int argc, char **argv);

#endif
