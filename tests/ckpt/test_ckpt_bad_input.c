/* Bad checkpoints: a truncated or missing shard file, a newer format
 * version, another model (a name or a shape differs), fp16 against another
 * precision. Each is found before anything is read into the engine and
 * refused with a message naming the file and the tensor, the same on every
 * rank, and the engine is unchanged: the run that tried the load and then
 * trained from its initial values ends bitwise where a run that never tried
 * does. A flipped byte shows only when its entry is read, once, into the
 * engine's state: the same message on every rank, and the engine broken on
 * every rank. A checkpoint of another stage loads (the format does not depend
 * on it) and continues bitwise as that stage would. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_phase.h"
#include "helpers.h"

#define STEPS 6

typedef void (*damage_fn)(const char *ck);

static void path_of(char *out, size_t cap, const char *ck, const char *name)
{
    snprintf(out, cap, "%s/%s", ck, name);
}

static void flip_byte(const char *ck)
{
    char p[800];
    path_of(p, sizeof p, ck, "rank_00001.bin");
    int fd = open(p, O_RDWR);
    cr_assert_geq(fd, 0);
    unsigned char b;
    cr_assert_eq(pread(fd, &b, 1, 100), 1);
    b ^= 0x10;
    cr_assert_eq(pwrite(fd, &b, 1, 100), 1);
    close(fd);
}

static void truncate_file(const char *ck)
{
    char p[800];
    path_of(p, sizeof p, ck, "rank_00000.bin");
    cr_assert_eq(truncate(p, 1000), 0);
}

static void remove_file(const char *ck)
{
    char p[800];
    path_of(p, sizeof p, ck, "rank_00001.bin");
    cr_assert_eq(unlink(p), 0);
}

static void edit_manifest(const char *ck, void (*edit)(json_t *root))
{
    char p[800];
    path_of(p, sizeof p, ck, "manifest.json");
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    edit(root);
    cr_assert_eq(json_dump_file(root, p, JSON_PRESERVE_ORDER), 0);
    json_decref(root);
}

static void v4(json_t *root) { json_object_set_new(root, "version", json_integer(4)); }
static void rename_p3(json_t *root)
{
    json_t *p = json_array_get(json_object_get(root, "params"), 3);
    json_object_set_new(p, "name", json_string("q3"));
}
static void reshape_p2(json_t *root)
{
    json_t *p = json_array_get(json_object_get(root, "params"), 2);
    json_t *sh = json_object_get(p, "shape");
    /* The same number of elements, another shape. */
    json_int_t n = json_integer_value(json_array_get(sh, 0));
    json_t *two = json_array();
    json_array_append_new(two, json_integer(1));
    json_array_append_new(two, json_integer(n));
    json_object_set_new(p, "shape", two);
}
/* An offset no chunk can have: offset + numel would overflow int64_t. */
static void far_offset_p2(json_t *root)
{
    json_t *p = json_array_get(json_object_get(root, "params"), 2);
    json_object_set_new(p, "offset", json_integer(INT64_MAX - 1));
}
static void newer_version(const char *ck) { edit_manifest(ck, v4); }
static void other_names(const char *ck) { edit_manifest(ck, rename_p3); }
static void other_shapes(const char *ck) { edit_manifest(ck, reshape_p2); }
static void far_offset(const char *ck) { edit_manifest(ck, far_offset_p2); }

/* Saves after STEPS steps with (save_stage, save_dt), damages, loads into a
 * fresh (stage 2, fp32) world of 2 which then trains STEPS steps. */
static void refused(damage_fn damage, zc_dtype save_dt, const char *want1, const char *want2)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, save_dt);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, STEPS, "t"), "%s", ck_phase_error(&saved.phase));
    const char *dir = saved.dir;
    char ck[700];
    snprintf(ck, sizeof ck, "%s/t", dir);
    if (damage)
        damage(ck);

    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase never = {.run = &run, .first = 0, .n = STEPS};
    cr_assert(ck_phase_run(&never), "%s", ck_phase_error(&never));
    ck_phase tried = {.run = &run, .load_dir = dir, .first = 0, .n = STEPS};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    for (int r = 0; r < 2; r++) {
        cr_assert_neq(tried.load_rc[r], ZC_OK, "rank %d: the damaged checkpoint loaded", r);
        cr_assert_eq(tried.load_rc[r], tried.load_rc[0]);
        cr_assert_not_null(strstr(tried.load_msg[r], want1), "rank %d: '%s' lacks '%s'", r,
                           tried.load_msg[r], want1);
        cr_assert_not_null(strstr(tried.load_msg[r], want2), "rank %d: '%s' lacks '%s'", r,
                           tried.load_msg[r], want2);
    }
    /* The same text on every rank, up to the part naming the failed rank
     * (everything after "failed on rank R of W: "). */
    const char *a = strstr(tried.load_msg[0], "failed on rank");
    const char *b = strstr(tried.load_msg[1], "failed on rank");
    cr_assert(a && b && !strcmp(a, b), "ranks disagree: '%s' vs '%s'", tried.load_msg[0],
              tried.load_msg[1]);
    for (int r = 0; r < 2; r++)
        cr_assert(!tried.broken[r], "rank %d: the refused load broke the engine", r);
    cr_assert(memcmp(never.master, tried.master, (size_t)t_total_numel() * 4) == 0,
              "the failed load changed the engine");
    free(never.master);
    free(tried.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

/* A byte of rank 1's file flipped: rank 1 reads that entry into its state
 * (rank 0 reads nothing of that file) and finds the mismatch only then. */
Test(ckpt_bad_input, flipped_byte)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, STEPS, "t"), "%s", ck_phase_error(&saved.phase));
    const char *dir = saved.dir;
    char ck[700];
    snprintf(ck, sizeof ck, "%s/t", dir);
    flip_byte(ck);

    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase tried = {.run = &run, .load_dir = dir, .first = 0, .n = STEPS};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(tried.load_rc[r], ZC_ERR_IO, "rank %d: %s", r, tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "failed on rank 1 of 2"), "rank %d: '%s'",
                           r, tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "rank_00001.bin: checksum mismatch in "
                                  "tensor 'p1' (master, elements ["),
                           "rank %d: '%s'", r, tried.load_msg[r]);
        cr_assert(tried.broken[r], "rank %d: the engine is not broken", r);
        cr_assert_eq(tried.after_rc[r], ZC_ERR_IO, "rank %d: %s", r, tried.after_msg[r]);
        cr_assert_not_null(strstr(tried.after_msg[r], "this engine is broken"), "rank %d: '%s'",
                           r, tried.after_msg[r]);
        cr_assert_not_null(strstr(tried.after_msg[r], "checksum mismatch"), "rank %d: '%s'", r,
                           tried.after_msg[r]);
    }
    cr_assert_str_eq(tried.load_msg[0], tried.load_msg[1]);
    free(tried.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}
Test(ckpt_bad_input, truncated_file) { refused(truncate_file, ZC_DTYPE_F32, "rank_00000.bin", "truncated; holds tensor 'p"); }
Test(ckpt_bad_input, missing_rank_file) { refused(remove_file, ZC_DTYPE_F32, "rank_00001.bin: missing shard file", "tensor 'p"); }
Test(ckpt_bad_input, newer_version) { refused(newer_version, ZC_DTYPE_F32, "manifest.json", "format version 4 is newer"); }
Test(ckpt_bad_input, other_model_names) { refused(other_names, ZC_DTYPE_F32, "manifest.json", "no tensor 'p3'"); }
Test(ckpt_bad_input, other_model_shapes) { refused(other_shapes, ZC_DTYPE_F32, "manifest.json", "tensor 'p2' has shape"); }
Test(ckpt_bad_input, offset_out_of_range) { refused(far_offset, ZC_DTYPE_F32, "manifest.json", "\"offset\" must be an integer in [0, "); }
Test(ckpt_bad_input, fp16_into_fp32) { refused(NULL, ZC_DTYPE_F16, "manifest.json", "saved with fp16 parameters"); }
Test(ckpt_bad_input, no_checkpoint) 
{
    char *dir = ck_tmpdir();
    t_run run;
    t_run_init(&run, 1, 1, ZC_DTYPE_F32);
    ck_phase tried = {.run = &run, .load_dir = dir, .first = 0, .n = 1};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    cr_assert_eq(tried.load_rc[0], ZC_ERR_IO);
    cr_assert_not_null(strstr(tried.load_msg[0], "/latest: cannot open"), "%s", tried.load_msg[0]);
    free(tried.master);
    ck_rm_tree(dir);
    free(dir);
}

/* The saving stage does not matter: stage 1's checkpoint resumes in stage 3
 * bitwise as stage 1 continues (the stages are bitwise equivalent). */
Test(ckpt_bad_input, other_stage_loads)
{
    t_run r1, r3;
    t_run_init(&r1, 1, 2, ZC_DTYPE_BF16);
    t_run_init(&r3, 3, 2, ZC_DTYPE_BF16);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &r1, STEPS, "s1"), "%s", ck_phase_error(&saved.phase));
    ck_phase ref = {.run = &r1, .first = 0, .n = 2 * STEPS};
    cr_assert(ck_phase_run(&ref), "%s", ck_phase_error(&ref));
    ck_phase in3 = {.run = &r3, .load_dir = saved.dir, .first = STEPS, .n = STEPS};
    cr_assert(ck_phase_run(&in3), "%s", ck_phase_error(&in3));
    cr_assert_eq(in3.load_rc[0], ZC_OK, "%s", in3.load_msg[0]);
    cr_assert(memcmp(ref.master, in3.master, (size_t)t_total_numel() * 4) == 0);
    free(ref.master);
    free(in3.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

/* A save that fails (the tag exists) fails alike on every rank and changes
 * nothing: the engine trains on, and the existing checkpoint still loads. */
Test(ckpt_bad_input, existing_tag_refused)
{
    char *dir = ck_tmpdir();
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase a = {.run = &run, .first = 0, .n = 2, .save_dir = dir, .save_tag = "x"};
    cr_assert(ck_phase_run(&a), "%s", ck_phase_error(&a));
    ck_phase b = {.run = &run, .first = 0, .n = 3, .save_dir = dir, .save_tag = "x"};
    cr_assert(ck_phase_run(&b), "%s", ck_phase_error(&b));
    cr_assert_eq(b.save_rc[0], ZC_ERR_IO);
    cr_assert_eq(b.save_rc[1], ZC_ERR_IO);
    ck_phase c = {.run = &run, .load_dir = dir, .first = 2, .n = 1};
    cr_assert(ck_phase_run(&c), "%s", ck_phase_error(&c));
    cr_assert_eq(c.load_rc[0], ZC_OK, "%s", c.load_msg[0]);
    cr_assert(memcmp(b.master, c.master, (size_t)t_total_numel() * 4) == 0);
    free(a.master);
    free(b.master);
    free(c.master);
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

/* DIR/.x.partial as a save killed while writing tag x leaves it (with the
 * marker a save makes first), holding `extra` too when not NULL. */
static void stale_staging(const char *dir, const char *extra)
{
    char sp[700], p[800];
    snprintf(sp, sizeof sp, "%s/.x.partial", dir);
    cr_assert_eq(mkdir(sp, 0755), 0);
    const char *names[] = {".zeroc-staging", "rank_00000.bin.tmp", "rank_00001.idx",
                           "manifest.json.tmp", extra};
    for (size_t i = 0; i < sizeof names / sizeof *names && names[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", sp, names[i]);
        FILE *f = fopen(p, "wx");
        cr_assert_not_null(f, "%s", p);
        fputs("left by a killed save", f);
        fclose(f);
    }
}

/* A crashed save's staging directory of the same tag is cleared: the save
 * goes through and loads. */
Test(ckpt_bad_input, stale_staging_cleared)
{
    char *dir = ck_tmpdir();
    stale_staging(dir, NULL);
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase a = {.run = &run, .first = 0, .n = 2, .save_dir = dir, .save_tag = "x"};
    cr_assert(ck_phase_run(&a), "%s", ck_phase_error(&a));
    cr_assert_eq(a.save_rc[0], ZC_OK);
    cr_assert_eq(a.save_rc[1], ZC_OK);
    char p[800];
    snprintf(p, sizeof p, "%s/.x.partial", dir);
    cr_assert_neq(access(p, F_OK), 0, "the staging directory is still there");
    ck_phase b = {.run = &run, .load_dir = dir, .first = 2, .n = 0};
    cr_assert(ck_phase_run(&b), "%s", ck_phase_error(&b));
    cr_assert_eq(b.load_rc[0], ZC_OK, "%s", b.load_msg[0]);
    cr_assert(memcmp(a.master, b.master, (size_t)t_total_numel() * 4) == 0);
    free(a.master);
    free(b.master);
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

/* A file a save does not write in the staging directory is not the save's
 * to remove: refused on every rank, naming it, and left in place. */
Test(ckpt_bad_input, stale_staging_with_foreign_file_refused)
{
    char *dir = ck_tmpdir();
    stale_staging(dir, "notes.txt");
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase a = {.run = &run, .first = 0, .n = 1, .save_dir = dir, .save_tag = "x"};
    cr_assert(ck_phase_run(&a), "%s", ck_phase_error(&a));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(a.save_rc[r], ZC_ERR_IO, "rank %d: %s", r, a.save_msg[r]);
        cr_assert_not_null(strstr(a.save_msg[r], ".x.partial holds 'notes.txt'"), "rank %d: '%s'",
                           r, a.save_msg[r]);
    }
    char p[800];
    snprintf(p, sizeof p, "%s/.x.partial/notes.txt", dir);
    cr_assert_eq(access(p, F_OK), 0, "the foreign file was removed");
    snprintf(p, sizeof p, "%s/x", dir);
    cr_assert_neq(access(p, F_OK), 0, "a checkpoint appeared");
    free(a.master);
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

static bool exists(const char *dir, const char *name)
{
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void assert_latest_names(const char *dir, const char *tag)
{
    char p[800], line[64] = "";
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f, "%s", p);
    cr_assert_not_null(fgets(line, sizeof line, f), "%s is empty", p);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "%s\n", tag);
    cr_assert_str_eq(line, want, "%s", p);
}

/* A shard file's write fails (ENOSPC at the K-th write request of each
 * rank's file, for every K a save makes, the last ones included, which are
 * found only once rank 0 has written the manifest and the next `latest`):
 * the same ZC_ERR_IO on every rank, and nothing of the save is left - no
 * DIR/TAG, no staging directory, no DIR/latest.tmp, `latest` still naming
 * the earlier checkpoint. The engine trains on, and the first K past the
 * save's writes saves a checkpoint that loads bitwise. */
Test(ckpt_bad_input, write_error_at_every_write_of_a_save, .timeout = 300)
{
    char *dir = ck_tmpdir();
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase base = {.run = &run, .first = 0, .n = 1, .save_dir = dir, .save_tag = "base"};
    cr_assert(ck_phase_run(&base), "%s", ck_phase_error(&base));
    cr_assert_eq(base.save_rc[0], ZC_OK, "%s", base.save_msg[0]);
    free(base.master);
    int failed = 0;
    bool saved = false;
    for (int k = 1; k <= 64 && !saved; k++) {
        char spec[32];
        snprintf(spec, sizeof spec, "enospc=%d", k);
        setenv("ZC_NVME_FAULTS", spec, 1);
        ck_phase a = {.run = &run, .first = 0, .n = 2, .save_dir = dir, .save_tag = "x"};
        const bool ran = ck_phase_run(&a);
        unsetenv("ZC_NVME_FAULTS");
        cr_assert(ran, "%s: %s", spec, ck_phase_error(&a));
        if (a.save_rc[0] == ZC_OK) {
            cr_assert_eq(a.save_rc[1], ZC_OK, "%s, rank 1: %s", spec, a.save_msg[1]);
            saved = true;
            ck_phase b = {.run = &run, .load_dir = dir, .load_tag = "x", .first = 2, .n = 0};
            cr_assert(ck_phase_run(&b), "%s", ck_phase_error(&b));
            cr_assert_eq(b.load_rc[0], ZC_OK, "%s", b.load_msg[0]);
            cr_assert(memcmp(a.master, b.master, (size_t)t_total_numel() * 4) == 0);
            assert_latest_names(dir, "x");
            free(b.master);
        } else {
            failed++;
            for (int r = 0; r < 2; r++) {
                cr_assert_eq(a.save_rc[r], ZC_ERR_IO, "%s, rank %d: %s", spec, r, a.save_msg[r]);
                cr_assert_not_null(strstr(a.save_msg[r], "No space left on device"),
                                   "%s, rank %d: '%s'", spec, r, a.save_msg[r]);
            }
            cr_assert_str_eq(a.save_msg[0], a.save_msg[1], "%s", spec);
            cr_assert(!exists(dir, "x"), "%s: a checkpoint appeared", spec);
            cr_assert(!exists(dir, ".x.partial"), "%s: the staging directory is left", spec);
            cr_assert(!exists(dir, "latest.tmp"), "%s: latest.tmp is left", spec);
            assert_latest_names(dir, "base");
        }
        free(a.master);
    }
    cr_assert(saved, "no save went through with its K-th write failing, K <= 64");
    cr_assert_gt(failed, 0, "no write of the save failed");
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

/* A read error while the entries are read into the state (the store's fault
 * injection fails the first read request of every shard file): the same
 * message on every rank, naming the file and the tensor, and the engine
 * broken on every rank. */
Test(ckpt_bad_input, read_error_breaks)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, STEPS, "t"), "%s", ck_phase_error(&saved.phase));
    const char *dir = saved.dir;

    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    setenv("ZC_NVME_FAULTS", "eio=1", 1);
    ck_phase tried = {.run = &run, .load_dir = dir, .first = 0, .n = STEPS};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    unsetenv("ZC_NVME_FAULTS");
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(tried.load_rc[r], ZC_ERR_IO, "rank %d: %s", r, tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "failed on rank 0 of 2"), "'%s'",
                           tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "rank_00000.bin"), "'%s'",
                           tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "tensor 'p0' (master)"), "'%s'",
                           tried.load_msg[r]);
        cr_assert(tried.broken[r], "rank %d: the engine is not broken", r);
    }
    cr_assert_str_eq(tried.load_msg[0], tried.load_msg[1]);
    free(tried.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

/* The read buffers cannot be allocated on one rank (the first pinned
 * allocation of the phase fails, on whichever rank gets there first): found
 * before anything is read, agreed, the same message on every rank, and the
 * engine unchanged. */
Test(ckpt_bad_input, read_buffers_refused_on_one_rank)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, STEPS, "t"), "%s", ck_phase_error(&saved.phase));
    const char *dir = saved.dir;

    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_phase never = {.run = &run, .first = 0, .n = STEPS};
    cr_assert(ck_phase_run(&never), "%s", ck_phase_error(&never));
    ck_phase tried = {.run = &run, .load_dir = dir, .first = 0, .n = STEPS,
                      .fail_pinned_alloc = 1};
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(tried.load_rc[r], ZC_ERR_NO_MEMORY, "rank %d: %s", r, tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], "checkpoint read buffers"), "'%s'",
                           tried.load_msg[r]);
        cr_assert(!tried.broken[r], "rank %d: the engine is broken", r);
    }
    cr_assert_str_eq(tried.load_msg[0], tried.load_msg[1]);
    cr_assert(memcmp(never.master, tried.master, (size_t)t_total_numel() * 4) == 0,
              "the failed load changed the engine");
    free(never.master);
    free(tried.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}
