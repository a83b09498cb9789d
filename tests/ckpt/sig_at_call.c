/* Test interposer (LD_PRELOAD): delivers a signal to the process at one
 * exact point of a checkpoint commit, so a test can check what an
 * interruption there leaves behind, deterministically.
 *
 *   ZC_TEST_SIG_AT=before_rename   SIGTERM as renameat2 is called, before
 *                                  the staging directory is renamed
 *   ZC_TEST_SIG_AT=after_rename    SIGTERM right after that rename
 *   ZC_TEST_SIG_AT=after_unmark    SIGTERM right after the staging marker
 *                                  (.zeroc-staging) is unlinked
 *
 * Only calls whose names a checkpoint commit uses are intercepted: the
 * rename of a ".TAG.partial" directory and the unlink of the marker. The
 * build hides symbols by default: the two interposers are exported. */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int rename_fn(int, const char *, int, const char *, unsigned);
typedef int unlink_fn(int, const char *, int);

/* dlsym's object pointer as a function pointer, the way POSIX allows. */
static void *next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

static const char *point(void)
{
    const char *p = getenv("ZC_TEST_SIG_AT");
    return p ? p : "";
}

static int is_staging(const char *name)
{
    size_t n = strlen(name);
    return name[0] == '.' && n > 9 && !strcmp(name + n - 8, ".partial");
}

__attribute__((visibility("default"))) int renameat2(int olddfd, const char *oldpath, int newdfd, const char *newpath, unsigned flags)
{
    rename_fn *real;
    void *sym = next_symbol("renameat2");
    memcpy(&real, &sym, sizeof real);
    if (is_staging(oldpath) && !strcmp(point(), "before_rename"))
        raise(SIGTERM);
    int r = real(olddfd, oldpath, newdfd, newpath, flags);
    if (r == 0 && is_staging(oldpath) && !strcmp(point(), "after_rename"))
        raise(SIGTERM);
    return r;
}

__attribute__((visibility("default"))) int unlinkat(int dfd, const char *path, int flags)
{
    unlink_fn *real;
    void *sym = next_symbol("unlinkat");
    memcpy(&real, &sym, sizeof real);
    int r = real(dfd, path, flags);
    if (r == 0 && !strcmp(path, ".zeroc-staging") && !strcmp(point(), "after_unmark")) {
        /* Once: the handler's own unlink of the marker must not re-raise. */
        unsetenv("ZC_TEST_SIG_AT");
        raise(SIGTERM);
    }
    return r;
}
