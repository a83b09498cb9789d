/* A Hugging Face GPT2LMHeadModel checkpoint in and out of train_gpt
 * (--init-from, --export). The tensor names are tools/hf_names.h's; the
 * values themselves are loaded by zc_load_safetensors, each rank reading
 * its own part. */
#ifndef GPT_HF_INIT_H
#define GPT_HF_INIT_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"
#include "options.h"

/* The model's shape from the checkpoint at path (a .safetensors file or an
 * index): vocab and dim from the token embedding, the context from the
 * position embedding, the layers from the blocks' names, the heads from
 * config.json beside it (or --heads); config.json's settings must be what
 * this model computes (GELU tanh, LayerNorm eps 1e-5, tied head). A size
 * given as a flag (given: GPT_GIVEN_* bits) must agree. --seq, when not
 * given, becomes min(64, context). false with err on failure. */
bool gpt_hf_shape(const char *path, gpt_config *c, unsigned given, char *err, size_t errlen);

/* Writes the model's fp32 master (registration order) to path as a
 * safetensors file under GPT2LMHeadModel's names, the Conv1D weights
 * transposed, no lm_head.weight (tied), and config.json beside it unless
 * one exists: GPT2LMHeadModel.from_pretrained loads the directory. The file
 * must not exist (O_EXCL); it is removed on failure. */
bool gpt_hf_export(const char *path, const gpt_config *c, const float *master, char *err,
                   size_t errlen);

#endif
