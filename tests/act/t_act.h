/* Activation store test harness: engines of W rank threads that save and
 * restore checkpoints through the public calls (zc_act_save, zc_act_restore)
 * and check every byte that comes back against the pattern it was saved
 * from. Errors inside rank threads are recorded (Criterion asserts only from
 * the test's own thread). */
#ifndef ZC_TESTS_T_ACT_H
#define ZC_TESTS_T_ACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

#define TA_MAX_WORLD 4

typedef struct ta_run {
    /* inputs */
    const char *home;       /* "device", "cpu" or "nvme" */
    const char *nvme_json;  /* nvme: activation_checkpointing.nvme_path as JSON */
    int world, stage, gas, steps;
    int64_t slots, bytes;   /* the store's bound */
    int64_t buffer_count;   /* nvme (0: the default) */
    bool staging;           /* force the GPU's staging path on the host */
    bool interleave;        /* a save between restores (a, b, restore b, c, restore c, a...) */
    int mp;                 /* partition_activations over groups of this many ranks (0: none):
                               ranks r and r' with r / mp == r' / mp are one data-parallel
                               group's... see t_act.c */
    int fault_thread;       /* >= 0: this rank thread's NVMe store gets `fault` after build */
    struct { int64_t enospc_write_at, eio_at; } fault;
    /* outputs, per rank */
    zc_status rc[TA_MAX_WORLD];
    char err[TA_MAX_WORLD][1024];
    int64_t bad_bytes[TA_MAX_WORLD]; /* bytes restored that differ from the pattern */
    int64_t restores[TA_MAX_WORLD];
    int64_t peak[TA_MAX_WORLD];      /* the most checkpoints the harness held at once */
    zc_act_stats st[TA_MAX_WORLD];
    zc_stats es[TA_MAX_WORLD];       /* after build */
    bool broken_after[TA_MAX_WORLD]; /* a save after the failure returned an error */
} ta_run;

/* Defaults: device home, W 1, stage 0, no accumulation, 2 steps, 6 slots of
 * 8 KiB + 12 bytes (not a page multiple). */
void ta_run_init(ta_run *r, const char *home, int world);
/* Runs it on r->world rank threads. */
void ta_run_go(ta_run *r);

/* The byte pattern of checkpoint k of (rank, step, micro): a splitmix64
 * stream, so any byte lost, swapped or stale shows. */
void ta_fill(uint8_t *p, size_t n, int rank, int step, int micro, int k);
/* The size of checkpoint k (distinct sizes, each at most bytes, multiples
 * of 16 words so a partition of up to 4 parts is exact). */
size_t ta_size(int64_t bytes, int k);

/* A config for home ("device", "cpu", "nvme" with nvme_json) at stage. */
zc_config *ta_config(const char *home, const char *nvme_json, int stage, int gas, int world,
                     int64_t buffer_count);

#endif
