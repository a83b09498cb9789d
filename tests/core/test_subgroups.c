/* An engine over a sub-group is a complete engine. Four rank threads split
 * into two data-parallel groups as a tensor-parallel program splits them
 * (zc_comm_split, colour = rank % 2); each group runs its own engines:
 *
 *   - each group's result is bitwise the 2-rank run of the same
 *     configuration alone (t_engine_run, world 2), although the two groups
 *     run different stages and precisions side by side - so the build
 *     agreement compares each group's own settings;
 *   - checkpoints: each group saves into its own directory (world 2), and
 *     fresh engines of that group resume from it bitwise;
 *   - zc_all_reduce_f64 sums over the group only;
 *   - a build mismatch inside one group fails that group's ranks with one
 *     message while the other group builds and trains;
 *   - a rank-local failure (ZC_FAULTS, whose RANK is the job's rank) on one
 *     rank of one group breaks that group's engines on every member with
 *     one message, and the other group trains on, bitwise as alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"

#define STEPS 4
#define HA_NP 8
#define HA_N 500

typedef enum { MODE_TRAIN = 0, MODE_CKPT, MODE_MISMATCH, MODE_FAULT } sub_mode;

typedef struct sub_ctx {
    sub_mode mode;
    zc_comm *world[4];
    t_run run[2];            /* per group */
    float *resumed[2];       /* MODE_CKPT: masters after the resume */
    char dir[2][256];
    zc_status rc[4];
    char msg[4][512];
    double scalar[4];
    int64_t gworld[4];
} sub_ctx;

static void note(sub_ctx *s, int r, zc_status rc)
{
    if (s->rc[r] == ZC_OK && rc != ZC_OK) {
        s->rc[r] = rc;
        snprintf(s->msg[r], sizeof s->msg[r], "%s", zc_last_error());
    }
}

/* Group 0's engine in MODE_FAULT: stage 3 over HA_NP chunks, a forward that
 * holds every chunk at once, so its gathers allocate beyond the reserve
 * after build - the allocations ZC_FAULTS can fail (fault_sweep's model). */
static zc_status hold_all(zc_comm *c, int dp_rank)
{
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_param *p[HA_NP];
    zc_status rc = zc_config_create(&cfg);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage", 3);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size", 512);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold", 0);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.bucket_elems = HA_N;
    if (rc == ZC_OK)
        rc = zc_engine_create(&e, cfg, c, &o);
    for (int i = 0; i < HA_NP && rc == ZC_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        const int64_t n = HA_N;
        if (i > 0)
            rc = zc_chunk_boundary(e);
        if (rc == ZC_OK && !(p[i] = zc_param_add(e, name, &n, 1, 0)))
            rc = ZC_ERR_INTERNAL;
    }
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    for (int s = 0; s < STEPS && rc == ZC_OK; s++) {
        for (int i = 0; i < HA_NP && rc == ZC_OK; i++)
            if (!zc_param_acquire(e, p[i], NULL))
                rc = zc_last_error()[0] ? ZC_ERR_NO_MEMORY : ZC_ERR_INTERNAL;
        for (int i = 0; i < HA_NP && rc == ZC_OK; i++)
            rc = zc_param_release(e, p[i], NULL);
        for (int i = HA_NP - 1; i >= 0 && rc == ZC_OK; i--) {
            const float *w = zc_param_acquire(e, p[i], NULL);
            float *g = w ? zc_grad_buffer(e, p[i]) : NULL;
            if (!g) {
                rc = ZC_ERR_NO_MEMORY;
                break;
            }
            for (int64_t j = 0; j < HA_N; j++)
                g[j] = 0.05f * w[j] + (float)t_noise(0x5eed, dp_rank, s, 0, i, j);
            rc = zc_grad_ready(e, p[i]);
            if (rc == ZC_OK)
                rc = zc_param_release(e, p[i], NULL);
        }
        if (rc == ZC_OK)
            rc = zc_step(e, NULL);
    }
    /* The engine's failure, agreed: what every later call says too. */
    if (rc != ZC_OK) {
        char first[512];
        snprintf(first, sizeof first, "%s", zc_last_error());
        zc_status again = zc_step(e, NULL);
        if (again == ZC_OK || !strstr(zc_last_error(), "broken"))
            rc = ZC_ERR_INTERNAL;
        zc__error_clear();
        rc = ZC_ERR(rc, "%s", first);
    }
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    return rc;
}

static void rank_main(int r, void *p)
{
    sub_ctx *s = p;
    zc_comm *dp = NULL;
    const int g = r % 2;
    note(s, r, zc_comm_split(s->world[r], g, r, &dp));
    if (s->rc[r] != ZC_OK)
        return;
    const int dr = zc_comm_rank(dp);
    t_run *run = &s->run[g];
    if (s->mode == MODE_FAULT && g == 0) {
        note(s, r, hold_all(dp, dr));
        zc_comm_destroy(dp);
        return;
    }
    t_ctx x;
    static t_run other;
    if (s->mode == MODE_MISMATCH && g == 0 && dr == 1) {
        /* The group disagrees on its stage; group 1 does not. */
        other = *run;
        other.stage = 3;
        run = &other;
    }
    zc_status rc = t_ctx_open(&x, run, dr, dp);
    note(s, r, rc);
    const int steps = s->mode == MODE_CKPT ? STEPS / 2 : STEPS;
    for (int st = 0; st < steps && s->rc[r] == ZC_OK; st++)
        note(s, r, t_train_step(&x, st, NULL));
    if (s->mode == MODE_CKPT && s->rc[r] == ZC_OK) {
        note(s, r, zc_checkpoint_save(x.eng, s->dir[g], "half"));
        for (int st = steps; st < STEPS && s->rc[r] == ZC_OK; st++)
            note(s, r, t_train_step(&x, st, NULL));
    }
    if (s->rc[r] == ZC_OK) {
        double v = (double)(r + 1);
        note(s, r, zc_all_reduce_f64(x.eng, &v, 1, ZC_REDUCE_SUM));
        s->scalar[r] = v;
        zc_stats st = {.size = sizeof st};
        note(s, r, zc_engine_stats(x.eng, &st));
        s->gworld[r] = st.world;
        note(s, r, t_gather(&x, run->master));
    }
    t_ctx_close(&x);
    if (s->mode == MODE_CKPT && s->rc[r] == ZC_OK) {
        /* Fresh engines of the group, from the group's checkpoint. */
        note(s, r, t_ctx_open(&x, run, dr, dp));
        if (s->rc[r] == ZC_OK)
            note(s, r, zc_checkpoint_load(x.eng, s->dir[g], "half"));
        for (int st = steps; st < STEPS && s->rc[r] == ZC_OK; st++)
            note(s, r, t_train_step(&x, st, NULL));
        if (s->rc[r] == ZC_OK)
            note(s, r, t_gather(&x, s->resumed[g]));
        t_ctx_close(&x);
    }
    zc_comm_destroy(dp);
}

static void setup(sub_ctx *s, sub_mode mode)
{
    memset(s, 0, sizeof *s);
    s->mode = mode;
    t_run_init(&s->run[0], 2, 2, ZC_DTYPE_BF16);
    t_run_init(&s->run[1], 3, 2, ZC_DTYPE_F32);
    for (int g = 0; g < 2; g++) {
        s->run[g].steps = STEPS;
        s->run[g].master = calloc((size_t)t_total_numel(), sizeof(float));
        s->resumed[g] = calloc((size_t)t_total_numel(), sizeof(float));
    }
    s->run[1].accum = 2;
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    cr_assert_eq(zc_comm_local_world(4, s->world), ZC_OK, "%s", zc_last_error());
}

static void teardown(sub_ctx *s)
{
    for (int r = 0; r < 4; r++)
        zc_comm_destroy(s->world[r]);
    for (int g = 0; g < 2; g++) {
        free(s->run[g].master);
        free(s->resumed[g]);
    }
    t_assert_no_leaks();
}

/* The 2-rank run of group g's configuration alone. */
static float *alone(const t_run *cfg)
{
    static t_run ref;
    ref = *cfg;
    ref.master = NULL;
    memset(ref.err, 0, sizeof ref.err);
    cr_assert(t_engine_run(&ref), "the 2-rank run alone: %s", t_run_error(&ref));
    return ref.master;
}

Test(subgroups, each_group_is_bitwise_its_two_rank_run_alone)
{
    static sub_ctx s;
    setup(&s, MODE_TRAIN);
    t_run_ranks(4, rank_main, &s);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(s.rc[r], ZC_OK, "rank %d: %s", r, s.msg[r]);
        /* Ranks r and r + 2 form a group: (r + 1) + (r + 3). */
        cr_assert_eq(s.scalar[r], (double)(2 * (r % 2) + 4), "rank %d's group sum", r);
        cr_assert_eq(s.gworld[r], 2);
    }
    for (int g = 0; g < 2; g++) {
        float *want = alone(&s.run[g]);
        cr_assert_eq(memcmp(s.run[g].master, want, (size_t)t_total_numel() * sizeof(float)), 0,
                     "group %d differs from its 2-rank run alone", g);
        free(want);
    }
    teardown(&s);
}

Test(subgroups, checkpoints_stay_in_the_group_and_resume_bitwise)
{
    static sub_ctx s;
    setup(&s, MODE_CKPT);
    char tmpl[] = "/tmp/zc_subgroups_XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl));
    for (int g = 0; g < 2; g++)
        snprintf(s.dir[g], sizeof s.dir[g], "%s/group%d", tmpl, g);
    t_run_ranks(4, rank_main, &s);
    for (int r = 0; r < 4; r++)
        cr_assert_eq(s.rc[r], ZC_OK, "rank %d: %s", r, s.msg[r]);
    for (int g = 0; g < 2; g++) {
        cr_assert_eq(memcmp(s.run[g].master, s.resumed[g],
                            (size_t)t_total_numel() * sizeof(float)), 0,
                     "group %d: the resumed run differs", g);
        /* Each group wrote a checkpoint of its own two ranks. */
        char f[512];
        snprintf(f, sizeof f, "%s/half/rank_00001.bin", s.dir[g]);
        cr_assert_eq(access(f, R_OK), 0, "%s", f);
        snprintf(f, sizeof f, "%s/half/rank_00002.bin", s.dir[g]);
        cr_assert_neq(access(f, F_OK), 0, "%s: a third rank file", f);
        float *want = alone(&s.run[g]);
        cr_assert_eq(memcmp(s.resumed[g], want, (size_t)t_total_numel() * sizeof(float)), 0,
                     "group %d: the resumed run differs from the 2-rank run alone", g);
        free(want);
    }
    t_rm_tree(tmpl);
    teardown(&s);
}

Test(subgroups, a_build_mismatch_fails_only_its_group)
{
    static sub_ctx s;
    setup(&s, MODE_MISMATCH);
    t_run_ranks(4, rank_main, &s);
    /* Group 0 (ranks 0 and 2): one message, naming both stages. */
    cr_assert_eq(s.rc[0], ZC_ERR_CONFIG, "%s", s.msg[0]);
    cr_assert_eq(s.rc[2], ZC_ERR_CONFIG, "%s", s.msg[2]);
    cr_assert(strstr(s.msg[0], "rank 0 has zero_optimization.stage 2") &&
                  strstr(s.msg[0], "rank 1 has zero_optimization.stage 3"), "%s", s.msg[0]);
    /* Group 1 trained as alone. */
    cr_assert_eq(s.rc[1], ZC_OK, "%s", s.msg[1]);
    cr_assert_eq(s.rc[3], ZC_OK, "%s", s.msg[3]);
    float *want = alone(&s.run[1]);
    cr_assert_eq(memcmp(s.run[1].master, want, (size_t)t_total_numel() * sizeof(float)), 0);
    free(want);
    teardown(&s);
}

Test(subgroups, a_failure_on_one_rank_breaks_its_group_only)
{
    static sub_ctx s;
    setup(&s, MODE_FAULT);
    /* World rank 2: the second rank of group 0 (ranks 0, 2). */
    setenv("ZC_FAULTS", "alloc:2:1", 1);
    t_run_ranks(4, rank_main, &s);
    unsetenv("ZC_FAULTS");
    cr_assert_eq(s.rc[0], ZC_ERR_NO_MEMORY, "%s", s.msg[0]);
    cr_assert_eq(s.rc[2], ZC_ERR_NO_MEMORY, "%s", s.msg[2]);
    cr_assert_str_eq(s.msg[0], s.msg[2]);
    cr_assert(strstr(s.msg[0], "failed on rank 1 of 2"), "%s", s.msg[0]);
    cr_assert_eq(s.rc[1], ZC_OK, "%s", s.msg[1]);
    cr_assert_eq(s.rc[3], ZC_OK, "%s", s.msg[3]);
    float *want = alone(&s.run[1]);
    cr_assert_eq(memcmp(s.run[1].master, want, (size_t)t_total_numel() * sizeof(float)), 0);
    free(want);
    teardown(&s);
}
