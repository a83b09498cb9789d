/* Helper program of the checkpoint script tests (a separate process, so a
 * test can SIGKILL it, and a fresh process loads what another saved).
 *
 *   ckpt_helper train DIR STEPS STAGE WORLD
 *       trains STEPS steps of the tests/core model, saves DIR/t<STEPS>, and
 *       writes DIR/ref/<name>.f32: each parameter's zc_param_gather_master.
 *   ckpt_helper crash DIR PREFIX
 *       trains and saves DIR/<PREFIX>_<step> after every step, forever,
 *       printing "saved <step>" after each (a test kills it at random).
 *   ckpt_helper verify DIR
 *       loads DIR/latest into fresh engines (stage 2, two ranks) and checks it
 *       bitwise against a fresh run of as many steps; prints "ok <step>".
 * Exit status 0 on success, 1 with a message on stderr otherwise. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_phase.h"
#include "core/engine.h"

static int die(const char *what, const char *why)
{
    fprintf(stderr, "ckpt_helper %s: %s\n", what, why);
    return 1;
}

static int train(const char *dir, int steps, int stage, int world)
{
    t_run run;
    t_run_init(&run, stage, world, ZC_DTYPE_F32);
    char tag[32];
    snprintf(tag, sizeof tag, "t%d", steps);
    ck_phase ph = {.run = &run, .first = 0, .n = steps, .save_dir = dir, .save_tag = tag};
    if (!ck_phase_run(&ph))
        return die("train", ck_phase_error(&ph));
    if (ph.save_rc[0] != ZC_OK)
        return die("train", "save failed");
    char p[1024];
    snprintf(p, sizeof p, "%s/ref", dir);
    if (mkdir(p, 0755) != 0)
        return die("train", strerror(errno));
    int64_t at = 0;
    for (int i = 0; i < T_NPARAMS; i++) {
        snprintf(p, sizeof p, "%s/ref/p%d.f32", dir, i);
        FILE *f = fopen(p, "wbx");
        if (!f || fwrite(ph.master + at, 4, (size_t)t_numel[i], f) != (size_t)t_numel[i])
            return die("train", "writing a reference");
        fclose(f);
        at += t_numel[i];
    }
    free(ph.master);
    return 0;
}

/* Rank threads that train and save after every step. */
typedef struct crash_arg {
    t_run *run;
    zc_comm *comm;
    int rank;
    const char *dir, *prefix;
} crash_arg;

static void *crash_rank(void *p)
{
    crash_arg *a = p;
    t_ctx x;
    if (t_ctx_open(&x, a->run, a->rank, a->comm) != ZC_OK)
        exit(die("crash", a->run->err[a->rank]));
    for (int s = 0;; s++) {
        if (t_train_step(&x, s, NULL) != ZC_OK)
            exit(die("crash", a->run->err[a->rank]));
        char tag[64];
        snprintf(tag, sizeof tag, "%s_%d", a->prefix, s + 1);
        if (zc_checkpoint_save(x.eng, a->dir, tag) != ZC_OK)
            exit(die("crash", zc_last_error()));
        if (a->rank == 0) {
            printf("saved %d\n", s + 1);
            fflush(stdout);
        }
    }
    return NULL;
}

#include <pthread.h>

static int crash(const char *dir, const char *prefix)
{
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    zc_comm *comms[2];
    if (zc_comm_local_world(2, comms) != ZC_OK)
        return die("crash", zc_last_error());
    pthread_t th[2];
    crash_arg args[2];
    for (int r = 0; r < 2; r++) {
        args[r] = (crash_arg){&run, comms[r], r, dir, prefix};
        pthread_create(&th[r], NULL, crash_rank, &args[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    return 1; /* never reached: killed */
}

static int verify(const char *dir)
{
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase loaded = {.run = &run, .load_dir = dir, .first = 0, .n = 0};
    if (!ck_phase_run(&loaded))
        return die("verify", ck_phase_error(&loaded));
    if (loaded.load_rc[0] != ZC_OK)
        return die("verify", loaded.load_msg[0]);
    /* The step the checkpoint holds: DIR/latest names <prefix>_<step>. */
    char p[1024], tag[256] = "";
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (!f || !fgets(tag, sizeof tag, f))
        return die("verify", "cannot read latest");
    fclose(f);
    const char *u = strrchr(tag, '_');
    int steps = u ? atoi(u + 1) : -1;
    if (steps <= 0)
        return die("verify", "latest names no step");
    ck_phase fresh = {.run = &run, .first = 0, .n = steps};
    if (!ck_phase_run(&fresh))
        return die("verify", ck_phase_error(&fresh));
    if (memcmp(fresh.master, loaded.master, (size_t)t_total_numel() * 4) != 0)
        return die("verify", "the loaded state differs from a fresh run of as many steps");
    printf("ok %d\n", steps);
    free(loaded.master);
    free(fresh.master);
    return 0;
}

int main(int argc, char **argv)
{
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    if (argc == 6 && !strcmp(argv[1], "train"))
        return train(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (argc == 4 && !strcmp(argv[1], "crash"))
        return crash(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "verify"))
        return verify(argv[2]);
    fprintf(stderr, "usage: ckpt_helper train DIR STEPS STAGE WORLD | crash DIR PREFIX | "
                    "verify DIR\n");
    return 2;
}
