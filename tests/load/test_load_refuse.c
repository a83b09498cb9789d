/* Every refusal of zc_load_safetensors, on two ranks at stage 3: each is
 * the same status and message on both ranks, names the tensor or the file,
 * and leaves the engine as it was - its fp32 master and working parameters
 * bitwise the values zc_param_load gave them - and usable: a good file
 * imports afterwards. A NaN in a tensor only one rank reads, and a read
 * that fails on one rank (ZC_FAULTS io), break both ranks' engines with the
 * same message instead. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_st.h"

#define W 2
/* The model: emb [16, 8], w [8, 12], b [40], a chunk each (64-element
 * buckets), so both ranks read part of emb and w and rank 0 all of b. */
static const int64_t shapes[3][2] = {{16, 8}, {8, 12}, {40, 0}};
static const char *const pnames[3] = {"emb", "w", "b"};

static int64_t numel_of(int i) { return shapes[i][0] * (shapes[i][1] ? shapes[i][1] : 1); }

/* The values zc_param_load gives (set 0) and a good file holds (set 1):
 * exact in every precision. */
static float value(int set, int i, int64_t k)
{
    const float v = 0.25f + (float)i + (float)k / 64.0f;
    return set ? -v : v;
}

typedef struct ranks {
    const char *path, *good;        /* the file to refuse; a good one after it */
    const zc_load_options *opts, *good_opts;
    zc_status rc[W];
    char msg[W][1024];
    bool unchanged[W];              /* master and working copy are set 0's */
    bool good_ok[W];                /* the good file loaded, and holds set 1 */
    bool broken[W];                 /* a later call fails, naming the failure */
    char err[W][256];               /* the harness's own failures */
} ranks;

static bool holds(zc_engine *e, zc_param **p, int set, char *err, size_t cap)
{
    for (int i = 0; i < 3; i++) {
        const int64_t n = numel_of(i);
        float *m = malloc((size_t)n * sizeof(float));
        if (zc_param_gather_master(e, p[i], m) != ZC_OK) {
            snprintf(err, cap, "gather %s: %s", pnames[i], zc_last_error());
            free(m);
            return false;
        }
        const float *w = zc_param_acquire(e, p[i], NULL);
        bool same = w != NULL;
        for (int64_t k = 0; same && k < n; k++)
            same = m[k] == value(set, i, k) && w[k] == value(set, i, k);
        if (w)
            zc_param_release(e, p[i], NULL);
        free(m);
        if (!same)
            return false;
    }
    return true;
}

static void on_rank(void *arg, zc_comm *comm, int rank)
{
    ranks *x = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_param *p[3];
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 64;
    if (zc_config_create(&cfg) != ZC_OK ||
        zc_config_set_int(cfg, "zero_optimization.stage", 3) != ZC_OK ||
        zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold", 0) !=
            ZC_OK ||
        zc_engine_create(&e, cfg, comm, &eo) != ZC_OK) {
        snprintf(x->err[rank], sizeof x->err[rank], "setup: %s", zc_last_error());
        goto out;
    }
    for (int i = 0; i < 3; i++)
        p[i] = zc_param_add(e, pnames[i], shapes[i], shapes[i][1] ? 2 : 1, 0);
    if (zc_engine_build(e) != ZC_OK) {
        snprintf(x->err[rank], sizeof x->err[rank], "build: %s", zc_last_error());
        goto out;
    }
    for (int i = 0; i < 3; i++) {
        float v[128];
        for (int64_t k = 0; k < numel_of(i); k++)
            v[k] = value(0, i, k);
        zc_param_load(e, p[i], v);
    }
    x->rc[rank] = zc_load_safetensors(e, x->path, x->opts, NULL);
    snprintf(x->msg[rank], sizeof x->msg[rank], "%s", zc_last_error());
    if (x->rc[rank] == ZC_OK) {
        x->good_ok[rank] = holds(e, p, 1, x->err[rank], sizeof x->err[rank]);
        goto out;
    }
    /* Collective at stage 3: both ranks are broken, or neither. */
    float tmp[128];
    x->broken[rank] = zc_param_gather_master(e, p[0], tmp) != ZC_OK;
    char why[256] = "";
    if (!x->broken[rank])
        x->unchanged[rank] = holds(e, p, 0, why, sizeof why);
    if (x->good && x->unchanged[rank] &&
        zc_load_safetensors(e, x->good, x->good_opts, NULL) == ZC_OK)
        x->good_ok[rank] = holds(e, p, 1, x->err[rank], sizeof x->err[rank]);
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "zc-load-refuse-XXXXXX");
    cr_assert(mkdtemp(dir));
}

static char *at(const char *name)
{
    static char buf[8][160];
    static int n;
    char *b = buf[n++ % 8];
    snprintf(b, 160, "%s/%s", dir, name);
    return b;
}

/* A file of the model's three tensors in set `set` (F32), with tensor i
 * replaced by *alt when alt is given for it. */
static void model_file(const char *path, int set, const t_st_tensor *alt, int alt_i, int drop_i)
{
    static float vals[3][128];
    t_st_tensor t[3];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        for (int64_t k = 0; k < numel_of(i); k++)
            vals[i][k] = value(set, i, k);
        if (i == drop_i)
            continue;
        t[n++] = i == alt_i ? *alt
                            : (t_st_tensor){.name = pnames[i], .dtype = ZC_DTYPE_F32,
                                            .ndim = shapes[i][1] ? 2 : 1,
                                            .shape = {shapes[i][0], shapes[i][1]},
                                            .values = vals[i]};
    }
    t_st_write(path, t, n);
}

/* The test's directory holds only the files it wrote. */
static void rm_rf(void)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            cr_assert_eq(unlinkat(dirfd(d), e->d_name, 0), 0, "%s/%s", dir, e->d_name);
    closedir(d);
    cr_assert_eq(rmdir(dir), 0);
}

/* Runs x on both ranks; asserts the refusal: rc on both, the same message,
 * every needle in it, the engine unchanged and then loading x->good. */
static void expect_refused(ranks *x, zc_status rc, const char *const *needles)
{
    char err[256];
    if (!x->good) {
        x->good = at("good.safetensors");
        model_file(x->good, 1, NULL, -1, -1);
    }
    cr_assert(t_on_ranks(W, on_rank, x, err, sizeof err), "%s", err);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(x->err[r][0], 0, "rank %d: %s", r, x->err[r]);
        cr_assert_eq(x->rc[r], rc, "rank %d: status %s, expected %s: %s", r,
                     zc_status_str(x->rc[r]), zc_status_str(rc), x->msg[r]);
        cr_assert_str_eq(x->msg[r], x->msg[0], "ranks disagree:\n%s\n%s", x->msg[r], x->msg[0]);
        for (int i = 0; needles[i]; i++)
            cr_assert(strstr(x->msg[r], needles[i]), "'%s' not in: %s", needles[i], x->msg[r]);
        cr_assert(x->unchanged[r], "rank %d: the refusal changed the engine (%s)", r, x->msg[r]);
        cr_assert(x->good_ok[r], "rank %d: a good file did not load after the refusal: %s", r,
                  x->err[r]);
    }
}

#define REFUSED(x, rc, ...) expect_refused(x, rc, (const char *const[]){__VA_ARGS__, NULL})

static const float some[128] = {1, 2, 3, 4, 5, 6, 7};

TestSuite(load_refuse, .init = make_dir, .fini = rm_rf);

Test(load_refuse, missing_tensor)
{
    ranks x = {.path = at("m.safetensors")};
    model_file(x.path, 1, NULL, -1, 2);
    REFUSED(&x, ZC_ERR_INVALID_ARG, "no tensor for parameter 'b'", x.path);
}

Test(load_refuse, extra_tensor_unless_allowed)
{
    static float vals[3][128];
    for (int i = 0; i < 3; i++)
        for (int64_t k = 0; k < numel_of(i); k++)
            vals[i][k] = value(1, i, k);
    const t_st_tensor t[4] = {
        {.name = "emb", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {16, 8}, .values = vals[0]},
        {.name = "lm_head.weight", .dtype = ZC_DTYPE_BF16, .ndim = 1, .shape = {3},
         .values = some},
        {.name = "w", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {8, 12}, .values = vals[1]},
        {.name = "b", .dtype = ZC_DTYPE_F32, .ndim = 1, .shape = {40}, .values = vals[2]}};
    ranks x = {.path = at("x.safetensors")};
    t_st_write(x.path, t, 4);
    REFUSED(&x, ZC_ERR_INVALID_ARG, "tensor 'lm_head.weight' is not a parameter", x.path);
    /* Allowed: the same file loads, the extra tensor skipped. */
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.allow_extra = true;
    ranks y = {.path = x.path, .opts = &o};
    char err[256];
    cr_assert(t_on_ranks(W, on_rank, &y, err, sizeof err));
    for (int r = 0; r < W; r++)
        cr_assert(y.rc[r] == ZC_OK && y.good_ok[r], "rank %d: %s %s", r, y.msg[r], y.err[r]);
    /* Or skipped by name in a table. */
    const zc_load_name skip[1] = {{"lm_head.weight", NULL, false}};
    o.allow_extra = false;
    o.names = skip;
    o.n_names = 1;
    ranks z = {.path = x.path, .opts = &o};
    cr_assert(t_on_ranks(W, on_rank, &z, err, sizeof err));
    for (int r = 0; r < W; r++)
        cr_assert(z.rc[r] == ZC_OK && z.good_ok[r], "rank %d: %s %s", r, z.msg[r], z.err[r]);
}

Test(load_refuse, two_tensors_for_one_parameter)
{
    static float v[96];
    const t_st_tensor w2 = {.name = "w.copy", .dtype = ZC_DTYPE_F32, .ndim = 2,
                            .shape = {8, 12}, .values = v};
    const zc_load_name names[1] = {{"w.copy", "w", false}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.names = names;
    o.n_names = 1;
    /* The file: emb, w.copy (for b's slot), then b dropped and w kept. */
    static float vals[3][128];
    for (int i = 0; i < 3; i++)
        for (int64_t k = 0; k < numel_of(i); k++)
            vals[i][k] = value(1, i, k);
    const t_st_tensor t[4] = {
        {.name = "emb", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {16, 8}, .values = vals[0]},
        {.name = "w", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {8, 12}, .values = vals[1]}, w2,
        {.name = "b", .dtype = ZC_DTYPE_F32, .ndim = 1, .shape = {40}, .values = vals[2]}};
    ranks x = {.path = at("d.safetensors"), .opts = &o};
    t_st_write(x.path, t, 4);
    REFUSED(&x, ZC_ERR_INVALID_ARG, "'w' and 'w.copy' both map to parameter 'w'", x.path);
}

Test(load_refuse, shape_and_count)
{
    static float v[128];
    const t_st_tensor wt = {.name = "w", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {12, 8},
                            .values = v};
    ranks x = {.path = at("s.safetensors")};
    model_file(x.path, 1, &wt, 1, -1);
    REFUSED(&x, ZC_ERR_INVALID_ARG, "tensor 'w' has shape [12, 8]", "parameter 'w' has [8, 12]",
            x.path);
    const t_st_tensor b6 = {.name = "b", .dtype = ZC_DTYPE_BF16, .ndim = 1, .shape = {41},
                            .values = v};
    ranks y = {.path = at("c.safetensors")};
    model_file(y.path, 1, &b6, 2, -1);
    REFUSED(&y, ZC_ERR_INVALID_ARG, "tensor 'b' has shape [41] (41 elements)", "(40 elements)");
    /* Transposed is for 2-D tensors only, and wants the swapped shape. */
    const zc_load_name tb[1] = {{"b", "b", true}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.names = tb;
    o.n_names = 1;
    char *g = at("good.safetensors");
    model_file(g, 1, NULL, -1, -1);
    ranks z = {.path = g, .opts = &o, .good = g};
    REFUSED(&z, ZC_ERR_INVALID_ARG, "only a 2-D tensor loads transposed", "'b'");
    const zc_load_name tw[1] = {{"w", "w", true}};
    o.names = tw;
    ranks u = {.path = g, .opts = &o, .good = g};
    REFUSED(&u, ZC_ERR_INVALID_ARG, "tensor 'w' has shape [8, 12]", "loaded transposed");
}

Test(load_refuse, dtypes)
{
    static float v[128];
    const t_st_tensor q = {.name = "b", .dtype_name = "Q7", .ndim = 1, .shape = {40},
                           .values = v};
    ranks x = {.path = at("q.safetensors")};
    model_file(x.path, 1, &q, 2, -1);
    REFUSED(&x, ZC_ERR_INVALID_ARG, "tensor 'b'", "unknown dtype 'Q7'", x.path);
    const t_st_tensor i16 = {.name = "b", .dtype_name = "I16", .ndim = 1, .shape = {40},
                             .values = v};
    ranks y = {.path = at("i.safetensors")};
    model_file(y.path, 1, &i16, 2, -1);
    REFUSED(&y, ZC_ERR_INVALID_ARG, "tensor 'b' has dtype I16", "only F32, BF16 and F16");
}

/* Headers written by hand: emb (512 bytes), w (384), b (160). */
static void raw(const char *path, const char *json, int64_t len, size_t data)
{
    static unsigned char zeros[4096];
    t_st_write_raw(path, json, len, zeros, data);
}

Test(load_refuse, offsets_and_sizes)
{
    const char *ok_w = "\"w\":{\"dtype\":\"F32\",\"shape\":[8,12],\"data_offsets\":[512,896]}";
    char h[512];
    /* b's bytes begin past the data that holds them: a gap. */
    snprintf(h, sizeof h, "{\"emb\":{\"dtype\":\"F32\",\"shape\":[16,8],\"data_offsets\":[0,512]},"
             "%s,\"b\":{\"dtype\":\"F32\",\"shape\":[40],\"data_offsets\":[2000,2160]}}", ok_w);
    ranks a = {.path = at("gap.safetensors")};
    raw(a.path, h, -1, 2160);
    REFUSED(&a, ZC_ERR_INVALID_ARG, "tensor 'b'", "belong to no tensor", a.path);
    /* Overlapping. */
    snprintf(h, sizeof h, "{\"emb\":{\"dtype\":\"F32\",\"shape\":[16,8],\"data_offsets\":[0,512]},"
             "%s,\"b\":{\"dtype\":\"F32\",\"shape\":[40],\"data_offsets\":[890,1050]}}", ok_w);
    ranks b = {.path = at("overlap.safetensors")};
    raw(b.path, h, -1, 1050);
    REFUSED(&b, ZC_ERR_INVALID_ARG, "tensor 'b'", "overlap tensor 'w'", b.path);
    /* Truncated: the file ends inside b. */
    snprintf(h, sizeof h, "{\"emb\":{\"dtype\":\"F32\",\"shape\":[16,8],\"data_offsets\":[0,512]},"
             "%s,\"b\":{\"dtype\":\"F32\",\"shape\":[40],\"data_offsets\":[896,1056]}}", ok_w);
    ranks c = {.path = at("short.safetensors")};
    raw(c.path, h, -1, 1050);
    REFUSED(&c, ZC_ERR_INVALID_ARG, "truncated", "tensor 'b'", c.path);
    /* Trailing bytes after the last tensor. */
    ranks d = {.path = at("long.safetensors")};
    raw(d.path, h, -1, 1060);
    REFUSED(&d, ZC_ERR_INVALID_ARG, "4 bytes after the last tensor", d.path);
    /* A byte count that the dtype and shape do not give. */
    snprintf(h, sizeof h, "{\"emb\":{\"dtype\":\"F32\",\"shape\":[16,8],\"data_offsets\":[0,512]},"
             "%s,\"b\":{\"dtype\":\"BF16\",\"shape\":[40],\"data_offsets\":[896,1056]}}", ok_w);
    ranks e = {.path = at("count.safetensors")};
    raw(e.path, h, -1, 1056);
    REFUSED(&e, ZC_ERR_INVALID_ARG, "tensor 'b'", "hold 160 bytes; BF16 of 40 elements take 80");
}

Test(load_refuse, headers)
{
    ranks a = {.path = at("big.safetensors")};
    raw(a.path, "{}", 1 << 20, 0);
    REFUSED(&a, ZC_ERR_INVALID_ARG, "header length says 1048576 bytes", a.path);
    ranks b = {.path = at("array.safetensors")};
    raw(b.path, "[1, 2, 3]", -1, 0);
    REFUSED(&b, ZC_ERR_INVALID_ARG, "the header is not one JSON object", b.path);
    ranks c = {.path = at("broken.safetensors")};
    raw(c.path, "{\"emb\": {", -1, 0);
    REFUSED(&c, ZC_ERR_INVALID_ARG, "the header is not one JSON object", c.path);
    ranks d = {.path = at("tiny.safetensors")};
    FILE *f = fopen(d.path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    REFUSED(&d, ZC_ERR_INVALID_ARG, "shorter than the 8-byte header length", d.path);
    ranks e = {.path = at("entry.safetensors")};
    raw(e.path, "{\"emb\": {\"dtype\": \"F32\", \"shape\": [16, 8]}}", -1, 0);
    REFUSED(&e, ZC_ERR_INVALID_ARG, "tensor 'emb'", "data_offsets", e.path);
    ranks g = {.path = at("dup.safetensors")};
    raw(g.path, "{\"emb\": {}, \"emb\": {}}", -1, 0);
    REFUSED(&g, ZC_ERR_INVALID_ARG, "not one JSON object", "duplicate");
}

Test(load_refuse, paths_and_options)
{
    ranks a = {.path = dir};
    REFUSED(&a, ZC_ERR_IO, dir, "is a directory");
    ranks b = {.path = at("absent.safetensors")};
    REFUSED(&b, ZC_ERR_IO, "absent.safetensors", "cannot open");
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.ring_bytes = 5;
    ranks c = {.path = at("good.safetensors"), .opts = &o};
    model_file(c.path, 1, NULL, -1, -1);
    c.good = c.path;
    REFUSED(&c, ZC_ERR_INVALID_ARG, "ring_bytes 5");
    zc_load_options old = ZC_LOAD_OPTIONS_INIT;
    old.size = 8;
    ranks d = {.path = c.path, .opts = &old, .good = c.path};
    REFUSED(&d, ZC_ERR_INVALID_ARG, "opts->size 8");
    const zc_load_name wrong[1] = {{"w", "weights", false}};
    zc_load_options m = ZC_LOAD_OPTIONS_INIT;
    m.names = wrong;
    m.n_names = 1;
    ranks e = {.path = c.path, .opts = &m, .good = c.path};
    REFUSED(&e, ZC_ERR_INVALID_ARG, "maps it to 'weights', which is not a parameter");
}

Test(load_refuse, index_files)
{
    /* Parts: emb and w in one, b in another. */
    model_file(at("part1.safetensors"), 1, NULL, -1, 2);
    static float bv[40];
    for (int k = 0; k < 40; k++)
        bv[k] = value(1, 2, k);
    const t_st_tensor b = {.name = "b", .dtype = ZC_DTYPE_F16, .ndim = 1, .shape = {40},
                           .values = bv};
    t_st_write(at("part2.safetensors"), &b, 1);
    FILE *f = fopen(at("good.json"), "w");
    fprintf(f, "{\"metadata\": {\"total_size\": 196}, \"weight_map\": {\"emb\": "
               "\"part1.safetensors\", \"w\": \"part1.safetensors\", \"b\": "
               "\"part2.safetensors\"}}");
    fclose(f);
    ranks g = {.path = at("good.json"), .good = at("good.json")};
    char err[256];
    cr_assert(t_on_ranks(W, on_rank, &g, err, sizeof err));
    for (int r = 0; r < W; r++)
        cr_assert(g.rc[r] == ZC_OK && g.good_ok[r], "rank %d: %s %s", r, g.msg[r], g.err[r]);

    f = fopen(at("escape.json"), "w");
    fprintf(f, "{\"weight_map\": {\"emb\": \"../part1.safetensors\"}}");
    fclose(f);
    ranks a = {.path = at("escape.json"), .good = at("good.json")};
    REFUSED(&a, ZC_ERR_INVALID_ARG, "tensor 'emb'", "plain file name", "escape.json");
    f = fopen(at("lies.json"), "w");
    fprintf(f, "{\"weight_map\": {\"emb\": \"part1.safetensors\", \"b\": \"part1.safetensors\","
               "\"w\": \"part1.safetensors\"}}");
    fclose(f);
    ranks c = {.path = at("lies.json"), .good = at("good.json")};
    REFUSED(&c, ZC_ERR_INVALID_ARG, "tensor 'b' in part1.safetensors", "does not hold it");
    model_file(at("part3.safetensors"), 1, NULL, -1, 0); /* w and b again */
    f = fopen(at("twice.json"), "w");
    fprintf(f, "{\"weight_map\": {\"emb\": \"part1.safetensors\", \"w\": \"part1.safetensors\","
               "\"b\": \"part3.safetensors\"}}");
    fclose(f);
    ranks d = {.path = at("twice.json"), .good = at("good.json")};
    REFUSED(&d, ZC_ERR_INVALID_ARG, "tensor 'w' is in", "part1.safetensors", "part3.safetensors");
    f = fopen(at("nomap.json"), "w");
    fprintf(f, "{\"metadata\": {}}");
    fclose(f);
    ranks e = {.path = at("nomap.json"), .good = at("good.json")};
    REFUSED(&e, ZC_ERR_INVALID_ARG, "weight_map", "nomap.json");
}

/* Breaks every rank alike: both fail with the same status and message, and
 * both engines refuse further work. */
static void expect_broken(ranks *x, zc_status rc, const char *const *needles)
{
    char err[256];
    cr_assert(t_on_ranks(W, on_rank, x, err, sizeof err), "%s", err);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(x->err[r][0], 0, "rank %d: %s", r, x->err[r]);
        cr_assert_eq(x->rc[r], rc, "rank %d: %s: %s", r, zc_status_str(x->rc[r]), x->msg[r]);
        cr_assert_str_eq(x->msg[r], x->msg[0]);
        for (int i = 0; needles[i]; i++)
            cr_assert(strstr(x->msg[r], needles[i]), "'%s' not in: %s", needles[i], x->msg[r]);
        cr_assert(x->broken[r], "rank %d: the engine goes on after a partial load", r);
    }
}

#define BROKEN(x, rc, ...) expect_broken(x, rc, (const char *const[]){__VA_ARGS__, NULL})

Test(load_refuse, bad_value_on_one_rank_breaks_all)
{
    /* b is in the last chunk, one rank's shard: the NaN is seen there only. */
    static float bv[40];
    for (int k = 0; k < 40; k++)
        bv[k] = value(1, 2, k);
    bv[3] = __builtin_nanf("");
    const t_st_tensor b = {.name = "b", .dtype = ZC_DTYPE_BF16, .ndim = 1, .shape = {40},
                           .values = bv};
    ranks x = {.path = at("nan.safetensors")};
    model_file(x.path, 1, &b, 2, -1);
    BROKEN(&x, ZC_ERR_INVALID_ARG, "tensor 'b' holds a NaN or an infinity at element 3",
           "partly loaded", x.path);
}

/* The same in a tensor stored transposed (Conv1D's [in, out]): the element
 * named is the file's, in the file's order. */
Test(load_refuse, bad_value_in_a_transposed_tensor_breaks_all)
{
    static float wv[12 * 8];
    for (int k = 0; k < 12 * 8; k++)
        wv[k] = value(1, 1, k);
    wv[5 * 8 + 2] = __builtin_inff(); /* file row 5, column 2 */
    const t_st_tensor w = {.name = "w", .dtype = ZC_DTYPE_F16, .ndim = 2, .shape = {12, 8},
                           .values = wv};
    const zc_load_name names[1] = {{"w", "w", true}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.names = names;
    o.n_names = 1;
    ranks x = {.path = at("inf_t.safetensors"), .opts = &o};
    model_file(x.path, 1, &w, 1, -1);
    BROKEN(&x, ZC_ERR_INVALID_ARG, "tensor 'w' holds a NaN or an infinity at element 42",
           "partly loaded", x.path);
}

Test(load_refuse, read_error_on_one_rank_breaks_all)
{
    /* A skipped tensor last, so the model's bytes lie in the file's whole
     * O_DIRECT blocks (its last part block is read at open, before the
     * agreement: a failure there changes nothing). */
    static float pad[8192], vals[3][128];
    for (int i = 0; i < 3; i++)
        for (int64_t k = 0; k < numel_of(i); k++)
            vals[i][k] = value(1, i, k);
    const t_st_tensor t[4] = {
        {.name = "emb", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {16, 8}, .values = vals[0]},
        {.name = "w", .dtype = ZC_DTYPE_F32, .ndim = 2, .shape = {8, 12}, .values = vals[1]},
        {.name = "b", .dtype = ZC_DTYPE_F32, .ndim = 1, .shape = {40}, .values = vals[2]},
        {.name = "pad", .dtype = ZC_DTYPE_F32, .ndim = 1, .shape = {8192}, .values = pad}};
    zc_load_options o = ZC_LOAD_OPTIONS_INIT;
    o.allow_extra = true;
    ranks x = {.path = at("padded.safetensors"), .opts = &o};
    t_st_write(x.path, t, 4);
    setenv("ZC_FAULTS", "load:1:1", 1);
    BROKEN(&x, ZC_ERR_IO, "ZC_FAULTS: import read 1 of rank 1 fails", "on rank 1 of 2",
           "partly loaded");
    unsetenv("ZC_FAULTS");
}
