/* Double-precision reference of the GPT example's layers and model, written
 * independently of examples/gpt (plain loops, no BLAS, no saved
 * activations): the tests differentiate it with central finite differences
 * and hold the fp32 backward passes to the result. Layouts are those of
 * examples/gpt/layers_cpu.h. */
#ifndef GPT_TESTS_REF_H
#define GPT_TESTS_REF_H

#include <stdint.h>

#include "model.h"

void ref_linear(double *out, const double *inp, const double *w, const double *b, int N, int IC,
                int OC);
void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N,
                   int C);
void ref_gelu(double *out, const double *inp, int n);
void ref_attention(double *out, const double *qkv, int B, int T, int C, int NH);
/* Mean over rows of -log softmax(logits)[target]. */
double ref_xent(const double *logits, const int *target, int N, int V);
/* The whole model's mean loss with parameters flat in registration order. */
double ref_gpt_loss(const gpt_config *c, const double *params, const int *tok, const int *tgt,
                    int B);

/* splitmix64 and a uniform double in [-1, 1). */
uint64_t ref_rand(uint64_t *s);
double ref_uniform(uint64_t *s);

#endif
