/* `zeroc estimate`'s activations (estimate_act.c): a GPT-2-style model's
 * activations of one micro-batch with and without activation checkpointing
 * by block, the activation store the engine then reserves, and the largest
 * micro-batch that fits a device budget at each sequence length. */
#ifndef ZC_TOOLS_ESTIMATE_ACT_H
#define ZC_TOOLS_ESTIMATE_ACT_H

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "plan/plan.h"

__extension__ typedef unsigned __int128 zc_u128;

/* The model's shape, as --model gives it, and the micro-batch's. */
typedef struct ea_gpt {
    int64_t L, D, A, V; /* layers, dim, heads, vocab */
    int64_t S, B;       /* sequence (--seq, else the model's), micro-batch */
    int64_t esz;        /* bytes per activation value (the working precision's) */
} ea_gpt;

/* The activations that live beside the engine's memory, in bytes, exact:
 * without checkpointing (ckpt false) every layer's, per Korthikanti et al.
 * 2022 (no recomputation, no sequence or tensor parallelism): per layer
 * S B D (34 + 5 A S / D) at 2 bytes per value, scaled by esz / 2, plus the
 * embedding's output S B D esz and the logits with their fp32 softmax
 * S B V (esz + 4). With checkpointing by block: one layer's (the block
 * recomputed in backward, or the last one, kept from its forward), the
 * embedding's output and the logits; the other blocks' inputs are the
 * activation store's (ea_store_spec), counted by the planner where the
 * section keeps them. */
zc_u128 zc__ea_activations(const ea_gpt *g, bool ckpt);

/* The activation store of checkpointing by block: L - 1 checkpoints of
 * S B D esz bytes (every block's input but the last's, whose block runs on
 * into its backward), kept where cfg's activation_checkpointing section says
 * (the planner's rule, zc__act_spec_from); slots 0 without ckpt or with one
 * layer. */
zc_status zc__ea_store_spec(const zc_config *cfg, const ea_gpt *g, bool ckpt, bool host_device,
                            zc_act_spec *out);

/* Sets cfg's section for --checkpoint-offload (0 device, 1 cpu, 2 nvme; -1:
 * leave the file's). nvme needs a path there or in an offload block. */
zc_status zc__ea_set_home(zc_config *cfg, int home);

#endif
