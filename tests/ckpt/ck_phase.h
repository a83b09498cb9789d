/* Checkpoint tests: one phase of a training run on W rank threads - open
 * fresh engines, optionally load a checkpoint, train steps [first, first + n),
 * optionally save, gather the master - with every status recorded. */
#ifndef ZC_TESTS_CK_PHASE_H
#define ZC_TESTS_CK_PHASE_H

#include "t_engine.h"

enum { CK_AFTER_OPEN, CK_AFTER_LOAD };

typedef struct ck_phase {
    t_run *run;
    const char *load_dir, *load_tag; /* load before training (load_dir NULL: none) */
    int first, n;                    /* steps [first, first + n) */
    const char *save_dir, *save_tag; /* save after training (save_dir NULL: none) */
    int64_t fail_pinned_alloc;       /* > 0: the k-th pinned allocation of the phase
                                        fails (zc__mem_fail_after), disarmed after */
    /* called on each rank thread with its opened engine (may be NULL):
     * CK_AFTER_OPEN before the load, CK_AFTER_LOAD after it (not when the
     * phase has no load) */
    void (*hook)(t_ctx *x, int rank, int when, void *arg);
    void *hook_arg;
    /* outputs */
    float *master;                   /* t_total_numel() floats, rank 0's gather */
    zc_step_info info[T_MAX_STEPS];  /* rank 0's, by step index */
    zc_status load_rc[T_MAX_WORLD], save_rc[T_MAX_WORLD];
    char load_msg[T_MAX_WORLD][1024], save_msg[T_MAX_WORLD][1024];
    double scale_after_load;         /* rank 0's zc_loss_scale after loading */
    /* A load that broke the engine: no training follows; after_msg is what
     * the next call (zc_step) said. */
    bool broken[T_MAX_WORLD];
    zc_status after_rc[T_MAX_WORLD];
    char after_msg[T_MAX_WORLD][1024];
    int64_t cur_hysteresis;          /* rank 0's loss scaler after training */
    /* swap-file reads and writes each rank's engine had made (ZC_FAULTS io
     * events, counted with or without ZC_FAULTS set) when it was opened and
     * when the load returned */
    int64_t io_after_open[T_MAX_WORLD], io_after_load[T_MAX_WORLD];
    char err[T_MAX_WORLD][512];      /* harness failures */
} ck_phase;

/* Runs the phase; returns false with err set when training or the gather
 * failed (a failed load or save is recorded, not fatal: training goes on). */
bool ck_phase_run(ck_phase *ph);
const char *ck_phase_error(const ck_phase *ph);

/* A checkpoint saved under DIR/TAG (DIR a fresh ck_tmpdir) after steps
 * [0, n) of a copy of `run`: the common start of the load tests. */
typedef struct ck_saved {
    char *dir;
    t_run run;
    ck_phase phase; /* the saving phase (its master, errors) */
} ck_saved;

/* Returns false with ck_phase_error(&s->phase) set when the directory, the
 * training or the save failed. s must not move afterwards (phase points into
 * it); ck_saved_free removes the directory and frees the rest. */
bool ck_saved_make(ck_saved *s, const t_run *run, int n, const char *tag);
void ck_saved_free(ck_saved *s);

/* A fresh directory under /tmp (caller frees the string); removed with
 * ck_rm_tree. */
char *ck_tmpdir(void);
void ck_rm_tree(const char *dir);

#endif
