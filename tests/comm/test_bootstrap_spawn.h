/* Starting W ranks as separate processes from a test (posix_spawn, never
 * fork: Criterion runs each test in its own worker process), each with a
 * launcher environment, and waiting for them with a deadline. */
#ifndef ZC_TESTS_BOOTSTRAP_SPAWN_H
#define ZC_TESTS_BOOTSTRAP_SPAWN_H

#include <sys/types.h>

#define T_MAX_RANKS 8

typedef struct t_rank_proc {
    pid_t pid;
    int status;         /* exit code, 128+signal, or -1 while running */
    char err_path[128]; /* the process's stderr */
} t_rank_proc;

/* A TCP port that was free on loopback a moment ago (ports p and p+1 both
 * bound successfully and were released). */
int t_free_port_pair(void);

/* Starts `exe` with argv {exe, arg, NULL} and this environment plus RANK,
 * WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT and the
 * NAME=VALUE strings of `extra` (NULL-terminated, may be NULL); every other
 * launcher variable of the parent is removed. Returns 0 or -1. */
int t_spawn_rank(t_rank_proc *p, const char *exe, const char *arg, int rank, int world,
                 int master_port, const char *const *extra);

/* Waits for n processes up to timeout_s; kills the rest and returns -1 on
 * timeout, else 0. */
int t_wait_ranks(t_rank_proc *p, int n, double timeout_s);

/* Contents of a process's stderr (static buffer, truncated to 4 KiB). */
const char *t_rank_stderr(const t_rank_proc *p);

#endif
