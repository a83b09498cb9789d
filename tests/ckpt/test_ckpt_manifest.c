/* Tampered manifests against zc_checkpoint_load: every field out of range,
 * layouts whose chunks and parameters disagree, duplicate names, files and
 * entries that do not fit, counters at the edge of what zc_step can count.
 *
 * Each case edits one field of a good checkpoint's manifest.json; the load
 * must be refused on both ranks with ZC_ERR_INVALID_ARG (ZC_ERR_IO for what
 * is not JSON), a message naming manifest.json and the field, and leave the
 * engine unbroken. The same manifests are run against `zeroc ckpt inspect /
 * export / reshard` by check_ckpt_hostile.py: every reader shares one
 * validation (zc__ck_manifest_read). A checkpoint whose counters are at the
 * limit loads, and zc_step then refuses to count past it, changing nothing. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/checked.h"
#include "ck_phase.h"
#include "helpers.h"

typedef void (*edit_fn)(json_t *root);

static json_t *at(json_t *root, const char *arr, size_t i, const char *key)
{
    json_t *o = json_array_get(json_object_get(root, arr), i);
    cr_assert_not_null(o, "%s[%zu]", arr, i);
    return key ? json_object_get(o, key) : o;
}
static void set(json_t *o, const char *key, json_t *v) { json_object_set_new(o, key, v); }
static void seti(json_t *o, const char *key, json_int_t v) { set(o, key, json_integer(v)); }
static json_int_t geti(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}
static json_t *row(json_t *root, size_t i) { return at(root, "tensors", i, NULL); }
static json_t *sched(json_t *root) { return json_object_get(root, "scheduler"); }
static json_t *scaler(json_t *root) { return json_object_get(root, "loss_scaler"); }

/* ---- the edits ----------------------------------------------------------- */
static void step_over(json_t *r)
{
    seti(r, "step", ZC_STEPS_MAX + 1);
    seti(sched(r), "optimizer_steps", ZC_STEPS_MAX + 1);
}
static void step_negative(json_t *r) { seti(r, "step", -1); }
static void skipped_over_step(json_t *r) { seti(r, "skipped_steps", geti(r, "step") + 1); }
static void counters_disagree(json_t *r) { seti(r, "skipped_steps", 1); }
static void adam_over_step(json_t *r) { seti(sched(r), "optimizer_steps", geti(r, "step") + 1); }
static void cur_iter_over(json_t *r) { seti(scaler(r), "cur_iter", ZC_STEPS_MAX + 1); }
static void overflow_iter_ahead(json_t *r)
{
    seti(scaler(r), "last_overflow_iter", geti(scaler(r), "cur_iter"));
}
static void scale_zero(json_t *r) { set(scaler(r), "scale", json_real(0.0)); }
static void scale_huge(json_t *r) { set(scaler(r), "scale", json_real(1e39)); }
static void world_zero(json_t *r) { seti(r, "world_size", 0); }
static void stage_four(json_t *r) { seti(r, "stage", 4); }
static void dtype_int8(json_t *r) { set(r, "dtype", json_string("int8")); }
static void version_zero(json_t *r) { seti(r, "version", 0); }
/* Version 3 records each kind's dtype: without it, or with another dtype,
 * the size of every entry would be a guess. */
static void v3_no_state_dtypes(json_t *r) { seti(r, "version", 3); }
static void state_dtype_fp16(json_t *r)
{
    seti(r, "version", 3);
    json_t *sd = json_object();
    json_object_set_new(sd, "master", json_string("fp16"));
    json_object_set_new(sd, "exp_avg", json_string("fp32"));
    json_object_set_new(sd, "exp_avg_sq", json_string("fp32"));
    set(r, "state_dtypes", sd);
}
static void no_params(json_t *r) { set(r, "params", json_array()); }
static void empty_name(json_t *r) { set(at(r, "params", 1, NULL), "name", json_string("")); }
static void duplicate_name(json_t *r)
{
    set(at(r, "params", 2, NULL), "name", json_string(json_string_value(at(r, "params", 1,
                                                                            "name"))));
}
static void shape_zero(json_t *r) { json_array_set_new(at(r, "params", 0, "shape"), 0, json_integer(0)); }
static void shape_huge(json_t *r)
{
    json_t *sh = json_array();
    json_array_append_new(sh, json_integer((json_int_t)1 << 40));
    json_array_append_new(sh, json_integer((json_int_t)1 << 40));
    set(at(r, "params", 0, NULL), "shape", sh);
}
static void chunk_out_of_range(json_t *r) { seti(at(r, "params", 0, NULL), "chunk", 99); }
static void offset_shifted(json_t *r)
{
    json_t *p = at(r, "params", 1, NULL);
    seti(p, "offset", geti(p, "offset") + 1);
}
static void param_in_other_chunk(json_t *r)
{
    /* Parameter 0 claims the last chunk (it is in chunk 0). */
    seti(at(r, "params", 0, NULL), "chunk",
         (json_int_t)json_array_size(json_object_get(r, "chunks")) - 1);
}
static void chunk_used_wrong(json_t *r)
{
    json_t *c = at(r, "chunks", 0, NULL);
    seti(c, "used", geti(c, "used") + 64);
}
static void chunk_used_huge(json_t *r) { seti(at(r, "chunks", 0, NULL), "used", (json_int_t)1 << 49); }
static void chunk_first_wrong(json_t *r)
{
    json_t *chunks = json_object_get(r, "chunks");
    json_t *c = json_array_get(chunks, json_array_size(chunks) - 1);
    seti(c, "first", geti(c, "first") - 1);
}
static void no_chunks(json_t *r) { set(r, "chunks", json_array()); }
static void files_fewer_than_world(json_t *r) { seti(r, "world_size", 3); }
static void file_rank_swapped(json_t *r)
{
    json_t *f = at(r, "files", 1, NULL);
    seti(f, "rank", 0);
    set(f, "name", json_string("rank_00000.bin"));
}
static void file_bytes_unaligned(json_t *r)
{
    json_t *f = at(r, "files", 0, NULL);
    seti(f, "bytes", geti(f, "bytes") + 1);
}
static void file_bytes_negative(json_t *r) { seti(at(r, "files", 0, NULL), "bytes", -4096); }
/* One entry past the 2^20 ranks a checkpoint may have: refused by that
 * limit, not as an empty array (it is not). */
static void files_over_limit(json_t *r)
{
    json_t *files = json_object_get(r, "files");
    while (json_array_size(files) <= ((size_t)1 << 20))
        json_array_append(files, json_array_get(files, 0));
}
static void files_empty(json_t *r) { set(r, "files", json_array()); }
static void files_not_array(json_t *r) { set(r, "files", json_string("rank_00000.bin")); }
static void row_short(json_t *r) { json_array_remove(row(r, 0), 6); }
static void row_param_out(json_t *r) { json_array_set_new(row(r, 0), 0, json_integer(1000)); }
static void row_kind_unknown(json_t *r) { json_array_set_new(row(r, 0), 1, json_string("m")); }
static void row_file_out(json_t *r) { json_array_set_new(row(r, 0), 2, json_integer(7)); }
static void row_offset_beyond(json_t *r)
{
    json_array_set_new(row(r, 0), 5, json_integer((json_int_t)1 << 40));
}
static void row_end_past_numel(json_t *r)
{
    json_array_set_new(row(r, 0), 4, json_integer((json_int_t)1 << 30));
}
static void row_duplicated(json_t *r)
{
    json_array_append(json_object_get(r, "tensors"), row(r, 0));
}
static void row_removed(json_t *r) { json_array_remove(json_object_get(r, "tensors"), 0); }
static void checksum_not_hex(json_t *r) { json_array_set_new(row(r, 0), 6, json_string("xyz")); }
static void no_format(json_t *r) { json_object_del(r, "format"); }

typedef struct tamper {
    const char *name;
    edit_fn edit;
    const char *needle;
} tamper;

static const tamper cases[] = {
    {"step_over", step_over, "\"step\" must be an integer in [0, 4611686018427387904]"},
    {"step_negative", step_negative, "\"step\" must be an integer in [0, "},
    {"skipped_over_step", skipped_over_step, "\"skipped_steps\" must be an integer in [0, "},
    {"counters_disagree", counters_disagree, "must add up to \"step\""},
    {"adam_over_step", adam_over_step, "\"optimizer_steps\" must be an integer in [0, "},
    {"cur_iter_over", cur_iter_over, "\"cur_iter\" must be an integer in [0, 4611686018427387904]"},
    {"overflow_iter_ahead", overflow_iter_ahead, "\"last_overflow_iter\" must be an integer"},
    {"scale_zero", scale_zero, "\"scale\" (> 0"},
    {"scale_huge", scale_huge, "\"scale\" (> 0"},
    {"world_zero", world_zero, "\"world_size\" must be an integer in [1, "},
    {"stage_four", stage_four, "\"stage\" must be an integer in [0, 3]"},
    {"dtype_int8", dtype_int8, "\"dtype\" must be"},
    {"version_zero", version_zero, "\"version\" must be an integer in [1, "},
    {"v3_no_state_dtypes", v3_no_state_dtypes, "\"state_dtypes\" must be an object of"},
    {"state_dtype_fp16", state_dtype_fp16,
     "\"state_dtypes\".\"master\" must be \"fp32\" or \"bf16\""},
    {"no_params", no_params, "\"params\" must be a non-empty array"},
    {"empty_name", empty_name, "params[1] needs a \"name\""},
    {"duplicate_name", duplicate_name, "appears twice (params[1] and params[2])"},
    {"shape_zero", shape_zero, "shape dimension 0 is not a positive integer"},
    {"shape_huge", shape_huge, "or the tensor is too large"},
    {"chunk_out_of_range", chunk_out_of_range, "\"chunk\" must be an integer in [0, "},
    {"offset_shifted", offset_shifted, "do not match the chunks"},
    {"param_in_other_chunk", param_in_other_chunk, "do not match the chunks"},
    {"chunk_used_wrong", chunk_used_wrong, "\"used\" is "},
    {"chunk_used_huge", chunk_used_huge, "\"used\" is 562949953421312"},
    {"chunk_first_wrong", chunk_first_wrong, "must start at tensor"},
    {"no_chunks", no_chunks, "\"chunk\" must be an integer in [0, -1]"},
    {"files_fewer_than_world", files_fewer_than_world, "2 files for a world of 3 ranks"},
    {"file_rank_swapped", file_rank_swapped, "files[1] must be the file of rank 1"},
    {"file_bytes_unaligned", file_bytes_unaligned, "is not a multiple of 4096"},
    {"file_bytes_negative", file_bytes_negative, "\"bytes\" must be an integer in [0, "},
    {"files_over_limit", files_over_limit,
     "\"files\" has 1048577 entries, more than the 1048576 (2^20) ranks a checkpoint may have"},
    {"files_empty", files_empty, "\"files\" is empty; it lists one file per rank"},
    {"files_not_array", files_not_array, "\"files\" must be an array of one file per rank"},
    {"row_short", row_short, "tensors[0] must be [param, kind, file"},
    {"row_param_out", row_param_out, "tensors[0] must be [param, kind, file"},
    {"row_kind_unknown", row_kind_unknown, "tensors[0] must be [param, kind, file"},
    {"row_file_out", row_file_out, "tensors[0] must be [param, kind, file"},
    {"row_offset_beyond", row_offset_beyond, "lies beyond the end of rank_0000"},
    {"row_end_past_numel", row_end_past_numel, "tensors[0] must be [param, kind, file"},
    {"row_duplicated", row_duplicated, "cover its"},
    {"row_removed", row_removed, "cover its"},
    {"checksum_not_hex", checksum_not_hex, "checksum must be 16 lower-case hex digits"},
    {"no_format", no_format, "not a zeroc checkpoint manifest"},
};

static ck_saved saved;
static char manifest[800];
static char *original;

static void save_once(void)
{
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    cr_assert(ck_saved_make(&saved, &run, 3, "t"), "%s", ck_phase_error(&saved.phase));
    snprintf(manifest, sizeof manifest, "%s/t/manifest.json", saved.dir);
    FILE *f = fopen(manifest, "r");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    original = calloc((size_t)n + 1, 1);
    cr_assert_eq(fread(original, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

static void write_text(const char *text)
{
    FILE *f = fopen(manifest, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_edited(edit_fn edit)
{
    json_error_t je;
    json_t *root = json_loads(original, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    edit(root);
    cr_assert_eq(json_dump_file(root, manifest, JSON_PRESERVE_ORDER), 0);
    json_decref(root);
}

/* Loads into a fresh 2-rank engine; both ranks must refuse alike with want
 * and the needle, the engine unbroken. */
static void refused(const char *what, zc_status want, const char *needle)
{
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase ph = {.run = &run, .load_dir = saved.dir, .first = 0, .n = 0};
    cr_assert(ck_phase_run(&ph), "%s: %s", what, ck_phase_error(&ph));
    for (int r = 0; r < 2; r++) {
        cr_expect_eq(ph.load_rc[r], want, "%s: rank %d: %d %s", what, r, ph.load_rc[r],
                     ph.load_msg[r]);
        cr_expect_not_null(strstr(ph.load_msg[r], "manifest.json"), "%s: '%s'", what,
                           ph.load_msg[r]);
        cr_expect_not_null(strstr(ph.load_msg[r], needle), "%s: '%s' lacks '%s'", what,
                           ph.load_msg[r], needle);
        cr_expect(!ph.broken[r], "%s: rank %d broken", what, r);
    }
    free(ph.master);
}

Test(ckpt_manifest, every_tampered_field_refused_by_the_load)
{
    save_once();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_edited(cases[i].edit);
        refused(cases[i].name, ZC_ERR_INVALID_ARG, cases[i].needle);
    }
    /* Not JSON, or JSON that repeats a key. */
    write_text("{\"format\": \"zeroc-checkpoint\", \"version\": 2, \"version\": 2}");
    refused("duplicate key", ZC_ERR_INVALID_ARG, "duplicate object key");
    write_text("[1, 2, 3]");
    refused("not an object", ZC_ERR_INVALID_ARG, "the manifest must be a JSON object");
    write_text(original);
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase ok = {.run = &run, .load_dir = saved.dir, .first = 3, .n = 1};
    cr_assert(ck_phase_run(&ok), "%s", ck_phase_error(&ok));
    cr_assert_eq(ok.load_rc[0], ZC_OK, "the restored manifest: %s", ok.load_msg[0]);
    free(ok.master);
    free(original);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

/* Counters at the limit: the checkpoint loads; zc_step then refuses, the
 * same on both ranks, and changes nothing. One below the limit, one step
 * goes through and the next is refused. */
typedef struct limit_probe {
    int ok[2];                   /* steps taken before the first refusal */
    zc_status rc[2];             /* the refusal */
    char msg[2][512];
    int64_t steps_after[2];
} limit_probe;

static void limit_hook(t_ctx *x, int rank, int when, void *arg)
{
    limit_probe *p = arg;
    if (when != CK_AFTER_LOAD)
        return;
    for (int k = 0; k < 3; k++) {
        zc_step_info info;
        p->rc[rank] = t_train_step(x, k, &info);
        if (p->rc[rank] != ZC_OK) {
            snprintf(p->msg[rank], sizeof p->msg[rank], "%s", zc_last_error());
            break;
        }
        p->ok[rank]++;
    }
    zc_stats st = {.size = sizeof st};
    p->steps_after[rank] = zc_engine_stats(x->eng, &st) == ZC_OK ? st.steps : -1;
}

static int64_t limit_at;
static void counters_at(json_t *r)
{
    seti(r, "step", limit_at);
    seti(r, "skipped_steps", 0);
    seti(sched(r), "optimizer_steps", limit_at);
    seti(sched(r), "last_batch_iteration", limit_at - 1);
    seti(scaler(r), "cur_iter", limit_at);
}

Test(ckpt_manifest, counters_at_the_limit_load_and_stop_counting)
{
    save_once();
    const int64_t ats[2] = {ZC_STEPS_MAX, ZC_STEPS_MAX - 1};
    for (int c = 0; c < 2; c++) {
        limit_at = ats[c];
        write_edited(counters_at);
        t_run run;
        t_run_init(&run, 2, 2, ZC_DTYPE_F32);
        limit_probe p;
        memset(&p, 0, sizeof p);
        ck_phase ph = {.run = &run, .load_dir = saved.dir, .first = 0, .n = 0,
                       .hook = limit_hook, .hook_arg = &p};
        cr_assert(ck_phase_run(&ph), "%s", ck_phase_error(&ph));
        for (int r = 0; r < 2; r++) {
            cr_assert_eq(ph.load_rc[r], ZC_OK, "rank %d: %s", r, ph.load_msg[r]);
            cr_assert_eq(p.ok[r], limit_at < ZC_STEPS_MAX ? 1 : 0, "at %lld, rank %d: %d steps",
                         (long long)limit_at, r, p.ok[r]);
            cr_assert_eq(p.rc[r], ZC_ERR_INVALID_STATE, "rank %d: %s", r, p.msg[r]);
            cr_assert_not_null(strstr(p.msg[r], "the step counter is at its limit"), "%s",
                               p.msg[r]);
            cr_assert_eq(p.steps_after[r], ZC_STEPS_MAX, "rank %d counted to %lld", r,
                         (long long)p.steps_after[r]);
        }
        free(ph.master);
    }
    free(original);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}
