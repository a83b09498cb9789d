/* Byte-level data for the GPT example (data.h). */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        tok[t] = gpt_token_of_byte(d->bytes[start + (size_t)t]);
        tgt[t] = gpt_token_of_byte(d->bytes[start + (size_t)t + 1]);
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
    size_t count[256] = {0};
    for (size_t i = from; i < to; i++) count[d->bytes[i]]++;
    double h = 0.0, n = (double)(to - from);
    for (int b = 0; b < 256; b++)
        if (count[b]) {
            double p = (double)count[b] / n;
            h -= p * log(p);
        }
    return h;
}
