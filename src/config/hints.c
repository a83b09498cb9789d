/* Hints for unknown keys: the nearest known key of the same block (edit
 * distance, or the same words in another order: comm_overlap ->
 * overlap_comm), or the block a misplaced key belongs to (loss_scale under
 * bf16 -> fp16). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hints.h"

static const char *const blocks[] = {
    "fp16", "bf16", "bfloat16", "optimizer", "optimizer.params", "scheduler", "scheduler.params",
    "zero_optimization", "zero_optimization.offload_optimizer", "zero_optimization.offload_param",
    "zero_optimization.max_memory",
    "aio", "data_types", "trace", "comms_logger", "activation_checkpointing", NULL};

/* DeepSpeed features zeroc does not use: accepted quietly at the top level. */
static const char *const ignored_features[] = {
    "flops_profiler", "tensorboard", "comms_config",
    "monitor_config", "csv_monitor", "wandb", "comet", "compression_training",
    "sparse_attention", "autotuning", "sequence_parallel", "elasticity", "checkpoint",
    "data_efficiency", "curriculum_learning", "pipeline", "amp", "dump_state",
    "memory_breakdown", "nebula", "tensor_parallel", "hybrid_engine", "fp8",
    "seq_parallel_communication_data_type", "sparse_gradients", "disable_allgather",
    "dataloader_drop_last", "eigenvalue", "progressive_layer_drop", "quantize_training",
    "weight_quantization", "graph_harvesting", "compile", "timers", "gradient_allreduce_op",
    "load_universal_checkpoint", "use_node_local_storage", "use_data_before_expert_parallel_",
    "zenflow", "torch_autocast", "mics_shard_size", "mics_hierarchical_params_gather",
    "expert_parallel", "moe", "train_data", "sparse_grads", "steps_per_eval", "data_sampling",
    "pld", "inference", "deepcompile", "checkpoint_config", "wall_clock_breakdown_steps", NULL};

bool zc__cfg_is_block(const char *path)
{
    for (int i = 0; blocks[i]; i++)
        if (!strcmp(blocks[i], path))
            return true;
    return false;
}

bool zc__cfg_is_ignored_feature(const char *name)
{
    for (int i = 0; ignored_features[i]; i++)
        if (!strcmp(ignored_features[i], name))
            return true;
    return false;
}

static void split(const char *path, char *block, size_t bcap, const char **leaf)
{
    const char *dot = strrchr(path, '.');
    if (!dot) {
        block[0] = 0;
        *leaf = path;
        return;
    }
    size_t n = (size_t)(dot - path);
    if (n >= bcap)
        n = bcap - 1;
    memcpy(block, path, n);
    block[n] = 0;
    *leaf = dot + 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Same '_'-separated words in any order (case-insensitive). */
static bool same_words(const char *a, const char *b)
{
    char ba[128], bb[128];
    if (strlen(a) >= sizeof ba || strlen(b) >= sizeof bb || !strcmp(a, b))
        return false;
    const char *wa[16], *wb[16];
    int na = 0, nb = 0;
    snprintf(ba, sizeof ba, "%s", a);
    snprintf(bb, sizeof bb, "%s", b);
    for (char *p = ba; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (char *p = bb; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (char *s = strtok(ba, "_"); s && na < 16; s = strtok(NULL, "_"))
        wa[na++] = s;
    for (char *s = strtok(bb, "_"); s && nb < 16; s = strtok(NULL, "_"))
        wb[nb++] = s;
    if (na != nb || na < 2)
        return false;
    qsort(wa, (size_t)na, sizeof wa[0], cmp_str);
    qsort(wb, (size_t)nb, sizeof wb[0], cmp_str);
    for (int i = 0; i < na; i++)
        if (strcmp(wa[i], wb[i]))
            return false;
    return true;
}

typedef struct {
    const char *leaf;
    int best;
    const char *best_name;
} nearest;

static void consider(nearest *n, const char *cand)
{
    if (!cand)
        return;
    /* Short names get one edit at most ("log" is not "moe"). */
    int len = (int)strlen(n->leaf);
    int cap = len / 3;
    if (cap < 1)
        cap = 1;
    if (len >= 6 && cap < 2)
        cap = 2;
    int dist = same_words(n->leaf, cand) ? 1 : zc__edit_distance(n->leaf, cand, cap);
    if (dist <= cap && dist < n->best) {
        n->best = dist;
        n->best_name = cand;
    }
}

/* Leaf of `full` if it lies directly in `block`, else NULL. */
static const char *leaf_in(const char *full, const char *block)
{
    if (!full)
        return NULL;
    size_t bl = strlen(block);
    if (bl == 0)
        return strchr(full, '.') ? NULL : full;
    if (strncmp(full, block, bl) || full[bl] != '.')
        return NULL;
    const char *leaf = full + bl + 1;
    return strchr(leaf, '.') ? NULL : leaf;
}

void zc__cfg_hint(const char *path, char *buf, size_t cap)
{
    char block[160];
    const char *leaf;
    buf[0] = 0;
    split(path, block, sizeof block, &leaf);
    if (!strcmp(block, "bfloat16"))
        snprintf(block, sizeof block, "bf16");

    /* 1. The same name in another block: a misplaced key. */
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        const zc_cfg_key *k = &zc__cfg_keys[i];
        const char *names[2] = {k->path, k->alias};
        for (int j = 0; j < 2; j++) {
            char kb[160];
            const char *kl;
            if (!names[j])
                continue;
            split(names[j], kb, sizeof kb, &kl);
            if (strcmp(kl, leaf) || !strcmp(kb, block))
                continue;
            if (!kb[0])
                snprintf(buf, cap, "; it belongs at the top level (%s)", names[j]);
            else
                snprintf(buf, cap, "; it belongs under %s (%s)", kb, names[j]);
            return;
        }
    }
    for (int i = 0; blocks[i]; i++) {
        char kb[160];
        const char *kl;
        split(blocks[i], kb, sizeof kb, &kl);
        if (!strcmp(kl, leaf) && strcmp(kb, block) && strcmp(blocks[i], "bfloat16")) {
            if (!kb[0])
                snprintf(buf, cap, "; %s is a top-level block", blocks[i]);
            else
                snprintf(buf, cap, "; it belongs under %s (%s)", kb, blocks[i]);
            return;
        }
    }

    /* 2. The nearest name in the same block. */
    nearest n = {.leaf = leaf, .best = 1 << 20};
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        consider(&n, leaf_in(zc__cfg_keys[i].path, block));
        consider(&n, leaf_in(zc__cfg_keys[i].alias, block));
    }
    for (int i = 0; blocks[i]; i++)
        consider(&n, leaf_in(blocks[i], block));
    if (!block[0])
        for (int i = 0; ignored_features[i]; i++)
            consider(&n, ignored_features[i]);
    static const char *const dep_names[] = {
        "zero_optimization.cpu_offload", "zero_optimization.cpu_offload_param",
        "zero_optimization.cpu_offload_use_pin_memory", "aio.thread_count", NULL};
    for (int i = 0; dep_names[i]; i++)
        consider(&n, leaf_in(dep_names[i], block));
    if (n.best_name)
        snprintf(buf, cap, "; did you mean %s?", n.best_name);
}
