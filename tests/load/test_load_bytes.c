/* What each rank reads, and tensors stored transposed.
 *
 * bytes: at stages 0-3 and worlds 1-4 each rank reads the headers and about
 * 1/W of the data - its shard of every chunk, in whole 4 KiB blocks - so the
 * ranks together read the data once, plus at most two blocks per chunk and
 * rank where neighbouring shards share a block, plus each rank's headers;
 * never W times the file.
 *
 * transposed: 2-D parameters whose file tensors are their transposes (as
 * Hugging Face's Conv1D weights are), split across ranks in the middle of
 * rows, import into fp32 masters and bf16 working copies bitwise equal to
 * zc_param_load of the same values, at stages 0-3 and worlds 1-4. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dtype.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_st.h"

#define NP 3

typedef struct model {
    const char *names[NP];
    int64_t shape[NP][2];
    bool transposed[NP]; /* stored as [cols, rows] in the file */
} model;

static int64_t numel(const model *m, int i) { return m->shape[i][0] * m->shape[i][1]; }

static float value(int i, int64_t k)
{
    uint64_t s = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)k * 0xbf58476d1ce4e5b9ull;
    s ^= s >> 29;
    return (float)((double)(s >> 11) * 0x1p-53 - 0.5);
}

/* The values in precision dt (what a file of it holds), parameter layout. */
static float *values(const model *m, int i, zc_dtype dt)
{
    float *v = malloc((size_t)numel(m, i) * sizeof(float));
    cr_assert(v);
    for (int64_t k = 0; k < numel(m, i); k++) {
        float x = value(i, k);
        v[k] = dt == ZC_DTYPE_BF16 ? zc__bf16_to_f32(zc__f32_to_bf16(x))
             : dt == ZC_DTYPE_F16  ? zc__f16_to_f32(zc__f32_to_f16(x))
                                   : x;
    }
    return v;
}

static int64_t write_file(const char *path, const model *m, zc_dtype dt, int64_t *data)
{
    float *v[NP], *f[NP];
    *data = 0;
    for (int i = 0; i < NP; i++) {
        v[i] = values(m, i, dt);
        f[i] = v[i];
        if (m->transposed[i]) {
            f[i] = malloc((size_t)numel(m, i) * sizeof(float));
            t_transpose(v[i], m->shape[i][0], m->shape[i][1], f[i]);
        }
        *data += numel(m, i) * (int64_t)(dt == ZC_DTYPE_F32 ? 4 : 2);
    }
    /* Written in reverse order, transposed ones as [cols, rows]. */
    t_st_tensor w[NP];
    for (int i = 0; i < NP; i++) {
        w[NP - 1 - i] = (t_st_tensor){.name = m->names[i], .dtype = dt, .ndim = 2,
                                      .shape = {m->shape[i][m->transposed[i] ? 1 : 0],
                                                m->shape[i][m->transposed[i] ? 0 : 1]},
                                      .values = f[i]};
    }
    const int64_t size = t_st_write(path, w, NP);
    for (int i = 0; i < NP; i++) {
        if (f[i] != v[i])
            free(f[i]);
        free(v[i]);
    }
    return size;
}

typedef struct job {
    const model *m;
    int stage, world;
    int64_t bucket;
    zc_dtype pdt, fdt;          /* working precision; the file's */
    const char *path;
    const zc_load_options *opts;
    bool import;                /* else zc_param_load */
    zc_load_stats stats[T_MAX_WORLD];
    int nchunks;
    /* rank 0's gathered master and every rank's working copies, per param */
    float *master[NP];
    unsigned char *work[T_MAX_WORLD][NP];
    char err[T_MAX_WORLD][512];
} job;

static void on_rank(void *arg, zc_comm *comm, int rank)
{
    job *j = arg;
    const model *m = j->m;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_param *p[NP];
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = j->bucket;
    eo.param_dtype = j->pdt;
    zc_status rc = zc_config_create(&cfg);
    if (rc == ZC_OK)
        rc = zc_config_set_int(cfg, "zero_optimization.stage", j->stage);
    if (rc == ZC_OK)
        rc = zc_engine_create(&e, cfg, comm, &eo);
    for (int i = 0; i < NP && rc == ZC_OK; i++)
        if (!(p[i] = zc_param_add(e, m->names[i], m->shape[i], 2, 0)))
            rc = ZC_ERR_INTERNAL;
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    if (rc == ZC_OK && j->import) {
        zc_load_stats st = {.size = sizeof st};
        rc = zc_load_safetensors(e, j->path, j->opts, &st);
        j->stats[rank] = st;
    }
    for (int i = 0; i < NP && rc == ZC_OK && !j->import; i++) {
        float *v = values(m, i, j->fdt);
        rc = zc_param_load(e, p[i], v);
        free(v);
    }
    for (int i = 0; i < NP && rc == ZC_OK; i++) {
        float *out = malloc((size_t)numel(m, i) * sizeof(float));
        rc = zc_param_gather_master(e, p[i], out);
        if (rank == 0)
            j->master[i] = out;
        else
            free(out);
        const void *w = rc == ZC_OK ? zc_param_acquire(e, p[i], NULL) : NULL;
        if (rc == ZC_OK && !w)
            rc = ZC_ERR_INTERNAL;
        if (rc == ZC_OK) {
            const size_t bytes = (size_t)numel(m, i) * zc_dtype_size(j->pdt);
            j->work[rank][i] = malloc(bytes);
            memcpy(j->work[rank][i], w, bytes);
            rc = zc_param_release(e, p[i], NULL);
        }
    }
    if (rc == ZC_OK && rank == 0) {
        zc_stats st = {.size = sizeof st};
        rc = zc_engine_stats(e, &st);
        j->nchunks = (int)st.num_chunks;
    }
    if (rc != ZC_OK)
        snprintf(j->err[rank], sizeof j->err[rank], "%s", zc_last_error());
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void run(job *j)
{
    char err[256];
    cr_assert(t_on_ranks(j->world, on_rank, j, err, sizeof err), "%s", err);
    for (int r = 0; r < j->world; r++)
        cr_assert_eq(j->err[r][0], 0, "stage %d world %d rank %d: %s", j->stage, j->world, r,
                     j->err[r]);
}

static void job_free(job *j)
{
    for (int i = 0; i < NP; i++) {
        free(j->master[i]);
        for (int r = 0; r < T_MAX_WORLD; r++)
            free(j->work[r][i]);
    }
}

Test(load_bytes, each_rank_reads_its_part)
{
    const model m = {{"a", "b", "c"}, {{1000, 300}, {7, 111}, {500, 200}}, {false, false, false}};
    char path[64];
    snprintf(path, sizeof path, "zc-load-bytes-%d.safetensors", (int)getpid());
    int64_t data = 0;
    const int64_t size = write_file(path, &m, ZC_DTYPE_BF16, &data);
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 4; world++) {
            job j = {.m = &m, .stage = stage, .world = world, .bucket = 65536,
                     .pdt = ZC_DTYPE_BF16, .fdt = ZC_DTYPE_BF16, .path = path, .import = true};
            run(&j);
            int64_t payload = 0;
            const int64_t slack = 2 * 4096 * (int64_t)j.nchunks; /* shared blocks per rank */
            for (int r = 0; r < world; r++) {
                const zc_load_stats *s = &j.stats[r];
                cr_assert_eq(s->file_bytes, size);
                cr_assert_eq(s->header_bytes, size - data, "stage %d world %d: header %lld",
                             stage, world, (long long)s->header_bytes);
                const int64_t own = s->bytes_read - s->header_bytes;
                cr_assert_leq(own, data / world + slack, "stage %d world %d rank %d read %lld of "
                              "%lld data bytes", stage, world, r, (long long)own,
                              (long long)data);
                cr_assert_eq(s->tensors, NP);
                cr_assert_gt(s->ring_bytes, 0);
                payload += own;
            }
            cr_assert_geq(payload, data, "stage %d world %d: %lld of %lld bytes read", stage,
                          world, (long long)payload, (long long)data);
            cr_assert_leq(payload, data + world * slack, "stage %d world %d: the ranks read "
                          "%lld bytes of %lld", stage, world, (long long)payload,
                          (long long)data);
            job_free(&j);
        }
    unlink(path);
    t_assert_no_leaks();
}

Test(load_bytes, transposed_equals_param_load)
{
    const model m = {{"t1", "n", "t2"}, {{48, 70}, {9, 37}, {130, 9}}, {true, false, true}};
    const zc_dtype fdts[3] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    char path[3][64];
    int64_t data;
    for (int f = 0; f < 3; f++) {
        snprintf(path[f], sizeof path[f], "zc-load-tr-%d-%d.safetensors", f, (int)getpid());
        write_file(path[f], &m, fdts[f], &data);
    }
    const zc_load_name names[2] = {{"t1", "t1", true}, {"t2", "t2", true}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.names = names;
    o.n_names = 2;
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 4; world++) {
            const int f = (stage + world) % 3;
            job ref = {.m = &m, .stage = stage, .world = world, .bucket = 256,
                       .pdt = ZC_DTYPE_BF16, .fdt = fdts[f]};
            job imp = ref;
            imp.import = true;
            imp.path = path[f];
            imp.opts = &o;
            run(&ref);
            run(&imp);
            for (int i = 0; i < NP; i++) {
                cr_assert(!memcmp(imp.master[i], ref.master[i],
                                  (size_t)numel(&m, i) * sizeof(float)),
                          "stage %d world %d %s file: master of %s differs", stage, world,
                          zc_dtype_name(fdts[f]), m.names[i]);
                for (int r = 0; r < world; r++)
                    cr_assert(!memcmp(imp.work[r][i], ref.work[r][i], (size_t)numel(&m, i) * 2),
                              "stage %d world %d rank %d: working copy of %s differs", stage,
                              world, r, m.names[i]);
            }
            job_free(&ref);
            job_free(&imp);
        }
    for (int f = 0; f < 3; f++)
        unlink(path[f]);
    t_assert_no_leaks();
}

/* A transposed tensor with more file rows than the import's transpose tile
 * holds (1 MiB: 262144 fp32 values, so 6553 file rows of 40): read whole
 * (one rank, a bucket the size of the model) it is converted in two bands
 * of file rows, the second partial; split over ranks, in pieces of part of
 * each file row. Both equal zc_param_load of the same values bitwise. */
Test(load_bytes, transposed_in_bands_equals_param_load)
{
    const model m = {{"wide", "n", "t2"}, {{40, 7001}, {9, 37}, {130, 9}}, {true, false, true}};
    const zc_dtype fdts[2] = {ZC_DTYPE_BF16, ZC_DTYPE_F32};
    const zc_load_name names[2] = {{"wide", "wide", true}, {"t2", "t2", true}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.names = names;
    o.n_names = 2;
    const struct { int stage, world; int64_t bucket; } runs[3] = {
        {0, 1, 1 << 20}, {3, 1, 1 << 20}, {1, 3, 1 << 18}};
    for (int f = 0; f < 2; f++) {
        char path[64];
        int64_t data;
        snprintf(path, sizeof path, "zc-load-band-%d-%d.safetensors", f, (int)getpid());
        write_file(path, &m, fdts[f], &data);
        for (int r = 0; r < 3; r++) {
            job ref = {.m = &m, .stage = runs[r].stage, .world = runs[r].world,
                       .bucket = runs[r].bucket, .pdt = ZC_DTYPE_BF16, .fdt = fdts[f]};
            job imp = ref;
            imp.import = true;
            imp.path = path;
            imp.opts = &o;
            run(&ref);
            run(&imp);
            for (int i = 0; i < NP; i++)
                cr_assert(!memcmp(imp.master[i], ref.master[i],
                                  (size_t)numel(&m, i) * sizeof(float)),
                          "stage %d world %d %s file: master of %s differs", ref.stage,
                          ref.world, zc_dtype_name(fdts[f]), m.names[i]);
            job_free(&ref);
            job_free(&imp);
        }
        unlink(path);
    }
    t_assert_no_leaks();
}
