/* zeroc ckpt import and the renaming, sharded export (ckpt_hf.c), called by
 * cmd_ckpt.c, which parses the flags and removes what a failed or
 * interrupted command created. */
#ifndef ZC_TOOLS_CKPT_HF_H
#define ZC_TOOLS_CKPT_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

/* How tensor names map between a safetensors file and the parameters: a
 * --map FILE (JSON: {"file tensor": "parameter" | null | {"param": "...",
 * "transposed": true}}; null skips the tensor) or --names hf-gpt2. */
typedef struct ckpt_names {
    zc_load_name *table;
    int n;
    bool hf_gpt2;
    void *json;     /* the parsed map file, which owns the table's strings */
} ckpt_names;

/* Reads --map FILE or --names NAME (one of them may be NULL). Prints why and
 * returns false on a bad file or name. */
bool ckpt_names_open(ckpt_names *nm, const char *map_file, const char *names, const char *cmd);
void ckpt_names_close(ckpt_names *nm);

/* zeroc ckpt import: registers a parameter per tensor of MODEL (its name
 * mapped, its shape transposed where the map says), builds `world` engines
 * as threads with cfg, imports MODEL into them (zc_load_safetensors) and
 * saves OUT/TAG (zc_checkpoint_save). Returns the exit status (0, or 1 with
 * the reason printed). */
int ckpt_import_run(const char *model, const char *out, const char *tag, int world,
                    const char *config, const ckpt_names *nm);

/* zeroc ckpt export with names or shards: DIR/TAG's master as one file OUT
 * (max_shard 0) or as Hugging Face's sharded layout in the new directory
 * OUT (model-0000i-of-0000K.safetensors and model.safetensors.index.json,
 * each shard at most max_shard bytes of tensors unless one tensor is
 * larger). Each file it creates is recorded through note_created (so a
 * signal handler can remove it) before it is written. Returns the exit
 * status. */
int ckpt_export_run(const char *dir, const char *tag, const char *out, zc_dtype dt,
                    const ckpt_names *nm, uint64_t max_shard,
                    void (*note_created)(const char *path));

#endif
