/* Nothing outside what a save created is deleted or written.
 *
 * A "victim" directory holds files with the very names a save writes
 * (rank_00000.bin, rank_00001.idx, manifest.json, even the staging marker)
 * and must survive every case untouched, byte for byte:
 *   - DIR/.x.partial is a symbolic link to it: the save is refused on every
 *     rank, naming the link, and the link stays;
 *   - DIR/.x.partial is a real directory with such files but no marker (not
 *     made by a zeroc save): refused, nothing removed;
 *   - a marked (crashed) staging directory whose entries are links into the
 *     victim: the links go, their targets stay;
 *   - DIR/latest and DIR/latest.tmp are links into the victim: the save
 *     replaces the links, never writes through them;
 *   - the reshard's output staging directory is a link: refused, likewise.
 * Each refusal changes nothing in the engine either: it trains on. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_phase.h"
#include "helpers.h"

#define NVICTIM 5
static const char *const victim_names[NVICTIM] = {"rank_00000.bin", "rank_00001.idx",
                                                  "manifest.json", ".zeroc-staging", "notes.txt"};

/* A directory of files that must survive. */
static char *make_victim(void)
{
    char *v = ck_tmpdir();
    cr_assert_not_null(v);
    for (int i = 0; i < NVICTIM; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", v, victim_names[i]);
        FILE *f = fopen(p, "wx");
        cr_assert_not_null(f, "%s", p);
        fprintf(f, "precious %d", i);
        fclose(f);
    }
    return v;
}

/* The victim holds exactly its files, each with its own bytes. */
static void assert_victim_intact(const char *v)
{
    int n = 0;
    DIR *d = opendir(v);
    cr_assert_not_null(d);
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    cr_assert_eq(n, NVICTIM, "the victim directory holds %d entries, not %d", n, NVICTIM);
    for (int i = 0; i < NVICTIM; i++) {
        char p[800], got[64] = "", want[64];
        snprintf(p, sizeof p, "%s/%s", v, victim_names[i]);
        FILE *f = fopen(p, "r");
        cr_assert_not_null(f, "%s was removed", p);
        cr_assert_not_null(fgets(got, sizeof got, f), "%s was emptied", p);
        fclose(f);
        snprintf(want, sizeof want, "precious %d", i);
        cr_assert_str_eq(got, want, "%s was written", p);
    }
}

/* A save of tag x into dir, 2 ranks, after 2 steps; its statuses. */
static ck_phase save_x(t_run *run, const char *dir)
{
    t_run_init(run, 2, 2, ZC_DTYPE_F32);
    ck_phase a = {.run = run, .first = 0, .n = 2, .save_dir = dir, .save_tag = "x"};
    cr_assert(ck_phase_run(&a), "%s", ck_phase_error(&a));
    return a;
}

static void assert_refused(const ck_phase *a, const char *needle)
{
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(a->save_rc[r], ZC_ERR_IO, "rank %d: %s", r, a->save_msg[r]);
        cr_assert_not_null(strstr(a->save_msg[r], needle), "rank %d: '%s' lacks '%s'", r,
                           a->save_msg[r], needle);
    }
}

Test(ckpt_staging, symlinked_staging_refused_and_target_untouched)
{
    char *dir = ck_tmpdir(), *victim = make_victim();
    char sp[800], p[800];
    snprintf(sp, sizeof sp, "%s/.x.partial", dir);
    cr_assert_eq(symlink(victim, sp), 0);
    t_run run;
    ck_phase a = save_x(&run, dir);
    assert_refused(&a, ".x.partial is a symbolic link, not a staging directory a zeroc save "
                       "made");
    assert_victim_intact(victim);
    struct stat st;
    cr_assert_eq(lstat(sp, &st), 0, "the link was removed");
    cr_assert(S_ISLNK(st.st_mode));
    snprintf(p, sizeof p, "%s/x", dir);
    cr_assert_neq(access(p, F_OK), 0, "a checkpoint appeared");
    free(a.master);
    ck_rm_tree(dir);
    ck_rm_tree(victim);
    free(dir);
    free(victim);
    t_assert_no_leaks();
}

/* The same directory, not a link, but without the marker: not a save's. */
Test(ckpt_staging, unmarked_staging_refused_and_kept)
{
    char *dir = ck_tmpdir(), *victim = make_victim();
    char sp[800];
    snprintf(sp, sizeof sp, "%s/.x.partial", dir);
    char marker[800];
    snprintf(marker, sizeof marker, "%s/.zeroc-staging", victim);
    cr_assert_eq(unlink(marker), 0);
    cr_assert_eq(rename(victim, sp), 0);
    t_run run;
    ck_phase a = save_x(&run, dir);
    assert_refused(&a, ".x.partial was not made by a zeroc save (it lacks .zeroc-staging)");
    /* Put back as it was and check every file. */
    cr_assert_eq(rename(sp, victim), 0);
    FILE *f = fopen(marker, "wx");
    cr_assert_not_null(f);
    fputs("precious 3", f);
    fclose(f);
    assert_victim_intact(victim);
    free(a.master);
    ck_rm_tree(dir);
    ck_rm_tree(victim);
    free(dir);
    free(victim);
    t_assert_no_leaks();
}

/* A crashed save's staging directory (marked) whose entries are links into
 * the victim: clearing it removes the links, never what they point to; the
 * save then goes through and loads. */
Test(ckpt_staging, links_inside_a_stale_staging_are_removed_not_followed)
{
    char *dir = ck_tmpdir(), *victim = make_victim();
    char sp[800], p[900], t[900];
    snprintf(sp, sizeof sp, "%s/.x.partial", dir);
    cr_assert_eq(mkdir(sp, 0755), 0);
    snprintf(p, sizeof p, "%s/.zeroc-staging", sp);
    FILE *f = fopen(p, "wx");
    cr_assert_not_null(f);
    fclose(f);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", sp, victim_names[i]);
        snprintf(t, sizeof t, "%s/%s", victim, victim_names[i]);
        cr_assert_eq(symlink(t, p), 0);
    }
    t_run run;
    ck_phase a = save_x(&run, dir);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(a.save_rc[r], ZC_OK, "rank %d: %s", r, a.save_msg[r]);
    assert_victim_intact(victim);
    cr_assert_neq(access(sp, F_OK), 0, "the staging directory is still there");
    ck_phase b = {.run = &run, .load_dir = dir, .first = 2, .n = 0};
    cr_assert(ck_phase_run(&b), "%s", ck_phase_error(&b));
    cr_assert_eq(b.load_rc[0], ZC_OK, "%s", b.load_msg[0]);
    cr_assert(memcmp(a.master, b.master, (size_t)t_total_numel() * 4) == 0);
    free(a.master);
    free(b.master);
    ck_rm_tree(dir);
    ck_rm_tree(victim);
    free(dir);
    free(victim);
    t_assert_no_leaks();
}

/* DIR/latest and a crashed save's DIR/latest.tmp are links to victim files:
 * the save replaces the link `latest` by its own file and removes the link
 * latest.tmp, writing through neither. */
Test(ckpt_staging, latest_links_replaced_not_written_through)
{
    char *dir = ck_tmpdir(), *victim = make_victim();
    char p[800], t[800];
    snprintf(p, sizeof p, "%s/latest", dir);
    snprintf(t, sizeof t, "%s/manifest.json", victim);
    cr_assert_eq(symlink(t, p), 0);
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    snprintf(t, sizeof t, "%s/notes.txt", victim);
    cr_assert_eq(symlink(t, p), 0);
    t_run run;
    ck_phase a = save_x(&run, dir);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(a.save_rc[r], ZC_OK, "rank %d: %s", r, a.save_msg[r]);
    assert_victim_intact(victim);
    snprintf(p, sizeof p, "%s/latest", dir);
    struct stat st;
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "latest is still a link");
    FILE *f = fopen(p, "r");
    char line[32] = "";
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    cr_assert_str_eq(line, "x\n");
    free(a.master);
    ck_rm_tree(dir);
    ck_rm_tree(victim);
    free(dir);
    free(victim);
    t_assert_no_leaks();
}

/* zc_checkpoint_reshard into OUT whose OUT/.x.partial is a link to the
 * victim: refused, victim untouched, OUT/latest not written. */
Test(ckpt_staging, reshard_symlinked_staging_refused)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, 2, "x"), "%s", ck_phase_error(&saved.phase));
    char *out = ck_tmpdir(), *victim = make_victim();
    char sp[800], p[800];
    snprintf(sp, sizeof sp, "%s/.x.partial", out);
    cr_assert_eq(symlink(victim, sp), 0);
    zc_status rc = zc_checkpoint_reshard(saved.dir, NULL, out, 3);
    cr_assert_eq(rc, ZC_ERR_IO);
    cr_assert_not_null(strstr(zc_last_error(), ".x.partial is a symbolic link"), "%s",
                       zc_last_error());
    assert_victim_intact(victim);
    snprintf(p, sizeof p, "%s/latest", out);
    cr_assert_neq(access(p, F_OK), 0, "latest was written");
    /* Without the link it goes through, under the input's tag. */
    cr_assert_eq(unlink(sp), 0);
    cr_assert_eq(zc_checkpoint_reshard(saved.dir, NULL, out, 3), ZC_OK, "%s", zc_last_error());
    snprintf(p, sizeof p, "%s/x/rank_00002.bin", out);
    cr_assert_eq(access(p, F_OK), 0);
    ck_saved_free(&saved);
    ck_rm_tree(out);
    ck_rm_tree(victim);
    free(out);
    free(victim);
    t_assert_no_leaks();
}

/* The reshard names its output after the input directory's tag, even when
 * the manifest's "tag" field says something else (a renamed checkpoint). */
Test(ckpt_staging, reshard_writes_under_the_directory_tag)
{
    t_run save_run;
    t_run_init(&save_run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &save_run, 2, "x"), "%s", ck_phase_error(&saved.phase));
    char from[800], to[800], p[800];
    snprintf(from, sizeof from, "%s/x", saved.dir);
    snprintf(to, sizeof to, "%s/renamed", saved.dir);
    cr_assert_eq(rename(from, to), 0);
    char *out = ck_tmpdir();
    cr_assert_eq(zc_checkpoint_reshard(saved.dir, "renamed", out, 3), ZC_OK, "%s",
                 zc_last_error());
    snprintf(p, sizeof p, "%s/renamed/manifest.json", out);
    cr_assert_eq(access(p, F_OK), 0, "not written under the directory's tag");
    snprintf(p, sizeof p, "%s/x", out);
    cr_assert_neq(access(p, F_OK), 0, "written under the manifest's tag");
    snprintf(p, sizeof p, "%s/latest", out);
    FILE *f = fopen(p, "r");
    char line[32] = "";
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    cr_assert_str_eq(line, "renamed\n");
    ck_saved_free(&saved);
    ck_rm_tree(out);
    free(out);
    t_assert_no_leaks();
}
