/* Data for the GPT example: a byte-level tokenizer (token = byte value, so
 * the vocabulary needs at least 256 entries) and a loader over any text file,
 * or token ids made by a tokenizer elsewhere (--tokens: llm.c's .bin format,
 * a 256-int32 header of magic 20240520, version 1 and the token count, then
 * uint16 ids; or raw little-endian uint16 ids). The last 10% of the data is
 * held out for validation.
 *
 * Batches are defined globally: global batch (step, micro) is G = B x W
 * windows of seq + 1 bytes whose starts are drawn from a stream keyed by
 * (seed, step, micro, index). Rank r reads windows [r B, (r + 1) B) of it,
 * so the W ranks together read exactly the global batch, each window once,
 * and the batch does not depend on how it is split. In sequential order
 * (--order sequential, as llm.c's loader reads) window g of the run (g =
 * (step x accum + micro) x G + index) starts at token (g mod nw) x seq, nw =
 * (n_train - 1) / seq. */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gpt_data {
    uint8_t *bytes;  /* text: its bytes are the tokens (NULL with tokens) */
    uint16_t *tokens; /* token ids (--tokens), or NULL */
    size_t n;        /* tokens */
    size_t n_train;  /* the first n_train tokens train; the rest validate */
    bool sequential; /* windows in order (set by the caller, with the two below) */
    int64_t accum, global_batch;
} gpt_data;

/* Token i. */
static inline int gpt_data_token(const gpt_data *d, size_t i)
{
    return d->tokens ? d->tokens[i] : d->bytes[i];
}

/* Reads a token file (llm.c's .bin with its header, or raw uint16 ids;
 * regular file, at most 2^31 tokens), checks every id is below vocab and
 * splits it as gpt_data_load does. Returns false with err on failure. */
bool gpt_data_load_tokens(gpt_data *d, const char *path, int seq, int vocab, char *err,
                          size_t errlen);

/* Reads the file (a regular file of at most 1 GiB) and splits it. Each split
 * must hold at least seq + 1 bytes. Returns false with err on failure. */
bool gpt_data_load(gpt_data *d, const char *path, int seq, char *err, size_t errlen);
/* Uses a copy of n bytes held in memory (tests). Same rules. */
bool gpt_data_from_memory(gpt_data *d, const void *bytes, size_t n, int seq, char *err,
                          size_t errlen);
void gpt_data_destroy(gpt_data *d);

/* The byte-level tokenizer: tokens of a text, and a token as text. */
static inline int gpt_token_of_byte(uint8_t b) { return b; }
static inline uint8_t gpt_byte_of_token(int t) { return (uint8_t)t; }

/* Start offset in the training split of window `index` of global batch
 * (step, micro). */
size_t gpt_data_window(const gpt_data *d, int seq, uint64_t seed, int64_t step, int micro,
                       int64_t index);
/* Fills tok and tgt ([B, seq]) with rank's slice of global batch (step,
 * micro) when every rank reads B windows; tgt is tok shifted by one byte. */
void gpt_data_rank_batch(const gpt_data *d, int seq, uint64_t seed, int64_t step, int micro,
                         int rank, int B, int *tok, int *tgt);

/* Number of validation windows: consecutive, non-overlapping windows of seq
 * tokens (with their next-byte targets) covering the validation split. */
size_t gpt_data_val_windows(const gpt_data *d, int seq);
/* Fills window k of the validation split. */
void gpt_data_val_window(const gpt_data *d, int seq, size_t k, int *tok, int *tgt);

/* Entropy in nats of the token distribution of [from, to) of the data: the
 * loss of the best model that ignores context. */
double gpt_data_unigram_entropy(const gpt_data *d, size_t from, size_t to);

#endif
