/* The checksums a save records are XXH3-64 of each entry's bytes, computed
 * here independently: xxHash's scalar code compiled into this test, one call
 * per entry (the save hashes on a worker thread, piece by piece, with the
 * library's vector code).
 *
 * - The shard writer (src/ckpt/shard_write.c) fed entries of sizes chosen
 *   against its ring (pieces of 256 KiB, four buffers of 4 MiB): entries
 *   several to a piece, ending one byte past a piece, exactly one piece, one
 *   buffer, spanning buffers, and longer than the whole ring; runs of several
 *   entries starting mid-buffer. The file holds the bytes put, and the index
 *   each entry's checksum.
 * - The engine's save (3 ranks): every entry of the manifest against the
 *   bytes of its file. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The reference: static copies of xxHash's functions, scalar code only. */
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_SCALAR
#include <xxhash.h>

#include "ck_phase.h"
#include "ckpt/dirwrite.h"
#include "ckpt/hash_worker.h"
#include "ckpt/shard_write.h"
#include "helpers.h"

static uint64_t ref_xxh3(const void *p, size_t n) { return XXH3_64bits(p, n); }

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s", path);
    cr_assert_eq(fseek(fp, 0, SEEK_END), 0);
    long len = ftell(fp);
    cr_assert_geq(len, 0);
    rewind(fp);
    unsigned char *b = malloc((size_t)len + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)len, fp), (size_t)len, "%s", path);
    fclose(fp);
    *n = (size_t)len;
    return b;
}

/* A value sequence of its own for each entry (xorshift64*), so no two
 * entries' bytes agree and an entry hashed in another's place is caught. */
static void fill(float *v, int64_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        const uint32_t u = (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
        memcpy(&v[i], &u, 4); /* any bits: the checksum is of bytes */
    }
}

#define PIECE_F (65536)   /* floats in a 256 KiB piece */
#define SLOT_F (1048576)  /* floats in a 4 MiB ring buffer */

/* Entries in file order; pad_after: the run ends after this entry. */
static const struct {
    int64_t n;
    bool pad_after;
} entries[] = {
    {1, false},           {7, false},      {1000, true},  /* several to a piece */
    {PIECE_F, true},                                      /* exactly a piece */
    {PIECE_F + 1, false}, {3, true},                      /* one byte past a piece, then a tail */
    {SLOT_F, true},                                       /* exactly a buffer */
    {5, false},           {SLOT_F - 1, true},             /* a run starting mid-buffer */
    {2500000, false},     {129, true},                    /* across buffers */
    {4 * SLOT_F + 11, true},                              /* longer than the ring */
    {64, true},
};
#define NENT ((int)(sizeof entries / sizeof entries[0]))

static void shard_writer_case(void)
{
    char *dir = ck_tmpdir();
    uint64_t capacity = 0, run = 0;
    for (int i = 0; i < NENT; i++) {
        run += (uint64_t)entries[i].n * 4;
        if (entries[i].pad_after) {
            capacity += zc__ck_run_bytes(run);
            run = 0;
        }
    }
    cr_assert_eq(run, 0);
    cr_assert_eq(zc__ck_stage_open(dir, "t"), ZC_OK, "%s", zc_last_error());
    zc_ck_shard sh;
    cr_assert_eq(zc__ck_shard_open(&sh, dir, "t", 0, capacity), ZC_OK, "%s", zc_last_error());
    float *vals[NENT];
    uint64_t want[NENT], where[NENT];
    for (int i = 0; i < NENT; i++) {
        vals[i] = malloc((size_t)entries[i].n * 4);
        cr_assert_not_null(vals[i]);
        fill(vals[i], entries[i].n, (uint64_t)i + 1);
        want[i] = ref_xxh3(vals[i], (size_t)entries[i].n * 4);
        where[i] = sh.bytes;
        cr_assert_eq(zc__ck_shard_put(&sh, i, 0, 0, entries[i].n, vals[i]), ZC_OK, "%s",
                     zc_last_error());
        if (entries[i].pad_after)
            cr_assert_eq(zc__ck_shard_pad(&sh), ZC_OK, "%s", zc_last_error());
    }
    cr_assert_eq(zc__ck_shard_close(&sh), ZC_OK, "%s", zc_last_error());
    zc__ck_shard_discard(&sh);

    char p[800];
    snprintf(p, sizeof p, "%s/.t.partial/rank_00000.bin", dir);
    size_t fbytes;
    unsigned char *file = read_file(p, &fbytes);
    cr_assert_eq(fbytes, capacity);
    snprintf(p, sizeof p, "%s/.t.partial/rank_00000.idx", dir);
    size_t ibytes;
    unsigned char *idx = read_file(p, &ibytes);
    uint64_t head[3];
    cr_assert_eq(ibytes, sizeof head + NENT * sizeof(zc_ck_entry));
    memcpy(head, idx, sizeof head);
    cr_assert_eq(head[1], (uint64_t)NENT);
    cr_assert_eq(head[2], capacity);
    for (int i = 0; i < NENT; i++) {
        zc_ck_entry e;
        memcpy(&e, idx + sizeof head + (size_t)i * sizeof e, sizeof e);
        const size_t len = (size_t)entries[i].n * 4;
        cr_assert_eq(e.param, i);
        cr_assert_eq(e.end - e.begin, entries[i].n);
        cr_assert_eq(e.offset, where[i], "entry %d at %llu, put at %llu", i,
                     (unsigned long long)e.offset, (unsigned long long)where[i]);
        cr_assert(memcmp(file + e.offset, vals[i], len) == 0, "entry %d: the file differs", i);
        cr_assert_eq(e.xxh3, want[i], "entry %d (%lld floats): recorded %016llx, XXH3 %016llx",
                     i, (long long)entries[i].n, (unsigned long long)e.xxh3,
                     (unsigned long long)want[i]);
        free(vals[i]);
    }
    free(file);
    free(idx);
    zc__ck_stage_abort(dir, "t");
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

Test(ckpt_checksums, shard_writer_matches_independent_xxh3_at_every_ring_boundary)
{
    shard_writer_case();
}

/* The worker far behind the writer (2 ms a piece, the writer a few hundred
 * microseconds): each ring buffer is refilled only after its pieces were
 * hashed, so the checksums are still those of the bytes put. */
Test(ckpt_checksums, shard_writer_waits_for_a_slow_worker)
{
    zc__ck_hasher_slow_for_tests(2000);
    shard_writer_case();
    zc__ck_hasher_slow_for_tests(0);
}

static uint64_t hex64(const char *s)
{
    cr_assert_not_null(s);
    cr_assert_eq(strlen(s), 16, "'%s'", s);
    return strtoull(s, NULL, 16);
}

Test(ckpt_checksums, engine_save_matches_independent_xxh3_of_the_files)
{
    t_run run;
    t_run_init(&run, 2, 3, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &run, 3, "t"), "%s", ck_phase_error(&saved.phase));
    char p[800];
    snprintf(p, sizeof p, "%s/t/manifest.json", saved.dir);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *files = json_object_get(root, "files"), *ents = json_object_get(root, "tensors");
    const size_t nf = json_array_size(files);
    cr_assert_eq(nf, 3);
    size_t checked = 0;
    for (size_t f = 0; f < nf; f++) {
        json_t *fo = json_array_get(files, f);
        snprintf(p, sizeof p, "%s/t/%s", saved.dir,
                 json_string_value(json_object_get(fo, "name")));
        size_t bytes;
        unsigned char *data = read_file(p, &bytes);
        for (size_t i = 0; i < json_array_size(ents); i++) {
            json_t *e = json_array_get(ents, i);
            if ((size_t)json_integer_value(json_array_get(e, 2)) != f)
                continue;
            const int64_t len = (json_integer_value(json_array_get(e, 4)) -
                                 json_integer_value(json_array_get(e, 3))) * 4;
            const int64_t off = json_integer_value(json_array_get(e, 5));
            cr_assert_leq((size_t)(off + len), bytes);
            const uint64_t rec = hex64(json_string_value(json_array_get(e, 6)));
            cr_assert_eq(rec, ref_xxh3(data + off, (size_t)len),
                         "file %zu, entry %zu at %lld: recorded %016llx", f, i, (long long)off,
                         (unsigned long long)rec);
            checked++;
        }
        free(data);
    }
    cr_assert_gt(checked, 3 * 3, "entries of every kind on every rank");
    json_decref(root);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}
