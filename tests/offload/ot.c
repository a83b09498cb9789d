#include "ot.h"

#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

void ot_mkdtemp(char out[512])
{
    const char *base = getenv("ZC_TEST_TMPDIR");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = ".";
    snprintf(out, 512, "%s/zc-offload-XXXXXX", base);
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        abort();
    }
}

void ot_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                umount2(p, MNT_DETACH);
                ot_rmtree(p);
            } else {
                unlink(p);
            }
        }
        closedir(d);
    }
    rmdir(dir);
}

bool ot_mount_tmpfs(const char *dir, const char *size, const char *extra, char why[256])
{
    char opts[128];
    snprintf(opts, sizeof opts, "size=%s", size);
    unsigned long fl = (extra && !strcmp(extra, "ro")) ? MS_RDONLY : 0;
    if (mount("tmpfs", dir, "tmpfs", fl, opts) != 0) {
        snprintf(why, 256, "cannot mount a tmpfs on %s: %s", dir, strerror(errno));
        return false;
    }
    return true;
}

void ot_umount(const char *dir) { umount2(dir, MNT_DETACH); }

static int n_warn;
static char last_warn[1024];
static char kept[64][512];

static void sink(zc_log_level level, const char *subsys, int rank, const char *line, void *user)
{
    (void)rank, (void)user;
    if (level <= ZC_LOG_WARN && subsys && !strcmp(subsys, "offload")) {
        if (n_warn < 64)
            snprintf(kept[n_warn], sizeof kept[n_warn], "%s", line);
        n_warn++;
        snprintf(last_warn, sizeof last_warn, "%s", line);
    }
}

void ot_capture_logs(void)
{
    n_warn = 0;
    last_warn[0] = '\0';
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(sink, NULL);
}

int ot_warnings(void) { return n_warn; }

int ot_warnings_with(const char *needle)
{
    int n = 0;
    for (int i = 0; i < n_warn && i < 64; i++)
        n += strstr(kept[i], needle) != NULL;
    return n;
}
const char *ot_last_warning(void) { return last_warn; }

static inline unsigned long long mix(unsigned long long x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

void ot_fill(void *buf, size_t len, unsigned long long seed, unsigned long long base)
{
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i += 8) {
        unsigned long long v = mix(seed * 0x9e3779b97f4a7c15ull + (base + i) / 8);
        for (size_t j = 0; j < 8 && i + j < len; j++)
            b[i + j] = (unsigned char)(v >> (8 * j));
    }
}

long long ot_check(const void *buf, size_t len, unsigned long long seed, unsigned long long base)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < len; i += 8) {
        unsigned long long v = mix(seed * 0x9e3779b97f4a7c15ull + (base + i) / 8);
        for (size_t j = 0; j < 8 && i + j < len; j++)
            if (b[i + j] != (unsigned char)(v >> (8 * j)))
                return (long long)(i + j);
    }
    return -1;
}

bool ot_limit_memlock(unsigned long long bytes)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return false;
    d[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
    if (syscall(SYS_capset, &h, d) != 0)
        return false;
    struct rlimit rl = {bytes, bytes};
    return setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
}
