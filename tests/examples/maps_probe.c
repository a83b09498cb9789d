/* A library preloaded into a program (LD_PRELOAD) that reports, as the
 * program exits, its peak resident memory (VmHWM of /proc/self/status) and
 * every CUDA library mapped (/proc/self/maps: the CUDA runtime, cuBLAS,
 * NCCL, the driver, zeroc's CUDA plugins) - whether linked or dlopen'ed, as
 * nothing unloads them. check_cpu_run_lean.py reads the reports.
 *
 * Each process writes one JSON line to $ZC_MAPS_PROBE_DIR/<pid>.json,
 * created exclusively (a directory the test made for it); without the
 * variable it does nothing. It reports at exit() (a destructor) and at
 * _exit(), which it interposes, since train_gpt leaves on an error that
 * way. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const cuda_libs[] = {"libcudart.so", "libcublas.so", "libcublasLt.so",
                                        "libnccl.so", "libcuda.so", "libzeroc_cuda.so",
                                        "libgpt_cuda.so"};

/* Appends the distinct CUDA library paths of /proc/self/maps to out as a
 * JSON array body. */
static void cuda_maps(char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[PATH_MAX + 128];
    while (fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path)
            continue;
        path[strcspn(path, "\n")] = '\0';
        const char *base = strrchr(path, '/') + 1;
        int cuda = 0;
        for (size_t i = 0; i < sizeof cuda_libs / sizeof cuda_libs[0]; i++)
            cuda |= strncmp(base, cuda_libs[i], strlen(cuda_libs[i])) == 0;
        char quoted[PATH_MAX + 8];
        snprintf(quoted, sizeof quoted, "\"%s\"", path);
        if (!cuda || strstr(out, quoted))
            continue;
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", n ? "," : "", quoted);
    }
    fclose(f);
}

static long vmhwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static int reported;

__attribute__((destructor)) static void report(void)
{
    const char *dir = getenv("ZC_MAPS_PROBE_DIR");
    if (!dir || !*dir || reported++)
        return;
    char exe[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = '\0';
    static char maps[16384];
    cuda_maps(maps, sizeof maps);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%ld.json", dir, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    char line[sizeof maps + PATH_MAX + 128];
    int len = snprintf(line, sizeof line, "{\"exe\":\"%s\",\"vmhwm_kib\":%ld,\"cuda\":[%s]}\n",
                       exe, vmhwm_kib(), maps);
    if (len > 0)
        (void)!write(fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    close(fd);
}

/* The program's _exit: report, then end the process as _exit does
 * (exported despite the build's -fvisibility=hidden, or it would not
 * interpose). */
__attribute__((visibility("default"))) void _exit(int status)
{
    report();
    for (;;)
        syscall(SYS_exit_group, status);
}
