/* Hybrid sharding (MiCS, hpZ) and the bytes of every collective by link, on
 * four rank threads made to look like two nodes of two (ZC_RANKS_PER_NODE=2).
 *
 * Bytes (zc_stats.comm_bytes_last_step_by_link, this rank's), with P the
 * padded elements of the model, e the working dtype's bytes and every chunk
 * gathered twice per step at stage 3 (forward and backward; no persistence,
 * no reuse), each rank sending, per collective of n elements per rank, n to
 * each peer (comm.h's model):
 *   flat stage 3:      gathers 2 x (P/4 e intra, P/2 e inter), reduce-scatter
 *                      P/4 e intra, P/2 e inter: 3P/4 e and 3P/2 e;
 *   MiCS S = 2:        gathers 2 x P/2 e intra, reduce-scatter P/2 e intra,
 *                      nothing of either across nodes; the fp32 gradient
 *                      shard (P/2 elements) all-reduced once across the
 *                      replica pair on the other node: P/4 + P/4 elements of
 *                      4 bytes across. Stage 1 and 2: one gather (publish).
 *   MiCS S = 4, hierarchical: each gather first across nodes (this rank's
 *                      P/4 to its peer on the other node), then inside the
 *                      node (2 shards of P/4 each to the node's peer):
 *                      P/2 e intra, P/4 e inter a gather; with the flat
 *                      reduce-scatter 5P/4 e and P e;
 *   hpZ S = 2:         forward gathers as flat, backward gathers from the
 *                      secondary partition in the node pair: P/2 e intra, 0
 *                      across; so P e intra, P e inter in all.
 * Numbers: MiCS equals flat within 1e-6 relative (2-norm of the parameter
 * difference; the gradient sums run in another order), is bitwise equal
 * across stages 1-3 for the same S at every precision, the hierarchical
 * gather changes no bit, hpZ changes no bit of flat stage 3; save -> resume
 * is bitwise and a MiCS checkpoint loads into a flat engine and back.
 * Refusals name the key and both sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_runs.h"
#include "plan/plan.h"

#define W 4

static const char *const mics2[] = {"zero_optimization.mics_shard_size", "2", NULL};
static const char *const mics1[] = {"zero_optimization.mics_shard_size", "1", NULL};
static const char *const mics4_hier[] = {"zero_optimization.mics_shard_size", "4",
                                         "zero_optimization.mics_hierarchical_params_gather",
                                         "true", NULL};
static const char *const mics4[] = {"zero_optimization.mics_shard_size", "4", NULL};
static const char *const hpz2[] = {"zero_optimization.zero_hpz_partition_size", "2", NULL};

static t_run cfg_of(int stage, zc_dtype dt, const char *const *keys)
{
    t_run r;
    t_run_init(&r, stage, W, dt);
    r.steps = 4;
    r.persistence = 0;
    r.layerwise = true; /* a layer (chunk) acquired at once: gathered twice a step */
    r.keys = keys;
    return r;
}

static t_run *trained(int stage, zc_dtype dt, const char *const *keys)
{
    t_run r = cfg_of(stage, dt, keys);
    return t_run_trained(&r);
}

static void two_nodes(void) { setenv("ZC_RANKS_PER_NODE", "2", 1); }

Test(hybrid, bytes_by_link_hold_to_the_formulas)
{
    two_nodes();
    for (int dti = 0; dti < 2; dti++) {
        const zc_dtype dt = dti ? ZC_DTYPE_BF16 : ZC_DTYPE_F32;
        const int64_t e = dti ? 2 : 4;
        t_run *flat = trained(3, dt, NULL), *m3 = trained(3, dt, mics2), *h3 = trained(3, dt, hpz2);
        t_run *m1 = trained(1, dt, mics2), *m2 = trained(2, dt, mics2), *f1 = trained(1, dt, NULL);
        t_run *hi = trained(3, dt, mics4_hier);
        for (int r = 0; r < W; r++) {
            const zc_stats *s = &flat->stats[r];
            cr_assert_eq(s->nodes, 2);
            cr_assert_eq(s->ranks_per_node, 2);
            /* Every chunk twice (forward, backward) in the step. */
            cr_assert_eq(s->gathers_last_step, 2 * s->num_chunks, "rank %d", r);
            const int64_t P = s->padded_params;
            const int64_t *l = s->comm_bytes_last_step_by_link;
            cr_assert_eq(l[ZC_LINK_INTRA_NODE], 3 * P / 4 * e, "flat rank %d: %lld", r,
                         (long long)l[0]);
            cr_assert_eq(l[ZC_LINK_INTER_NODE], 3 * P / 2 * e, "flat rank %d: %lld", r,
                         (long long)l[1]);
            const zc_stats *ms = &m3->stats[r];
            const int64_t Pm = ms->padded_params;
            cr_assert_eq(ms->shard_world, 2);
            cr_assert_eq(ms->replicas, 2);
            cr_assert_eq(ms->shard_rank, r % 2);
            cr_assert_eq(ms->gathers_last_step, 2 * ms->num_chunks);
            cr_assert_eq(ms->comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE], 3 * Pm / 2 * e,
                         "MiCS rank %d: %lld", r, (long long)ms->comm_bytes_last_step_by_link[0]);
            cr_assert_eq(ms->comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE], Pm / 2 * 4,
                         "MiCS rank %d: %lld", r, (long long)ms->comm_bytes_last_step_by_link[1]);
            /* The all-reduce across replicas is of 1/S of the model, fp32. */
            cr_assert_eq(ms->comm_bytes_last_step[ZC_COLL_ALL_REDUCE], Pm / 2 * 4);
            for (int k = 0; k < 2; k++) {
                const zc_stats *m12 = k ? &m2->stats[r] : &m1->stats[r];
                const int64_t Q = m12->padded_params;
                cr_assert_eq(m12->comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE], Q * e,
                             "MiCS stage %d rank %d", k + 1, r);
                cr_assert_eq(m12->comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE], Q / 2 * 4,
                             "MiCS stage %d rank %d", k + 1, r);
            }
            /* Flat stage 1: reduce-scatter + publish gather, 2/4 and 2/2. */
            const zc_stats *fs = &f1->stats[r];
            cr_assert_eq(fs->comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE],
                         fs->padded_params / 2 * e);
            cr_assert_eq(fs->comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE],
                         fs->padded_params * e);
            const zc_stats *hs = &h3->stats[r];
            cr_assert_eq(hs->hpz_partition_size, 2);
            cr_assert_eq(hs->padded_params, P);
            cr_assert_eq(hs->comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE], P * e,
                         "hpZ rank %d", r);
            cr_assert_eq(hs->comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE], P * e,
                         "hpZ rank %d", r);
            const zc_stats *his = &hi->stats[r];
            cr_assert_eq(his->comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE], 5 * P / 4 * e,
                         "hierarchical rank %d: %lld", r,
                         (long long)his->comm_bytes_last_step_by_link[0]);
            cr_assert_eq(his->comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE], P * e,
                         "hierarchical rank %d: %lld", r,
                         (long long)his->comm_bytes_last_step_by_link[1]);
            /* The secondary partition: P/2 working-precision elements. */
            cr_assert_eq(hs->bytes[ZC_MEM_PARAMS], s->bytes[ZC_MEM_PARAMS] + P / 2 * e);
        }
        t_run_free(flat), t_run_free(m3), t_run_free(h3), t_run_free(m1), t_run_free(m2);
        t_run_free(f1), t_run_free(hi);
    }
    unsetenv("ZC_RANKS_PER_NODE");
}

Test(hybrid, one_node_sends_nothing_across)
{
    unsetenv("ZC_RANKS_PER_NODE");
    t_run *m = trained(3, ZC_DTYPE_BF16, mics2);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(m->stats[r].nodes, 1);
        cr_assert_eq(m->stats[r].comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE], 0);
        cr_assert_gt(m->stats[r].comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE], 0);
    }
    t_run_free(m);
}

/* ||a - b|| / ||b|| over the fp32 masters. */
static double rel_l2(const t_run *a, const t_run *b)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < t_total_numel(); i++) {
        const double d = (double)a->master[i] - (double)b->master[i];
        num += d * d;
        den += (double)b->master[i] * b->master[i];
    }
    return sqrt(num / den);
}

Test(hybrid, mics_numbers)
{
    two_nodes();
    /* Within 1e-6 of flat at accumulation 1, fp32. */
    for (int stage = 1; stage <= 3; stage++) {
        t_run *flat = trained(stage, ZC_DTYPE_F32, NULL), *m = trained(stage, ZC_DTYPE_F32, mics2);
        t_assert_trained(m);
        const double d = rel_l2(m, flat);
        cr_assert(d <= 1e-6, "stage %d: MiCS differs from flat by %g (2-norm, relative)", stage,
                  d);
        for (int s = 0; s < flat->steps; s++)
            cr_assert(fabs(m->info[s].grad_norm - flat->info[s].grad_norm) <=
                          1e-6 * flat->info[s].grad_norm,
                      "stage %d step %d: grad norm %.17g, flat %.17g", stage, s,
                      m->info[s].grad_norm, flat->info[s].grad_norm);
        t_run_free(flat), t_run_free(m);
    }
    /* Bitwise across stages 1-3 for the same S, every precision; the
     * hierarchical gather changes no bit; S = W is flat. */
    static const zc_dtype dts[3] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++) {
        const char *const *sets[2] = {mics2, mics1};
        for (int si = 0; si < 2; si++) {
            t_run *ref = trained(1, dts[di], sets[si]);
            for (int stage = 2; stage <= 3; stage++) {
                t_run *m = trained(stage, dts[di], sets[si]);
                char what[64];
                snprintf(what, sizeof what, "MiCS S=%s stage %d", sets[si][1], stage);
                t_assert_same_training(m, ref, what);
                t_run_free(m);
            }
            t_run_free(ref);
        }
        t_run *flat3 = trained(3, dts[di], NULL), *m4 = trained(3, dts[di], mics4);
        t_run *hier = trained(3, dts[di], mics4_hier), *hier1 = trained(1, dts[di], mics4_hier);
        t_assert_same_training(m4, flat3, "MiCS S=W");
        t_assert_same_training(hier, flat3, "MiCS S=W, hierarchical gather");
        t_run *flat1 = trained(1, dts[di], NULL);
        t_assert_same_training(hier1, flat1, "MiCS S=W, hierarchical gather, stage 1");
        t_run_free(flat3), t_run_free(m4), t_run_free(hier), t_run_free(hier1), t_run_free(flat1);
    }
    unsetenv("ZC_RANKS_PER_NODE");
}

Test(hybrid, hpz_changes_no_bit)
{
    two_nodes();
    for (int di = 0; di < 2; di++) {
        const zc_dtype dt = di ? ZC_DTYPE_BF16 : ZC_DTYPE_F32;
        t_run *flat = trained(3, dt, NULL), *h = trained(3, dt, hpz2);
        t_assert_same_training(h, flat, "hpZ S=2");
        t_run a = cfg_of(3, dt, hpz2), b = cfg_of(3, dt, NULL);
        a.accum = b.accum = 2;
        t_run *ha = t_run_trained(&a), *fa = t_run_trained(&b);
        t_assert_same_training(ha, fa, "hpZ S=2, accumulation 2");
        t_run_free(flat), t_run_free(h), t_run_free(ha), t_run_free(fa);
    }
    unsetenv("ZC_RANKS_PER_NODE");
}

/* zc_engine_create or build with one key, on one rank of a world of n
 * threads: the status and message of every rank. */
typedef struct refuse_ctx {
    const char *const *keys;
    int stage;
    zc_status rc[W];
    char msg[W][512];
} refuse_ctx;

static void refuse_rank(void *arg, zc_comm *comm, int rank)
{
    refuse_ctx *x = arg;
    t_run r = cfg_of(x->stage, ZC_DTYPE_F32, x->keys);
    t_ctx c;
    x->rc[rank] = t_ctx_open(&c, &r, rank, comm);
    snprintf(x->msg[rank], sizeof x->msg[rank], "%s", x->rc[rank] ? zc_last_error() : "");
    t_ctx_close(&c);
}

static void expect_refusal(int world, int stage, const char *const *keys, zc_status want,
                           const char *a, const char *b)
{
    static refuse_ctx x;
    memset(&x, 0, sizeof x);
    x.keys = keys;
    x.stage = stage;
    char err[256];
    cr_assert(t_on_ranks(world, refuse_rank, &x, err, sizeof err), "%s", err);
    for (int r = 0; r < world; r++) {
        cr_assert_eq(x.rc[r], want, "rank %d: %s", r, x.msg[r]);
        cr_assert(strstr(x.msg[r], a) && (!b || strstr(x.msg[r], b)), "rank %d: %s", r,
                  x.msg[r]);
    }
    t_assert_no_leaks();
}

Test(hybrid, refusals_name_the_key_and_both_sizes)
{
    static const char *const mics3[] = {"zero_optimization.mics_shard_size", "3", NULL};
    static const char *const hpz3[] = {"zero_optimization.zero_hpz_partition_size", "3", NULL};
    static const char *const mics_off[] = {"zero_optimization.mics_shard_size", "2",
                                           "zero_optimization.offload_optimizer.device",
                                           "\"cpu\"", NULL};
    static const char *const both[] = {"zero_optimization.mics_shard_size", "2",
                                       "zero_optimization.zero_hpz_partition_size", "2", NULL};
    static const char *const hpz_poff[] = {"zero_optimization.zero_hpz_partition_size", "2",
                                           "zero_optimization.offload_param.device", "\"cpu\"",
                                           NULL};
    expect_refusal(4, 2, mics3, ZC_ERR_CONFIG, "mics_shard_size 3 does not divide",
                   "world of 4 ranks");
    expect_refusal(4, 3, hpz3, ZC_ERR_CONFIG, "zero_hpz_partition_size 3 does not divide",
                   "world of 4 ranks");
    expect_refusal(2, 0, mics2, ZC_ERR_CONFIG, "mics_shard_size", "stage 0");
    expect_refusal(2, 2, mics_off, ZC_ERR_CONFIG, "mics_shard_size", "offload_optimizer");
    expect_refusal(2, 3, both, ZC_ERR_CONFIG, "zero_hpz_partition_size", "mics_shard_size 2");
    expect_refusal(2, 3, hpz_poff, ZC_ERR_CONFIG, "zero_hpz_partition_size", "offload_param");
    /* The hierarchical gather of a shard group inside one node: refused at
     * build, on every rank alike, as DeepSpeed refuses it. */
    unsetenv("ZC_RANKS_PER_NODE");
    expect_refusal(4, 3, mics4_hier, ZC_ERR_CONFIG, "mics_hierarchical_params_gather",
                   "lies within one node");
    /* ZC_RANKS_PER_NODE is parsed strictly. */
    setenv("ZC_RANKS_PER_NODE", "2x", 1);
    expect_refusal(2, 2, NULL, ZC_ERR_CONFIG, "ZC_RANKS_PER_NODE", NULL);
    setenv("ZC_RANKS_PER_NODE", "0", 1);
    expect_refusal(2, 2, NULL, ZC_ERR_CONFIG, "ZC_RANKS_PER_NODE", NULL);
    unsetenv("ZC_RANKS_PER_NODE");
}

/* ---- checkpoints saved with S ------------------------------------------- */

typedef struct ck_ctx {
    const char *const *save_keys, *const *load_keys;
    int save_world, load_world;
    int save_steps, more_steps;
    const char *dir, *load_dir;
    float *at_save, *after; /* rank 0's gathered masters */
    zc_status rc[W];
    char msg[W][512];
} ck_ctx;

static void ck_note(ck_ctx *x, int r, zc_status rc)
{
    if (x->rc[r] == ZC_OK && rc != ZC_OK) {
        x->rc[r] = rc;
        snprintf(x->msg[r], sizeof x->msg[r], "%s", zc_last_error());
    }
}

static void ck_save_rank(void *arg, zc_comm *comm, int r)
{
    ck_ctx *x = arg;
    t_run run = cfg_of(3, ZC_DTYPE_BF16, x->save_keys);
    run.world = x->save_world;
    t_ctx c;
    ck_note(x, r, t_ctx_open(&c, &run, r, comm));
    for (int s = 0; s < x->save_steps && x->rc[r] == ZC_OK; s++)
        ck_note(x, r, t_train_step(&c, s, NULL));
    if (x->rc[r] == ZC_OK)
        ck_note(x, r, zc_checkpoint_save(c.eng, x->dir, "t"));
    if (x->rc[r] == ZC_OK)
        ck_note(x, r, t_gather(&c, x->at_save));
    t_ctx_close(&c);
}

static void ck_load_rank(void *arg, zc_comm *comm, int r)
{
    ck_ctx *x = arg;
    t_run run = cfg_of(3, ZC_DTYPE_BF16, x->load_keys);
    run.world = x->load_world;
    t_ctx c;
    ck_note(x, r, t_ctx_open(&c, &run, r, comm));
    if (x->rc[r] == ZC_OK)
        ck_note(x, r, zc_checkpoint_load(c.eng, x->load_dir ? x->load_dir : x->dir, "t"));
    if (x->rc[r] == ZC_OK && !x->more_steps)
        ck_note(x, r, t_gather(&c, x->after));
    for (int s = x->save_steps; s < x->save_steps + x->more_steps && x->rc[r] == ZC_OK; s++)
        ck_note(x, r, t_train_step(&c, s, NULL));
    if (x->rc[r] == ZC_OK && x->more_steps)
        ck_note(x, r, t_gather(&c, x->after));
    t_ctx_close(&c);
}

static void ck_run(ck_ctx *x, t_rank_fn *fn, int world)
{
    memset(x->rc, 0, sizeof x->rc);
    char err[256];
    cr_assert(t_on_ranks(world, fn, x, err, sizeof err), "%s", err);
    for (int r = 0; r < world; r++)
        cr_assert_eq(x->rc[r], ZC_OK, "rank %d: %s", r, x->msg[r]);
}

static bool same_floats(const float *a, const float *b)
{
    return memcmp(a, b, (size_t)t_total_numel() * sizeof(float)) == 0;
}

Test(hybrid, checkpoints_saved_with_s)
{
    two_nodes();
    char base[] = "/tmp/zc_hybrid_ck_XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    char d1[300], d2[300];
    snprintf(d1, sizeof d1, "%s/mics", base);
    snprintf(d2, sizeof d2, "%s/flat", base);
    static ck_ctx x;
    memset(&x, 0, sizeof x);
    const size_t bytes = (size_t)t_total_numel() * sizeof(float);
    x.at_save = calloc(1, bytes);
    x.after = calloc(1, bytes);
    float *mics_saved = calloc(1, bytes);

    /* Save -> resume with the same S: bitwise the uninterrupted run. */
    t_run full = cfg_of(3, ZC_DTYPE_BF16, mics2);
    t_run *ref = t_run_trained(&full);
    x = (ck_ctx){.save_keys = mics2, .load_keys = mics2, .save_world = W, .load_world = W,
                 .save_steps = 2, .more_steps = 2, .dir = d1, .at_save = x.at_save,
                 .after = x.after};
    ck_run(&x, ck_save_rank, W);
    memcpy(mics_saved, x.at_save, bytes);
    ck_run(&x, ck_load_rank, W);
    cr_assert(same_floats(x.after, ref->master), "MiCS save -> resume differs");
    /* The first replica wrote the S shard files. */
    char f[400];
    snprintf(f, sizeof f, "%s/t/rank_00001.bin", d1);
    cr_assert_eq(access(f, R_OK), 0, "%s", f);
    snprintf(f, sizeof f, "%s/t/rank_00002.bin", d1);
    cr_assert_neq(access(f, F_OK), 0, "%s: a replica wrote a shard file", f);

    /* A MiCS checkpoint into flat engines (and into S = 1), and a flat one
     * into MiCS engines: the master as saved. */
    x.more_steps = 0;
    x.load_keys = NULL;
    ck_run(&x, ck_load_rank, W);
    cr_assert(same_floats(x.after, mics_saved), "MiCS -> flat");
    x.load_keys = mics1;
    ck_run(&x, ck_load_rank, W);
    cr_assert(same_floats(x.after, mics_saved), "MiCS S=2 -> S=1");
    x.save_keys = NULL;
    x.load_keys = mics2;
    x.dir = d2;
    ck_run(&x, ck_save_rank, W);
    ck_run(&x, ck_load_rank, W);
    cr_assert(same_floats(x.after, x.at_save), "flat -> MiCS");

    /* zc_checkpoint_reshard of the MiCS checkpoint (2 shard files) for 3
     * ranks, loaded by a flat world of 3 and by MiCS S=2 over 4. */
    cr_assert_eq(zc_checkpoint_reshard(d1, "t", base, 3), ZC_OK, "%s", zc_last_error());
    x.load_dir = base;
    x.load_keys = NULL;
    x.load_world = 3;
    ck_run(&x, ck_load_rank, 3);
    cr_assert(same_floats(x.after, mics_saved), "MiCS resharded for 3 -> flat 3");
    x.load_keys = mics2;
    x.load_world = W;
    ck_run(&x, ck_load_rank, W);
    cr_assert(same_floats(x.after, mics_saved), "MiCS resharded for 3 -> MiCS S=2");
    t_run_free(ref);
    free(x.at_save), free(x.after), free(mics_saved);
    t_rm_tree(base);
    unsetenv("ZC_RANKS_PER_NODE");
    t_assert_no_leaks();
}

/* ---- the planner against the engine -------------------------------------- */

/* The plan of a run (zc_plan_memory, and the chunks its internal form
 * returns) against what the run's engines allocated and sent. */
static void plan_matches(const t_run *r, const char *what)
{
    zc_config *cfg = NULL;
    cr_assert_eq(t_config_make(r, &cfg), ZC_OK, "%s", zc_last_error());
    zc_plan_tensor t[T_NPARAMS];
    for (int i = 0; i < T_NPARAMS; i++)
        t[i] = (zc_plan_tensor){.shape = &t_numel[i], .ndim = 1, .boundary = t_boundary[i]};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = r->bucket;
    zc_memory_plan p = {.size = sizeof p};
    zc_plan_chunks ch = {0};
    cr_assert_eq(zc__plan_memory_placed(cfg, r->world, t, T_NPARAMS, &eo, &p, &ch), ZC_OK, "%s",
                 zc_last_error());
    for (int rank = 0; rank < r->world; rank++) {
        const zc_stats *s = &r->stats[rank];
        for (int k = 0; k < ZC_KIND__COUNT; k++)
            for (int c = 0; c < ZC_MEM__COUNT; c++) {
                if (c == ZC_MEM_OTHER || c == ZC_MEM_BUFFERS || c == ZC_MEM_RESERVED)
                    continue;
                cr_assert_eq(p.bytes_by_kind_cat[k][c], s->bytes_by_kind_cat[k][c],
                             "%s rank %d kind %d category %d: planned %lld, allocated %lld", what,
                             rank, k, c, (long long)p.bytes_by_kind_cat[k][c],
                             (long long)s->bytes_by_kind_cat[k][c]);
            }
        const int64_t pb = p.bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_BUFFERS] +
                           p.bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_RESERVED];
        const int64_t sb = s->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_BUFFERS] +
                           s->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_RESERVED];
        cr_assert_eq(pb, sb, "%s rank %d: buffers planned %lld, allocated %lld", what, rank,
                     (long long)pb, (long long)sb);
        const zc_link_plan_in li = {
            .world = r->world, .stage = r->stage, .ranks_per_node = s->ranks_per_node,
            .rank = rank, .shard_world = s->shard_world,
            .hier = cfg->zero.mics_hierarchical_params_gather, .hpz = s->hpz_partition_size,
            .pesz = zc_dtype_size(r->dtype), .gas = r->accum, .nchunks = ch.n,
            .padded = ch.padded, .persistent = ch.persistent};
        int64_t lb[2];
        cr_assert_eq(zc__plan_link_bytes(&li, lb), ZC_OK, "%s", zc_last_error());
        for (int l = 0; l < 2; l++)
            cr_assert_eq(lb[l], s->comm_bytes_last_step_by_link[l],
                         "%s rank %d link %d: planned %lld, sent %lld", what, rank, l,
                         (long long)lb[l], (long long)s->comm_bytes_last_step_by_link[l]);
    }
    zc__plan_chunks_free(&ch);
    zc_config_destroy(cfg);
}

Test(hybrid, the_planner_counts_what_the_engine_allocates_and_sends)
{
    two_nodes();
    const char *const *sets[5] = {NULL, mics2, mics4_hier, hpz2, mics1};
    const char *names[5] = {"flat", "MiCS S=2", "MiCS S=4 hierarchical", "hpZ S=2", "MiCS S=1"};
    for (int si = 0; si < 5; si++)
        for (int stage = 1; stage <= 3; stage++)
            for (int accum = 1; accum <= 2; accum++) {
                if (sets[si] == hpz2 && stage < 3)
                    continue;
                t_run c = cfg_of(stage, ZC_DTYPE_BF16, sets[si]);
                c.accum = accum;
                t_run *r = t_run_trained(&c);
                char what[96];
                snprintf(what, sizeof what, "%s stage %d accum %d", names[si], stage, accum);
                plan_matches(r, what);
                t_run_free(r);
            }
    unsetenv("ZC_RANKS_PER_NODE");
}
