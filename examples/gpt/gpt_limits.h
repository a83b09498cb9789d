/* The model shapes train_gpt accepts: the ranges of its --layers, --heads,
 * --dim, --seq and --vocab (options.c). `zeroc bench train`, which runs
 * train_gpt as its workload, holds its --model to the same ranges before it
 * starts a configuration (tools/cmd_bench_train.c), so a shape the workload
 * would refuse is a usage error there, not one failure per configuration.
 * Byte-level tokens need GPT_BYTE_VOCAB vocabulary entries (more are
 * padding); token ids read with --tokens as few as GPT_VOCAB_MIN. */
#ifndef GPT_GPT_LIMITS_H
#define GPT_GPT_LIMITS_H

#define GPT_LAYERS_MIN 1
#define GPT_LAYERS_MAX 64
#define GPT_HEADS_MIN 1
#define GPT_HEADS_MAX 64
#define GPT_DIM_MIN 1
#define GPT_DIM_MAX 4096
#define GPT_SEQ_MIN 1
#define GPT_SEQ_MAX 1024
#define GPT_VOCAB_MIN 2
#define GPT_BYTE_VOCAB 256
#define GPT_VOCAB_MAX 65536

#endif
