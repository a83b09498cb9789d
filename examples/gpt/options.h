/* Command line and DeepSpeed configuration of train_gpt. */
#ifndef GPT_OPTIONS_H
#define GPT_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include <zeroc/zeroc.h>

#include "model.h"

typedef struct gpt_opts {
    gpt_config model;
    int stage, world, steps, accum, batch, eval_every, sample;
    zc_dtype dtype;
    uint64_t seed;
    double clip, lr, weight_decay;
    const char *config_path; /* a DeepSpeed JSON file, or NULL */
    const char *data_path;
    unsigned given;          /* GPT_GIVEN_* bits: flags set on the command line */
    bool json;
    int launcher;            /* GPT_LAUNCH_*: ranks as threads, or one per process */
    bool cuda;               /* --device cuda */
    int save_every;          /* --save-every: checkpoint every N steps (0: never) */
    const char *save_dir;    /* --save-dir */
    bool resume;             /* --resume: load the latest checkpoint in save_dir first */
    const char *init_from;   /* --init-from: a Hugging Face GPT-2 checkpoint, or NULL */
    const char *tokens_path; /* --tokens: token ids instead of --data's bytes, or NULL */
    const char *export_path; /* --export: the trained model as Hugging Face safetensors */
    bool sequential;         /* --order sequential: windows in order, as llm.c reads */
    bool ckpt;               /* --checkpoint-activations block: each block's input kept in
                                zeroc's activation store, the block recomputed in backward */
    int ckpt_offload;        /* --checkpoint-offload: GPT_CKPT_* where the store keeps them
                                (GPT_CKPT_CONFIG: as the config's activation_checkpointing
                                section says); read back from the config after it is made */
    const char *ckpt_nvme_path; /* --checkpoint-nvme-path: activation_checkpointing.nvme_path */
    const char *trace;       /* --trace: the timeline's file (trace.path), or NULL */
    const char *trace_steps; /* --trace-steps: its window (trace.steps), or NULL */
    double peak_flops;       /* --peak-flops: one rank's peak FLOP/s for MFU (0: the device's) */
    int print_every;         /* steps_per_print of the config; 0: unset (every steps / 20) */
    bool comms_logger;       /* comms_logger.enabled: the summary is printed at the end */
} gpt_opts;

/* --checkpoint-offload: the config's section, or device / cpu / nvme. */
enum { GPT_CKPT_CONFIG = -1, GPT_CKPT_DEVICE = 0, GPT_CKPT_CPU, GPT_CKPT_NVME };

enum {
    GPT_GIVEN_STAGE = 1u << 0, GPT_GIVEN_DTYPE = 1u << 1, GPT_GIVEN_ACCUM = 1u << 2,
    GPT_GIVEN_BATCH = 1u << 3, GPT_GIVEN_CLIP = 1u << 4, GPT_GIVEN_LR = 1u << 5,
    GPT_GIVEN_WORLD = 1u << 6, GPT_GIVEN_LAYERS = 1u << 7, GPT_GIVEN_HEADS = 1u << 8,
    GPT_GIVEN_DIM = 1u << 9, GPT_GIVEN_SEQ = 1u << 10, GPT_GIVEN_VOCAB = 1u << 11,
    GPT_GIVEN_DATA = 1u << 12, GPT_GIVEN_CTX = 1u << 13
};

/* --launcher: auto (one rank per process when mpirun or torchrun started
 * this one), threads (every rank a thread here), env (one rank per process,
 * from the launcher's environment: zc_comm_init_env). */
enum { GPT_LAUNCH_AUTO, GPT_LAUNCH_THREADS, GPT_LAUNCH_ENV };

/* Parses argv strictly (tools/cliarg.h): an unknown flag, a missing value or
 * a value outside its range prints why and ends the process with status 2. */
gpt_opts gpt_parse_args(int argc, char **argv);

/* One configuration for every rank. Without --config it is built from the
 * flags; with it, the file decides, flags given explicitly override it,
 * "auto" is resolved from the flags, and stage, precision, accumulation and
 * micro batch are read back into *o. Ends the process with status 1 on
 * failure. `world` is the data-parallel world the batch keys resolve for. */
zc_config *gpt_make_config(gpt_opts *o, int world);

/* Ends the process from any thread (see options.c). */
_Noreturn void gpt_quit(int code);

#endif
