/* The checksums a save records are XXH3-64 of each entry's bytes, computed
 * here independently: xxHash's scalar code compiled into this test, one call
 * per entry (the save hashes on a worker thread, piece by piece, with the
 * library's vector code).
 *
 * - The shard writer (src/ckpt/shard_write.c) fed entries of sizes chosen
 *   against its ring (pieces of 256 KiB, ZC_CK_RING_SLOTS buffers of 4 MiB): entries
 *   several to a piece, ending one byte past a piece, exactly one piece, one
 *   buffer, spanning buffers, and longer than the whole ring; runs of several
 *   entries starting mid-buffer. The file holds the bytes put, and the index
 *   each entry's checksum.
 * - The same for values the caller keeps (zc__ck_shard_put_kept), written
 *   from their memory where address and file offset align: runs aligned,
 *   skewed, with a head and a tail, longer than the ring, short; the bytes so
 *   written counted against the rule, the file and checksums as above.
 * - The engine's save (3 ranks): every entry of the manifest against the
 *   bytes of its file.
 * - A load of a shard file several times the read ring, with the worker
 *   slowed down, brings back the saved master bit for bit: a ring buffer is
 *   read into again only after its bytes were hashed.
 * - The load hashes on the worker too, behind its copy: a flipped byte in
 *   the last entry a rank reads (found only after that entry, by
 *   zc__ck_reader_finish) or in an earlier one with the worker slowed down
 *   still fails the load on every rank, naming the entry, and breaks the
 *   engines. */
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

/* The shards here hold fp32 values of every kind. */
static const zc_dtype all_fp32[ZC_CK__KINDS] = {ZC_DTYPE_F32, ZC_DTYPE_F32, ZC_DTYPE_F32};

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
    {ZC_CK_RING_SLOTS * SLOT_F + 11, true},               /* longer than the ring */
    {64, true},
};
#define NENT ((int)(sizeof entries / sizeof entries[0]))

/* Writes the entries (values from seed) as tag's shard through the ring kept
 * in *keep (NULL: a ring of its own) and checks the file and the index
 * against them; returns the ring's address. */
static const void *shard_writer_pass(const char *dir, const char *tag, uint64_t seed,
                                     zc_mem_account *acct, zc_ck_ring_mem **keep)
{
    uint64_t capacity = 0, run = 0;
    for (int i = 0; i < NENT; i++) {
        run += (uint64_t)entries[i].n * 4;
        if (entries[i].pad_after) {
            capacity += zc__ck_run_bytes(run);
            run = 0;
        }
    }
    cr_assert_eq(run, 0);
    cr_assert_eq(zc__ck_stage_open(dir, tag), ZC_OK, "%s", zc_last_error());
    zc_ck_shard sh;
    cr_assert_eq(zc__ck_shard_open(&sh, dir, tag, 0, capacity, all_fp32, acct, keep), ZC_OK, "%s",
                 zc_last_error());
    const void *ring = sh.ring;
    float *vals[NENT];
    uint64_t want[NENT], where[NENT];
    for (int i = 0; i < NENT; i++) {
        vals[i] = malloc((size_t)entries[i].n * 4);
        cr_assert_not_null(vals[i]);
        fill(vals[i], entries[i].n, seed + (uint64_t)i + 1);
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
    snprintf(p, sizeof p, "%s/.%s.partial/rank_00000.bin", dir, tag);
    size_t fbytes;
    unsigned char *file = read_file(p, &fbytes);
    cr_assert_eq(fbytes, capacity);
    snprintf(p, sizeof p, "%s/.%s.partial/rank_00000.idx", dir, tag);
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
    zc__ck_stage_abort(dir, tag);
    return ring;
}

static void shard_writer_case(void)
{
    char *dir = ck_tmpdir();
    shard_writer_pass(dir, "t", 0, NULL, NULL);
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

/* An engine's save keeps its ring for the next one (ring_mem.h): the second
 * shard is written through the same buffers, which still hold the first
 * one's bytes, and matches its own values; the buffers are counted in the
 * account while kept and given back at the release. */
Test(ckpt_checksums, a_kept_ring_is_reused_and_each_shard_matches_its_own_bytes)
{
    char *dir = ck_tmpdir();
    zc_mem_account acct;
    memset(&acct, 0, sizeof acct);
    zc_ck_ring_mem *keep = NULL;
    const void *first = shard_writer_pass(dir, "t", 0, &acct, &keep);
    cr_assert_not_null(keep);
    cr_assert_eq(first, keep->base);
    const int64_t held = atomic_load(&acct.kind_total[ZC_MEMKIND_PINNED]);
    cr_assert_eq(held, (int64_t)keep->bytes, "%lld bytes counted while kept", (long long)held);
    const void *second = shard_writer_pass(dir, "u", 1000, &acct, &keep);
    cr_assert_eq(second, first, "the second save did not reuse the kept ring");
    cr_assert_eq(atomic_load(&acct.kind_total[ZC_MEMKIND_PINNED]), held);
    zc__ck_ring_release(&keep);
    cr_assert_null(keep);
    cr_assert_eq(atomic_load(&acct.kind_total[ZC_MEMKIND_PINNED]), 0);
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

static bool staged_file(const char *dir, const char *tag, const char *name)
{
    char p[800];
    snprintf(p, sizeof p, "%s/.%s.partial/%s", dir, tag, name);
    return access(p, F_OK) == 0;
}

/* A write that fails after the seal (ENOSPC at its completion, found by the
 * close's fsync): the close says so, and the discard removes the file under
 * its final name and the index the seal wrote. */
Test(ckpt_checksums, a_shard_whose_write_fails_after_the_seal_leaves_nothing)
{
    char *dir = ck_tmpdir();
    cr_assert_eq(zc__ck_stage_open(dir, "f"), ZC_OK, "%s", zc_last_error());
    const int64_t n = 1 << 18; /* 1 MiB: one write, in flight at the seal */
    zc_ck_shard sh;
    cr_assert_eq(zc__ck_shard_open(&sh, dir, "f", 0, (uint64_t)n * 4, all_fp32, NULL, NULL), ZC_OK, "%s",
                 zc_last_error());
    zc_nvme_faults f = {.enospc_write_at = 1};
    zc__nvme_set_faults(sh.st, &f);
    float *v = malloc((size_t)n * 4);
    cr_assert_not_null(v);
    fill(v, n, 7);
    cr_assert_eq(zc__ck_shard_append(&sh, 0, 0, 0, n, v), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__ck_shard_seal(&sh), ZC_OK, "%s", zc_last_error());
    cr_assert(staged_file(dir, "f", "rank_00000.bin"), "no file under its final name");
    cr_assert(staged_file(dir, "f", "rank_00000.idx"), "no index after the seal");
    cr_assert_eq(zc__ck_shard_close(&sh), ZC_ERR_IO);
    cr_assert_not_null(strstr(zc_last_error(), "No space left on device"), "'%s'",
                       zc_last_error());
    zc__ck_shard_discard(&sh);
    cr_assert(!staged_file(dir, "f", "rank_00000.bin"), "the file is left");
    cr_assert(!staged_file(dir, "f", "rank_00000.bin.tmp"), "a temporary file is left");
    cr_assert(!staged_file(dir, "f", "rank_00000.idx"), "the index is left");
    free(v);
    zc__ck_stage_abort(dir, "f");
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

/* Values kept for the shard writer (zc__ck_shard_put_kept), laid out as an
 * engine's runs are: each run's entries back to back in memory, the run at
 * `skew` bytes past a page boundary. */
static const struct {
    int64_t n[3]; /* its entries (0: none) */
    size_t skew;
} kept_runs[] = {
    {{SLOT_F, 0, 0}, 0},                       /* aligned, a whole buffer: all direct */
    {{3 * SLOT_F + 5, 0, 0}, 4},               /* off by 4 bytes from the file: copied */
    {{5, 3 * SLOT_F + 7, 1000}, 0},            /* head copied to the boundary, bulk
                                                  direct, tail and the next copied */
    {{ZC_CK_RING_SLOTS * SLOT_F + 11, 0, 0}, 0}, /* more writes than the ring has buffers */
    {{1000, 0, 0}, 0},                         /* aligned but short: copied */
    {{PIECE_F + 1, 0, 0}, 0},                  /* just over the direct minimum: a
                                                  direct write of a piece, the tail copied */
};
#define NKEPT ((int)(sizeof kept_runs / sizeof kept_runs[0]))

/* Bytes the rule in shard_write.h writes straight from memory for an entry
 * of len bytes at address addr and file offset off: from the first offset
 * where both are 4096-aligned, whole 4 KiB blocks, if 256 KiB or more. */
static uint64_t direct_rule(uintptr_t addr, uint64_t off, uint64_t len)
{
    if ((addr - off) % 4096)
        return 0;
    const uint64_t head = (4096 - off % 4096) % 4096;
    return len >= head + ((uint64_t)256 << 10) ? (len - head) / 4096 * 4096 : 0;
}

/* esz: bytes an element of the kind written (4: fp32, 2: bf16, where the
 * entries' element counts make other byte lengths and alignments). */
static void kept_values_case(size_t esz)
{
    char *dir = ck_tmpdir();
    const zc_dtype kdt[ZC_CK__KINDS] = {ZC_DTYPE_F32, esz == 2 ? ZC_DTYPE_BF16 : ZC_DTYPE_F32,
                                        ZC_DTYPE_F32};
    uint64_t capacity = 0, mem_bytes = 0;
    for (int r = 0; r < NKEPT; r++) {
        uint64_t run = 0;
        for (int j = 0; j < 3; j++)
            run += (uint64_t)kept_runs[r].n[j] * esz;
        capacity += zc__ck_run_bytes(run);
        mem_bytes += zc__ck_run_bytes(run) + 4096;
    }
    unsigned char *mem = NULL;
    cr_assert_eq(posix_memalign((void **)&mem, (size_t)2 << 20, mem_bytes), 0);
    cr_assert_eq(zc__ck_stage_open(dir, "k"), ZC_OK, "%s", zc_last_error());
    zc_ck_shard sh;
    cr_assert_eq(zc__ck_shard_open(&sh, dir, "k", 0, capacity, kdt, NULL, NULL), ZC_OK, "%s",
                 zc_last_error());
    enum { MAXE = 3 * (sizeof kept_runs / sizeof kept_runs[0]) };
    const float *vals[MAXE];
    uint64_t want[MAXE], where[MAXE], len[MAXE], direct = 0;
    int ne = 0;
    size_t at = 0;
    for (int r = 0; r < NKEPT; r++) {
        at = (at + 4095) / 4096 * 4096 + kept_runs[r].skew;
        for (int j = 0; j < 3 && kept_runs[r].n[j]; j++, ne++) {
            len[ne] = (uint64_t)kept_runs[r].n[j] * esz;
            float *v = (float *)(mem + at);
            /* Random bytes: whole floats over the entry's bytes (the last
             * may run 2 bytes into the slack after the run). */
            fill(v, (int64_t)((len[ne] + 3) / 4), (uint64_t)ne + 77);
            vals[ne] = v;
            want[ne] = ref_xxh3(v, len[ne]);
            where[ne] = sh.bytes;
            direct += direct_rule((uintptr_t)v, sh.bytes, len[ne]);
            cr_assert_eq(zc__ck_shard_put_kept(&sh, ne, 1, 0, kept_runs[r].n[j], v), ZC_OK,
                         "%s", zc_last_error());
            at += len[ne];
        }
        cr_assert_eq(zc__ck_shard_pad(&sh), ZC_OK, "%s", zc_last_error());
    }
    /* Most of the bytes go straight: more than 12 fp32 buffers' worth, and
     * for bf16, the same entries in half the bytes, more than 10. */
    cr_assert_gt(direct, (uint64_t)(ZC_CK_RING_SLOTS + (esz == 4 ? 4 : 2)) * SLOT_F * esz);
    cr_assert_eq(sh.direct_bytes, direct, "%llu bytes written from memory, the rule says %llu",
                 (unsigned long long)sh.direct_bytes, (unsigned long long)direct);
    cr_assert_eq(zc__ck_shard_close(&sh), ZC_OK, "%s", zc_last_error());
    zc__ck_shard_discard(&sh);

    char p[800];
    snprintf(p, sizeof p, "%s/.k.partial/rank_00000.bin", dir);
    size_t fbytes;
    unsigned char *file = read_file(p, &fbytes);
    cr_assert_eq(fbytes, capacity);
    snprintf(p, sizeof p, "%s/.k.partial/rank_00000.idx", dir);
    size_t ibytes;
    unsigned char *idx = read_file(p, &ibytes);
    uint64_t head[3];
    cr_assert_eq(ibytes, sizeof head + (size_t)ne * sizeof(zc_ck_entry));
    memcpy(head, idx, sizeof head);
    cr_assert_eq(head[1], (uint64_t)ne);
    uint64_t end = 0;
    for (int i = 0; i < ne; i++) {
        zc_ck_entry e;
        memcpy(&e, idx + sizeof head + (size_t)i * sizeof e, sizeof e);
        cr_assert_eq(e.param, i);
        cr_assert_eq(e.kind, 1);
        cr_assert_eq(e.offset, where[i]);
        cr_assert(memcmp(file + e.offset, vals[i], len[i]) == 0, "entry %d: the file differs", i);
        cr_assert_eq(e.xxh3, want[i], "entry %d: recorded %016llx, XXH3 %016llx", i,
                     (unsigned long long)e.xxh3, (unsigned long long)want[i]);
        /* The padding between runs is zeros. */
        for (uint64_t b = end; b < e.offset; b++)
            cr_assert_eq(file[b], 0, "byte %llu of padding", (unsigned long long)b);
        end = e.offset + len[i];
    }
    for (uint64_t b = end; b < fbytes; b++)
        cr_assert_eq(file[b], 0, "byte %llu of padding", (unsigned long long)b);
    free(file);
    free(idx);
    free(mem);
    zc__ck_stage_abort(dir, "k");
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}

/* Kept values are written from where they are wherever the address and the
 * file offset align (the count of such bytes is the rule's), through the ring
 * elsewhere, with the same file and checksums as copied ones. */
Test(ckpt_checksums, kept_values_are_written_from_memory_where_aligned)
{
    kept_values_case(4);
}

/* The same for 2-byte (bf16) values: the rule is about bytes, whatever the
 * element. */
Test(ckpt_checksums, kept_bf16_values_are_written_from_memory_where_aligned)
{
    kept_values_case(2);
}

/* The same with the worker far behind: the direct writes' pieces are hashed
 * from the caller's memory after their writes, the ring's after its reuse is
 * waited for; every checksum is still of the bytes written. */
Test(ckpt_checksums, kept_values_with_a_slow_worker)
{
    zc__ck_hasher_slow_for_tests(2000);
    kept_values_case(4);
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

/* Flips a byte of the entry of rank_00001.bin that lies last in the file
 * (last: true) or first; returns its tensor's name and kind in `what`. */
static void flip_entry(const char *ck, bool last, char *what, size_t cap)
{
    char p[800];
    snprintf(p, sizeof p, "%s/manifest.json", ck);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *ents = json_object_get(root, "tensors"), *params = json_object_get(root, "params");
    json_t *pick = NULL;
    for (size_t i = 0; i < json_array_size(ents); i++) {
        json_t *e = json_array_get(ents, i);
        if (json_integer_value(json_array_get(e, 2)) != 1)
            continue;
        const int64_t off = json_integer_value(json_array_get(e, 5));
        if (!pick || (last ? off > json_integer_value(json_array_get(pick, 5))
                           : off < json_integer_value(json_array_get(pick, 5))))
            pick = e;
    }
    cr_assert_not_null(pick);
    const int64_t off = json_integer_value(json_array_get(pick, 5));
    const int64_t len = (json_integer_value(json_array_get(pick, 4)) -
                         json_integer_value(json_array_get(pick, 3))) * 4;
    json_t *param = json_array_get(params, (size_t)json_integer_value(json_array_get(pick, 0)));
    snprintf(what, cap, "tensor '%s' (%s, elements [",
             json_string_value(json_object_get(param, "name")),
             json_string_value(json_array_get(pick, 1)));
    json_decref(root);
    snprintf(p, sizeof p, "%s/rank_00001.bin", ck);
    int fd = open(p, O_RDWR);
    cr_assert_geq(fd, 0, "%s", p);
    const int64_t at = off + len - 1; /* the entry's last byte */
    unsigned char b;
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x01;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void load_refused(bool last, unsigned slow_us)
{
    t_run run;
    t_run_init(&run, 2, 2, ZC_DTYPE_F32);
    ck_saved saved;
    cr_assert(ck_saved_make(&saved, &run, 3, "t"), "%s", ck_phase_error(&saved.phase));
    char ck[700], what[256], want[400];
    snprintf(ck, sizeof ck, "%s/t", saved.dir);
    flip_entry(ck, last, what, sizeof what);
    snprintf(want, sizeof want, "rank_00001.bin: checksum mismatch in %s", what);
    t_run again;
    t_run_init(&again, 2, 2, ZC_DTYPE_F32);
    ck_phase tried = {.run = &again, .load_dir = saved.dir, .first = 3, .n = 1};
    zc__ck_hasher_slow_for_tests(slow_us);
    cr_assert(ck_phase_run(&tried), "%s", ck_phase_error(&tried));
    zc__ck_hasher_slow_for_tests(0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(tried.load_rc[r], ZC_ERR_IO, "rank %d: %s", r, tried.load_msg[r]);
        cr_assert_not_null(strstr(tried.load_msg[r], want), "rank %d: '%s' lacks '%s'", r,
                           tried.load_msg[r], want);
        cr_assert(tried.broken[r], "rank %d: the engine is not broken", r);
    }
    cr_assert_str_eq(tried.load_msg[0], tried.load_msg[1]);
    free(tried.master);
    ck_saved_free(&saved);
    t_assert_no_leaks();
}

Test(ckpt_checksums, load_finds_a_flipped_byte_in_the_last_entry_read)
{
    load_refused(true, 0);
}

Test(ckpt_checksums, load_finds_a_flipped_byte_behind_a_slow_worker)
{
    load_refused(false, 2000);
}

/* One rank, stage 1, host device: two parameters whose state (96 MB) is
 * three times the read ring (32 MiB); the master from `fill`, m and v zero. */
static zc_engine *big_engine_np(zc_comm **comm, zc_config **cfg, zc_param **p, const int64_t *n,
                                int np, const char *offload, const char *swap)
{
    zc_engine *eng = NULL;
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(zc_config_create(cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(*cfg, "zero_optimization.stage", 1), ZC_OK);
    if (offload) {
        cr_assert_eq(zc_config_set_string(*cfg, "zero_optimization.offload_optimizer.device",
                                          offload), ZC_OK, "%s", zc_last_error());
        if (swap)
            cr_assert_eq(zc_config_set_string(*cfg,
                                              "zero_optimization.offload_optimizer.nvme_path",
                                              swap), ZC_OK, "%s", zc_last_error());
    }
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&eng, *cfg, *comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < np; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        p[i] = zc_param_add(eng, name, &n[i], 1, 0);
        cr_assert_not_null(p[i], "%s", zc_last_error());
    }
    cr_assert_eq(zc_engine_build(eng), ZC_OK, "%s", zc_last_error());
    return eng;
}

static zc_engine *big_engine(zc_comm **comm, zc_config **cfg, zc_param **p, const int64_t *n)
{
    return big_engine_np(comm, cfg, p, n, 2, NULL, NULL);
}

/* A save of each optimizer home on the host device, one parameter of 2-4 MiB
 * per chunk (ZC_CHUNK_CAP), 14 chunks: the device home's tensors are written
 * from memory, the cpu home's where its pool aligns them, and an NVMe home's
 * swap buffers (4, reused for a later chunk as soon as one is released) are
 * always copied. Each loads back bit for bit into a fresh engine. */
#define NBIG 14
static void save_load_case(const char *offload)
{
    int64_t n[NBIG];
    for (int i = 0; i < NBIG; i++)
        n[i] = 600001 + (int64_t)i * 28571 + (i % 3 ? 0 : 1024);
    cr_assert_eq(setenv("ZC_CHUNK_CAP", "1000000", 1), 0);
    char *dir = ck_tmpdir(), *swap = offload && !strcmp(offload, "nvme") ? ck_tmpdir() : NULL;
    float *want[NBIG], *got[NBIG];
    zc_comm *comm;
    zc_config *cfg;
    zc_param *p[NBIG];
    zc_engine *eng = big_engine_np(&comm, &cfg, p, n, NBIG, offload, swap);
    for (int i = 0; i < NBIG; i++) {
        want[i] = malloc((size_t)n[i] * 4);
        got[i] = malloc((size_t)n[i] * 4);
        cr_assert(want[i] && got[i]);
        for (int64_t k = 0; k < n[i]; k++)
            want[i][k] = (float)((k * 7 + i) % 999983) * 0.125f - (float)i;
        cr_assert_eq(zc_param_load(eng, p[i], want[i]), ZC_OK, "%s", zc_last_error());
    }
    cr_assert_eq(zc_checkpoint_save(eng, dir, "t"), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);

    eng = big_engine_np(&comm, &cfg, p, n, NBIG, offload, swap);
    cr_assert_eq(zc_checkpoint_load(eng, dir, "t"), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < NBIG; i++) {
        cr_assert_eq(zc_param_gather_master(eng, p[i], got[i]), ZC_OK, "%s", zc_last_error());
        cr_assert(memcmp(got[i], want[i], (size_t)n[i] * 4) == 0, "%s: w%d differs after the "
                  "load", offload ? offload : "none", i);
        free(want[i]);
        free(got[i]);
    }
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    cr_assert_eq(unsetenv("ZC_CHUNK_CAP"), 0);
    ck_rm_tree(dir);
    free(dir);
    if (swap) {
        ck_rm_tree(swap);
        free(swap);
    }
    t_assert_no_leaks();
}

Test(ckpt_checksums, every_home_saves_and_loads_back_bit_for_bit)
{
    save_load_case(NULL);
    save_load_case("cpu");
    save_load_case("nvme");
    /* The worker behind the reads of the next chunks: what it hashes from an
     * NVMe home would have been overwritten by then. */
    zc__ck_hasher_slow_for_tests(2000);
    save_load_case("nvme");
    zc__ck_hasher_slow_for_tests(0);
}

Test(ckpt_checksums, load_larger_than_the_ring_waits_for_a_slow_worker)
{
    const int64_t n[2] = {6000000, 2000001};
    char *dir = ck_tmpdir();
    float *want[2], *got[2];
    zc_comm *comm;
    zc_config *cfg;
    zc_param *p[2];
    zc_engine *eng = big_engine(&comm, &cfg, p, n);
    for (int i = 0; i < 2; i++) {
        want[i] = malloc((size_t)n[i] * 4);
        got[i] = malloc((size_t)n[i] * 4);
        cr_assert(want[i] && got[i]);
        for (int64_t k = 0; k < n[i]; k++) /* finite: NaN bits need not survive a load */
            want[i][k] = (float)(k % 1000003) * (i ? -0.5f : 0.25f) + (float)i;
        cr_assert_eq(zc_param_load(eng, p[i], want[i]), ZC_OK, "%s", zc_last_error());
    }
    cr_assert_eq(zc_checkpoint_save(eng, dir, "t"), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);

    eng = big_engine(&comm, &cfg, p, n);
    zc__ck_hasher_slow_for_tests(1000);
    const zc_status rc = zc_checkpoint_load(eng, dir, "t");
    zc__ck_hasher_slow_for_tests(0);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(zc_param_gather_master(eng, p[i], got[i]), ZC_OK, "%s", zc_last_error());
        cr_assert(memcmp(got[i], want[i], (size_t)n[i] * 4) == 0, "w%d differs after the load",
                  i);
        free(want[i]);
        free(got[i]);
    }
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    ck_rm_tree(dir);
    free(dir);
    t_assert_no_leaks();
}
