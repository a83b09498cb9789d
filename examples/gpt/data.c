/* Data for the GPT example: text bytes or token ids (data.h). */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <sys/stat.h>

#include "regfile.h"

#define MAX_FILE (1u << 30)

static bool split(gpt_data *d, int seq, char *err, size_t errlen)
{
    /* The last 10% validates, rounded so that the training part is the
     * larger one; both must hold one window and its target. */
    d->n_train = d->n - d->n / 10;
    if (seq < 1 || d->n_train < (size_t)seq + 1 || d->n - d->n_train < (size_t)seq + 1) {
        snprintf(err, errlen,
                 "%zu bytes are too few: the training (90%%) and validation (10%%) parts "
                 "each need at least --seq + 1 = %d bytes",
                 d->n, seq + 1);
        return false;
    }
    return true;
}

bool gpt_data_from_memory(gpt_data *d, const void *bytes, size_t n, int seq, char *err,
                          size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->bytes = malloc(n ? n : 1);
    if (!d->bytes) {
        snprintf(err, errlen, "out of memory for %zu bytes of data", n);
        return false;
    }
    memcpy(d->bytes, bytes, n);
    d->n = n;
    if (!split(d, seq, err, errlen)) {
        gpt_data_destroy(d);
        return false;
    }
    return true;
}

bool gpt_data_load(gpt_data *d, const char *path, int seq, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    /* A directory, FIFO, device or socket is refused by what it is, at once
     * (regfile.h: a FIFO without a writer would block fopen). */
    char why[512];
    FILE *f = zc__fopen_regular(path, "a regular file of text", why, sizeof why);
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "--data: %s", f ? strerror(errno) : why);
        if (f) fclose(f);
        return false;
    }
    if (st.st_size > MAX_FILE) {
        snprintf(err, errlen, "--data '%s' is larger than 1 GiB", path);
        fclose(f);
        return false;
    }
    size_t n = (size_t)st.st_size;
    d->bytes = malloc(n ? n : 1);
    if (!d->bytes || fread(d->bytes, 1, n, f) != n) {
        snprintf(err, errlen, "cannot read %zu bytes of --data '%s'", n, path);
        fclose(f);
        gpt_data_destroy(d);
        return false;
    }
    fclose(f);
    d->n = n;
    if (!split(d, seq, err, errlen)) {
        char reason[256];
        snprintf(reason, sizeof reason, "%s", err);
        snprintf(err, errlen, "--data '%s': %s", path, reason);
        gpt_data_destroy(d);
        return false;
    }
    return true;
}

void gpt_data_destroy(gpt_data *d)
{
    free(d->bytes);
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t gpt_data_window(const gpt_data *d, int seq, uint64_t seed, int64_t step, int micro,
                       int64_t index)
{
    if (d->sequential) {
        const uint64_t g = ((uint64_t)step * (uint64_t)d->accum + (uint64_t)micro) *
                               (uint64_t)d->global_batch + (uint64_t)index;
        return (size_t)(g % ((d->n_train - 1) / (size_t)seq)) * (size_t)seq;
    }
    uint64_t h = mix(seed ^ 0x74726169ull);
    h = mix(h ^ (uint64_t)step);
    h = mix(h ^ (uint64_t)micro);
    h = mix(h ^ (uint64_t)index);
    /* Starts in [0, n_train - seq - 1]: the window and its last target stay
     * inside the training split. The modulo bias is below 2^-40 for any
     * file this loader accepts. */
    return (size_t)(h % (d->n_train - (size_t)seq));
}

static void fill(const gpt_data *d, size_t start, int seq, int *tok, int *tgt)
{
    for (int t = 0; t < seq; t++) {
        tok[t] = gpt_data_token(d, start + (size_t)t);
        tgt[t] = gpt_data_token(d, start + (size_t)t + 1);
    }
}

void gpt_data_rank_batch(const gpt_data *d, int seq, uint64_t seed, int64_t step, int micro,
                         int rank, int B, int *tok, int *tgt)
{
    for (int b = 0; b < B; b++) {
        int64_t index = (int64_t)rank * B + b;
        size_t s = gpt_data_window(d, seq, seed, step, micro, index);
        fill(d, s, seq, tok + (size_t)b * seq, tgt + (size_t)b * seq);
    }
}

size_t gpt_data_val_windows(const gpt_data *d, int seq)
{
    /* Window k covers tokens [n_train + k seq, + seq) and needs one more
     * byte for its last target. */
    return (d->n - d->n_train - 1) / (size_t)seq;
}

void gpt_data_val_window(const gpt_data *d, int seq, size_t k, int *tok, int *tgt)
{
    fill(d, d->n_train + k * (size_t)seq, seq, tok, tgt);
}

double gpt_data_unigram_entropy(const gpt_data *d, size_t from, size_t to)
{
    size_t *count = calloc(65536, sizeof *count);
    if (!count) return NAN;
    for (size_t i = from; i < to; i++) count[gpt_data_token(d, i)]++;
    double h = 0.0, n = (double)(to - from);
    for (int b = 0; b < 65536; b++)
        if (count[b]) {
            double p = (double)count[b] / n;
            h -= p * log(p);
        }
    free(count);
    return h;
}

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256

bool gpt_data_load_tokens(gpt_data *d, const char *path, int seq, int vocab, char *err,
                          size_t errlen)
{
    memset(d, 0, sizeof *d);
    char why[512];
    FILE *f = zc__fopen_regular(path, "a file of token ids", why, sizeof why);
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "--tokens: %s", f ? strerror(errno) : why);
        if (f) fclose(f);
        return false;
    }
    const uint64_t size = (uint64_t)st.st_size;
    int32_t head[LLMC_HEADER_INTS] = {0};
    uint64_t skip = 0, count = size / 2;
    const bool llmc = size >= sizeof head && fread(head, sizeof head, 1, f) == 1 &&
                      head[0] == LLMC_MAGIC;
    if (llmc) {
        /* llm.c's header: magic, version (1: uint16 ids, GPT-2's), count. */
        if (head[1] != 1 || head[2] < 0 ||
            (uint64_t)head[2] * 2 + sizeof head != size) {
            snprintf(err, errlen, "--tokens '%s': an llm.c token file of version %d with %d "
                     "tokens, but %llu bytes (version 1, uint16 ids, needs %llu)", path, head[1],
                     head[2], (unsigned long long)size,
                     (unsigned long long)((uint64_t)(head[2] > 0 ? head[2] : 0) * 2 +
                                          sizeof head));
            fclose(f);
            return false;
        }
        skip = sizeof head;
        count = (uint64_t)head[2];
    } else if (size % 2) {
        snprintf(err, errlen, "--tokens '%s': %llu bytes: neither an llm.c token file (magic "
                 "%d) nor raw uint16 ids (an even size)", path, (unsigned long long)size,
                 LLMC_MAGIC);
        fclose(f);
        return false;
    }
    if (count > ((uint64_t)1 << 31)) {
        snprintf(err, errlen, "--tokens '%s' holds more than 2^31 tokens", path);
        fclose(f);
        return false;
    }
    d->tokens = malloc((size_t)(count ? count : 1) * sizeof *d->tokens);
    if (!d->tokens || fseek(f, (long)skip, SEEK_SET) != 0 ||
        fread(d->tokens, 2, (size_t)count, f) != count) {
        snprintf(err, errlen, "cannot read %llu tokens of --tokens '%s'",
                 (unsigned long long)count, path);
        fclose(f);
        gpt_data_destroy(d);
        return false;
    }
    fclose(f);
    d->n = (size_t)count;
    for (size_t i = 0; i < d->n; i++) /* little-endian ids */
        d->tokens[i] = (uint16_t)le16toh(d->tokens[i]);
    for (size_t i = 0; i < d->n; i++)
        if (d->tokens[i] >= vocab) {
            snprintf(err, errlen, "--tokens '%s': token %zu is id %u, outside the model's "
                     "vocabulary of %d", path, i, d->tokens[i], vocab);
            gpt_data_destroy(d);
            return false;
        }
    if (!split(d, seq, err, errlen)) {
        char reason[256];
        snprintf(reason, sizeof reason, "%s", err);
        snprintf(err, errlen, "--tokens '%s': %s", path, reason);
        gpt_data_destroy(d);
        return false;
    }
    return true;
}
