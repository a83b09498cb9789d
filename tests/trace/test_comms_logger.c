/* The comms logger (DeepSpeed's comms_logger, src/trace/comms.c): its
 * figures against the bytes the engine counts and against the formulas.
 *
 * The harness's model (tests/core/t_engine.h) trains on rank threads with
 * comms_logger enabled; after the run each rank's zc_comms_stats and summary
 * table are checked:
 *   - payload_bytes of each collective kind equal the sum over the steps of
 *     zc_stats.comm_bytes_last_step (the engine's own count), and, at
 *     stages 0-2, the layout's formula: per step, with S = padded elements
 *     x the dtype's size, stage 0 all-reduces S, stages 1 and 2
 *     reduce-scatter S (once per window at stage 1, every micro-step at
 *     stage 2) and all-gather S (the publish);
 *   - bytes >= payload_bytes (the norm partials and the agreements' records
 *     come on top), ops > 0 where bytes are;
 *   - the bandwidths: algbw = bytes / latency_s and busbw = algbw x
 *     2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather);
 *   - the table: for each kind, the rows' count x message size add up to
 *     the kind's bytes (plain and "_coalesced" rows together);
 *   - verbose: one INFO line per logged operation (a row's count);
 *   - prof_all false with prof_ops ["all_gather"]: nothing but all-gathers;
 *   - debug: rows name their calling function;
 *   - an unknown op name in prof_ops is refused, naming the key;
 *   - under MiCS (S = 2 of 4 ranks) the group collectives' rows say "(2
 *     ranks)" and their busbw is algbw x (2-1)/2 (all-reduce 2(2-1)/2),
 *     and the kind's busbw in zc_comms_stats weighs the factor by bytes. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

#define STEPS 4

typedef struct job {
    t_run run;
    zc_comm *comms[T_MAX_WORLD];
    zc_stats step_stats[T_MAX_WORLD][STEPS];
    zc_comms_stats cs[T_MAX_WORLD];
    char table[T_MAX_WORLD][8192];
    size_t table_len[T_MAX_WORLD];
    char err[T_MAX_WORLD][512];
} job;

static void rank_fn(int rank, void *arg)
{
    job *j = arg;
    t_ctx x;
    if (t_ctx_open(&x, &j->run, rank, j->comms[rank]) != ZC_OK) {
        snprintf(j->err[rank], sizeof j->err[rank], "open: %s", zc_last_error());
        t_ctx_close(&x);
        return;
    }
    for (int s = 0; s < STEPS; s++) {
        zc_step_info info;
        if (t_train_step(&x, s, &info) != ZC_OK) {
            snprintf(j->err[rank], sizeof j->err[rank], "step %d: %s", s, zc_last_error());
            goto out;
        }
        j->step_stats[rank][s] = (zc_stats){.size = sizeof(zc_stats)};
        cr_assert_eq(zc_engine_stats(x.eng, &j->step_stats[rank][s]), ZC_OK);
    }
    j->cs[rank] = (zc_comms_stats){.size = sizeof(zc_comms_stats)};
    if (zc_engine_comms_stats(x.eng, &j->cs[rank]) != ZC_OK ||
        zc_engine_comms_summary(x.eng, j->table[rank], sizeof j->table[rank],
                                &j->table_len[rank]) != ZC_OK)
        snprintf(j->err[rank], sizeof j->err[rank], "comms: %s", zc_last_error());
out:
    t_ctx_close(&x);
}

/* INFO lines of the "comm" subsystem that are per-operation ones. */
static _Atomic int op_lines;
static void sink(zc_log_level level, const char *subsys, int rank, const char *msg, void *u)
{
    (void)rank;
    (void)u;
    if (level == ZC_LOG_INFO && !strcmp(subsys, "comm") && strstr(msg, "comm op: "))
        op_lines++;
}

static job *run(int stage, int world, int accum, const char *const *keys)
{
    job *j = calloc(1, sizeof *j);
    t_run_init(&j->run, stage, world, ZC_DTYPE_BF16);
    j->run.accum = accum;
    j->run.steps = STEPS;
    j->run.keys = keys;
    cr_assert_eq(zc_comm_local_world(world, j->comms), ZC_OK);
    t_run_ranks(world, rank_fn, j);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(j->comms[r]);
    for (int r = 0; r < world; r++)
        cr_assert_eq(j->err[r][0], '\0', "stage %d rank %d: %s", stage, r, j->err[r]);
    return j;
}

static const char *const kind_names[ZC_COLL__COUNT] = {"all_reduce", "reduce_scatter",
                                                       "all_gather", "broadcast"};

/* Sums count x size over the table's rows of kind k (plain and coalesced).
 * Rows read "<pad><size> <unit> <count> ...": sizes in the table are
 * rounded (%.2f of a unit), so the sum is compared with that rounding. */
static double table_bytes(const char *table, int k, double *slack)
{
    double sum = 0;
    *slack = 0;
    const char *kind = NULL;
    char line[512];
    for (const char *p = table; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        p = nl ? nl + 1 : p + n;
        if (line[0] != ' ') {
            kind = NULL;
            for (int c = 0; c < ZC_COLL__COUNT; c++)
                if (!strncmp(line, kind_names[c], strlen(kind_names[c])))
                    kind = kind_names[c];
            continue;
        }
        if (kind != kind_names[k])
            continue;
        double v = 0;
        char unit[8] = "";
        long long count = 0;
        if (sscanf(line, " %lf %7s %lld", &v, unit, &count) != 3)
            continue;
        double mul = !strcmp(unit, "B") ? 1 : !strcmp(unit, "KiB") ? 1024.0
                   : !strcmp(unit, "MiB") ? 1048576.0 : !strcmp(unit, "GiB") ? 1073741824.0 : 0;
        cr_assert_gt(mul, 0, "unit '%s' in '%s'", unit, line);
        sum += v * mul * (double)count;
        *slack += 0.005 * mul * (double)count;
    }
    return sum;
}

static void check_run(job *j, int stage, int world, int accum)
{
    for (int r = 0; r < world; r++) {
        const zc_comms_stats *cs = &j->cs[r];
        cr_assert(cs->enabled);
        cr_assert_eq(cs->world, world);
        int64_t counted[ZC_COLL__COUNT] = {0};
        for (int s = 0; s < STEPS; s++)
            for (int k = 0; k < ZC_COLL__COUNT; k++)
                counted[k] += j->step_stats[r][s].comm_bytes_last_step[k];
        /* The formula of the layout (stages 0-2). */
        const int64_t S = j->step_stats[r][0].padded_params * 2; /* bf16 */
        int64_t want[ZC_COLL__COUNT] = {0};
        if (stage == 0)
            want[ZC_COLL_ALL_REDUCE] = S * STEPS;
        if (stage == 1) {
            want[ZC_COLL_REDUCE_SCATTER] = S * STEPS;
            want[ZC_COLL_ALL_GATHER] = S * STEPS;
        }
        if (stage == 2) {
            want[ZC_COLL_REDUCE_SCATTER] = S * STEPS * accum;
            want[ZC_COLL_ALL_GATHER] = S * STEPS;
        }
        for (int k = 0; k < ZC_COLL__COUNT; k++) {
            cr_assert_eq(cs->payload_bytes[k], counted[k],
                         "stage %d rank %d %s: the comms logger's payload %lld bytes, the "
                         "engine counted %lld", stage, r, kind_names[k],
                         (long long)cs->payload_bytes[k], (long long)counted[k]);
            if (stage < 3)
                cr_assert_eq(cs->payload_bytes[k], want[k],
                             "stage %d rank %d %s: %lld payload bytes, the layout says %lld",
                             stage, r, kind_names[k], (long long)cs->payload_bytes[k],
                             (long long)want[k]);
            cr_assert_geq(cs->bytes[k], cs->payload_bytes[k]);
            cr_assert_eq(cs->bytes[k] > 0, cs->ops[k] > 0);
            if (cs->bytes[k] > 0 && cs->latency_s[k] > 0) {
                const double alg = (double)cs->bytes[k] / cs->latency_s[k];
                const double f = k == ZC_COLL_ALL_REDUCE ? 2.0 * (world - 1) / world
                               : k == ZC_COLL_BROADCAST ? 1.0 : (double)(world - 1) / world;
                cr_assert(fabs(cs->algbw[k] - alg) <= 1e-9 * alg, "algbw %g, want %g",
                          cs->algbw[k], alg);
                cr_assert(fabs(cs->busbw[k] - alg * f) <= 1e-9 * alg + 1e-12,
                          "busbw %g, want %g", cs->busbw[k], alg * f);
            }
            double slack = 0;
            const double tb = table_bytes(j->table[r], k, &slack);
            cr_assert(fabs(tb - (double)cs->bytes[k]) <= slack + 0.5,
                      "stage %d rank %d %s: the table's rows add up to %.0f bytes, the "
                      "logger holds %lld\n%s", stage, r, kind_names[k], tb,
                      (long long)cs->bytes[k], j->table[r]);
        }
        cr_assert_eq(strlen(j->table[r]) + 1, j->table_len[r], "the whole table fits");
        cr_assert_not_null(strstr(j->table[r], "busbw (GB/s)"));
    }
}

Test(comms_logger, figures_match_the_engine_counts)
{
    const char *keys[] = {"comms_logger.enabled", "true", NULL};
    static const int cases[][3] = {{0, 2, 1}, {1, 2, 2}, {2, 3, 2}, {3, 2, 1}, {3, 3, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        job *j = run(cases[c][0], cases[c][1], cases[c][2], keys);
        check_run(j, cases[c][0], cases[c][1], cases[c][2]);
        free(j);
    }
}

Test(comms_logger, verbose_prof_ops_and_debug)
{
    /* verbose: a line per operation logged. */
    zc_log_set_sink(sink, NULL);
    zc_log_set_level(ZC_LOG_INFO);
    op_lines = 0;
    const char *verbose[] = {"comms_logger.enabled", "true", "comms_logger.verbose", "true",
                             NULL};
    job *j = run(2, 2, 1, verbose);
    int64_t rows = 0;
    for (int r = 0; r < 1; r++) { /* the log shows rank 0's lines (ZC_LOG_RANKS) */
        /* Every row's count, from the table. */
        char line[512];
        for (const char *p = j->table[r]; *p;) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            snprintf(line, sizeof line, "%.*s", (int)n, p);
            p = nl ? nl + 1 : p + n;
            double v;
            char unit[8];
            long long count;
            if (line[0] == ' ' && sscanf(line, " %lf %7s %lld", &v, unit, &count) == 3)
                rows += count;
        }
    }
    free(j);
    zc_log_set_sink(NULL, NULL);
    zc_log_set_level(ZC_LOG_WARN);
    cr_assert_gt(rows, 0);
    cr_assert_eq(op_lines, rows, "%d per-operation lines, the tables count %lld operations",
                 (int)op_lines, (long long)rows);

    /* Only the kinds of prof_ops. */
    const char *ops[] = {"comms_logger.enabled", "true", "comms_logger.prof_all", "false",
                         "comms_logger.prof_ops", "[\"all_gather\"]", NULL};
    j = run(2, 2, 1, ops);
    cr_assert_gt(j->cs[0].ops[ZC_COLL_ALL_GATHER], 0);
    cr_assert_eq(j->cs[0].ops[ZC_COLL_REDUCE_SCATTER], 0);
    cr_assert_eq(j->cs[0].ops[ZC_COLL_ALL_REDUCE], 0);
    cr_assert_null(strstr(j->table[0], "reduce_scatter"), "%s", j->table[0]);
    free(j);

    /* debug: the calling function of each row. */
    const char *dbg[] = {"comms_logger.enabled", "true", "comms_logger.debug", "true", NULL};
    j = run(1, 2, 1, dbg);
    cr_assert_not_null(strstr(j->table[0], "[Caller: "), "%s", j->table[0]);
    cr_assert_not_null(strstr(j->table[0], "[Caller: norm_partials]"), "%s", j->table[0]);
    free(j);

    /* Off: nothing logged, the table is its header. */
    j = run(2, 2, 1, NULL);
    cr_assert(!j->cs[0].enabled);
    cr_assert_eq(j->cs[0].ops[ZC_COLL_ALL_GATHER], 0);
    free(j);
}

Test(comms_logger, unknown_op_refused)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "comms_logger.prof_ops", "[\"all_gahter\"]"), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_ERR_CONFIG);
    cr_assert_not_null(strstr(zc_last_error(), "comms_logger.prof_ops"), "%s", zc_last_error());
    cr_assert_not_null(strstr(zc_last_error(), "all_gahter"), "%s", zc_last_error());
    cr_assert_eq(zc_config_set(cfg, "comms_logger.prof_ops", "\"all_gather\""), ZC_ERR_CONFIG,
                 "prof_ops is a list");
    cr_assert_eq(zc_config_set(cfg, "comms_logger.prof_ops", "[]"), ZC_OK);
    zc_config_destroy(cfg);
}

/* MiCS: every reduce-scatter, and the all-reduce across replicas, runs on a
 * 2-rank group of the 4; the rows and the stats use n = 2. */
Test(comms_logger, hybrid_groups_use_their_size)
{
    const char *keys[] = {"comms_logger.enabled", "true", "zero_optimization.mics_shard_size",
                          "2", NULL};
    job *j = run(2, 4, 2, keys);
    int rows = 0;
    for (int r = 0; r < 4; r++) {
        const char *kind = NULL;
        char line[512];
        for (const char *p = j->table[r]; *p;) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            snprintf(line, sizeof line, "%.*s", (int)n, p);
            p = nl ? nl + 1 : p + n;
            if (line[0] != ' ') {
                kind = strncmp(line, "reduce_scatter", 14) == 0 ? "rs"
                       : strncmp(line, "all_reduce", 10) == 0   ? "ar" : NULL;
                continue;
            }
            if (!kind)
                continue;
            double v, tot, avg, alg, bus;
            char unit[8];
            int ranks = 0;
            long long count;
            if (sscanf(line, " %lf %7s (%d ranks) %lld %lf %lf %lf %lf", &v, unit, &ranks, &count,
                       &tot, &avg, &alg, &bus) != 8)
                continue;
            cr_assert_eq(ranks, 2, "%s", line);
            const double f = !strcmp(kind, "ar") ? 1.0 : 0.5;
            cr_assert(fabs(bus - alg * f) <= 0.011, "%s: busbw %.2f, algbw %.2f x %.1f", line,
                      bus, alg, f);
            rows++;
        }
        /* No reduce-scatter ran over all 4: the stats' factor is (2-1)/2. */
        const zc_comms_stats *cs = &j->cs[r];
        const int k = ZC_COLL_REDUCE_SCATTER;
        cr_assert_gt(cs->bytes[k], 0);
        if (cs->latency_s[k] > 0)
            cr_assert(fabs(cs->busbw[k] - 0.5 * cs->algbw[k]) <= 1e-9 * cs->algbw[k],
                      "rank %d: reduce-scatter busbw %g, algbw %g", r, cs->busbw[k],
                      cs->algbw[k]);
        cr_assert_null(strstr(j->table[r], "(4 ranks)"));
    }
    free(j);
    cr_assert_gt(rows, 4, "group rows in the tables: %d", rows);
}
