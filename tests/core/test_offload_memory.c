/* Where the optimizer state is, in bytes (zc_stats.bytes_by_kind_cat), against
 * formulas computed here from the layout (P = padded elements, W = world):
 *   none: master 4P/W and Adam 8P/W in "device" memory (host kind here);
 *   cpu:  the same bytes in pinned memory, none left in device memory, and at
 *         stages 2/3 the fp32 gradient shard (4P/W) pinned too;
 *   nvme: swap files of 12P/W bytes plus at most one 4 KiB alignment pad per
 *         tensor and the store's 1 MiB stripe round-up; no master or Adam
 *         bytes in any memory; pinned bytes within buffer_count x buffer_size
 *         (buffer_size = the largest tensor, aligned), and the offload's
 *         pageable bookkeeping within NVME_BOOKKEEPING bytes (the home's
 *         tables: its struct with 64 slots and 32 path buffers, a chunk table
 *         and the agreement buffers) - whatever the model size.
 * And configuration errors at build, before anything is allocated: offload at
 * stage 0, more pinned memory than the machine has, more swap than the disk
 * has; each names what was asked, what is there and the key to change. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

#define NVME_BOOKKEEPING (64 * 1024)

typedef struct probe {
    zc_opt_nvme_info info[T_MAX_WORLD];
    int64_t file_bytes_on_disk[T_MAX_WORLD];
} probe;

/* After the first step, on each rank: the nvme home's geometry and the size
 * of its swap file as the filesystem reports it. */
static void after_step(t_ctx *x, int step, void *arg)
{
    probe *pr = arg;
    if (step != 0)
        return;
    zc_opt_home *h = zc__opt_offload_home(x->eng);
    if (!h || strcmp(h->ops->name, "nvme"))
        return;
    zc__opt_home_nvme_info(h, &pr->info[x->rank]);
    pr->file_bytes_on_disk[x->rank] = pr->info[x->rank].file0_size;
}

static t_run *run_acc(int stage, int world, int accum, const char *offload, const char *json,
                      probe *pr)
{
    t_run cfg;
    t_run_init(&cfg, stage, world, ZC_DTYPE_BF16);
    cfg.accum = accum;
    cfg.steps = 2;
    cfg.offload = offload;
    cfg.nvme_path_json = json;
    cfg.after_step = after_step;
    cfg.hook_arg = pr;
    return t_run_trained(&cfg);
}

static t_run *run(int stage, int world, const char *offload, const char *json, probe *pr)
{
    return run_acc(stage, world, 1, offload, json, pr);
}

static int64_t state_bytes(const zc_stats *s, int kind)
{
    return s->bytes_by_kind_cat[kind][ZC_MEM_MASTER] + s->bytes_by_kind_cat[kind][ZC_MEM_ADAM];
}

Test(offload_memory, bytes_by_kind_match_the_formulas)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-mem");
    for (int stage = 1; stage <= 3; stage++)
        for (int world = 1; world <= 4; world++) {
            probe pn = {0}, pc = {0}, pv = {0};
            t_run *none = run(stage, world, NULL, NULL, &pn);
            t_run *cpu = run(stage, world, "cpu", NULL, &pc);
            t_run *nv = run(stage, world, "nvme", dir.json, &pv);
            for (int r = 0; r < world; r++) {
                const zc_stats *sn = &none->stats[r], *sc = &cpu->stats[r], *sv = &nv->stats[r];
                const int64_t P = sn->padded_params, per = P / world;
                /* none: everything in the engine device's memory (host memory
                 * here, reported as device memory as on a GPU). */
                cr_assert_eq(state_bytes(sn, ZC_KIND_DEVICE), 12 * per);
                cr_assert_eq(state_bytes(sn, ZC_KIND_HOST), 0);
                cr_assert_eq(sn->bytes_by_kind[ZC_KIND_PINNED] + sn->bytes_by_kind[ZC_KIND_NVME],
                             0);
                /* cpu: the same bytes, pinned. */
                cr_assert_eq(sc->bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_MASTER], 4 * per);
                cr_assert_eq(sc->bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_ADAM], 8 * per);
                cr_assert_eq(state_bytes(sc, ZC_KIND_DEVICE) + state_bytes(sc, ZC_KIND_HOST), 0);
                if (stage >= 2) {
                    cr_assert_eq(sc->bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_GRADS], 4 * per);
                    cr_assert_eq(sc->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_GRADS],
                                 sn->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_GRADS] - 4 * per,
                                 "the device keeps no fp32 gradient shard");
                }
                /* nvme: in files only. */
                cr_assert_eq(state_bytes(sv, ZC_KIND_DEVICE) + state_bytes(sv, ZC_KIND_HOST) +
                                 state_bytes(sv, ZC_KIND_PINNED),
                             0);
                const int64_t files = sv->bytes_by_kind[ZC_KIND_NVME];
                const int64_t pads = 3 * sv->num_chunks * 4096;
                cr_assert_geq(files, 12 * per, "stage %d world %d rank %d", stage, world, r);
                cr_assert_leq(files, 12 * per + pads + (1 << 20), "stage %d world %d rank %d: %lld",
                              stage, world, r, (long long)files);
                cr_assert_eq(pv.file_bytes_on_disk[r], files, "the swap file on disk");
                /* By category: master a third of the chunk extents, m and v
                 * two thirds, each at least its share of 12P/W. */
                cr_assert_geq(sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_MASTER], 4 * per);
                cr_assert_eq(sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_ADAM],
                             2 * sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_MASTER]);
                /* Host memory for the state: the swap buffers only. */
                const zc_opt_nvme_info *in = &pv.info[r];
                cr_assert_gt(in->buffer_bytes, 0);
                cr_assert_leq(sv->bytes_by_kind[ZC_KIND_PINNED],
                              (int64_t)4 * in->buffer_bytes * (int64_t)in->slots,
                              "pinned %lld > buffer_count x buffer_size",
                              (long long)sv->bytes_by_kind[ZC_KIND_PINNED]);
                /* Bookkeeping: pageable bytes beyond the run without offload. */
                int64_t extra = sv->bytes_by_kind[ZC_KIND_HOST] - sn->bytes_by_kind[ZC_KIND_HOST];
                cr_assert_leq(extra, NVME_BOOKKEEPING, "bookkeeping %lld bytes", (long long)extra);
            }
            cr_assert_eq(t_dir_entries(dir.path), 0);
            t_run_free(none);
            t_run_free(cpu);
            t_run_free(nv);
        }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_NVME), 0);
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
}

/* With accumulation (stages 2/3) the fp32 gradient shard outlives a
 * micro-step and goes to the swap files too: 4P/W more file bytes, 4P/W less
 * gradient memory, and still no state in host memory beyond the buffers. */
Test(offload_memory, accumulated_gradient_in_the_swap_files)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-mem");
    for (int stage = 2; stage <= 3; stage++) {
        probe pn = {0}, pv = {0};
        t_run *none = run_acc(stage, 2, 4, NULL, NULL, &pn);
        t_run *nv = run_acc(stage, 2, 4, "nvme", dir.json, &pv);
        for (int r = 0; r < 2; r++) {
            const zc_stats *sn = &none->stats[r], *sv = &nv->stats[r];
            const int64_t per = sn->padded_params / 2;
            cr_assert_geq(sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_GRADS], 4 * per);
            cr_assert_eq(sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_GRADS],
                         sv->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_MASTER]);
            cr_assert_eq(sv->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_GRADS],
                         sn->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_GRADS] - 4 * per);
            cr_assert_eq(state_bytes(sv, ZC_KIND_DEVICE) + state_bytes(sv, ZC_KIND_HOST) +
                             state_bytes(sv, ZC_KIND_PINNED),
                         0);
            cr_assert_leq(sv->bytes_by_kind[ZC_KIND_PINNED],
                          (int64_t)(4 * pv.info[r].slots + 1) * (int64_t)pv.info[r].buffer_bytes,
                          "swap buffers and the one gradient buffer");
        }
        cr_assert_eq(t_dir_entries(dir.path), 0);
        t_run_free(none);
        t_run_free(nv);
    }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

/* One engine of one huge parameter: build must fail in the pre-flight, with
 * nothing allocated for the state and no file left. */
static zc_status build_huge(const char *device, const char *json, int stage, char *msg,
                            size_t cap)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", stage), ZC_OK);
    char dev[32];
    snprintf(dev, sizeof dev, "\"%s\"", device);
    zc_status rc = zc_config_set(cfg, "zero_optimization.offload_optimizer.device", dev);
    if (rc == ZC_OK && json)
        rc = zc_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", json);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    zc_comm *comm;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    rc = zc_engine_create(&e, cfg, comm, &eo);
    if (rc == ZC_OK) {
        const int64_t shape[1] = {(int64_t)1 << 40}; /* 12 TiB of optimizer state */
        cr_assert_not_null(zc_param_add(e, "huge", shape, 1, 0), "%s", zc_last_error());
        rc = zc_engine_build(e);
    }
    snprintf(msg, cap, "%s", zc_last_error());
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_NVME), 0);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}

Test(offload_memory, preflight_errors_before_allocating)
{
    char msg[1024];
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-mem");

    cr_assert_eq(build_huge("cpu", NULL, 2, msg, sizeof msg), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(msg, "MemAvailable") && strstr(msg, "offload_optimizer") &&
                  strstr(msg, "TiB"),
              "%s", msg);

    cr_assert_eq(build_huge("nvme", dir.json, 2, msg, sizeof msg), ZC_ERR_IO);
    cr_assert(strstr(msg, "nvme_path") && strstr(msg, "free") && strstr(msg, dir.path), "%s", msg);
    cr_assert_eq(t_dir_entries(dir.path), 0, "pre-flight left files");

    cr_assert_eq(build_huge("cpu", NULL, 0, msg, sizeof msg), ZC_ERR_CONFIG);
    cr_assert(strstr(msg, "zero_optimization.offload_optimizer") && strstr(msg, "stage"), "%s",
              msg);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}
