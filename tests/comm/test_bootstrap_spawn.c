/* See test_bootstrap_spawn.h. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_bootstrap_spawn.h"

extern char **environ;

static const char *const launcher_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "NCCL_COMM_ID", "ZC_BOOTSTRAP", NULL};

static int is_launcher_var(const char *kv)
{
    for (int i = 0; launcher_vars[i]; i++) {
        size_t n = strlen(launcher_vars[i]);
        if (!strncmp(kv, launcher_vars[i], n) && kv[n] == '=')
            return 1;
    }
    return 0;
}

static int bind_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

int t_free_port_pair(void)
{
    for (int tries = 0; tries < 50; tries++) {
        int fd = bind_port(0);
        if (fd < 0)
            return -1;
        struct sockaddr_in a;
        socklen_t l = sizeof a;
        getsockname(fd, (struct sockaddr *)&a, &l);
        int p = ntohs(a.sin_port);
        int fd2 = p < 65535 ? bind_port(p + 1) : -1;
        close(fd);
        if (fd2 >= 0) {
            close(fd2);
            return p;
        }
    }
    return -1;
}

int t_spawn_rank(t_rank_proc *p, const char *exe, const char *arg, int rank, int world,
                 int master_port, const char *const *extra)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 32, sizeof *envp);
    char own[6][64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_launcher_var(environ[i]))
            envp[k++] = environ[i];
    snprintf(own[0], sizeof own[0], "RANK=%d", rank);
    snprintf(own[1], sizeof own[1], "WORLD_SIZE=%d", world);
    snprintf(own[2], sizeof own[2], "LOCAL_RANK=%d", rank);
    snprintf(own[3], sizeof own[3], "MASTER_ADDR=127.0.0.1");
    snprintf(own[4], sizeof own[4], "MASTER_PORT=%d", master_port);
    snprintf(own[5], sizeof own[5], "LOCAL_WORLD_SIZE=%d", world);
    for (int i = 0; i < 6; i++)
        envp[k++] = own[i];
    for (int i = 0; extra && extra[i] && k < n + 31; i++)
        envp[k++] = (char *)extra[i];
    envp[k] = NULL;

    snprintf(p->err_path, sizeof p->err_path, "/tmp/zc_rank_%d_%d_%ld.err", (int)getpid(), rank,
             (long)time(NULL));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, p->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)exe, (char *)arg, NULL};
    int rc = posix_spawn(&p->pid, exe, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    p->status = -1;
    return rc == 0 ? 0 : -1;
}

int t_wait_ranks(t_rank_proc *p, int n, double timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int running = 0;
        for (int i = 0; i < n; i++) {
            if (p[i].status != -1)
                continue;
            int st;
            pid_t r = waitpid(p[i].pid, &st, WNOHANG);
            if (r == p[i].pid)
                p[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            else
                running++;
        }
        if (!running)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
            for (int i = 0; i < n; i++)
                if (p[i].status == -1) {
                    kill(p[i].pid, SIGKILL);
                    waitpid(p[i].pid, NULL, 0);
                    p[i].status = 128 + SIGKILL;
                }
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

const char *t_rank_stderr(const t_rank_proc *p)
{
    static char buf[4096];
    buf[0] = 0;
    FILE *f = fopen(p->err_path, "r");
    if (!f)
        return buf;
    size_t r = fread(buf, 1, sizeof buf - 1, f);
    buf[r] = 0;
    fclose(f);
    unlink(p->err_path);
    return buf;
}
