/* Hostile and absurd configuration input (issue 19): numbers beyond any
 * range, products that leave int64, dotted key names, files that are not
 * files, files far too large, floods of unknown keys, long and non-ASCII
 * strings, and configurations the engine refuses. Each test asserts the
 * status, the message text, and that a failed call changed nothing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfg_helpers.h"
#include "config/internal.h"
#include "base/alloc.h"
#include "helpers.h"

#define HAS(msg, needle) cr_assert(strstr((msg), (needle)), "'%s' lacks '%s'", (msg), (needle))

static zc_config *load_ok(const char *text)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_OK, "%s", zc_last_error());
    return cfg;
}

static void get_eq(const zc_config *cfg, const char *key, const char *want)
{
    char buf[256];
    cr_assert_eq(zc_config_get(cfg, key, buf, sizeof buf), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(buf, want, "%s = %s, want %s", key, buf, want);
}

/* ---- numbers ------------------------------------------------------------ */

Test(config_hostile, huge_micro_batch_names_key_value_and_range)
{
    /* 2^62 * 4 wrapped to 0 before: "Train batch size: 0 has to be > 0". */
    zc_config *cfg = (zc_config *)0x1;
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"train_micro_batch_size_per_gpu\": 4611686018427387904,"
                                       " \"gradient_accumulation_steps\": 4}",
                                       "t.json", 0),
                 ZC_ERR_CONFIG);
    cr_assert_null(cfg);
    HAS(zc_last_error(),
        "train_micro_batch_size_per_gpu: 4611686018427387904 is out of range [1, 2147483647]");
    cr_assert_null(strstr(zc_last_error(), "has to be greater than 0"));
    /* Beyond int64 in the text: still the key and its range, not a column. */
    cr_assert_eq(zc_config_load_string(&cfg, "{\"train_batch_size\": 99999999999999999999999}",
                                       "t.json", 0),
                 ZC_ERR_CONFIG);
    HAS(zc_last_error(), "train_batch_size: ");
    HAS(zc_last_error(), "is out of range [1, 2147483647]");
    /* Past even a double: read back from the text, with the key's range. */
    char text[600] = "{\"train_batch_size\": 1";
    for (int i = 0; i < 400; i++)
        strcat(text, "0");
    strcat(text, "}");
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_ERR_CONFIG);
    HAS(zc_last_error(), "train_batch_size: an integer of 401 digits (line 1, column 422) is out "
                         "of range [1, 2147483647]");
    /* In a block zeroc ignores, under an escaped name: still named. */
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"flops_profiler\": {\"a\\\"b\\\\\": "
                                       "99999999999999999999}}",
                                       "t.json", 0),
                 ZC_ERR_CONFIG);
    HAS(zc_last_error(), "a\"b\\: an integer of 20 digits");
    HAS(zc_last_error(), "is out of range [-9223372036854775808, 9223372036854775807]");
    t_assert_no_leaks();
}

Test(config_hostile, batch_products_are_checked)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", 2147483647), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 2147483647), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    /* (2^31-1)^3 > 2^63: the product itself is what is reported. */
    cr_assert_eq(zc_config_resolve(cfg, 2147483647), ZC_ERR_CONFIG);
    HAS(zc_last_error(), "2147483647 * 2147483647 * 2147483647 does not fit in 64 bits");
    /* (2^31-1) * 3 * 5 = 32212254705 fits int64 but not the key's range. */
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 3), ZC_OK);
    free(before);
    before = t_cfg_snapshot(cfg);
    cr_assert_eq(zc_config_resolve(cfg, 5), ZC_ERR_CONFIG);
    HAS(zc_last_error(), "2147483647 * 3 * 5 = 32212254705 is out of range [1, 2147483647]");
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after, "a failed resolve changed the configuration");
    free(after);
    free(before);
    /* 65536 * 1024 * 16 = 2^30 is inside every range. */
    cr_assert_eq(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", 65536), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 1024), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 16), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "train_batch_size", "1073741824");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_hostile, every_numeric_key_has_a_stated_bounded_range)
{
    /* The audit: each integer key is refused one past its maximum with the
     * key, the value and the range in the message, and accepts the maximum.
     * Only model_persistence_threshold may reach INT64_MAX (DeepSpeed's
     * default is sys.maxsize; the value is only compared). */
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        const zc_cfg_key *k = &zc__cfg_keys[i];
        if (k->type != ZC_KT_I64 && k->type != ZC_KT_I32 && k->type != ZC_KT_F64)
            continue;
        zc_config *cfg;
        cr_assert_eq(zc_config_create(&cfg), ZC_OK);
        if (k->type == ZC_KT_F64) {
            /* Any finite value past dmax, and nan/inf whatever dmax is. */
            cr_assert_eq(zc_config_set_double(cfg, k->path, NAN), ZC_ERR_INVALID_ARG, "%s",
                         k->path);
            if (!isinf(k->dmax)) {
                cr_assert_neq(zc_config_set_double(cfg, k->path, k->dmax * 2), ZC_OK, "%s",
                              k->path);
                HAS(zc_last_error(), k->path);
                HAS(zc_last_error(), "is out of range");
            }
            zc_config_destroy(cfg);
            continue;
        }
        if (strcmp(k->path, "zero_optimization.stage3_model_persistence_threshold"))
            cr_assert_lt(k->imax, INT64_MAX, "%s has no stated maximum", k->path);
        if (k->imax < INT64_MAX) {
            char want[160];
            snprintf(want, sizeof want, "%s: %lld is out of range [%lld, %lld]", k->path,
                     (long long)k->imax + 1, (long long)k->imin, (long long)k->imax);
            cr_assert_neq(zc_config_set_int(cfg, k->path, k->imax + 1), ZC_OK, "%s", k->path);
            HAS(zc_last_error(), want);
        }
        cr_assert_eq(zc_config_set_int(cfg, k->path, k->imax), ZC_OK, "%s: %s", k->path,
                     zc_last_error());
        zc_config_destroy(cfg);
    }
    t_assert_no_leaks();
}

Test(config_hostile, program_values_are_checked_all_at_once)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    pv.lr = NAN;                             /* was read as "not given" */
    pv.micro_batch_per_gpu = (int64_t)1 << 40; /* past the key's range */
    pv.beta2 = 1.0;                          /* betas are in [0, 1) */
    cr_assert_eq(zc_config_set_program_values(cfg, &pv), ZC_ERR_INVALID_ARG);
    const char *m = zc_last_error();
    HAS(m, "lr: nan is not a finite number");
    HAS(m, "micro_batch_per_gpu: 1099511627776 is out of range [1, 2147483647]");
    HAS(m, "beta2: 1 is out of range [0, 1)");
    /* Refused values are not recorded: an "auto" lr stays unresolved. */
    cr_assert_eq(zc_config_set(cfg, "optimizer.params.lr", "\"auto\""), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_batch_size", 8), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "optimizer.params.lr", "0.001");
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_neq(before, after); /* the sets above did change it */
    free(before);
    free(after);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_hostile, model_auto_past_the_range_is_refused)
{
    zc_config *cfg = load_ok("{\"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}");
    /* H = 2^26: H^2 = 2^52 elements, past the 2^50 of the key's range. */
    cr_assert_eq(zc__config_resolve_model_auto(cfg, (int64_t)1 << 26), ZC_ERR_CONFIG);
    HAS(zc_last_error(), "zero_optimization.reduce_bucket_size: \"auto\" would be H^2 with H = "
                         "67108864 = 4503599627370496, out of range [0, 1125899906842624]");
    zc_config_destroy(cfg);
    cfg = load_ok("{\"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}");
    cr_assert_eq(zc__config_resolve_model_auto(cfg, 1000), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "1000000");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* ---- dotted names --------------------------------------------------------- */

Test(config_hostile, dotted_top_level_key_is_unknown_with_the_nesting_meant)
{
    zc_config *cfg = (zc_config *)0x1;
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"train_batch_size\": 8, \"zero_optimization.stage\": 3}",
                                       "t.json", 0),
                 ZC_ERR_CONFIG);
    cr_assert_null(cfg, "it ran stage 3 before; now nothing is loaded");
    HAS(zc_last_error(), "zero_optimization.stage: unknown key");
    HAS(zc_last_error(), "did you mean zero_optimization \u2192 stage?");
    HAS(zc_last_error(), "{\"zero_optimization\": {\"stage\": ...}}");
    /* Inside a block too, and through zc_config_set's block form. */
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"zero_optimization\": {\"stage\": 3, "
                                       "\"offload_param.device\": \"cpu\"}}",
                                       "t.json", 0),
                 ZC_ERR_CONFIG);
    HAS(zc_last_error(), "did you mean offload_param \u2192 device?");
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization", "{\"offload_param.device\": \"cpu\"}"),
                 ZC_ERR_CONFIG);
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    /* The dotted-key API is a different thing and keeps working. */
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.stage", "3"), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_param.pin_memory", "false"), ZC_OK,
                 "%s", zc_last_error());
    get_eq(cfg, "zero_optimization.stage", "3");
    get_eq(cfg, "zero_optimization.offload_param.pin_memory", "false");
    zc_config_destroy(cfg);
    /* A dotted name that spells nothing real is an ordinary unknown
     * top-level key: ignored, as DeepSpeed does. */
    cfg = load_ok("{\"train_batch_size\": 8, \"my.note\": \"x\"}");
    get_eq(cfg, "zero_optimization.stage", "0");
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* ---- size and cost -------------------------------------------------------- */

Test(config_hostile, unknown_keys_cost_a_bounded_number_of_messages)
{
    enum { N = 20000 };
    size_t cap = (size_t)N * 32 + 64, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "{\"train_batch_size\": 8");
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(text + n, cap - n, ", \"no_such_key_%05d\": %d", i, i);
    snprintf(text + n, cap - n, "}");
    zc_cfg_diag d = {0};
    zc_config *cfg = NULL;
    cr_assert_eq(zc__config_load_text(&cfg, text, strlen(text), "t.json", 0, &d), ZC_OK);
    cr_assert_eq(d.count[ZC_SEV_WARN], N);
    cr_assert_eq(d.kept[ZC_SEV_WARN], ZC_CFG_DIAG_KEEP);
    cr_assert_eq(zc__diag_dropped(&d, ZC_SEV_WARN), N - ZC_CFG_DIAG_KEEP);
    /* What the messages hold is bounded by the cap, not by N: before, each
     * of the 20000 held a 528-byte record (10 MB). */
    int64_t held = zc__mem_global_bytes(ZC_MEMKIND_HOST);
    cr_assert_lt(held, 256 * 1024, "%lld bytes held for %d unknown keys", (long long)held, N);
    zc__diag_free(&d);
    zc_config_destroy(cfg);
    free(text);
    t_assert_no_leaks();
}

Test(config_hostile, a_string_past_the_limit_is_refused_before_parsing)
{
    size_t n = ZC_CFG_MAX_BYTES + 1;
    char *text = malloc(n + 1);
    /* Not even JSON: the size is refused before the parser would say so. */
    memset(text, 'x', n);
    text[n] = 0;
    zc_config *cfg = (zc_config *)0x1;
    cr_assert_eq(zc_config_load_string(&cfg, text, "big.json", 0), ZC_ERR_CONFIG);
    cr_assert_null(cfg);
    HAS(zc_last_error(), "a config may be at most 16 MiB (16777216 bytes)");
    cr_assert_null(strstr(zc_last_error(), "invalid JSON"));
    /* The same limit for a block given from code. */
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization", text), ZC_ERR_INVALID_ARG);
    HAS(zc_last_error(), "zc_config_set: zero_optimization: the value is longer than 16 MiB");
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    zc_config_destroy(cfg);
    free(text);
    t_assert_no_leaks();
}

/* {"train_batch_size": 8, "flops_profiler": [0,0,...]} with n zeros. */
static char *zeros_doc(int n)
{
    size_t cap = (size_t)n * 2 + 64, len;
    char *text = malloc(cap);
    len = (size_t)snprintf(text, cap, "{\"train_batch_size\": 8, \"flops_profiler\": [0");
    for (int i = 1; i < n; i++) {
        memcpy(text + len, ",0", 2);
        len += 2;
    }
    memcpy(text + len, "]}", 3);
    return text;
}

Test(config_hostile, too_many_values_are_refused_before_parsing)
{
    /* Commas and brackets inside strings (escaped quote included) are not
     * values: root, the array, 1 and 2 are. */
    const char *t = "{\"a,b\\\",[{\": [1,2]}";
    cr_assert_eq(zc__cfg_count_values(t, strlen(t), 100), 4);
    /* 70000 zeros in an ignored key: a tree of 70000 values is never built. */
    char *text = zeros_doc(70000);
    zc_config *cfg = (zc_config *)0x1;
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_ERR_CONFIG);
    cr_assert_null(cfg);
    HAS(zc_last_error(), "t.json: more than 65536 JSON values; a config may hold at most 65536");
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization", text), ZC_ERR_INVALID_ARG);
    HAS(zc_last_error(), "the value holds more than 65536 JSON values");
    zc_config_destroy(cfg);
    /* 60000 values (the root, the object, the array and its elements) load. */
    free(text);
    text = zeros_doc(59990);
    cfg = load_ok(text);
    get_eq(cfg, "train_batch_size", "8");
    zc_config_destroy(cfg);
    free(text);
    t_assert_no_leaks();
}

/* ---- paths that are not config files ---------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zc_cfg_hostile.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmp(const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    unlink(p);
}

Test(config_hostile, a_directory_says_what_it_is, .timeout = 20)
{
    make_tmpdir();
    zc_config *cfg = (zc_config *)0x1;
    cr_assert_eq(zc_config_load(&cfg, tmpdir), ZC_ERR_IO);
    cr_assert_null(cfg);
    char want[128];
    snprintf(want, sizeof want, "%s is a directory; expected a regular JSON file", tmpdir);
    HAS(zc_last_error(), want);
    cr_assert_null(strstr(zc_last_error(), "9223372036854775807"));
    rmdir(tmpdir);
    t_assert_no_leaks();
}

Test(config_hostile, a_character_device_is_not_read, .timeout = 20)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load(&cfg, "/dev/zero"), ZC_ERR_IO);
    HAS(zc_last_error(), "/dev/zero is a character device; expected a regular JSON file");
    t_assert_no_leaks();
}

Test(config_hostile, a_fifo_without_writer_does_not_block, .timeout = 20)
{
    /* Before, fopen waited for a writer forever (the timeout catches it). */
    make_tmpdir();
    char p[128];
    snprintf(p, sizeof p, "%s/ds_config.json", tmpdir);
    cr_assert_eq(mkfifo(p, 0600), 0, "%s", strerror(errno));
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load(&cfg, p), ZC_ERR_IO);
    char want[256];
    snprintf(want, sizeof want, "%s is a named pipe (FIFO); expected a regular JSON file", p);
    HAS(zc_last_error(), want);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "the FIFO must still be there");
    cr_assert(S_ISFIFO(st.st_mode));
    remove_tmp("ds_config.json");
    rmdir(tmpdir);
    t_assert_no_leaks();
}

Test(config_hostile, a_file_past_the_limit_is_refused_by_its_size, .timeout = 20)
{
    make_tmpdir();
    char p[128];
    snprintf(p, sizeof p, "%s/big.json", tmpdir);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    /* Sparse: 17 MiB that costs no disk; the size alone must refuse it. */
    cr_assert_eq(ftruncate(fd, (off_t)17 << 20), 0);
    close(fd);
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load(&cfg, p), ZC_ERR_CONFIG);
    HAS(zc_last_error(), "is 17825792 bytes; a config may be at most 16 MiB (16777216 bytes)");
    remove_tmp("big.json");
    rmdir(tmpdir);
    t_assert_no_leaks();
}

/* ---- strings ---------------------------------------------------------------- */

Test(config_hostile, long_non_ascii_strings_are_kept_whole)
{
    /* 3000 bytes of two- and three-byte characters, quotes and backslashes. */
    char path[3100] = "/mnt/";
    while (strlen(path) < 3000)
        strcat(path, "\u00e9\u2192\"\\");
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_string(cfg, "zero_optimization.offload_param.nvme_path", path),
                 ZC_OK, "%s", zc_last_error());
    static char got[8192];
    cr_assert_eq(zc_config_get(cfg, "zero_optimization.offload_param.nvme_path", got, sizeof got),
                 ZC_OK);
    json_t *j = json_loads(got, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(j, "not JSON: %.80s", got);
    cr_assert_str_eq(json_string_value(j), path);
    json_decref(j);
    zc_config_destroy(cfg);

    /* An unknown nested key of 500 bytes: its path is reported whole. */
    char key[600] = "";
    while (strlen(key) < 500)
        strcat(key, "k\u00fc\u2192");
    json_t *doc = json_pack("{s:{s:i}}", "zero_optimization", key, 1);
    char *text = json_dumps(doc, 0);
    zc_cfg_diag d = {0};
    cr_assert_eq(zc__config_load_text(&cfg, text, strlen(text), "t.json", 0, &d), ZC_ERR_CONFIG);
    cr_assert_eq(d.nerr, 1);
    char want[700];
    snprintf(want, sizeof want, "zero_optimization.%s", key);
    cr_assert_str_eq(d.v[0].path, want);
    json_t *again = json_string(d.v[0].path);
    cr_assert_not_null(again, "the path is not valid UTF-8");
    json_decref(again);
    zc__diag_free(&d);
    free(text);
    json_decref(doc);
    t_assert_no_leaks();
}

Test(config_hostile, an_overlong_first_error_is_cut_on_a_character_boundary)
{
    /* A 4000-byte unsupported optimizer name of 2-byte characters: the error
     * does not fit zc_last_error whole, and what is kept must be UTF-8. */
    char name[4100] = "";
    while (strlen(name) < 4000)
        strcat(name, "\u00e4");
    json_t *doc = json_pack("{s:{s:s}}", "optimizer", "type", name);
    char *text = json_dumps(doc, 0);
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_ERR_UNSUPPORTED);
    HAS(zc_last_error(), "optimizer.type: \"\u00e4\u00e4");
    json_t *j = json_string(zc_last_error());
    cr_assert_not_null(j, "zc_last_error() is not valid UTF-8");
    json_decref(j);
    free(text);
    json_decref(doc);
    t_assert_no_leaks();
}

/* ---- what the engine will do ------------------------------------------------ */

static char engine_msg[1024];

/* zc_engine_create on one in-process rank; the message is kept in
 * engine_msg (destroying the communicator may clear zc_last_error). */
static zc_status create_engine(const zc_config *cfg)
{
    zc_comm *comm[1];
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    zc_status rc = zc_engine_create(&e, cfg, comm[0], &eo);
    snprintf(engine_msg, sizeof engine_msg, "%s", zc_last_error());
    zc_engine_destroy(e);
    zc_comm_destroy(comm[0]);
    return rc;
}

Test(config_hostile, offload_is_refused_by_the_engine_with_every_block_named)
{
    /* Parameter offload (stage 3) and optimizer offload (stages 1-3) run:
     * accepted by the engine and by the checker alike. */
    zc_config *cfg = load_ok("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                             "\"offload_optimizer\": {\"device\": \"cpu\"}, "
                             "\"offload_param\": {\"device\": \"cpu\"}}}");
    cr_assert_eq(create_engine(cfg), ZC_OK, "%s", engine_msg);
    zc_cfg_diag d = {0};
    zc__cfg_engine_support(cfg, &d);
    cr_assert_eq(d.nerr, 0);
    zc__diag_free(&d);
    zc_config_destroy(cfg);
    /* Optimizer offload at stage 0 (the whole state on every rank): refused,
     * naming the key, by both. */
    cfg = load_ok("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, "
                  "\"offload_optimizer\": {\"device\": \"cpu\"}}}");
    cr_assert_eq(create_engine(cfg), ZC_ERR_CONFIG);
    HAS(engine_msg, "zero_optimization.offload_optimizer.device: \"cpu\" at stage 0");
    d = (zc_cfg_diag){0};
    zc__cfg_engine_support(cfg, &d);
    cr_assert_eq(d.nerr, 1);
    cr_assert_str_eq(d.v[0].path, "zero_optimization.offload_optimizer.device");
    zc__diag_free(&d);
    zc_config_destroy(cfg);
    /* device "none" is no offload: accepted by both. */
    cfg = load_ok("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                  "\"offload_param\": {\"device\": \"none\"}}}");
    cr_assert_eq(zc__config_engine_check(cfg), ZC_OK);
    cr_assert_eq(create_engine(cfg), ZC_OK, "%s", engine_msg);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* examples/ds_config_zero2.json, as a program would load it. */
static const char zero2_example[] =
    "{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": 2,"
    " \"gradient_clipping\": 1.0, \"steps_per_print\": 10, \"bf16\": {\"enabled\": true},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 2e-3, \"betas\": [0.9, 0.999],"
    " \"eps\": 1e-8, \"weight_decay\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": 1e-4,"
    " \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": 5, \"total_num_steps\": \"auto\"}},"
    " \"zero_optimization\": {\"stage\": 2, \"contiguous_gradients\": true,"
    " \"overlap_comm\": true, \"reduce_scatter\": true, \"reduce_bucket_size\": 65536,"
    " \"allgather_bucket_size\": 5e8}}";

Test(config_hostile, auto_template_engine_names_every_missing_program_value)
{
    zc_config *cfg = load_ok(zero2_example);
    /* Without program values: both unresolved keys at once, each with the
     * zc_program_values field that resolves it. */
    cr_assert_eq(create_engine(cfg), ZC_ERR_CONFIG);
    HAS(engine_msg, "train_micro_batch_size_per_gpu: \"auto\" must be resolved by the program: "
                    "set zc_program_values.micro_batch_per_gpu");
    HAS(engine_msg, "scheduler.params.total_num_steps: \"auto\" must be resolved by the "
                    "program: set zc_program_values.total_num_steps");
    /* What the Hugging Face Trainer passes, the C program passes. */
    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    pv.micro_batch_per_gpu = 4;
    pv.total_num_steps = 100;
    cr_assert_eq(zc_config_set_program_values(cfg, &pv), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(create_engine(cfg), ZC_OK, "%s", engine_msg);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "train_batch_size", "8"); /* 4 x 2 x 1 */
    get_eq(cfg, "scheduler.params.total_num_steps", "100");
    get_eq(cfg, "scheduler.params.warmup_max_lr", "0.002"); /* = optimizer lr */
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
