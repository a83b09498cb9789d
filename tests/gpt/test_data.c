/* The data loader of examples/gpt: rank slices partition each global batch
 * exactly, windows stay in their split, the byte tokenizer, the validation
 * windows and the unigram entropy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "data.h"

enum { SEQ = 8, NBYTES = 1000 };

static void make(gpt_data *d)
{
    uint8_t text[NBYTES];
    for (int i = 0; i < NBYTES; i++) text[i] = (uint8_t)((i * 7 + i / 256) % 256);
    char err[256];
    cr_assert(gpt_data_from_memory(d, text, NBYTES, SEQ, err, sizeof err), "%s", err);
    cr_assert_eq(d->n_train, 900u, "the last 10%% is held out");
}

Test(gpt_data, rank_slices_partition_the_global_batch)
{
    gpt_data d;
    make(&d);
    for (int world = 1; world <= 4; world++)
        for (int B = 1; B <= 3; B += 2)
            for (int step = 0; step < 3; step++)
                for (int micro = 0; micro < 2; micro++) {
                    const int G = world * B;
                    int *gtok = calloc((size_t)G * SEQ, sizeof(int));
                    int *gtgt = calloc((size_t)G * SEQ, sizeof(int));
                    int *tok = calloc((size_t)G * SEQ, sizeof(int));
                    int *tgt = calloc((size_t)G * SEQ, sizeof(int));
                    /* The global batch as one rank of a world of one reads it. */
                    gpt_data_rank_batch(&d, SEQ, 5, step, micro, 0, G, gtok, gtgt);
                    /* Each rank's slice, laid end to end in rank order. */
                    for (int r = 0; r < world; r++)
                        gpt_data_rank_batch(&d, SEQ, 5, step, micro, r, B,
                                            tok + (size_t)r * B * SEQ, tgt + (size_t)r * B * SEQ);
                    cr_assert(!memcmp(tok, gtok, sizeof(int) * (size_t)G * SEQ),
                              "world %d, B %d, step %d: rank slices differ from the global batch",
                              world, B, step);
                    cr_assert(!memcmp(tgt, gtgt, sizeof(int) * (size_t)G * SEQ));
                    for (int w = 0; w < G; w++) {
                        size_t s = gpt_data_window(&d, SEQ, 5, step, micro, w);
                        cr_assert_leq(s + SEQ + 1, d.n_train, "a window reads validation bytes");
                        for (int t = 0; t < SEQ; t++) {
                            cr_assert_eq(tok[w * SEQ + t], d.bytes[s + t]);
                            cr_assert_eq(tgt[w * SEQ + t], d.bytes[s + t + 1]);
                        }
                    }
                    free(gtok); free(gtgt); free(tok); free(tgt);
                }
    gpt_data_destroy(&d);
}

Test(gpt_data, batches_differ_by_step_micro_and_seed)
{
    gpt_data d;
    make(&d);
    int same_step = 0, same_micro = 0, same_seed = 0;
    for (int w = 0; w < 64; w++) {
        size_t s = gpt_data_window(&d, SEQ, 1, 0, 0, w);
        same_step += s == gpt_data_window(&d, SEQ, 1, 1, 0, w);
        same_micro += s == gpt_data_window(&d, SEQ, 1, 0, 1, w);
        same_seed += s == gpt_data_window(&d, SEQ, 2, 0, 0, w);
    }
    /* 892 possible starts: a handful of collisions by chance at most. */
    cr_assert_lt(same_step, 4);
    cr_assert_lt(same_micro, 4);
    cr_assert_lt(same_seed, 4);
    gpt_data_destroy(&d);
}

Test(gpt_data, validation_windows_tile_the_held_out_tail)
{
    gpt_data d;
    make(&d);
    size_t nw = gpt_data_val_windows(&d, SEQ);
    cr_assert_eq(nw, (100u - 1) / SEQ);
    int tok[SEQ], tgt[SEQ];
    for (size_t k = 0; k < nw; k++) {
        gpt_data_val_window(&d, SEQ, k, tok, tgt);
        for (int t = 0; t < SEQ; t++) {
            cr_assert_eq(tok[t], d.bytes[900 + k * SEQ + t]);
            cr_assert_eq(tgt[t], d.bytes[900 + k * SEQ + t + 1]);
        }
    }
    gpt_data_destroy(&d);
}

Test(gpt_data, tokenizer_round_trips_every_byte)
{
    for (int b = 0; b < 256; b++) {
        int t = gpt_token_of_byte((uint8_t)b);
        cr_assert(t >= 0 && t < 256);
        cr_assert_eq(gpt_byte_of_token(t), b);
    }
}

Test(gpt_data, unigram_entropy)
{
    /* Two bytes equally often: ln 2; four: ln 4. */
    gpt_data d;
    char err[256];
    uint8_t text[40];
    for (int i = 0; i < 40; i++) text[i] = (uint8_t)("abcd"[i % 4]);
    cr_assert(gpt_data_from_memory(&d, text, 40, 2, err, sizeof err), "%s", err);
    cr_assert_float_eq(gpt_data_unigram_entropy(&d, 0, 40), log(4.0), 1e-12);
    cr_assert_float_eq(gpt_data_unigram_entropy(&d, 0, 2), log(2.0), 1e-12);
    gpt_data_destroy(&d);
}

Test(gpt_data, too_short_is_refused)
{
    gpt_data d;
    char err[256] = "";
    uint8_t text[50] = {0};
    /* 45 training bytes, 5 held out: a window of 8 needs 9 in each. */
    cr_assert(!gpt_data_from_memory(&d, text, 50, SEQ, err, sizeof err));
    cr_assert(strstr(err, "too few"), "message: %s", err);
    cr_assert(!gpt_data_load(&d, "/nonexistent/file", SEQ, err, sizeof err));
    cr_assert(strstr(err, "/nonexistent/file"), "message: %s", err);
    cr_assert(!gpt_data_load(&d, "/tmp", SEQ, err, sizeof err), "a directory is refused");
}
