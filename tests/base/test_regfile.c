/* zc__open_regular: a regular file opens (blocking again, fstat'd); a
 * directory, a FIFO without a writer, a socket, a character device and (with
 * O_NOFOLLOW) a symbolic link are refused at once, naming the path and what it
 * is; a missing file keeps its errno. Every reader of zeroc goes through it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/regfile.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/zc_regfile_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    const char *names[] = {"file", "fifo", "sock", "link", "sub"};
    char p[128];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (unlink(p) != 0)
            rmdir(p);
    }
    rmdir(dir);
}

static void path(char *out, const char *name) { snprintf(out, 128, "%s/%s", dir, name); }

/* Refused as `kind`, with the path in the message. "At once" is held by
 * the call returning at all: an open that blocked (a FIFO without a writer
 * blocks forever) would hang the test until its timeout, which fails it. */
static void refused(const char *p, int flags, const char *kind)
{
    int fd = 7;
    char err[512], want[512];
    zc_open_result r = zc__open_regular(p, flags, "a test input", &fd, NULL, err, sizeof err);
    cr_assert_eq(r, ZC_OPEN_NOT_REGULAR, "%s: %d (%s)", p, r, err);
    cr_assert_eq(fd, -1);
    snprintf(want, sizeof want, "%s is %s; expected a test input", p, kind);
    cr_assert_str_eq(err, want);
}

Test(regfile, regular_file_opens_blocking, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    path(p, "file");
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("hello", f);
    fclose(f);
    int fd;
    struct stat st;
    char err[256] = "";
    cr_assert_eq(zc__open_regular(p, 0, NULL, &fd, &st, err, sizeof err), ZC_OPEN_OK, "%s", err);
    cr_assert_eq(st.st_size, 5);
    const int fl = fcntl(fd, F_GETFL);
    cr_assert(!(fl & O_NONBLOCK), "O_NONBLOCK left set (io_uring would return -EAGAIN)");
    cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    char b[8] = "";
    cr_assert_eq(read(fd, b, sizeof b), 5);
    cr_assert_str_eq(b, "hello");
    close(fd);
    /* And through stdio. */
    FILE *g = zc__fopen_regular(p, NULL, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    cr_assert_not_null(fgets(b, sizeof b, g));
    cr_assert_str_eq(b, "hello");
    fclose(g);
}

Test(regfile, directory_refused, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    path(p, "sub");
    cr_assert_eq(mkdir(p, 0755), 0);
    refused(p, 0, "a directory");
    refused(p, O_DIRECT, "a directory");
}

/* Without a writer, open(O_RDONLY) of a FIFO blocks forever; the helper
 * returns at once (the test's timeout catches a hang). */
Test(regfile, fifo_without_writer_refused_at_once, .init = make_dir, .fini = remove_dir,
     .timeout = 20)
{
    char p[128];
    path(p, "fifo");
    cr_assert_eq(mkfifo(p, 0644), 0);
    refused(p, 0, "a named pipe (FIFO)");
    char err[256];
    cr_assert_null(zc__fopen_regular(p, "a test input", err, sizeof err));
    cr_assert_not_null(strstr(err, "is a named pipe (FIFO)"), "%s", err);
}

Test(regfile, socket_refused, .init = make_dir, .fini = remove_dir, .timeout = 20)
{
    char p[128];
    path(p, "sock");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(p), sizeof a.sun_path);
    memcpy(a.sun_path, p, strlen(p) + 1);
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s, 1), 0);
    refused(p, 0, "a socket");
    close(s);
}

Test(regfile, devices_refused, .timeout = 20)
{
    refused("/dev/null", 0, "a character device");
    refused("/dev/zero", 0, "a character device");
}

Test(regfile, symlink_refused_with_nofollow, .init = make_dir, .fini = remove_dir)
{
    char p[128], l[128];
    path(p, "file");
    path(l, "link");
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(symlink(p, l), 0);
    refused(l, O_NOFOLLOW, "a symbolic link");
    int fd;
    char err[256] = "";
    cr_assert_eq(zc__open_regular(l, 0, NULL, &fd, NULL, err, sizeof err), ZC_OPEN_OK, "%s", err);
    close(fd);
}

Test(regfile, missing_file_keeps_errno, .init = make_dir, .fini = remove_dir)
{
    char p[128], err[256], want[256];
    path(p, "nothing");
    int fd = 7;
    errno = 0;
    cr_assert_eq(zc__open_regular(p, 0, NULL, &fd, NULL, err, sizeof err), ZC_OPEN_FAILED);
    cr_assert_eq(errno, ENOENT);
    cr_assert_eq(fd, -1);
    snprintf(want, sizeof want, "%s: cannot open: %s", p, strerror(ENOENT));
    cr_assert_str_eq(err, want);
}

/* Relative to a directory descriptor, the message names what the caller
 * shows. */
Test(regfile, at_dirfd_names_the_shown_path, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    path(p, "sub");
    cr_assert_eq(mkdir(p, 0755), 0);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(dfd, 0);
    int fd;
    char err[256];
    cr_assert_eq(zc__open_regular_at(dfd, "sub", 0, "SHOWN", "X", &fd, NULL, err, sizeof err),
                 ZC_OPEN_NOT_REGULAR);
    cr_assert_str_eq(err, "SHOWN is a directory; expected X");
    close(dfd);
}
