/* `zeroc bench adam --device cuda ...`: the GPU Adam bench (bench/gpu_adam).
 *
 * It runs the bench_gpu_adam program in place of this process rather than
 * linking the bench into the CLI: the bench calls the CUDA runtime, and a CLI
 * linked against it would not start at all on a machine without the runtime,
 * where every other subcommand works. The program is looked for
 *   1. beside this zeroc (a bundle's bin/, scripts/gpu_bundle.sh),
 *   2. where the build tree puts it (tools/zeroc -> bench/gpu_adam/),
 *   3. where `meson install` put it (ZC_BENCH_GPU_ADAM_INSTALLED,
 *      libexecdir/zeroc).
 * A build without CUDA has no such bench: the body is left out, so the
 * CLI's weak reference stays unresolved and says so. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ZC_BENCH_GPU_ADAM_INSTALLED

int zc__cmd_bench_adam_cuda(int argc, char **argv);

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The program to run, into out (PATH_MAX bytes). */
static void find_bench(char *out, size_t cap)
{
    snprintf(out, cap, "%s", ZC_BENCH_GPU_ADAM_INSTALLED);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return;
    *slash = '\0';
    static const char *const near[] = {"%s/bench_gpu_adam", "%s/../bench/gpu_adam/bench_gpu_adam"};
    char path[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        int len = snprintf(path, sizeof path, near[i], self);
        if (len > 0 && (size_t)len < cap && is_file(path)) {
            memcpy(out, path, (size_t)len + 1); /* len < cap, checked */
            return;
        }
    }
}

/* argv[0] is this subcommand's name; cmd_bench_adam.c has already taken
 * --device out, and argv[argc] is NULL. Returns only on failure. */
int zc__cmd_bench_adam_cuda(int argc, char **argv)
{
    (void)argc;
    char prog[PATH_MAX];
    find_bench(prog, sizeof prog);
    fflush(NULL); /* nothing written so far is lost to the exec */
    execv(prog, argv);
    fprintf(stderr, "zeroc bench adam --device cuda: cannot run %s: %s (the GPU Adam bench, "
            "bench_gpu_adam: built with CUDA, installed with zeroc)\n", prog, strerror(errno));
    return 1;
}
#else
typedef int zc__cmd_bench_adam_cuda_unused; /* ISO C: no empty translation unit */
#endif
