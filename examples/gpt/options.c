/* Flags and configuration of train_gpt (options.h). */
#include "options.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cliarg.h"
#include "gpt_limits.h"
#include "hf_init.h"

/* exit() is not safe from two threads at once and would run destructors
 * under ranks still working: the first caller flushes and leaves with
 * _exit; any other waits here until then. */
static pthread_mutex_t quit_lock = PTHREAD_MUTEX_INITIALIZER;

_Noreturn void gpt_quit(int code)
{
    pthread_mutex_lock(&quit_lock); /* never unlocked: the process ends */
    fflush(NULL);
    _exit(code);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: train_gpt [--layers %d..%d] [--heads %d..%d] [--dim %d..%d] [--seq %d..%d]\n"
        "                 [--ctx %d..%d]\n"
        "                 [--vocab %d..%d] [--batch 1..4096] [--steps 0..1000000]\n"
        "                 [--stage 0..3] [--world 1..64] [--dtype fp32|bf16|fp16]\n"
        "                 [--accum 1..1024] [--lr 0..1e6] [--clip 0..1e9] [--seed 0..2^64-1]\n"
        "                 [--eval-every 0..1000000] [--sample 0..100000] [--data FILE]\n"
        "                 [--config ds_config.json] [--device cpu|cuda]\n"
        "                 [--launcher auto|threads|env] [--json]\n"
        "                 [--save-every N --save-dir DIR] [--resume]\n"
        "                 [--trace FILE [--trace-steps A-B]] [--peak-flops 0..1e18]\n"
        "                 [--init-from MODEL.safetensors|INDEX.json] [--tokens FILE]\n"
        "                 [--order random|sequential] [--export OUT.safetensors]\n"
        "                 [--checkpoint-activations none|block]\n"
        "                 [--checkpoint-offload device|cpu|nvme] [--checkpoint-nvme-path DIR]\n"
        "defaults: --layers 2 --heads 4 --dim 64 --seq 64 --vocab 256 --batch 8 --steps 300\n"
        "          --stage 2 --world 2 --dtype bf16 --accum 1 --lr 3e-3 --clip 1.0 --seed 1\n"
        "          --eval-every 100 --sample 0 --data /usr/share/common-licenses/GPL-3\n"
        "--device cuda: the model on the GPU (cuBLAS bf16 matmuls, CUDA kernels); cpu is\n"
        "          the default (OpenBLAS).\n"
        "--save-every N: a checkpoint in --save-dir every N steps; --resume: load the\n"
        "          latest one in --save-dir and train --steps more steps from it.\n"
        "--dim must be a multiple of --heads. --batch is sequences per rank and micro-step.\n"
        "--launcher: threads (--world ranks run as threads here), env (this process is one\n"
        "          rank of a job started by torchrun, srun or mpirun: zc_comm_init_env; the\n"
        "          world is the launcher's), auto (env when mpirun or torchrun started it;\n"
        "          the default).\n"
        "--config: a DeepSpeed JSON file decides stage, precision, optimizer, clipping and\n"
        "          accumulation; flags given explicitly override it. Its steps_per_print\n"
        "          sets how often a progress line is printed (unset: every --steps / 20).\n"
        "--trace FILE: a timeline of steps 2-4 (--trace-steps A-B) in Chrome trace JSON\n"
        "          (Perfetto, chrome://tracing), FILE.rank<R>.json per rank with several\n"
        "          (docs/trace.md); the config's trace section does the same.\n"
        "--peak-flops F: one rank's peak FLOP/s, for the MFU of the progress lines\n"
        "          (default: the device's - the CPU's estimate, or the GPU's datasheet\n"
        "          bf16 peak).\n"
        "--init-from: start from a Hugging Face GPT2LMHeadModel checkpoint (its names, the\n"
        "          Conv1D weights transposed; layers, dim, vocab and context from its shapes,\n"
        "          heads from config.json beside it or --heads); each rank reads its part\n"
        "          (zc_load_safetensors). --seq defaults to min(64, its context).\n"
        "--tokens: token ids to train on instead of --data's bytes: llm.c's .bin (header\n"
        "          magic 20240520, version 1, count; uint16 ids) or raw little-endian uint16;\n"
        "          the last 10%% validate. --vocab is then from 2 (bytes need 256).\n"
        "--ctx: positions of the position embedding (GPT-2's n_positions; default --seq),\n"
        "          at least --seq.\n"
        "--order sequential: each global batch takes the next windows of --seq tokens in\n"
        "          order (window g starts at token g x seq), instead of random ones.\n"
        "--checkpoint-activations block: keep only each block's input (in zeroc's activation\n"
        "          store: zc_act_save) and recompute the block in backward from it (the last\n"
        "          block keeps its activations: it runs on into its backward); the result\n"
        "          is bitwise that of none (the default), in less memory.\n"
        "--checkpoint-offload: where the store keeps the inputs - device memory, pinned host\n"
        "          memory (activation_checkpointing.cpu_checkpointing) or NVMe\n"
        "          (nvme_checkpointing, under --checkpoint-nvme-path or the config's\n"
        "          nvme_path); default: as --config's activation_checkpointing says.\n"
        "--export: after training, the model as one safetensors file under\n"
        "          GPT2LMHeadModel's names (and config.json beside it unless one exists), for\n"
        "          GPT2LMHeadModel.from_pretrained.\n",
        GPT_LAYERS_MIN, GPT_LAYERS_MAX, GPT_HEADS_MIN, GPT_HEADS_MAX, GPT_DIM_MIN, GPT_DIM_MAX,
        GPT_SEQ_MIN, GPT_SEQ_MAX, GPT_SEQ_MIN, GPT_SEQ_MAX, GPT_VOCAB_MIN, GPT_VOCAB_MAX);
}

static long long parse_int(const char *flag, const char *v, long long lo, long long hi)
{
    char err[ZC_ARG_ERRLEN];
    int64_t x;
    if (!zc__arg_i64(flag, v, lo, hi, 0, &x, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        gpt_quit(2);
    }
    return x;
}

static double parse_double(const char *flag, const char *v, double lo, double hi)
{
    char err[ZC_ARG_ERRLEN];
    double x;
    if (!zc__arg_double(flag, v, lo, hi, &x, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        gpt_quit(2);
    }
    return x;
}

gpt_opts gpt_parse_args(int argc, char **argv)
{
    gpt_opts o = {.model = {.vocab = 256, .seq = 64, .layers = 2, .heads = 4, .dim = 64},
                  .stage = 2, .world = 2, .steps = 300, .accum = 1, .batch = 8,
                  .eval_every = 100, .dtype = ZC_DTYPE_BF16, .seed = 1, .clip = 1.0, .lr = 3e-3,
                  .weight_decay = 0.1, .data_path = "/usr/share/common-licenses/GPL-3",
                  .ckpt_offload = GPT_CKPT_CONFIG};
    static const char *const with_value[] = {
        "--layers", "--heads", "--dim", "--seq", "--vocab", "--batch", "--steps", "--stage",
        "--world", "--dtype", "--accum", "--lr", "--clip", "--seed", "--eval-every", "--sample",
        "--data", "--config", "--device", "--launcher", "--save-every", "--save-dir",
        "--init-from", "--tokens", "--order", "--export", "--ctx",
        "--trace", "--trace-steps", "--peak-flops", "--checkpoint-activations",
        "--checkpoint-offload", "--checkpoint-nvme-path"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) { o.json = true; continue; }
        if (!strcmp(a, "--resume")) { o.resume = true; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); gpt_quit(0); }
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "train_gpt: unknown flag '%.200s'\n", a);
            usage(stderr);
            gpt_quit(2);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "train_gpt: %s needs a value\n", a);
            usage(stderr);
            gpt_quit(2);
        }
        const char *v = argv[++i];
        /* A file name that starts with '-' is almost always a forgotten value. */
        if ((!strcmp(a, "--config") || !strcmp(a, "--data") || !strcmp(a, "--init-from") ||
             !strcmp(a, "--tokens") || !strcmp(a, "--export") || !strcmp(a, "--trace")) && v[0] == '-') {
            fprintf(stderr, "train_gpt: %s needs a file name, got '%.200s' (a flag?); write "
                    "./%.200s for a file of that name\n", a, v, v);
            gpt_quit(2);
        }
        /* The model's ranges: gpt_limits.h (`zeroc bench train` holds --model to them). */
        if (!strcmp(a, "--layers")) {
            o.model.layers = (int)parse_int(a, v, GPT_LAYERS_MIN, GPT_LAYERS_MAX);
            o.given |= GPT_GIVEN_LAYERS;
        } else if (!strcmp(a, "--heads")) {
            o.model.heads = (int)parse_int(a, v, GPT_HEADS_MIN, GPT_HEADS_MAX);
            o.given |= GPT_GIVEN_HEADS;
        } else if (!strcmp(a, "--dim")) {
            o.model.dim = (int)parse_int(a, v, GPT_DIM_MIN, GPT_DIM_MAX);
            o.given |= GPT_GIVEN_DIM;
        } else if (!strcmp(a, "--seq")) {
            o.model.seq = (int)parse_int(a, v, GPT_SEQ_MIN, GPT_SEQ_MAX);
            o.given |= GPT_GIVEN_SEQ;
        } else if (!strcmp(a, "--ctx")) {
            o.model.ctx = (int)parse_int(a, v, GPT_SEQ_MIN, GPT_SEQ_MAX);
            o.given |= GPT_GIVEN_CTX;
        }
        /* Byte-level tokens need GPT_BYTE_VOCAB entries (checked with the
         * data); token ids as many as the tokenizer had. */
        else if (!strcmp(a, "--vocab")) {
            o.model.vocab = (int)parse_int(a, v, GPT_VOCAB_MIN, GPT_VOCAB_MAX);
            o.given |= GPT_GIVEN_VOCAB;
        }
        else if (!strcmp(a, "--checkpoint-activations")) {
            if (!strcmp(v, "none")) o.ckpt = false;
            else if (!strcmp(v, "block")) o.ckpt = true;
            else {
                fprintf(stderr, "train_gpt: --checkpoint-activations must be none or block, got "
                        "'%.200s'\n", v);
                gpt_quit(2);
            }
        } else if (!strcmp(a, "--checkpoint-offload")) {
            if (!strcmp(v, "device")) o.ckpt_offload = GPT_CKPT_DEVICE;
            else if (!strcmp(v, "cpu")) o.ckpt_offload = GPT_CKPT_CPU;
            else if (!strcmp(v, "nvme")) o.ckpt_offload = GPT_CKPT_NVME;
            else {
                fprintf(stderr, "train_gpt: --checkpoint-offload must be device, cpu or nvme, "
                        "got '%.200s'\n", v);
                gpt_quit(2);
            }
        } else if (!strcmp(a, "--checkpoint-nvme-path")) o.ckpt_nvme_path = v;
        else if (!strcmp(a, "--init-from")) o.init_from = v;
        else if (!strcmp(a, "--tokens")) o.tokens_path = v;
        else if (!strcmp(a, "--export")) o.export_path = v;
        else if (!strcmp(a, "--order")) {
            if (!strcmp(v, "random")) o.sequential = false;
            else if (!strcmp(v, "sequential")) o.sequential = true;
            else {
                fprintf(stderr, "train_gpt: --order must be random or sequential, got "
                        "'%.200s'\n", v);
                gpt_quit(2);
            }
        }
        else if (!strcmp(a, "--batch")) { o.batch = (int)parse_int(a, v, 1, 4096); o.given |= GPT_GIVEN_BATCH; }
        else if (!strcmp(a, "--steps")) o.steps = (int)parse_int(a, v, 0, 1000000);
        else if (!strcmp(a, "--stage")) { o.stage = (int)parse_int(a, v, 0, 3); o.given |= GPT_GIVEN_STAGE; }
        else if (!strcmp(a, "--world")) { o.world = (int)parse_int(a, v, 1, 64); o.given |= GPT_GIVEN_WORLD; }
        else if (!strcmp(a, "--accum")) { o.accum = (int)parse_int(a, v, 1, 1024); o.given |= GPT_GIVEN_ACCUM; }
        else if (!strcmp(a, "--lr")) { o.lr = parse_double(a, v, 0, 1e6); o.given |= GPT_GIVEN_LR; }
        else if (!strcmp(a, "--clip")) { o.clip = parse_double(a, v, 0, 1e9); o.given |= GPT_GIVEN_CLIP; }
        else if (!strcmp(a, "--eval-every")) o.eval_every = (int)parse_int(a, v, 0, 1000000);
        else if (!strcmp(a, "--sample")) o.sample = (int)parse_int(a, v, 0, 100000);
        else if (!strcmp(a, "--save-every")) o.save_every = (int)parse_int(a, v, 1, 1000000);
        else if (!strcmp(a, "--save-dir")) o.save_dir = v;
        else if (!strcmp(a, "--trace")) o.trace = v;
        else if (!strcmp(a, "--trace-steps")) o.trace_steps = v;
        else if (!strcmp(a, "--peak-flops")) o.peak_flops = parse_double(a, v, 0, 1e18);
        else if (!strcmp(a, "--data")) { o.data_path = v; o.given |= GPT_GIVEN_DATA; }
        else if (!strcmp(a, "--config")) o.config_path = v;
        else if (!strcmp(a, "--launcher")) {
            if (!strcmp(v, "auto")) o.launcher = GPT_LAUNCH_AUTO;
            else if (!strcmp(v, "threads")) o.launcher = GPT_LAUNCH_THREADS;
            else if (!strcmp(v, "env")) o.launcher = GPT_LAUNCH_ENV;
            else {
                fprintf(stderr, "train_gpt: --launcher must be auto, threads or env, got "
                        "'%.200s'\n", v);
                gpt_quit(2);
            }
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "cpu")) o.cuda = false;
            else if (!strcmp(v, "cuda")) o.cuda = true;
            else {
                fprintf(stderr, "train_gpt: --device must be cpu or cuda, got '%.200s'\n", v);
                gpt_quit(2);
            }
        }
        else if (!strcmp(a, "--seed")) {
            char err[ZC_ARG_ERRLEN];
            uint64_t x;
            if (!zc__arg_u64(a, v, 0, UINT64_MAX, 0, &x, err, sizeof err)) {
                fprintf(stderr, "train_gpt: %s\n", err);
                gpt_quit(2);
            }
            o.seed = x;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "fp32")) o.dtype = ZC_DTYPE_F32;
            else if (!strcmp(v, "bf16")) o.dtype = ZC_DTYPE_BF16;
            else if (!strcmp(v, "fp16")) o.dtype = ZC_DTYPE_F16;
            else {
                fprintf(stderr, "train_gpt: --dtype must be fp32, bf16 or fp16, got '%.200s'\n", v);
                gpt_quit(2);
            }
            o.given |= GPT_GIVEN_DTYPE;
        }
    }
    if (o.trace_steps && !o.trace) {
        fprintf(stderr, "train_gpt: --trace-steps needs --trace FILE\n");
        gpt_quit(2);
    }
    if (o.trace_steps) {
        /* "A-B" or "A", 1 <= A <= B (the library's trace.steps, checked here
         * as a flag). */
        char a[32] = "", b[32] = "";
        const char *dash = strchr(o.trace_steps, '-');
        snprintf(a, sizeof a, "%.*s", dash ? (int)(dash - o.trace_steps) : 31, o.trace_steps);
        snprintf(b, sizeof b, "%s", dash ? dash + 1 : a);
        const long long first = parse_int("--trace-steps (first)", a, 1, 1LL << 53);
        const long long last = parse_int("--trace-steps (last)", b, 1, 1LL << 53);
        if (last < first) {
            fprintf(stderr, "train_gpt: --trace-steps %s: the window ends before it begins "
                    "(want A-B with A <= B)\n", o.trace_steps);
            gpt_quit(2);
        }
    }
    if ((o.save_every || o.resume) && !o.save_dir) {
        fprintf(stderr, "train_gpt: --save-every and --resume need --save-dir DIR\n");
        gpt_quit(2);
    }
    if ((o.ckpt_offload != GPT_CKPT_CONFIG || o.ckpt_nvme_path) && !o.ckpt) {
        fprintf(stderr, "train_gpt: --checkpoint-offload and --checkpoint-nvme-path go with "
                "--checkpoint-activations block\n");
        gpt_quit(2);
    }
    if (o.ckpt_nvme_path && o.ckpt_offload != GPT_CKPT_NVME) {
        fprintf(stderr, "train_gpt: --checkpoint-nvme-path goes with --checkpoint-offload nvme\n");
        gpt_quit(2);
    }
    if (o.tokens_path && (o.given & GPT_GIVEN_DATA)) {
        fprintf(stderr, "train_gpt: --tokens and --data exclude each other\n");
        gpt_quit(2);
    }
    char err[1024];
    /* The checkpoint's shapes decide the model (hf_init.h). */
    if (o.init_from && !gpt_hf_shape(o.init_from, &o.model, o.given, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        gpt_quit(2);
    }
    if (!o.tokens_path && o.model.vocab < GPT_BYTE_VOCAB) {
        fprintf(stderr, "train_gpt: --vocab %d: byte-level text needs 256 tokens (token ids "
                "come with --tokens)\n", o.model.vocab);
        gpt_quit(2);
    }
    if (!gpt_config_check(&o.model, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        gpt_quit(2);
    }
    return o;
}

static void fail(const char *what)
{
    const char *m = zc_last_error();
    fprintf(stderr, "train_gpt: %s: %s\n", what, m && *m ? m : "(no detail)");
    gpt_quit(1);
}

#define CHECK(call) do { if ((call) != ZC_OK) fail(#call); } while (0)

/* A resolved integer or boolean read back and held to this program's range. */
static long long config_int(zc_config *cfg, const char *path, const char *key, long long lo,
                            long long hi)
{
    char buf[64], err[ZC_ARG_ERRLEN];
    CHECK(zc_config_get(cfg, key, buf, sizeof buf));
    if (!strcmp(buf, "true")) return 1;
    if (!strcmp(buf, "false")) return 0;
    int64_t v;
    if (!zc__arg_i64(key, buf, lo, hi, 0, &v, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s: %s (this example's limit)\n", path, err);
        gpt_quit(1);
    }
    return v;
}

zc_config *gpt_make_config(gpt_opts *o, int world)
{
    zc_config *cfg = NULL;
    const bool file = o->config_path != NULL;
    char v[64];
    if (file) {
        if (zc_config_load(&cfg, o->config_path) != ZC_OK) {
            fprintf(stderr, "train_gpt: %s\n", zc_last_error());
            gpt_quit(1);
        }
        zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
        pv.micro_batch_per_gpu = o->batch;
        pv.gradient_accumulation_steps = o->accum;
        pv.total_num_steps = o->steps > 0 ? o->steps : 1;
        if (o->given & GPT_GIVEN_LR) pv.lr = o->lr;
        if (o->given & GPT_GIVEN_CLIP) pv.max_grad_norm = o->clip;
        if (o->given & GPT_GIVEN_DTYPE) pv.dtype = (int)o->dtype;
        CHECK(zc_config_set_program_values(cfg, &pv));
    } else {
        CHECK(zc_config_create(&cfg));
    }
#define SET(bit, key, ...) do { if (!file || (o->given & (bit))) { \
        snprintf(v, sizeof v, __VA_ARGS__); CHECK(zc_config_set(cfg, key, v)); } } while (0)
    SET(GPT_GIVEN_STAGE, "zero_optimization.stage", "%d", o->stage);
    SET(GPT_GIVEN_BATCH, "train_micro_batch_size_per_gpu", "%d", o->batch);
    SET(GPT_GIVEN_ACCUM, "gradient_accumulation_steps", "%d", o->accum);
    SET(GPT_GIVEN_CLIP, "gradient_clipping", "%.17g", o->clip);
    if (!file) {
        CHECK(zc_config_set(cfg, "optimizer.type", "\"AdamW\""));
        CHECK(zc_config_set(cfg, "optimizer.params.betas", "[0.9, 0.95]"));
        snprintf(v, sizeof v, "%.17g", o->weight_decay);
        CHECK(zc_config_set(cfg, "optimizer.params.weight_decay", v));
    }
    SET(GPT_GIVEN_LR, "optimizer.params.lr", "%.17g", o->lr);
    SET(GPT_GIVEN_DTYPE, "bf16.enabled", "%s", o->dtype == ZC_DTYPE_BF16 ? "true" : "false");
    SET(GPT_GIVEN_DTYPE, "fp16.enabled", "%s", o->dtype == ZC_DTYPE_F16 ? "true" : "false");
#undef SET
    /* Where the activation store keeps the blocks' inputs: the flags set
     * the section's keys (the file's otherwise decide); the path first, which
     * nvme_checkpointing needs. */
    if (o->ckpt_nvme_path &&
        zc_config_set_string(cfg, "activation_checkpointing.nvme_path", o->ckpt_nvme_path) !=
            ZC_OK) {
        fprintf(stderr, "train_gpt: --checkpoint-nvme-path: %s\n", zc_last_error());
        gpt_quit(2);
    }
    if (o->ckpt_offload != GPT_CKPT_CONFIG) {
        CHECK(zc_config_set_bool(cfg, "activation_checkpointing.cpu_checkpointing",
                                 o->ckpt_offload == GPT_CKPT_CPU));
        CHECK(zc_config_set_bool(cfg, "activation_checkpointing.nvme_checkpointing",
                                 o->ckpt_offload == GPT_CKPT_NVME));
    }
    /* --trace: the timeline's keys (a string set through JSON: escaped). */
    const struct { const char *key, *text; } strs[] = {{"trace.path", o->trace},
                                                     {"trace.steps", o->trace_steps}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (!strs[i].text)
            continue;
        if (zc_config_set_string(cfg, strs[i].key, strs[i].text) != ZC_OK) {
            fprintf(stderr, "train_gpt: --%s: %s\n", i ? "trace-steps" : "trace",
                    zc_last_error());
            gpt_quit(2);
        }
    }
    if (zc_config_resolve(cfg, world) != ZC_OK) {
        fprintf(stderr, "train_gpt: %s: %s\n", file ? o->config_path : "flags", zc_last_error());
        gpt_quit(1);
    }
    const char *p = file ? o->config_path : "flags";
    /* "auto" (with zero_optimization.max_memory): the engine picks the stage
     * at build; the final line reports the one it took. */
    CHECK(zc_config_get(cfg, "zero_optimization.stage", v, sizeof v));
    o->stage = !strcmp(v, "\"auto\"") ? -1
                                       : (int)config_int(cfg, p, "zero_optimization.stage", 0, 3);
    o->accum = (int)config_int(cfg, p, "gradient_accumulation_steps", 1, 1024);
    o->batch = (int)config_int(cfg, p, "train_micro_batch_size_per_gpu", 1, 4096);
    o->ckpt_offload = config_int(cfg, p, "activation_checkpointing.nvme_checkpointing", 0, 1)
                          ? GPT_CKPT_NVME
                      : config_int(cfg, p, "activation_checkpointing.cpu_checkpointing", 0, 1)
                          ? GPT_CKPT_CPU
                          : GPT_CKPT_DEVICE;
    CHECK(zc_config_get(cfg, "steps_per_print", v, sizeof v));
    o->print_every = !strcmp(v, "null") ? 0 : (int)config_int(cfg, p, "steps_per_print", 1,
                                                                1000000);
    o->comms_logger = config_int(cfg, p, "comms_logger.enabled", 0, 1) != 0;
    o->dtype = config_int(cfg, p, "bf16.enabled", 0, 1)   ? ZC_DTYPE_BF16
               : config_int(cfg, p, "fp16.enabled", 0, 1) ? ZC_DTYPE_F16
                                                           : ZC_DTYPE_F32;
    return cfg;
}
