/* Data for the GPT example: a byte-level tokenizer (token = byte value, so
 * the vocabulary needs at least 256 entries) and a loader over any text file.
 * The last 10% of the file is held out for validation.
 *
 * Batches are defined globally: global batch (step, micro) is G = B x W
 * windows of seq + 1 bytes whose starts are drawn from a stream keyed by
 * (seed, step, micro, index). Rank r reads windows [r B, (r + 1) B) of it,
 * so the W ranks together read exactly the global batch, each window once,
 * and the batch does not depend on how it is split. */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gpt_data {
    uint8_t *bytes;
    size_t n;        /* bytes in the file */
    size_t n_train;  /* the first n_train bytes train; the rest validate */
} gpt_data;

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

/* Entropy in nats of the byte distribution of [from, to) of the data: the
 * loss of the best model that ignores context. */
double gpt_data_unigram_entropy(const gpt_data *d, size_t from, size_t to);

#endif
