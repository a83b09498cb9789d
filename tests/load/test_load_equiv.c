/* zc_load_safetensors is zc_param_load of the file's values, bitwise: the
 * engine harness's model (tests/core/t_engine.h: eight parameters over six
 * chunks, several straddling shard boundaries) trained 3 steps after an
 * import equals the same training after zc_param_load of the same fp32
 * values - the fp32 master, grad norms, skips and loss scales - at stages
 * 0-3 x fp32/bf16/fp16 parameters x offload none / cpu / nvme (the
 * optimizer state, and at stage 3 the parameter shards too) x worlds 1-4,
 * each with a file of F32, BF16 or F16 tensors written in reverse
 * registration order. Every run leaves its nvme_path directory empty. The
 * same under hybrid sharding (MiCS at stages 1-3, hpZ at stage 3). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"
#include "t_st.h"

static const zc_dtype dtypes[3] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};

/* The harness's initial values in precision dt, as a safetensors file. */
static void write_model(const char *path, zc_dtype dt)
{
    t_st_tensor t[T_NPARAMS];
    float *vals[T_NPARAMS];
    char names[T_NPARAMS][8];
    for (int i = 0; i < T_NPARAMS; i++) {
        vals[i] = malloc((size_t)t_numel[i] * sizeof(float));
        cr_assert(vals[i]);
        for (int64_t k = 0; k < t_numel[i]; k++)
            vals[i][k] = t_init_value_as(i, k, dt);
        snprintf(names[i], sizeof names[i], "p%d", i);
        const int j = T_NPARAMS - 1 - i; /* the file in reverse order */
        t[j] = (t_st_tensor){.name = names[i], .dtype = dt, .ndim = 1,
                             .shape = {t_numel[i]}, .values = vals[i]};
    }
    t_st_write(path, t, T_NPARAMS);
    for (int i = 0; i < T_NPARAMS; i++)
        free(vals[i]);
}

static void sweep(int stage)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-load-equiv");
    char paths[3][64];
    for (int f = 0; f < 3; f++) {
        snprintf(paths[f], sizeof paths[f], "zc-load-equiv-%d-%d-%d.safetensors", stage, f,
                 (int)getpid());
        write_model(paths[f], dtypes[f]);
    }
    const char *offloads[3] = {NULL, "cpu", "nvme"};
    int pairs = 0;
    for (int di = 0; di < 3; di++)
        for (int oi = 0; oi < (stage == 0 ? 1 : 3); oi++)
            for (int world = 1; world <= 4; world++) {
                const int fi = (di + oi + world) % 3;
                t_run cfg;
                t_run_init(&cfg, stage, world, dtypes[di]);
                cfg.steps = 3;
                cfg.load_dtype = dtypes[fi];
                cfg.offload = offloads[oi];
                cfg.nvme_path_json = oi == 2 ? dir.json : NULL;
                if (stage == 3) {
                    cfg.offload_param = offloads[oi];
                    cfg.param_nvme_path_json = oi == 2 ? dir.json : NULL;
                }
                t_run *ref = t_run_trained(&cfg);
                cfg.load_path = paths[fi];
                t_run *imp = t_run_trained(&cfg);
                char what[160];
                snprintf(what, sizeof what, "stage %d %s world %d offload %s, a %s file", stage,
                         zc_dtype_name(dtypes[di]), world, offloads[oi] ? offloads[oi] : "none",
                         zc_dtype_name(dtypes[fi]));
                t_assert_same_training(imp, ref, what);
                for (int r = 0; r < world; r++)
                    cr_assert_eq(imp->load_stats[r].tensors, T_NPARAMS, "%s: rank %d loaded "
                                 "%lld tensors", what, r, (long long)imp->load_stats[r].tensors);
                t_run_free(ref);
                t_run_free(imp);
                cr_assert_eq(t_dir_entries(dir.path), 0, "%s: swap files left", what);
                pairs++;
            }
    cr_assert_eq(pairs, stage == 0 ? 12 : 36);
    for (int f = 0; f < 3; f++)
        unlink(paths[f]);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(load_equiv, stage0) { sweep(0); }
Test(load_equiv, stage1) { sweep(1); }
Test(load_equiv, stage2) { sweep(2); }
Test(load_equiv, stage3) { sweep(3); }

/* Under hybrid sharding a rank imports its shard of its group (the shard
 * rank's range), the groups' gathers publish it: MiCS S = 2 at stages 1-3
 * and hpZ S = 2 at stage 3, four ranks, equal to zc_param_load bitwise. */
Test(load_equiv, hybrid_sharding)
{
    static const char *const mics2[] = {"zero_optimization.mics_shard_size", "2", NULL};
    static const char *const hpz2[] = {"zero_optimization.zero_hpz_partition_size", "2", NULL};
    char path[64];
    snprintf(path, sizeof path, "zc-load-equiv-hybrid-%d.safetensors", (int)getpid());
    write_model(path, ZC_DTYPE_BF16);
    int pairs = 0;
    for (int stage = 1; stage <= 3; stage++)
        for (int h = 0; h < (stage == 3 ? 2 : 1); h++)
            for (int di = 0; di < 2; di++) {
                t_run cfg;
                t_run_init(&cfg, stage, 4, dtypes[di]);
                cfg.steps = 3;
                cfg.load_dtype = ZC_DTYPE_BF16;
                cfg.keys = h ? hpz2 : mics2;
                t_run *ref = t_run_trained(&cfg);
                cfg.load_path = path;
                t_run *imp = t_run_trained(&cfg);
                char what[128];
                snprintf(what, sizeof what, "stage %d %s, %s 2, a bf16 file", stage,
                         zc_dtype_name(dtypes[di]), h ? "hpZ" : "MiCS");
                t_assert_same_training(imp, ref, what);
                t_run_free(ref);
                t_run_free(imp);
                pairs++;
            }
    cr_assert_eq(pairs, 8);
    unlink(path);
    t_assert_no_leaks();
}
