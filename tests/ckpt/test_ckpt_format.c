/* The on-disk layout of format version 2 (docs/checkpoint.md): shard files
 * are written with O_DIRECT, so every run of entries starts at a multiple of
 * 4096 bytes, each entry either starts a run or follows the previous one of
 * its file back to back, the gaps are zeros, and a file's size is a multiple
 * of 4096. Checked on the files a 3-rank save writes (uneven shards, several
 * parameters per chunk) against the manifest, and the checkpoint loads. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_phase.h"
#include "helpers.h"

/* The saved checkpoint loads into fresh stage-2 engines of `world` ranks
 * with the master the saving run gathered, bit for bit. */
static void assert_loads_bitwise(const ck_saved *saved, int world)
{
    t_run again;
    t_run_init(&again, 2, world, ZC_DTYPE_F32);
    ck_phase loaded = {.run = &again, .load_dir = saved->dir, .first = 3, .n = 0};
    cr_assert(ck_phase_run(&loaded), "%s", ck_phase_error(&loaded));
    for (int r = 0; r < world; r++)
        cr_assert_eq(loaded.load_rc[r], ZC_OK, "%s", loaded.load_msg[r]);
    cr_assert(memcmp(saved->phase.master, loaded.master, (size_t)t_total_numel() * 4) == 0,
              "the loaded master differs from the saved one");
    free(loaded.master);
}

Test(ckpt_format, runs_are_aligned_padded_with_zeros_and_files_are_whole_blocks)
{
    t_run run;
    t_run_init(&run, 1, 3, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &run, 3, "t"), "%s", ck_phase_error(&saved.phase));
    const char *dir = saved.dir;

    char p[800];
    snprintf(p, sizeof p, "%s/t/manifest.json", dir);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(root, "version")), 2);
    json_t *files = json_object_get(root, "files"), *ents = json_object_get(root, "tensors");
    const size_t nf = json_array_size(files);
    cr_assert_eq(nf, 3);
    int64_t runs = 0;
    for (size_t f = 0; f < nf; f++) {
        json_t *fo = json_array_get(files, f);
        const int64_t bytes = json_integer_value(json_object_get(fo, "bytes"));
        cr_assert_eq(bytes % 4096, 0, "file %zu: %lld bytes", f, (long long)bytes);
        snprintf(p, sizeof p, "%s/t/%s", dir, json_string_value(json_object_get(fo, "name")));
        FILE *fp = fopen(p, "rb");
        cr_assert_not_null(fp, "%s", p);
        unsigned char *data = malloc((size_t)bytes + 1), *used = calloc((size_t)bytes + 1, 1);
        cr_assert_eq(fread(data, 1, (size_t)bytes, fp), (size_t)bytes);
        fclose(fp);
        int64_t end = 0; /* end of the previous entry of this file */
        for (size_t i = 0; i < json_array_size(ents); i++) {
            json_t *e = json_array_get(ents, i);
            if ((size_t)json_integer_value(json_array_get(e, 2)) != f)
                continue;
            const int64_t len = (json_integer_value(json_array_get(e, 4)) -
                                 json_integer_value(json_array_get(e, 3))) * 4;
            const int64_t off = json_integer_value(json_array_get(e, 5));
            cr_assert(off == end || (off % 4096 == 0 && off > end && off - end < 4096),
                      "file %zu: an entry at %lld after one ending at %lld", f, (long long)off,
                      (long long)end);
            if (off != end || end == 0)
                runs++;
            memset(used + off, 1, (size_t)len);
            end = off + len;
        }
        for (int64_t b = 0; b < bytes; b++)
            cr_assert(used[b] || data[b] == 0, "file %zu: padding byte %lld is %d", f,
                      (long long)b, data[b]);
        free(data);
        free(used);
    }
    cr_assert_gt(runs, 3, "several runs per file");
    json_decref(root);

    assert_loads_bitwise(&saved, 3);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

/* Rewrites checkpoint ck (format 2) as format 1 wrote it: each file's
 * entries back to back in file order, no padding, the offsets and sizes in
 * the manifest to match, version 1. */
static void to_version1(const char *ck)
{
    char p[800];
    snprintf(p, sizeof p, "%s/manifest.json", ck);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *files = json_object_get(root, "files"), *ents = json_object_get(root, "tensors");
    for (size_t f = 0; f < json_array_size(files); f++) {
        json_t *fo = json_array_get(files, f);
        const int64_t bytes = json_integer_value(json_object_get(fo, "bytes"));
        snprintf(p, sizeof p, "%s/%s", ck, json_string_value(json_object_get(fo, "name")));
        FILE *fp = fopen(p, "rb");
        cr_assert_not_null(fp, "%s", p);
        unsigned char *in = malloc((size_t)bytes + 1), *out = malloc((size_t)bytes + 1);
        cr_assert_eq(fread(in, 1, (size_t)bytes, fp), (size_t)bytes);
        fclose(fp);
        int64_t at = 0;
        for (size_t i = 0; i < json_array_size(ents); i++) { /* in file order */
            json_t *e = json_array_get(ents, i);
            if ((size_t)json_integer_value(json_array_get(e, 2)) != f)
                continue;
            const int64_t len = (json_integer_value(json_array_get(e, 4)) -
                                 json_integer_value(json_array_get(e, 3))) * 4;
            const int64_t off = json_integer_value(json_array_get(e, 5));
            memcpy(out + at, in + off, (size_t)len);
            json_array_set_new(e, 5, json_integer(at));
            at += len;
        }
        cr_assert_lt(at, bytes, "file %zu: the padding should have gone", f);
        json_object_set_new(fo, "bytes", json_integer(at));
        fp = fopen(p, "wb");
        cr_assert_not_null(fp, "%s", p);
        cr_assert_eq(fwrite(out, 1, (size_t)at, fp), (size_t)at);
        fclose(fp);
        free(in);
        free(out);
    }
    json_object_set_new(root, "version", json_integer(1));
    snprintf(p, sizeof p, "%s/manifest.json", ck);
    cr_assert_eq(json_dump_file(root, p, JSON_PRESERVE_ORDER), 0);
    json_decref(root);
}

/* Format 1 (entries back to back, files of any size) still loads, through
 * the verify-then-pread path, bitwise as the format-2 original; a flipped
 * byte there is still refused before anything changes. */
Test(ckpt_format, version1_loads)
{
    t_run run;
    t_run_init(&run, 1, 3, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &run, 3, "t"), "%s", ck_phase_error(&saved.phase));
    char ck[700];
    snprintf(ck, sizeof ck, "%s/t", saved.dir);
    to_version1(ck);
    assert_loads_bitwise(&saved, 2);

    char p[800];
    snprintf(p, sizeof p, "%s/rank_00002.bin", ck);
    FILE *fp = fopen(p, "r+b");
    cr_assert_not_null(fp);
    unsigned char b;
    cr_assert_eq(fseek(fp, 40, SEEK_SET), 0);
    cr_assert_eq(fread(&b, 1, 1, fp), 1);
    b ^= 0x01;
    cr_assert_eq(fseek(fp, 40, SEEK_SET), 0);
    cr_assert_eq(fwrite(&b, 1, 1, fp), 1);
    fclose(fp);
    t_run again;
    t_run_init(&again, 2, 2, ZC_DTYPE_F32);
    ck_phase damaged = {.run = &again, .load_dir = saved.dir, .first = 3, .n = 0};
    cr_assert(ck_phase_run(&damaged), "%s", ck_phase_error(&damaged));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(damaged.load_rc[r], ZC_ERR_IO, "%s", damaged.load_msg[r]);
        cr_assert_not_null(strstr(damaged.load_msg[r], "rank_00002.bin: checksum mismatch"),
                           "%s", damaged.load_msg[r]);
        cr_assert(!damaged.broken[r], "a version-1 load verifies before it changes anything");
    }
    free(damaged.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}
