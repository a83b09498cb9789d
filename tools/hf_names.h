/* Hugging Face GPT-2 names for the GPT example's parameters (shared by the
 * zeroc CLI and examples/gpt; public API types only).
 *
 * train_gpt registers wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2,
 * mlp.c_fc, mlp.c_proj}.{weight, bias}, ln_f.{weight, bias}, its linear
 * weights as [out, in]. GPT2LMHeadModel names them transformer.wte.weight,
 * transformer.h.N.attn.c_attn.weight, ... and stores the four Conv1D weights
 * of each block as [in, out]: those load and export transposed. Its tied
 * lm_head.weight and the attention-mask buffers (h.N.attn.bias,
 * h.N.attn.masked_bias) of older files are skipped; names without the
 * "transformer." prefix (the original GPT-2 files) are taken too. */
#ifndef ZC_TOOLS_HF_NAMES_H
#define ZC_TOOLS_HF_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

/* A zc_load_map_fn: the Hugging Face tensor name to the example's. */
zc_load_map_result zc__hf_gpt2_import(void *user, const char *file_name, const int64_t *shape,
                                      int ndim, char *param, size_t cap, bool *transposed);

/* The example's parameter name to Hugging Face's (out, cap bytes) and
 * whether the tensor is stored transposed; false for a name that is not one
 * of the example's. */
bool zc__hf_gpt2_export(const char *param, char *out, size_t cap, bool *transposed);

#endif
