/* The zeroc command-line tool: dispatches to subcommands.
 *
 * Subcommands live in their own translation units and are linked when built;
 * they are referenced through weak symbols so a build without one reports it
 * clearly instead of failing to link. Exit codes: 0 success, 1 failure of the
 * command itself, 2 usage error. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zeroc/zeroc.h"
#include "base/log.h"

int zc__cmd_config(int argc, char **argv) __attribute__((weak));
int zc__cmd_estimate(int argc, char **argv) __attribute__((weak));
int zc__cmd_bench_io(int argc, char **argv) __attribute__((weak));
int zc__cmd_bench_adam(int argc, char **argv) __attribute__((weak));
int zc__cmd_ckpt(int argc, char **argv) __attribute__((weak));
int zc__cmd_bench_train(int argc, char **argv) __attribute__((weak));
int zc__cmd_report(int argc, char **argv) __attribute__((weak));

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zeroc <command> [args]\n"
            "  config check FILE [--world N] [--lenient] [--json]\n"
            "                         validate a DeepSpeed config and print the effective values\n"
            "  config keys            every supported key with its type, default and aliases\n"
            "  estimate (--params N | --model gpt:L,D,H,S,V) --world W [options]\n"
            "                         per-rank memory of every stage x offload configuration\n"
            "  bench io [options]     NVMe store throughput next to fio\n"
            "  bench adam [--device cpu|cuda] [--optimizer adam|lion|adagrad] [options]\n"
            "                         optimizer step throughput next to a streaming ceiling\n"
            "  ckpt inspect DIR [--tag T] [--json]\n"
            "  ckpt export DIR OUT.safetensors [--tag T] [--dtype fp32|bf16|fp16]\n"
            "  ckpt reshard IN OUT --world W [--tag T]\n"
            "                         look at, export or reshard a checkpoint\n"
            "  bench train --out DIR [options]\n"
            "                         memory against step time over a sweep of ZeRO configurations\n"
            "  report [--json] [--nvme-path DIR]...\n"
            "                         what was built and what this machine offers it\n"
            "                         (ds_report): CPU, NUMA, memory, io_uring, NVMe, CUDA, MPI\n"
            "  version                print the version\n"
            "Run a command with --help for its options.\n");
}

static int run(int (*fn)(int, char **), const char *what, int argc, char **argv)
{
    if (!fn) {
        fprintf(stderr, "zeroc: '%s' is not part of this build\n", what);
        return 2;
    }
    return fn(argc, argv);
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("zeroc %d.%d.%d\n", ZEROC_VERSION_MAJOR, ZEROC_VERSION_MINOR, ZEROC_VERSION_PATCH);
        return 0;
    }
    /* Every command may log, and a log line cannot fail: a malformed ZC_LOG,
     * ZC_LOG_RANKS or ZC_LOG_SUBSYS fails the command before it starts. */
    if (zc__log_env_check() != ZC_OK) {
        fprintf(stderr, "zeroc: %s\n", zc_last_error());
        return 1;
    }
    if (!strcmp(cmd, "config"))
        return run(zc__cmd_config, "config", argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt"))
        return run(zc__cmd_ckpt, "ckpt", argc - 1, argv + 1);
    if (!strcmp(cmd, "report"))
        return run(zc__cmd_report, "report", argc - 1, argv + 1);
    if (!strcmp(cmd, "estimate"))
        return run(zc__cmd_estimate, "estimate", argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) {
        if (argc >= 3 && !strcmp(argv[2], "io"))
            return run(zc__cmd_bench_io, "bench io", argc - 2, argv + 2);
        if (argc >= 3 && !strcmp(argv[2], "adam"))
            return run(zc__cmd_bench_adam, "bench adam", argc - 2, argv + 2);
        if (argc >= 3 && !strcmp(argv[2], "train"))
            return run(zc__cmd_bench_train, "bench train", argc - 2, argv + 2);
        fprintf(stderr, "zeroc bench: expected 'io', 'adam' or 'train'%s%.200s%s\n",
                argc >= 3 ? ", got '" : "", argc >= 3 ? argv[2] : "", argc >= 3 ? "'" : "");
        usage(stderr);
        return 2;
    }
    fprintf(stderr, "zeroc: unknown command '%.200s'\n", cmd);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    /* Output that could not be written (a full disk, a closed pipe) is a
     * failure: a script reading `zeroc config check --json` must not take a
     * truncated answer for a successful one. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "zeroc: cannot write the output: %s\n", errno ? strerror(errno) : "write error");
        if (rc == 0)
            rc = 1;
    }
    return rc;
}
