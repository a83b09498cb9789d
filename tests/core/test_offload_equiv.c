/* Optimizer offload changes where the state lives, never the numbers: for
 * stages 1-3, worlds 1-4, fp32/bf16/fp16 and accumulation 1 and 4, training
 * with offload_optimizer "cpu" and "nvme" gives the same fp32 master
 * parameters (bitwise), grad norms and loss-scale sequence after 20 steps as
 * the same run without offload (the independent reference: the device home,
 * which the stage-equivalence tests tie to the unsharded reference). Also:
 * nvme with ratio 0.5 (stage 3, part of the chunks stay on the device), nvme
 * striped over two directories, pipelined and serial swapping, and the
 * staging path a GPU takes (D2H gradient, H2D output) forced on the host.
 * Every run must leave its nvme_path directories empty. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"

/* A fresh directory under the build directory (the test's cwd): a real
 * filesystem, so O_DIRECT is exercised where it can be. */
static void make_dir(char *out, size_t cap)
{
    snprintf(out, cap, "zc-offload-test-XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp");
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static t_run *run_cfg(int stage, int world, zc_dtype dt, int accum, const char *offload,
                      const char *path_json, double ratio, bool pipeline)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, stage, world, dt);
    r->accum = accum;
    r->offload = offload;
    r->nvme_path_json = path_json;
    r->offload_ratio = ratio;
    r->pipeline = pipeline;
    r->buffer_count = pipeline ? 12 : 0;
    bool ok = t_engine_run(r);
    cr_assert(ok, "stage %d world %d %s accum %d offload %s: %s", stage, world,
              zc_dtype_name(dt), accum, offload ? offload : "none", t_run_error(r));
    return r;
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

static void same(const t_run *r, const t_run *ref, const char *what)
{
    const int64_t n = t_total_numel();
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&r->master[i], &ref->master[i], sizeof(float))) {
            diff++;
            if (first < 0)
                first = i;
        }
    cr_assert_eq(diff, 0, "%s: %lld of %lld master elements differ (first %lld: %a vs %a)", what,
                 (long long)diff, (long long)n, (long long)first,
                 first >= 0 ? r->master[first] : 0.0f, first >= 0 ? ref->master[first] : 0.0f);
    for (int s = 0; s < ref->steps; s++) {
        cr_assert(r->info[s].grad_norm == ref->info[s].grad_norm, "%s step %d: norm %.17g vs %.17g",
                  what, s, r->info[s].grad_norm, ref->info[s].grad_norm);
        cr_assert_eq(r->info[s].skipped, ref->info[s].skipped, "%s step %d skipped", what, s);
        cr_assert(r->info[s].loss_scale == ref->info[s].loss_scale, "%s step %d scale", what, s);
    }
}

static void sweep(zc_dtype dt, int accum)
{
    char dir[64], json[96];
    make_dir(dir, sizeof dir);
    snprintf(json, sizeof json, "\"%s\"", dir);
    for (int world = 1; world <= 4; world++)
        for (int stage = 1; stage <= 3; stage++) {
            t_run *ref = run_cfg(stage, world, dt, accum, NULL, NULL, 0, false);
            int skipped = 0;
            for (int s = 0; s < ref->steps; s++)
                skipped += ref->info[s].skipped;
            cr_assert_lt(skipped, ref->steps, "every step skipped");
            char what[96];
            t_run *cpu = run_cfg(stage, world, dt, accum, "cpu", NULL, 0, false);
            snprintf(what, sizeof what, "%s accum %d world %d stage %d cpu", zc_dtype_name(dt),
                     accum, world, stage);
            same(cpu, ref, what);
            free_run(cpu);
            /* Serial swapping on odd worlds, pipelined on even ones: both
             * orders of I/O must give the same numbers. */
            t_run *nv = run_cfg(stage, world, dt, accum, "nvme", json, 0, world % 2 == 0);
            snprintf(what, sizeof what, "%s accum %d world %d stage %d nvme", zc_dtype_name(dt),
                     accum, world, stage);
            same(nv, ref, what);
            free_run(nv);
            cr_assert_eq(entries(dir), 0, "swap files left in %s", dir);
            free_run(ref);
        }
    rmdir(dir);
    t_assert_no_leaks();
}

Test(offload_equiv, fp32_accum1) { sweep(ZC_DTYPE_F32, 1); }
Test(offload_equiv, bf16_accum1) { sweep(ZC_DTYPE_BF16, 1); }
Test(offload_equiv, fp16_accum1) { sweep(ZC_DTYPE_F16, 1); }
Test(offload_equiv, fp32_accum4) { sweep(ZC_DTYPE_F32, 4); }
Test(offload_equiv, bf16_accum4) { sweep(ZC_DTYPE_BF16, 4); }
Test(offload_equiv, fp16_accum4) { sweep(ZC_DTYPE_F16, 4); }

/* ratio 0.5 (stage 3 only, as in DeepSpeed) and two striped directories. */
Test(offload_equiv, nvme_ratio_half_and_two_dirs)
{
    char d1[64], d2[64], one[96], two[200];
    make_dir(d1, sizeof d1);
    make_dir(d2, sizeof d2);
    snprintf(one, sizeof one, "\"%s\"", d1);
    snprintf(two, sizeof two, "[\"%s\", \"%s\"]", d1, d2);
    const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int world = 1; world <= 4; world += 3)
            for (int accum = 1; accum <= 4; accum += 3) {
                char what[96];
                t_run *ref = run_cfg(3, world, dts[di], accum, NULL, NULL, 0, false);
                t_run *half = run_cfg(3, world, dts[di], accum, "nvme", one, 0.5, true);
                snprintf(what, sizeof what, "%s world %d accum %d ratio 0.5",
                         zc_dtype_name(dts[di]), world, accum);
                same(half, ref, what);
                free_run(half);
                for (int stage = 1; stage <= 3; stage++) {
                    t_run *sref = stage == 3 ? ref
                                             : run_cfg(stage, world, dts[di], accum, NULL, NULL,
                                                       0, false);
                    t_run *striped = run_cfg(stage, world, dts[di], accum, "nvme", two, 0, true);
                    snprintf(what, sizeof what, "%s world %d accum %d stage %d two dirs",
                             zc_dtype_name(dts[di]), world, accum, stage);
                    same(striped, sref, what);
                    free_run(striped);
                    if (sref != ref)
                        free_run(sref);
                }
                free_run(ref);
                cr_assert_eq(entries(d1) + entries(d2), 0, "swap files left behind");
            }
    rmdir(d1);
    rmdir(d2);
    t_assert_no_leaks();
}

/* The GPU path's copies (gradient shard D2H into pinned staging, output H2D
 * from it), run on the host: still bitwise the device-home result. */
Test(offload_equiv, staged_copies_as_on_a_gpu)
{
    char dir[64], json[96];
    make_dir(dir, sizeof dir);
    snprintf(json, sizeof json, "\"%s\"", dir);
    zc__opt_force_staging(true);
    const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int stage = 1; stage <= 3; stage++)
            for (int accum = 1; accum <= 4; accum += 3) {
                char what[96];
                zc__opt_force_staging(false);
                t_run *ref = run_cfg(stage, 2, dts[di], accum, NULL, NULL, 0, false);
                zc__opt_force_staging(true);
                t_run *cpu = run_cfg(stage, 2, dts[di], accum, "cpu", NULL, 0, false);
                t_run *nv = run_cfg(stage, 2, dts[di], accum, "nvme", json, 0, true);
                snprintf(what, sizeof what, "staged %s stage %d accum %d cpu",
                         zc_dtype_name(dts[di]), stage, accum);
                same(cpu, ref, what);
                snprintf(what, sizeof what, "staged %s stage %d accum %d nvme",
                         zc_dtype_name(dts[di]), stage, accum);
                same(nv, ref, what);
                free_run(cpu);
                free_run(nv);
                free_run(ref);
            }
    zc__opt_force_staging(false);
    cr_assert_eq(entries(dir), 0);
    rmdir(dir);
    t_assert_no_leaks();
}
