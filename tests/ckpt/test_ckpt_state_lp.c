/* Checkpoints of optimizer state in bf16 (bf16.bf16_master_weights_and_grads,
 * bf16_optimizer_states, exp_avg_dtype, exp_avg_sq_dtype):
 *
 *   - exact resume: N steps, save, load into fresh engines, N more equals 2N
 *     steps bitwise, for bf16 master and moments at stages 1-3, a bf16 master
 *     with fp32 moments under cpu and nvme offload, bf16 state in an nvme
 *     home, and bf16 moments alone at stage 0;
 *   - the shard files hold each kind in its dtype: their sizes are what the
 *     test computes from the layout (2 bytes a bf16 element, 4 an fp32 one),
 *     and every entry's checksum is XXH3 of exactly that many bytes;
 *   - a bf16 checkpoint loads into an engine of fp32 state, widened exactly:
 *     the values the test decodes from the shard files itself;
 *   - an fp32 checkpoint into an engine of bf16 state is refused, naming the
 *     kind, both dtypes and the key, and leaves the engine as it was;
 *   - the reshard carries the dtypes bitwise, and the export writes the
 *     master that zc_param_gather_master gives. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ck_phase.h"
#include "helpers.h"

#define HALF 6
#define NKINDS 3

static const char *const kind_names[NKINDS] = {"master", "exp_avg", "exp_avg_sq"};

static const char *const all_bf16[] = {"bf16.bf16_master_weights_and_grads", "true",
                                       "bf16.bf16_optimizer_states", "true", NULL};
static const char *const master_bf16[] = {"bf16.bf16_master_weights_and_grads", "true", NULL};
static const char *const moments_bf16[] = {"bf16.exp_avg_dtype", "\"bf16\"",
                                           "bf16.exp_avg_sq_dtype", "\"bf16\"", NULL};

static void phase_ok(ck_phase *ph)
{
    cr_assert(ck_phase_run(ph), "%s", ck_phase_error(ph));
    for (int r = 0; r < ph->run->world; r++) {
        cr_assert_eq(ph->load_rc[r], ZC_OK, "rank %d load: %s", r, ph->load_msg[r]);
        cr_assert_eq(ph->save_rc[r], ZC_OK, "rank %d save: %s", r, ph->save_msg[r]);
    }
}

static void run_init(t_run *run, int stage, int world, zc_dtype dt, const char *const *keys,
                     const char *offload, const char *swap_json)
{
    t_run_init(run, stage, world, dt);
    run->keys = keys;
    run->offload = offload;
    run->nvme_path_json = swap_json;
}

static size_t numel(void) { return (size_t)t_total_numel(); }

/* Every value has zero low 16 bits: it is a bf16 value widened. */
static bool all_bf16_values(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        if (u & 0xFFFFu)
            return false;
    }
    return true;
}

/* ---- the checkpoint as the test reads it, without the library --------- */

static json_t *manifest_of(const char *ck)
{
    char p[800];
    snprintf(p, sizeof p, "%s/manifest.json", ck);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s: %s", p, je.text);
    return root;
}

/* The dtype the manifest gives a kind: "state_dtypes" from version 3, fp32 before. */
static const char *kind_dtype(json_t *root, const char *kind)
{
    if (json_integer_value(json_object_get(root, "version")) < 3)
        return "fp32";
    const char *dt = json_string_value(json_object_get(json_object_get(root, "state_dtypes"),
                                                       kind));
    cr_assert_not_null(dt, "state_dtypes.%s missing", kind);
    return dt;
}

static size_t dtype_bytes(const char *dt)
{
    cr_assert(!strcmp(dt, "fp32") || !strcmp(dt, "bf16"), "stored dtype '%s'", dt);
    return strcmp(dt, "bf16") ? 4 : 2;
}

/* Element offset of manifest parameter i in the harness's order (p0..p7). */
static int64_t harness_offset(json_t *root, int i)
{
    const char *name = json_string_value(
        json_object_get(json_array_get(json_object_get(root, "params"), (size_t)i), "name"));
    char want[16];
    snprintf(want, sizeof want, "p%d", i);
    cr_assert(name && !strcmp(name, want), "params[%d] is '%s'", i, name ? name : "(null)");
    int64_t off = 0;
    for (int j = 0; j < i; j++)
        off += t_numel[j];
    return off;
}

static unsigned char *read_at(const char *ck, json_t *root, int file, uint64_t off, size_t n)
{
    const char *name = json_string_value(
        json_object_get(json_array_get(json_object_get(root, "files"), (size_t)file), "name"));
    char p[800];
    snprintf(p, sizeof p, "%s/%s", ck, name);
    int fd = open(p, O_RDONLY);
    cr_assert_geq(fd, 0, "open %s", p);
    unsigned char *b = malloc(n ? n : 1);
    cr_assert_eq(pread(fd, b, n, (off_t)off), (ssize_t)n, "read %s", p);
    close(fd);
    return b;
}

/* Every value of `kind` in checkpoint ck as the shard files hold it, widened
 * to fp32 here (bf16: the 16 bits shifted up), into out in the harness's
 * order. Each entry's checksum is checked over (end - begin) * size bytes,
 * so an entry of another element size would fail. */
static void file_values(const char *ck, const char *kind, float *out)
{
    json_t *root = manifest_of(ck);
    const size_t esz = dtype_bytes(kind_dtype(root, kind));
    json_t *rows = json_object_get(root, "tensors");
    size_t got = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        if (strcmp(json_string_value(json_array_get(row, 1)), kind))
            continue;
        const int p = (int)json_integer_value(json_array_get(row, 0));
        const int f = (int)json_integer_value(json_array_get(row, 2));
        const int64_t b = json_integer_value(json_array_get(row, 3));
        const int64_t e = json_integer_value(json_array_get(row, 4));
        const uint64_t off = (uint64_t)json_integer_value(json_array_get(row, 5));
        const size_t n = (size_t)(e - b) * esz;
        unsigned char *bytes = read_at(ck, root, f, off, n);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(bytes, n));
        cr_assert_str_eq(hex, json_string_value(json_array_get(row, 6)),
                         "%s: %s of p%d [%lld, %lld): checksum over %zu bytes", ck, kind, p,
                         (long long)b, (long long)e, n);
        float *dst = out + harness_offset(root, p) + b;
        for (int64_t k = 0; k < e - b; k++) {
            uint32_t u;
            if (esz == 2) {
                uint16_t h;
                memcpy(&h, bytes + 2 * k, 2);
                u = (uint32_t)h << 16;
            } else {
                memcpy(&u, bytes + 4 * k, 4);
            }
            memcpy(&dst[k], &u, 4);
        }
        got += (size_t)(e - b);
        free(bytes);
    }
    cr_assert_eq(got, numel(), "%s: %s entries hold %zu of %zu elements", ck, kind, got,
                 numel());
    json_decref(root);
}

static void assert_same_bits(const float *a, const float *b, const char *what)
{
    for (size_t i = 0; i < numel(); i++)
        cr_assert(memcmp(&a[i], &b[i], 4) == 0, "%s: element %zu: %.9g against %.9g", what, i,
                  a[i], b[i]);
}

/* ---- exact resume ------------------------------------------------------ */

static void resume_case(int stage, zc_dtype dt, const char *const *keys, const char *offload,
                        bool master_lp)
{
    char *dir = ck_tmpdir(), *swap = ck_tmpdir();
    cr_assert(dir && swap);
    char swap_json[600];
    snprintf(swap_json, sizeof swap_json, "\"%s\"", swap);
    t_run run;
    run_init(&run, stage, 2, dt, keys, offload, swap_json);

    ck_phase straight = {.run = &run, .first = 0, .n = 2 * HALF};
    phase_ok(&straight);
    ck_phase first = {.run = &run, .first = 0, .n = HALF, .save_dir = dir, .save_tag = "s"};
    phase_ok(&first);
    ck_phase second = {.run = &run, .load_dir = dir, .first = HALF, .n = HALF};
    phase_ok(&second);

    const char *what = offload ? offload : "no offload";
    if (master_lp)
        cr_assert(all_bf16_values(straight.master, numel()), "stage %d %s: the master is not "
                  "bf16", stage, what);
    char msg[96];
    snprintf(msg, sizeof msg, "stage %d %s: resumed against straight", stage, what);
    assert_same_bits(second.master, straight.master, msg);
    for (int s = HALF; s < 2 * HALF; s++) {
        cr_assert_eq(straight.info[s].lr, second.info[s].lr, "step %d lr", s);
        cr_assert_eq(straight.info[s].step, second.info[s].step, "step %d counter", s);
    }
    free(straight.master);
    free(first.master);
    free(second.master);
    ck_rm_tree(dir);
    ck_rm_tree(swap);
    free(dir);
    free(swap);
    t_assert_no_leaks();
}

Test(ckpt_state_lp, resume_stage1_bf16_state)
{
    resume_case(1, ZC_DTYPE_BF16, all_bf16, NULL, true);
}
Test(ckpt_state_lp, resume_stage2_bf16_state)
{
    resume_case(2, ZC_DTYPE_BF16, all_bf16, NULL, true);
}
Test(ckpt_state_lp, resume_stage3_bf16_state)
{
    resume_case(3, ZC_DTYPE_BF16, all_bf16, NULL, true);
}
Test(ckpt_state_lp, resume_stage2_bf16_master_fp32_moments_cpu)
{
    resume_case(2, ZC_DTYPE_BF16, master_bf16, "cpu", true);
}
Test(ckpt_state_lp, resume_stage1_bf16_master_fp32_moments_nvme)
{
    resume_case(1, ZC_DTYPE_BF16, master_bf16, "nvme", true);
}
Test(ckpt_state_lp, resume_stage3_bf16_state_nvme)
{
    resume_case(3, ZC_DTYPE_BF16, all_bf16, "nvme", true);
}
Test(ckpt_state_lp, resume_stage0_bf16_moments_fp32_params)
{
    resume_case(0, ZC_DTYPE_F32, moments_bf16, NULL, false);
}

/* ---- shard file sizes -------------------------------------------------- */

/* The size rank r's file must have for a world of w: per chunk, the rank's
 * shard of it (chunks padded to a multiple of w * 64 elements, cut in w
 * equal parts; padding is not stored), one run per kind of that many
 * elements of the kind's size, each run padded to 4096 bytes. */
static uint64_t expected_file_bytes(int r, int w, const size_t esz[NKINDS])
{
    uint64_t total = 0;
    for (int k = 0; k < T_NLAYERS; k++) {
        const int64_t q = (int64_t)w * 64, used = t_layer_numel[k];
        const int64_t shard = (used + q - 1) / q * q / w;
        const int64_t lo = (int64_t)r * shard;
        const int64_t hi = lo + shard < used ? lo + shard : used;
        const int64_t len = hi > lo ? hi - lo : 0;
        for (int kind = 0; kind < NKINDS; kind++)
            total += ((uint64_t)len * esz[kind] + 4095) / 4096 * 4096;
    }
    return total;
}

static void sizes_case(const char *const *keys, const char *offload, const char *dts[NKINDS])
{
    t_run run;
    run_init(&run, 2, 2, ZC_DTYPE_BF16, keys, offload, NULL);
    ck_saved s;
    cr_assert(ck_saved_make(&s, &run, 2, "t"), "%s", ck_phase_error(&s.phase));
    char ck[700];
    snprintf(ck, sizeof ck, "%s/t", s.dir);
    json_t *root = manifest_of(ck);
    cr_assert_eq(json_integer_value(json_object_get(root, "version")), 3);
    size_t esz[NKINDS];
    for (int k = 0; k < NKINDS; k++) {
        cr_assert_str_eq(kind_dtype(root, kind_names[k]), dts[k], "state_dtypes.%s",
                         kind_names[k]);
        esz[k] = dtype_bytes(dts[k]);
    }
    /* The test's layout is the saving engine's. */
    json_t *chunks = json_object_get(root, "chunks");
    cr_assert_eq(json_array_size(chunks), T_NLAYERS);
    for (int k = 0; k < T_NLAYERS; k++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(chunks, (size_t)k),
                                                        "used")),
                     t_layer_numel[k], "chunk %d", k);
    const size_t fp32[NKINDS] = {4, 4, 4};
    for (int r = 0; r < 2; r++) {
        char p[800];
        snprintf(p, sizeof p, "%s/rank_%05d.bin", ck, r);
        struct stat st;
        cr_assert_eq(stat(p, &st), 0, "%s", p);
        const uint64_t want = expected_file_bytes(r, 2, esz);
        cr_assert_eq((uint64_t)st.st_size, want, "%s: %lld bytes, %llu expected", p,
                     (long long)st.st_size, (unsigned long long)want);
        cr_assert_lt(want, expected_file_bytes(r, 2, fp32), "bf16 kinds take fewer bytes");
    }
    json_decref(root);
    /* Every entry's checksum over its (end - begin) * size bytes. */
    float *v = malloc(numel() * sizeof(float));
    for (int k = 0; k < NKINDS; k++)
        file_values(ck, kind_names[k], v);
    free(v);
    ck_saved_free(&s);
    t_assert_no_leaks();
}

Test(ckpt_state_lp, shard_files_hold_each_kind_in_its_dtype)
{
    const char *bf[NKINDS] = {"bf16", "bf16", "bf16"};
    sizes_case(all_bf16, NULL, bf);
    const char *mixed[NKINDS] = {"bf16", "fp32", "fp32"};
    sizes_case(master_bf16, "cpu", mixed);
}

/* ---- across dtypes ----------------------------------------------------- */

Test(ckpt_state_lp, bf16_checkpoint_widens_into_fp32_state)
{
    t_run bf;
    run_init(&bf, 2, 2, ZC_DTYPE_BF16, all_bf16, NULL, NULL);
    ck_saved s;
    cr_assert(ck_saved_make(&s, &bf, HALF, "b"), "%s", ck_phase_error(&s.phase));
    char ck[700];
    snprintf(ck, sizeof ck, "%s/b", s.dir);

    /* Loaded into fp32 state, saved again at once: every kind of the new
     * (fp32) checkpoint is the bf16 file's values widened. */
    t_run wide;
    run_init(&wide, 2, 2, ZC_DTYPE_BF16, NULL, NULL, NULL);
    ck_phase ph = {.run = &wide, .load_dir = s.dir, .first = HALF, .n = 0, .save_dir = s.dir,
                   .save_tag = "w"};
    phase_ok(&ph);
    char ck2[700];
    snprintf(ck2, sizeof ck2, "%s/w", s.dir);
    json_t *root = manifest_of(ck2);
    cr_assert_eq(json_integer_value(json_object_get(root, "version")), 2,
                 "fp32 state saves format version 2");
    json_decref(root);
    float *want = malloc(numel() * sizeof(float)), *got = malloc(numel() * sizeof(float));
    for (int k = 0; k < NKINDS; k++) {
        file_values(ck, kind_names[k], want);
        file_values(ck2, kind_names[k], got);
        char what[64];
        snprintf(what, sizeof what, "%s: fp32 state against the bf16 file", kind_names[k]);
        assert_same_bits(got, want, what);
        if (k == 0) {
            cr_assert(all_bf16_values(want, numel()));
            assert_same_bits(ph.master, want, "gathered master against the bf16 file");
        }
    }
    /* And it trains on. */
    ck_phase more = {.run = &wide, .load_dir = s.dir, .load_tag = "b", .first = HALF, .n = 2};
    phase_ok(&more);
    free(want);
    free(got);
    free(ph.master);
    free(more.master);
    ck_saved_free(&s);
    t_assert_no_leaks();
}

/* Rank 0's gathered master right after the engines open and right after
 * the load returns (every rank gathers: it is collective). */
typedef struct snap {
    float *before, *after;
    bool failed[T_MAX_WORLD];
} snap;

static void snapshot(t_ctx *x, int rank, int when, void *arg)
{
    snap *s = arg;
    float *to = when == CK_AFTER_OPEN ? s->before : s->after;
    if (t_gather(x, rank == 0 ? to : NULL) != ZC_OK)
        s->failed[rank] = true;
}

/* Saved with (keys, offload), loaded into bf16 state (no offload): refused
 * with a message holding `want`; the engine is as it was, and trains as a
 * fresh one does. */
static void refused_case(const char *const *keys, const char *offload, const char *want[3])
{
    t_run saver;
    run_init(&saver, 2, 2, ZC_DTYPE_BF16, keys, offload, NULL);
    ck_saved s;
    cr_assert(ck_saved_make(&s, &saver, HALF, "f"), "%s", ck_phase_error(&s.phase));

    t_run lp;
    run_init(&lp, 2, 2, ZC_DTYPE_BF16, all_bf16, NULL, NULL);
    snap sn = {malloc(numel() * sizeof(float)), malloc(numel() * sizeof(float)), {false}};
    ck_phase tried = {.run = &lp, .load_dir = s.dir, .first = 0, .n = HALF, .hook = snapshot,
                      .hook_arg = &sn};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(tried.load_rc[r], ZC_ERR_INVALID_ARG, "rank %d: %s", r, tried.load_msg[r]);
        cr_assert(!tried.broken[r], "rank %d: a refused load broke the engine", r);
        for (int i = 0; i < 3; i++)
            cr_assert_not_null(strstr(tried.load_msg[r], want[i]), "rank %d: '%s' lacks '%s'",
                               r, tried.load_msg[r], want[i]);
    }
    cr_assert_str_eq(tried.load_msg[0], tried.load_msg[1]);
    cr_assert(!sn.failed[0] && !sn.failed[1], "a snapshot's gather failed");
    assert_same_bits(sn.after, sn.before, "master after the refused load");
    ck_phase fresh = {.run = &lp, .first = 0, .n = HALF};
    phase_ok(&fresh);
    assert_same_bits(tried.master, fresh.master, "trained after the refusal against fresh");
    free(sn.before);
    free(sn.after);
    free(tried.master);
    free(fresh.master);
    ck_saved_free(&s);
    t_assert_no_leaks();
}

Test(ckpt_state_lp, fp32_checkpoint_into_bf16_state_is_refused)
{
    const char *master[3] = {"manifest.json: master is stored in fp32, the engine keeps it in "
                             "bf16", "would round",
                             "bf16.bf16_master_weights_and_grads false"};
    refused_case(NULL, NULL, master);
    /* A bf16 master passes; the fp32 moments are refused. */
    const char *moments[3] = {"exp_avg is stored in fp32, the engine keeps it in bf16",
                              "would round", "bf16.exp_avg_dtype \"fp32\""};
    refused_case(master_bf16, "cpu", moments);
}

/* ---- reshard and export ------------------------------------------------ */

Test(ckpt_state_lp, reshard_carries_the_dtypes_bitwise)
{
    t_run w2;
    run_init(&w2, 3, 2, ZC_DTYPE_BF16, all_bf16, NULL, NULL);
    ck_saved s;
    cr_assert(ck_saved_make(&s, &w2, HALF, "r"), "%s", ck_phase_error(&s.phase));
    char ck[700], *out = ck_tmpdir();
    snprintf(ck, sizeof ck, "%s/r", s.dir);
    float *a = malloc(numel() * sizeof(float)), *b = malloc(numel() * sizeof(float));
    const int worlds[2] = {1, 4};
    for (int wi = 0; wi < 2; wi++) {
        const int w = worlds[wi];
        char sub[700], ck2[760];
        snprintf(sub, sizeof sub, "%s/w%d", out, w);
        cr_assert_eq(mkdir(sub, 0755), 0);
        cr_assert_eq(zc_checkpoint_reshard(s.dir, NULL, sub, w), ZC_OK, "%s", zc_last_error());
        snprintf(ck2, sizeof ck2, "%s/r", sub);
        json_t *root = manifest_of(ck2);
        cr_assert_eq(json_integer_value(json_object_get(root, "version")), 3);
        for (int k = 0; k < NKINDS; k++) {
            cr_assert_str_eq(kind_dtype(root, kind_names[k]), "bf16");
            file_values(ck, kind_names[k], a);
            file_values(ck2, kind_names[k], b);
            assert_same_bits(b, a, kind_names[k]);
        }
        json_decref(root);
        t_run run;
        run_init(&run, 3, w, ZC_DTYPE_BF16, all_bf16, NULL, NULL);
        ck_phase direct = {.run = &run, .load_dir = s.dir, .first = HALF, .n = HALF};
        phase_ok(&direct);
        ck_phase via = {.run = &run, .load_dir = sub, .first = HALF, .n = HALF};
        phase_ok(&via);
        char what[64];
        snprintf(what, sizeof what, "W=2 -> W=%d: resharded against direct", w);
        assert_same_bits(via.master, direct.master, what);
        free(direct.master);
        free(via.master);
    }
    free(a);
    free(b);
    ck_rm_tree(out);
    free(out);
    ck_saved_free(&s);
    t_assert_no_leaks();
}

/* The export of DIR's latest checkpoint in dtype dt, read back whole. */
static unsigned char *export_to(const char *dir, zc_dtype dt, size_t *len)
{
    char p[800];
    snprintf(p, sizeof p, "%s/out.safetensors", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_EXCL, 0644);
    cr_assert_geq(fd, 0, "%s", p);
    cr_assert_eq(zc_checkpoint_export_fd(dir, NULL, fd, dt), ZC_OK, "%s", zc_last_error());
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    unsigned char *b = malloc(*len);
    cr_assert_eq(pread(fd, b, *len, 0), (ssize_t)*len);
    close(fd);
    unlink(p);
    return b;
}

static void check_export(const unsigned char *f, size_t len, const float *master, zc_dtype dt)
{
    uint64_t hn;
    memcpy(&hn, f, 8);
    cr_assert_leq(8 + hn, len);
    json_error_t je;
    json_t *h = json_loadb((const char *)f + 8, (size_t)hn, 0, &je);
    cr_assert_not_null(h, "%s", je.text);
    const unsigned char *data = f + 8 + hn;
    const size_t esz = dt == ZC_DTYPE_F32 ? 4 : 2;
    int64_t off = 0;
    for (int i = 0; i < T_NPARAMS; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        json_t *t = json_object_get(h, name);
        cr_assert_not_null(t, "tensor %s", name);
        cr_assert_str_eq(json_string_value(json_object_get(t, "dtype")),
                         dt == ZC_DTYPE_F32 ? "F32" : "BF16");
        json_t *o = json_object_get(t, "data_offsets");
        const int64_t b = json_integer_value(json_array_get(o, 0));
        cr_assert_eq(json_integer_value(json_array_get(o, 1)) - b, t_numel[i] * (int64_t)esz);
        for (int64_t k = 0; k < t_numel[i]; k++) {
            uint32_t want;
            memcpy(&want, &master[off + k], 4);
            uint32_t got = 0;
            if (esz == 4) {
                memcpy(&got, data + b + 4 * k, 4);
            } else {
                uint16_t g;
                memcpy(&g, data + b + 2 * k, 2);
                got = (uint32_t)g << 16;
            }
            cr_assert_eq(got, want, "%s[%lld] (%s): 0x%08x, the master 0x%08x", name,
                         (long long)k, zc_dtype_name(dt), got, want);
        }
        off += t_numel[i];
    }
    json_decref(h);
}

Test(ckpt_state_lp, export_of_a_bf16_master)
{
    t_run run;
    run_init(&run, 1, 2, ZC_DTYPE_BF16, all_bf16, NULL, NULL);
    ck_saved s;
    cr_assert(ck_saved_make(&s, &run, HALF, "e"), "%s", ck_phase_error(&s.phase));
    /* The saving phase's master is zc_param_gather_master's, after the save. */
    cr_assert(all_bf16_values(s.phase.master, numel()));
    const zc_dtype dts[2] = {ZC_DTYPE_F32, ZC_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        size_t len;
        unsigned char *f = export_to(s.dir, dts[d], &len);
        check_export(f, len, s.phase.master, dts[d]);
        free(f);
    }
    ck_saved_free(&s);
    t_assert_no_leaks();
}
