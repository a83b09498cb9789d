/* `zeroc estimate`: per-rank memory of a model in every stage x offload
 * configuration (offload_optimizer, and offload_param at stage 3) or a config
 * file's, before anything runs.
 *
 * The bytes come from the engine's own planner (src/plan/estimate.c), fed the
 * chunk layout zc_engine_build would make (the same chunking, padding and
 * stage-3 persistence rules) and the configuration's sizes ("auto" keys
 * resolved from the model's hidden size as the engine does). Beside them:
 * DeepSpeed's estimate_zero2/zero3_model_states_mem_needs figures, and with
 * --model the activations of a GPT-2-style model (docs/estimate.md states the
 * formula and its assumptions). Exit status: 0, 1 (a plan failed: overflow,
 * unreadable config), 2 usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cliarg.h"
#include "config/config.h"
#include "plan/plan.h"
#include "estimate_act.h"
#include "estimate_place.h"

int zc__cmd_estimate(int argc, char **argv);

#define MAX_TENSORS (1 << 20)
/* --params makes tensors of the default chunk cap (each then a chunk of its
 * own), at most MAX_TENSORS of them: the largest N it can answer for, and so
 * the range --help states and the parser holds it to. The plan is one pass
 * over the chunks (src/plan/estimate.c), so the top of the range answers at
 * once. */
#define MAX_PARAMS ((int64_t)MAX_TENSORS * ZC_CHUNK_CAP_ELEMS) /* 2^44 */
_Static_assert(MAX_PARAMS == (int64_t)1 << 44, "--help states 2^44");

/* Byte counts: the activations of the largest models and batches --model
 * accepts pass 2^64 (5 A S^2 B L alone reaches 2^83), so they and the totals
 * that hold them are 128-bit; printed as a JSON integer up to 2^63 - 1 and as
 * a JSON number with an exponent beyond. */
__extension__ typedef unsigned __int128 u128;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zeroc estimate (--params N | --model gpt:LAYERS,DIM,HEADS,SEQ,VOCAB)\n"
            "                      --world W [--ranks-per-node N] [--dtype fp32|bf16|fp16]\n"
            "                      [--mics-shard-size S [--mics-hierarchical]]\n"
            "                      [--hpz-partition-size S]\n"
            "                      [--micro-batch B] [--config FILE] [--json]\n"
            "                      [--chunks auto|per-block] [--device cuda|host]\n"
            "                      [--max-memory device=SIZE,cpu=SIZE,nvme=SIZE [--nvme-path DIR]]\n"
            "                      [--seq S] [--checkpoint-activations none|block]\n"
            "                      [--checkpoint-offload device|cpu|nvme] [--fit-device SIZE]\n"
            "                      [--act-dtype fp32|bf16|fp16] [--state config|fp32|bf16|both]\n"
            "  Per-rank bytes of device, pinned host, pageable host and NVMe memory that\n"
            "  zc_engine_build allocates, for every stage x offload_optimizer combination\n"
            "  and, at stage 3, x offload_param (or only the one FILE configures), with\n"
            "  DeepSpeed's estimator figures and,\n"
            "  for --model, the activations of one micro-batch (docs/estimate.md).\n"
            "  --params N        parameters, in 2^24-element tensors, N in [1, 2^44]\n"
            "  --model gpt:...   a GPT-2 shape: tied embeddings, learned positions, 4x MLP;\n"
            "                    LAYERS in [1, 4096], DIM in [1, 65536], HEADS in [1, 4096]\n"
            "                    dividing DIM, SEQ in [1, 2^20], VOCAB in [1, 2^24], and\n"
            "                    at most 2^44 parameters in all, --params's range\n"
            "  --world W         data-parallel ranks, [1, 65536]\n"
            "  --ranks-per-node N [1, 1024], dividing W (default: W up to 8): ranks (GPUs)\n"
            "                    per node, nodes of N consecutive ranks, for the bytes per\n"
            "                    step by link; --gpus-per-node G is its older name\n"
            "  --mics-shard-size S [1, 65536], dividing W: MiCS\n"
            "                    (zero_optimization.mics_shard_size): each configuration\n"
            "                    of stages 1-3 also planned sharded in groups of S ranks,\n"
            "                    beside flat sharding\n"
            "  --mics-hierarchical  with it: the parameters gathered across nodes first\n"
            "                    (S a multiple of N spanning several nodes)\n"
            "  --hpz-partition-size S [1, 65536], dividing W: hpZ\n"
            "                    (zero_hpz_partition_size): stage 3 also planned with the\n"
            "                    secondary partition, beside flat\n"
            "  --dtype           working precision (default: the config's, else bf16)\n"
            "  --state           the optimizer state's precision: config (the default: --config's\n"
            "                    bf16 keys, else fp32), fp32, bf16 (master and moments), or both:\n"
            "                    a row for each (bf16 from stage 1, as DeepSpeed allows it)\n"
            "  --micro-batch B   sequences per rank and micro-step, [1, 65536] (default: the\n"
            "                    config's train_micro_batch_size_per_gpu, else 1)\n"
            "  --json            one JSON line per configuration\n"
            "  --chunks per-block  with --model: a chunk boundary before each transformer\n"
            "                    block and the final LayerNorm, as examples/gpt registers\n"
            "                    them (default auto: chunks filled to the bucket size)\n"
            "  --device host     the engine on the host path (no GPU): its \"device\"\n"
            "                    buffers and the activations are host memory (default cuda)\n"
            "  --max-memory      per-rank budgets (zero_optimization.max_memory: sizes as\n"
            "                    \"70GiB\", \"500MB\", or auto; a kind left out may not be\n"
            "                    used): prints, per stage (or the config's), the placement\n"
            "                    the engine would choose - chunks and bytes per kind, link\n"
            "                    bytes per step, the bounding link, the keys that pin it\n"
            "                    down (docs/placement.md); exit 1 when no stage fits\n"
            "  --nvme-path DIR   with nvme=: the swap directory (offload_optimizer.nvme_path)\n"
            "  --seq S           with --model: the training sequence, [1, the model's SEQ]\n"
            "                    (its context; default SEQ)\n"
            "  --checkpoint-activations block  with --model: each block's input but the\n"
            "                    last's kept in the engine's activation store (planned in\n"
            "                    the kinds' columns where activation_checkpointing keeps\n"
            "                    them) and the block recomputed in backward: the activations\n"
            "                    column holds one block's working set (default none: every\n"
            "                    layer's)\n"
            "  --checkpoint-offload device|cpu|nvme  with block: where the store keeps them\n"
            "                    (cpu_checkpointing, nvme_checkpointing; default: --config's)\n"
            "  --act-dtype       with --model: the activations' precision (default the\n"
            "                    working one; train_gpt keeps fp32 activations)\n"
            "  --fit-device SIZE with --model: the largest micro-batch whose device bytes\n"
            "                    (activations counted as device memory) fit SIZE, at each\n"
            "                    sequence 128, 256, ... up to SEQ, without and with\n"
            "                    checkpointing, for --config's configuration (default\n"
            "                    stage 0)\n"
            "Exit status: 0 success, 1 a plan failed, 2 usage error.\n");
}

typedef struct model {
    int64_t *numel;
    bool *boundary;  /* per tensor: a zc_chunk_boundary before it (--chunks per-block) */
    int n;
    int64_t total, largest, hidden; /* hidden: H of the "auto" rules (0: none) */
    bool gpt;
    int64_t L, D, Hh, S, V;
} model;

typedef struct opts {
    model m;
    int world, gpn, micro;
    int dtype; /* -1: from the config */
    const char *config;
    bool json;
    bool per_block;   /* --chunks per-block */
    bool host_device; /* --device host */
    const char *max_memory, *nvme_path; /* --max-memory, --nvme-path */
    int mics, hpz;    /* --mics-shard-size, --hpz-partition-size (0: not given) */
    bool hier;        /* --mics-hierarchical */
    bool gpn_given;
    int64_t seq;      /* --seq (0: the model's SEQ) */
    bool ckpt;        /* --checkpoint-activations block */
    int ckpt_home;    /* --checkpoint-offload: 0 device, 1 cpu, 2 nvme; -1 the config's */
    int64_t fit;      /* --fit-device bytes, -1 none */
    int act_esz;      /* --act-dtype's bytes (0: the working precision's) */
    int state;        /* --state: 0 config, 1 fp32, 2 bf16, 3 both */
    zc_state_dtypes sd; /* the row being planned: master, m, v */
} opts;

/* How a row is sharded: flat, MiCS over groups of `size`, or hpZ. */
typedef enum { SHARD_FLAT = 0, SHARD_MICS, SHARD_HPZ } shard_kind;
typedef struct sharding {
    shard_kind kind;
    int size;
    bool hier;
} sharding;

static bool push(model *m, int64_t n)
{
    if (m->n == MAX_TENSORS)
        return false;
    m->numel[m->n++] = n;
    if (__builtin_add_overflow(m->total, n, &m->total))
        return false;
    if (n > m->largest)
        m->largest = n;
    return true;
}

/* --params: N elements as tensors of the default chunk cap (each then a
 * chunk of its own) and the remainder. */
static bool make_params(model *m, int64_t N)
{
    for (int64_t left = N; left > 0; left -= ZC_CHUNK_CAP_ELEMS)
        if (!push(m, left < ZC_CHUNK_CAP_ELEMS ? left : ZC_CHUNK_CAP_ELEMS))
            return false;
    return true;
}

/* GPT-2's tensors in registration order: wte V x D (tied with the output
 * head), wpe S x D, per layer ln_1 (w, b), attn qkv (3D x D, 3D), attn proj
 * (D x D, D), ln_2 (w, b), fc (4D x D, 4D), proj (D x 4D, D); then ln_f. */
static bool make_gpt(model *m)
{
    const int64_t D = m->D;
    int64_t t = 0;
    if (__builtin_mul_overflow(m->V, D, &t) || !push(m, t))
        return false;
    if (__builtin_mul_overflow(m->S, D, &t) || !push(m, t))
        return false;
    for (int64_t l = 0; l < m->L; l++) {
        const int64_t sz[12] = {D, D, 3 * D * D, 3 * D, D * D, D, D, D, 4 * D * D, 4 * D,
                                4 * D * D, D};
        m->boundary[m->n] = true; /* examples/gpt: a chunk per block */
        for (int i = 0; i < 12; i++)
            if (!push(m, sz[i]))
                return false;
    }
    m->boundary[m->n] = true; /* and one for ln_f */
    /* H of the "auto" rules, as layout.c's model_hidden_size takes it: the
     * largest dimension of the first 2-D tensor of the largest size (wte,
     * wpe, then the 4D x D MLP weight; qkv and the D x D projection are
     * smaller than the MLP's). */
    const int64_t cand[3][2] = {{m->V, D}, {m->S, D}, {4 * D, D}};
    int64_t best = 0;
    for (int i = 0; i < 3; i++)
        if (cand[i][0] * cand[i][1] > best) {
            best = cand[i][0] * cand[i][1];
            m->hidden = cand[i][0] > cand[i][1] ? cand[i][0] : cand[i][1];
        }
    return push(m, D) && push(m, D);
}

static int parse_model(const char *text, model *m)
{
    char err[ZC_ARG_ERRLEN];
    if (strncmp(text, "gpt:", 4)) {
        fprintf(stderr, "zeroc estimate: --model '%s': expected gpt:LAYERS,DIM,HEADS,SEQ,VOCAB\n",
                text);
        return 2;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text + 4);
    const char *names[5] = {"--model LAYERS", "--model DIM", "--model HEADS", "--model SEQ",
                            "--model VOCAB"};
    /* DIM up to 2^16 keeps 12 DIM^2 x LAYERS inside int64 elements; --help
     * states these bounds. */
    const int64_t hi[5] = {4096, 65536, 4096, 1 << 20, 1 << 24};
    int64_t v[5];
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    int n = 0;
    for (; tok && n < 5; tok = strtok_r(NULL, ",", &save), n++)
        if (!zc__arg_i64(names[n], tok, 1, hi[n], 0, &v[n], err, sizeof err)) {
            fprintf(stderr, "zeroc estimate: %s\n", err);
            return 2;
        }
    if (n != 5 || tok || text[strlen(text) - 1] == ',' || strstr(text, ",,")) {
        fprintf(stderr, "zeroc estimate: --model '%s': expected five whole numbers "
                        "gpt:LAYERS,DIM,HEADS,SEQ,VOCAB\n", text);
        return 2;
    }
    if (v[1] % v[2]) {
        fprintf(stderr, "zeroc estimate: --model '%s': DIM %lld is not a multiple of HEADS "
                        "%lld\n", text, (long long)v[1], (long long)v[2]);
        return 2;
    }
    m->gpt = true;
    m->L = v[0], m->D = v[1], m->Hh = v[2], m->S = v[3], m->V = v[4];
    return 0;
}

static int parse(int argc, char **argv, opts *o, int64_t *params)
{
    char err[ZC_ARG_ERRLEN];
    *params = 0;
    o->world = 0;
    o->gpn = 0;
    o->micro = 0;
    o->dtype = -1;
    o->ckpt_home = -1;
    o->fit = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--mics-hierarchical")) {
            o->hier = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "zeroc estimate: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--params")) {
            ok = zc__arg_i64(a, v, 1, MAX_PARAMS, ZC_ARG_SUFFIX, params, err, sizeof err);
        } else if (!strcmp(a, "--model")) {
            int rc = parse_model(v, &o->m);
            if (rc)
                return rc;
        } else if (!strcmp(a, "--world")) {
            ok = zc__arg_int(a, v, 1, 65536, &o->world, err, sizeof err);
        } else if (!strcmp(a, "--gpus-per-node") || !strcmp(a, "--ranks-per-node")) {
            int g = 0;
            ok = zc__arg_int(a, v, 1, 1024, &g, err, sizeof err);
            if (ok && o->gpn_given && g != o->gpn) {
                fprintf(stderr, "zeroc estimate: %s %d but an earlier --ranks-per-node or "
                                "--gpus-per-node said %d\n", a, g, o->gpn);
                return 2;
            }
            o->gpn = g;
            o->gpn_given = true;
        } else if (!strcmp(a, "--mics-shard-size")) {
            ok = zc__arg_int(a, v, 1, 65536, &o->mics, err, sizeof err);
        } else if (!strcmp(a, "--hpz-partition-size")) {
            ok = zc__arg_int(a, v, 1, 65536, &o->hpz, err, sizeof err);
        } else if (!strcmp(a, "--micro-batch")) {
            ok = zc__arg_int(a, v, 1, 65536, &o->micro, err, sizeof err);
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "fp32"))
                o->dtype = ZC_DTYPE_F32;
            else if (!strcmp(v, "bf16"))
                o->dtype = ZC_DTYPE_BF16;
            else if (!strcmp(v, "fp16"))
                o->dtype = ZC_DTYPE_F16;
            else {
                fprintf(stderr, "zeroc estimate: --dtype '%s': expected fp32, bf16 or fp16\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--config")) {
            o->config = v;
        } else if (!strcmp(a, "--state")) {
            static const char *const names[] = {"config", "fp32", "bf16", "both"};
            o->state = -1;
            for (int si = 0; si < 4; si++)
                if (!strcmp(v, names[si]))
                    o->state = si;
            if (o->state < 0) {
                fprintf(stderr, "zeroc estimate: --state '%s': expected config, fp32, bf16 or "
                                "both\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--max-memory")) {
            o->max_memory = v;
        } else if (!strcmp(a, "--nvme-path")) {
            o->nvme_path = v;
        } else if (!strcmp(a, "--seq")) {
            ok = zc__arg_i64(a, v, 1, 1 << 20, 0, &o->seq, err, sizeof err);
        } else if (!strcmp(a, "--checkpoint-activations")) {
            if (strcmp(v, "none") && strcmp(v, "block")) {
                fprintf(stderr, "zeroc estimate: --checkpoint-activations '%s': expected none or "
                                "block\n", v);
                return 2;
            }
            o->ckpt = !strcmp(v, "block");
        } else if (!strcmp(a, "--checkpoint-offload")) {
            o->ckpt_home = !strcmp(v, "device") ? 0 : !strcmp(v, "cpu") ? 1
                           : !strcmp(v, "nvme") ? 2 : -2;
            if (o->ckpt_home == -2) {
                fprintf(stderr, "zeroc estimate: --checkpoint-offload '%s': expected device, cpu "
                                "or nvme\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--act-dtype")) {
            o->act_esz = !strcmp(v, "fp32") ? 4 : !strcmp(v, "bf16") || !strcmp(v, "fp16") ? 2 : 0;
            if (!o->act_esz) {
                fprintf(stderr, "zeroc estimate: --act-dtype '%s': expected fp32, bf16 or "
                                "fp16\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--fit-device")) {
            if (!zc__parse_size(v, &o->fit, err, sizeof err)) {
                fprintf(stderr, "zeroc estimate: --fit-device: %s\n", err);
                return 2;
            }
        } else if (!strcmp(a, "--chunks")) {
            if (strcmp(v, "auto") && strcmp(v, "per-block")) {
                fprintf(stderr, "zeroc estimate: --chunks '%s': expected auto or per-block\n", v);
                return 2;
            }
            o->per_block = !strcmp(v, "per-block");
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cuda") && strcmp(v, "host")) {
                fprintf(stderr, "zeroc estimate: --device '%s': expected cuda or host\n", v);
                return 2;
            }
            o->host_device = !strcmp(v, "host");
        } else {
            fprintf(stderr, "zeroc estimate: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "zeroc estimate: %s\n", err);
            return 2;
        }
    }
    if ((*params > 0) == o->m.gpt) {
        fprintf(stderr, "zeroc estimate: give exactly one of --params N and --model gpt:...\n");
        return 2;
    }
    if (!o->world) {
        fprintf(stderr, "zeroc estimate: --world W is required\n");
        return 2;
    }
    if (o->per_block && !o->m.gpt) {
        fprintf(stderr, "zeroc estimate: --chunks per-block needs --model gpt:...\n");
        return 2;
    }
    if ((o->seq || o->ckpt || o->fit >= 0 || o->act_esz) && !o->m.gpt) {
        fprintf(stderr, "zeroc estimate: --seq, --checkpoint-activations, --act-dtype and "
                        "--fit-device need --model gpt:...\n");
        return 2;
    }
    if (o->seq > o->m.S) {
        fprintf(stderr, "zeroc estimate: --seq %lld is longer than the model's context SEQ "
                        "%lld\n", (long long)o->seq, (long long)o->m.S);
        return 2;
    }
    if (o->ckpt_home >= 0 && !o->ckpt) {
        fprintf(stderr, "zeroc estimate: --checkpoint-offload goes with "
                        "--checkpoint-activations block\n");
        return 2;
    }
    if (o->fit >= 0 && (o->max_memory || o->ckpt)) {
        fprintf(stderr, "zeroc estimate: --fit-device compares both modes itself: without "
                        "--max-memory and --checkpoint-activations\n");
        return 2;
    }
    if (o->nvme_path && !o->max_memory) {
        fprintf(stderr, "zeroc estimate: --nvme-path goes with --max-memory\n");
        return 2;
    }
    if (!o->gpn)
        o->gpn = o->world < 8 ? o->world : (o->world % 8 ? 1 : 8);
    if (o->world % o->gpn) {
        fprintf(stderr, "zeroc estimate: --gpus-per-node %d does not divide --world %d\n",
                o->gpn, o->world);
        return 2;
    }
    /* The refusals zc_engine_create and zc_engine_build make. */
    if (o->mics && (o->world % o->mics || o->mics > o->world)) {
        fprintf(stderr, "zeroc estimate: --mics-shard-size %d does not divide --world %d\n",
                o->mics, o->world);
        return 2;
    }
    if (o->hpz && (o->world % o->hpz || o->hpz > o->world)) {
        fprintf(stderr, "zeroc estimate: --hpz-partition-size %d does not divide --world %d\n",
                o->hpz, o->world);
        return 2;
    }
    if (o->mics && o->hpz > 1) {
        fprintf(stderr, "zeroc estimate: --mics-shard-size and --hpz-partition-size: MiCS "
                        "already keeps every gather inside its shard group; give one\n");
        return 2;
    }
    if (o->hier && (!o->mics || !zc__plan_hier_j(o->mics, o->gpn))) {
        fprintf(stderr, "zeroc estimate: --mics-hierarchical needs --mics-shard-size S spanning "
                        "whole nodes of --ranks-per-node %d, several of them (S %d)\n", o->gpn,
                o->mics);
        return 2;
    }
    return 0;
}

/* The model's shape and micro-batch for the activation model. */
static ea_gpt gpt_of(const model *m, int64_t seq, int64_t B, int64_t esz)
{
    return (ea_gpt){.L = m->L, .D = m->D, .A = m->Hh, .V = m->V, .S = seq ? seq : m->S, .B = B,
                    .esz = esz};
}

static const char *dtype_name(int dt)
{
    return dt == ZC_DTYPE_F32 ? "fp32" : dt == ZC_DTYPE_F16 ? "fp16" : "bf16";
}
static const char *off_name(int off)
{
    return off == ZC_OFFLOAD_CPU ? "cpu" : off == ZC_OFFLOAD_NVME ? "nvme" : "none";
}

/* The state's precision as a row shows it: "fp32", "bf16", or each
 * tensor's ("bf16/fp32/fp32": master, m, v) when they differ. */
static void state_name(const zc_state_dtypes *sd, char *buf, size_t cap)
{
    if (sd->master == sd->m && sd->m == sd->v)
        snprintf(buf, cap, "%s", dtype_name(sd->master));
    else
        snprintf(buf, cap, "%s/%s/%s", dtype_name(sd->master), dtype_name(sd->m),
                 dtype_name(sd->v));
}

/* One configuration's row. */
typedef struct row {
    int stage, offload, poffload, dtype;
    zc_state_dtypes sd; /* the optimizer state's precision */
    sharding sh;
    int64_t link[2];  /* bytes one rank sends per step: inside its node, across nodes */
    bool ckpt;
    zc_est est;
    int64_t used, padded, live_bound;
    u128 act;
    uint64_t ds_gpu, ds_cpu;
    bool has_ds, has_act;
} row;

static int plan_row(const opts *o, const zc_config *cfg, int stage, int off, int poff,
                    int dtype, int64_t gas, const sharding *sh, row *r)
{
    /* The ranks chunks are sharded over (MiCS: its groups). */
    const int sw = sh->kind == SHARD_MICS ? sh->size : o->world;
    const model *m = &o->m;
    const size_t pesz = dtype == ZC_DTYPE_F32 ? 4 : 2;
    int64_t cap = 0;
    bool forced = false;
    if (zc__chunk_cap_env(&cap, &forced) != ZC_OK) {
        fprintf(stderr, "zeroc estimate: %s\n", zc_last_error());
        return 2;
    }
    /* layout.c's size_from_model */
    const int64_t bucket = zc__bucket_elems(0, cfg->zero.reduce_bucket_size, cap, forced);
    int64_t *padded = calloc((size_t)m->n, sizeof *padded);
    bool *pers = calloc((size_t)m->n, sizeof *pers);
    /* With a boundary before each block, the units of the stage-2/3
     * gradient pool are the blocks (zc__grad_pool_plan). */
    bool *units = o->per_block ? calloc((size_t)m->n, sizeof *units) : NULL;
    if (!padded || !pers || (o->per_block && !units)) {
        free(padded);
        free(pers);
        free(units);
        fprintf(stderr, "zeroc estimate: out of memory\n");
        return 1;
    }
    int nc = -1;
    int64_t cur = 0, big = 0, ptotal = 0;
    memset(r, 0, sizeof *r);
    for (int i = 0; i <= m->n; i++) {
        const bool boundary = i < m->n && o->per_block && m->boundary[i];
        if (i == m->n || zc__chunk_starts(i, boundary, cur, m->numel[i], bucket)) {
            if (nc >= 0) {
                padded[nc] = zc__chunk_padded(cur, sw);
                r->used += cur;
                r->padded += padded[nc];
                if (stage == 3)
                    pers[nc] = zc__chunk_persists(big, padded[nc],
                                                  cfg->zero.param_persistence_threshold,
                                                  cfg->zero.model_persistence_threshold, &ptotal);
            }
            if (i == m->n)
                break;
            nc++;
            if (units)
                units[nc] = boundary;
            cur = 0;
            big = 0;
        }
        cur += m->numel[i];
        if (m->numel[i] > big)
            big = m->numel[i];
    }
    const int64_t max_live =
        cfg->zero.max_live_parameters > 0 ? cfg->zero.max_live_parameters : INT64_MAX;
    zc_est_in in = {
        .world = o->world, .stage = stage, .pesz = pesz, .gas = gas, .bucket = bucket,
        .sesz = {zc_dtype_size(o->sd.master), zc_dtype_size(o->sd.m), zc_dtype_size(o->sd.v)},
        .offload = off,
        .ratio = cfg->zero.offload_optimizer.ratio > 0 ? cfg->zero.offload_optimizer.ratio : 1,
        .staging = !o->host_device,
        .dev_kind = o->host_device ? ZC_MEMKIND_HOST : ZC_MEMKIND_DEVICE,
        .buffer_count = cfg->zero.offload_optimizer.buffer_count,
        .nvme_round = cfg->aio.block_size *
                      zc__nvme_path_count(cfg->zero.offload_optimizer.nvme_path),
        .max_live = max_live,
        .prefetch_elems = cfg->zero.prefetch_bucket_size > 0 ? cfg->zero.prefetch_bucket_size : 0,
        .nchunks = nc + 1, .padded = padded, .persistent = pers, .unit_start = units,
        .poffload = poff,
        .pbuffer_count = cfg->zero.offload_param.buffer_count,
        .max_in_cpu = cfg->zero.offload_param.max_in_cpu,
        .pnvme_round = cfg->aio.block_size *
                       zc__nvme_path_count(cfg->zero.offload_param.nvme_path),
        .shard_world = sw,
        .replicas = o->world / sw,
        .hpz = sh->kind == SHARD_HPZ && stage == 3 ? sh->size : 0,
        .hier_j = sh->kind == SHARD_MICS && sh->hier ? zc__plan_hier_j(sw, o->gpn) : 0,
    };
    const ea_gpt g = gpt_of(m, o->seq, o->micro, o->act_esz ? o->act_esz : (int64_t)pesz);
    zc_status rc = m->gpt ? zc__ea_store_spec(cfg, &g, o->ckpt, o->host_device, &in.act) : ZC_OK;
    if (rc == ZC_OK)
        rc = zc__estimate(&in, &r->est);
    if (rc == ZC_OK) {
        const zc_link_plan_in li = {
            .world = o->world, .stage = stage, .ranks_per_node = o->gpn, .rank = 0,
            .shard_world = sw, .hier = in.hier_j > 0, .hpz = in.hpz, .pesz = pesz, .gas = gas,
            .nchunks = nc + 1, .padded = padded, .persistent = pers};
        rc = zc__plan_link_bytes(&li, r->link);
    }
    free(padded);
    free(pers);
    free(units);
    if (rc != ZC_OK) {
        fprintf(stderr, "zeroc estimate: stage %d offload_optimizer %s offload_param %s: %s\n",
                stage, off_name(off), off_name(poff), zc_last_error());
        return 1;
    }
    r->stage = stage;
    r->sd = o->sd;
    r->sh = *sh;
    r->offload = off;
    r->poffload = poff;
    r->dtype = dtype;
    if (stage == 3 && max_live != INT64_MAX &&
        __builtin_mul_overflow(max_live, (int64_t)pesz, &r->live_bound))
        r->live_bound = INT64_MAX;
    /* DeepSpeed's estimators know no MiCS: a MiCS row shows them for the S
     * GPUs a shard group is (its states are sharded over S ranks). */
    const int ds_g = sw, ds_gpn = o->gpn < sw ? o->gpn : sw;
    if (stage >= 1 && (poff == ZC_OFFLOAD_NONE || off != ZC_OFFLOAD_NONE)) {
        r->has_ds = zc__est_deepspeed(stage, off != ZC_OFFLOAD_NONE, poff != ZC_OFFLOAD_NONE,
                                      (uint64_t)m->total,
                                      (uint64_t)m->largest, (uint64_t)ds_g,
                                      (uint64_t)ds_gpn, &r->ds_gpu, &r->ds_cpu) == ZC_OK;
    }
    if (m->gpt) {
        r->act = zc__ea_activations(&g, o->ckpt);
        r->has_act = true;
    }
    r->ckpt = o->ckpt;
    return 0;
}

/* The activations live where the model runs: the device, or the host on
 * the host path. */
static u128 device_total(const opts *o, const row *r)
{
    return (u128)r->est.kind_total[ZC_MEMKIND_DEVICE] + (o->host_device ? 0 : r->act);
}

static u128 host_total(const opts *o, const row *r)
{
    return (u128)r->est.kind_total[ZC_MEMKIND_HOST] + (o->host_device ? r->act : 0);
}

/* A byte count as JSON: an integer while one fits (jansson's are int64). */
static json_t *json_bytes(u128 v)
{
    return v <= (u128)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static void print_json(const opts *o, const row *r)
{
    const zc_est *e = &r->est;
    json_t *parts = json_object();
    static const char *const pn[ZC_EST__PARTS] = {"params", "grads", "optimizer", "buffers",
                                                  "activations"};
    static const char *const kn[ZC_MEMKIND__COUNT] = {"host", "pinned", "device", "nvme"};
    for (int k = 0; k < ZC_MEMKIND__COUNT; k++) {
        json_t *pk = json_object();
        for (int p = 0; p < ZC_EST__PARTS; p++)
            json_object_set_new(pk, pn[p],
                                json_integer(zc__est_part_bytes(e, (zc_mem_kind)k, (zc_est_part)p)));
        /* ZC_MEM_OTHER: the device's bookkeeping, the NVMe stripe round-up. */
        json_object_set_new(pk, "other", json_integer(e->bytes[k][ZC_MEM_OTHER]));
        json_object_set_new(parts, kn[k], pk);
    }
    json_t *ds = json_null();
    if (r->has_ds)
        ds = json_pack("{s:o, s:o}", "gpu", json_bytes(r->ds_gpu), "cpu_per_node",
                       json_bytes(r->ds_cpu));
    static const char *const kinds[3] = {"flat", "mics", "hpz"};
    json_t *shj = json_pack("{s:s, s:i, s:b}", "kind", kinds[r->sh.kind], "size",
                                 r->sh.kind == SHARD_FLAT ? o->world : r->sh.size,
                                 "hierarchical", (int)r->sh.hier);
    json_t *state = json_pack("{s:s, s:s, s:s}", "master", dtype_name(r->sd.master), "exp_avg",
                              dtype_name(r->sd.m), "exp_avg_sq", dtype_name(r->sd.v));
    json_t *links = json_pack("{s:I, s:I}", "intra_node", (json_int_t)r->link[0], "inter_node",
                              (json_int_t)r->link[1]);
    json_t *j = json_pack(
        "{s:i, s:s, s:s, s:i, s:s, s:{s:o, s:I, s:o, s:I}, s:o, s:o, s:I, s:I, s:I, s:o, s:o, "
        "s:i, s:o}",
        "stage", r->stage, "offload_optimizer", off_name(r->offload), "offload_param", off_name(r->poffload),
        "world", o->world, "dtype", dtype_name(r->dtype), "bytes", "device",
        json_bytes(device_total(o, r)), "pinned", (json_int_t)e->kind_total[ZC_MEMKIND_PINNED],
        "host", json_bytes(host_total(o, r)), "nvme",
        (json_int_t)e->kind_total[ZC_MEMKIND_NVME], "parts", parts, "activations",
        json_bytes(r->act), "params", (json_int_t)o->m.total, "padding_elems",
        (json_int_t)(r->padded - r->used), "live_bound", (json_int_t)r->live_bound,
        "deepspeed", ds, "sharding", shj, "ranks_per_node", o->gpn,
        "comm_bytes_per_step_by_link", links);
    if (j)
        json_object_set_new(j, "state", state);
    else
        json_decref(state);
    if (j && o->m.gpt) {
        /* The activation store (checkpointing by block): planned in the
         * kinds above, beside the activations that stay with the model. */
        json_object_set_new(j, "checkpoint_activations", json_string(r->ckpt ? "block" : "none"));
        json_object_set_new(j, "seq", json_integer((json_int_t)(o->seq ? o->seq : o->m.S)));
        json_object_set_new(j, "act_store", json_pack(
            "{s:I, s:I, s:I}", "device",
            (json_int_t)e->bytes[ZC_MEMKIND_DEVICE][ZC_MEM_ACTIVATIONS], "pinned",
            (json_int_t)e->bytes[ZC_MEMKIND_PINNED][ZC_MEM_ACTIVATIONS], "nvme",
            (json_int_t)e->bytes[ZC_MEMKIND_NVME][ZC_MEM_ACTIVATIONS]));
    }
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

static void mib(char *buf, size_t cap, u128 b)
{
    snprintf(buf, cap, "%.1f", (double)b / 1048576.0);
}

static void print_row(const opts *o, const row *r)
{
    char d[32], p[32], h[32], n[32], a[32], g[32], c[32], li[32], lx[32], sh[32], st[32];
    state_name(&r->sd, st, sizeof st);
    mib(li, sizeof li, (u128)r->link[0]);
    mib(lx, sizeof lx, (u128)r->link[1]);
    if (r->sh.kind == SHARD_FLAT)
        snprintf(sh, sizeof sh, "flat");
    else
        snprintf(sh, sizeof sh, "%s %d%s", r->sh.kind == SHARD_MICS ? "MiCS" : "hpZ",
                 r->sh.size, r->sh.hier ? " hier" : "");
    mib(d, sizeof d, device_total(o, r));
    mib(p, sizeof p, (u128)r->est.kind_total[ZC_MEMKIND_PINNED]);
    mib(h, sizeof h, host_total(o, r));
    mib(n, sizeof n, (u128)r->est.kind_total[ZC_MEMKIND_NVME]);
    mib(a, sizeof a, r->act);
    snprintf(g, sizeof g, "-");
    snprintf(c, sizeof c, "-");
    if (r->has_ds) {
        mib(g, sizeof g, r->ds_gpu);
        mib(c, sizeof c, r->ds_cpu);
    }
    printf("| %d | %-4s | %-4s | %s | %-4s | %-10s | %12s | %12s | %12s | %12s | %12s | %12s | "
           "%12s | %10s | %10s |\n",
           r->stage, off_name(r->offload), off_name(r->poffload), dtype_name(r->dtype), st, sh,
           d, p, h, n, a, g, c, li, lx);
}

/* --fit-device: the device bytes of the configuration (activations counted
 * as device memory, as train_gpt's host path accounts them) against the
 * budget, for the largest micro-batch in [1, 65536] at each sequence 128,
 * 256, ... up to SEQ, without and with checkpointing (a binary search: the
 * bytes grow with the batch). */
static int fit(const opts *base, zc_config *cfg, int dtype, int64_t gas)
{
    const int cs = cfg->zero.stage, coff = (int)cfg->zero.offload_optimizer.device;
    const int cpoff = cs == 3 ? (int)cfg->zero.offload_param.device : ZC_OFFLOAD_NONE;
    if (!base->json)
        printf("# the largest micro-batch per rank whose device bytes fit %.1f MiB (stage %d, "
               "offload_optimizer %s, offload_param %s, %s)\n| seq | checkpoint_activations "
               "| micro_batch | tokens | device MiB |\n|---:|---|---:|---:|---:|\n",
               (double)base->fit / 1048576.0, cs, off_name(coff), off_name(cpoff),
               dtype_name(dtype));
    int64_t seqs[32];
    int n = 0;
    for (int64_t q = 128; q < base->m.S && n < 30; q *= 2)
        seqs[n++] = q;
    seqs[n++] = base->m.S;
    /* Flat sharding: the fit is the device's, whatever the groups. */
    const sharding flat = {SHARD_FLAT, 0, false};
    for (int mode = 0; mode < 2; mode++)
        for (int i = 0; i < n; i++) {
            opts o = *base;
            o.ckpt = mode == 1;
            o.seq = seqs[i];
            int64_t lo = 0, hi = 65536;
            u128 at_lo = 0;
            /* Invariant: lo fits (0: nothing does), hi + 1 does not or is out
             * of range. */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo + 1) / 2;
                o.micro = (int)mid;
                row r;
                int rc = plan_row(&o, cfg, cs, coff, cpoff, dtype, gas, &flat, &r);
                if (rc)
                    return rc;
                const u128 dev = (u128)r.est.kind_total[ZC_MEMKIND_DEVICE] + r.act;
                if (dev <= (u128)base->fit) {
                    lo = mid;
                    at_lo = dev;
                } else {
                    hi = mid - 1;
                }
            }
            if (base->json)
                printf("{\"fit_device\":%lld,\"stage\":%d,\"offload_optimizer\":\"%s\","
                       "\"offload_param\":\"%s\",\"dtype\":\"%s\",\"seq\":%lld,"
                       "\"checkpoint_activations\":\"%s\",\"micro_batch\":%lld,\"tokens\":%lld,"
                       "\"device\":%.0f}\n", (long long)base->fit, cs, off_name(coff),
                       off_name(cpoff), dtype_name(dtype), (long long)seqs[i],
                       mode ? "block" : "none", (long long)lo, (long long)(lo * seqs[i]),
                       (double)at_lo);
            else
                printf("| %lld | %s | %lld | %lld | %.1f |\n", (long long)seqs[i],
                       mode ? "block" : "none", (long long)lo, (long long)(lo * seqs[i]),
                       (double)at_lo / 1048576.0);
        }
    return 0;
}

static int run(const opts *o, zc_config *cfg)
{
    if (zc__config_resolve_model_auto(cfg, o->m.hidden) != ZC_OK) {
        fprintf(stderr, "zeroc estimate: %s\n", zc_last_error());
        return 1;
    }
    int dtype = o->dtype;
    if (dtype < 0)
        dtype = o->config ? (cfg->fp16.enabled ? ZC_DTYPE_F16
                                               : cfg->bf16.enabled ? ZC_DTYPE_BF16 : ZC_DTYPE_F32)
                          : ZC_DTYPE_BF16;
    const int64_t gas = cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1;
    opts oo = *o;
    /* The state precisions of the rows (--state). */
    const zc_state_dtypes f32s = {ZC_DTYPE_F32, ZC_DTYPE_F32, ZC_DTYPE_F32};
    const zc_state_dtypes bf16s = {ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16};
    zc_state_dtypes states[2] = {zc__config_state_dtypes(cfg), bf16s};
    int nstates = 1;
    if (o->state == 1 || o->state == 3)
        states[0] = f32s;
    if (o->state == 2)
        states[0] = bf16s;
    if (o->state == 3)
        nstates = 2;
    oo.sd = states[0];
    const int64_t file_mb = cfg->train_micro_batch_size_per_gpu;
    const int64_t micro = o->micro ? o->micro : file_mb > 0 ? file_mb : 1;
    /* The file's micro batch sizes the activations (--model only): held to
     * --micro-batch's range, not cut to it, since a plan of another batch
     * would be a wrong answer. */
    if (micro > 65536 && o->m.gpt) {
        fprintf(stderr, "zeroc estimate: train_micro_batch_size_per_gpu %lld in '%s' is beyond "
                        "--micro-batch's range [1, 65536]; give --micro-batch\n",
                (long long)micro, o->config ? o->config : "");
        return 2;
    }
    oo.micro = micro > 65536 ? 65536 : (int)micro; /* unused without --model */
    if (zc__ea_set_home(cfg, o->ckpt_home) != ZC_OK) {
        fprintf(stderr, "zeroc estimate: --checkpoint-offload: %s\n", zc_last_error());
        return 2;
    }
    if (o->fit >= 0)
        return fit(&oo, cfg, dtype, gas);
    if (o->max_memory) {
        const int brc = zc__ep_set_budgets(cfg, o->max_memory, o->nvme_path);
        if (brc)
            return brc;
        const ep_model em = {o->m.numel, o->per_block ? o->m.boundary : NULL, o->m.n};
        return zc__ep_print(cfg, &em, o->world, dtype, o->host_device, o->config != NULL,
                            o->json);
    }
    /* offload_param only exists at stage 3: below it the engine ignores the
     * block (as DeepSpeed does), so a file's offload_param counts there
     * only. */
    const int cfg_poff = cfg->zero.stage == 3 ? (int)cfg->zero.offload_param.device
                                              : ZC_OFFLOAD_NONE;
    /* The hybrid sharding of the rows beside flat: the flags, else the
     * configuration file's keys. */
    sharding hyb = {SHARD_FLAT, 0, false};
    const int fmics = cfg->zero.mics_shard_size > 0 ? (int)cfg->zero.mics_shard_size : 0;
    const int fhpz = cfg->zero.zero_hpz_partition_size > 1 ? (int)cfg->zero.zero_hpz_partition_size
                                                           : 0;
    if (o->mics || (!o->hpz && fmics))
        hyb = (sharding){SHARD_MICS, o->mics ? o->mics : fmics,
                         o->mics ? o->hier : cfg->zero.mics_hierarchical_params_gather};
    else if (o->hpz > 1 || fhpz)
        hyb = (sharding){SHARD_HPZ, o->hpz > 1 ? o->hpz : fhpz, false};
    if (hyb.kind != SHARD_FLAT && (o->world % hyb.size || hyb.size > o->world ||
                                   (hyb.hier && !zc__plan_hier_j(hyb.size, o->gpn)))) {
        fprintf(stderr, "zeroc estimate: %s %d in '%s' does not divide --world %d (or spans "
                        "no whole nodes of %d ranks)\n",
                hyb.kind == SHARD_MICS ? "zero_optimization.mics_shard_size"
                                       : "zero_optimization.zero_hpz_partition_size",
                hyb.size, o->config ? o->config : "", o->world, o->gpn);
        return 2;
    }
    if (!o->json) {
        printf("# %lld parameters, world %d (%d per node), micro-batch %lld; MiB per rank "
               "(DeepSpeed: GPU per rank, CPU per node); MiB one rank sends per step inside "
               "its node and across nodes (every stage-3 chunk gathered in forward and "
               "backward)\n",
               (long long)o->m.total, o->world, o->gpn, (long long)micro);
        /* DeepSpeed's max_in_cpu default (1e9 elements) caches every shard of
         * most models in pinned memory: say so next to nvme rows. */
        if (!o->config || cfg_poff == ZC_OFFLOAD_NVME)
            printf("# offload_param nvme keeps shards of up to max_in_cpu = %lld elements in "
                   "pinned memory (set it to 0 in --config to plan every shard on NVMe)\n",
                   (long long)cfg->zero.offload_param.max_in_cpu);
        if (o->m.gpt)
            printf("# activations at seq %lld: %s\n", (long long)(o->seq ? o->seq : o->m.S),
                   o->ckpt ? "checkpointed by block - the blocks' inputs but the last's are the "
                             "activation store's, in the device, pinned or nvme column "
                             "(activation_checkpointing); the activations column is one "
                             "block's working set, the embedding and the logits"
                           : "every layer's (Korthikanti et al. 2022; no recomputation)");
        printf("| stage | offload_optimizer | offload_param | dtype | state | sharding | device "
               "| pinned "
               "| host | nvme | of %s: activations | DeepSpeed GPU | DeepSpeed CPU | "
               "sent in node / step | across nodes / step |\n",
               o->host_device ? "host" : "device");
        printf("|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int stage = 0; stage <= 3; stage++)
        for (int off = ZC_OFFLOAD_NONE; off <= ZC_OFFLOAD_NVME; off++)
            for (int poff = ZC_OFFLOAD_NONE; poff <= ZC_OFFLOAD_NVME; poff++) {
                if (o->config && (stage != cfg->zero.stage ||
                                  off != (int)cfg->zero.offload_optimizer.device ||
                                  poff != cfg_poff))
                    continue;
                if (stage == 0 && off != ZC_OFFLOAD_NONE)
                    continue; /* stage 0 keeps the whole optimizer state on every rank */
                if (stage < 3 && poff != ZC_OFFLOAD_NONE)
                    continue; /* only stage 3 shards the parameters */
                /* Flat, and beside it the hybrid sharding asked for (the
                 * flags, else the file's keys) where the engine takes it:
                 * MiCS at stages 1-3 without offload, hpZ at stage 3
                 * without parameter offload. */
                sharding shs[2] = {{SHARD_FLAT, 0, false}, hyb};
                const bool with = (hyb.kind == SHARD_MICS && stage >= 1 &&
                                   off == ZC_OFFLOAD_NONE && poff == ZC_OFFLOAD_NONE) ||
                                  (hyb.kind == SHARD_HPZ && stage == 3 &&
                                   poff == ZC_OFFLOAD_NONE);
                for (int v = 0; v < (with ? 2 : 1); v++)
                    for (int si = 0; si < nstates; si++) {
                        /* A bf16 state starts at stage 1 (DeepSpeed's rule for
                         * bf16_master_weights_and_grads). */
                        if (stage == 0 && states[si].master != ZC_DTYPE_F32)
                            continue;
                        oo.sd = states[si];
                        row r;
                        int rc = plan_row(&oo, cfg, stage, off, poff, dtype, gas, &shs[v], &r);
                        if (rc)
                            return rc;
                        if (o->json)
                            print_json(&oo, &r);
                        else
                            print_row(&oo, &r);
                    }
            }
    return 0;
}

int zc__cmd_estimate(int argc, char **argv)
{
    opts o = {0};
    int64_t params = 0;
    o.m.numel = calloc(MAX_TENSORS, sizeof *o.m.numel);
    o.m.boundary = calloc(MAX_TENSORS + 1, sizeof *o.m.boundary);
    if (!o.m.numel || !o.m.boundary) {
        free(o.m.numel);
        free(o.m.boundary);
        fprintf(stderr, "zeroc estimate: out of memory\n");
        return 1;
    }
    int rc = parse(argc, argv, &o, &params);
    if (rc)
        goto out;
    if (!(o.m.gpt ? make_gpt(&o.m) : make_params(&o.m, params))) {
        fprintf(stderr, "zeroc estimate: the model has more than %d tensors or 2^63 elements\n",
                MAX_TENSORS);
        rc = 2;
        goto out;
    }
    /* One range for both ways of naming a model: a GPT shape whose parts
     * are each in range can still hold more parameters than --params takes
     * (every part at its top: 2.1e14). Within the parts' ranges the total
     * fits int64 (12 DIM^2 LAYERS < 2^48), so make_gpt has it exactly. */
    if (o.m.gpt && o.m.total > MAX_PARAMS) {
        fprintf(stderr, "zeroc estimate: --model gpt:%lld,%lld,%lld,%lld,%lld has %lld "
                        "parameters, out of range [1, 2^44] (the range of --params)\n",
                (long long)o.m.L, (long long)o.m.D, (long long)o.m.Hh, (long long)o.m.S,
                (long long)o.m.V, (long long)o.m.total);
        rc = 2;
        goto out;
    }
    zc_config *cfg = NULL;
    if (o.config ? zc_config_load(&cfg, o.config) : zc_config_create(&cfg)) {
        fprintf(stderr, "zeroc estimate: %s\n", zc_last_error());
        rc = o.config ? 2 : 1;
        goto out;
    }
    rc = run(&o, cfg);
    zc_config_destroy(cfg);
out:
    free(o.m.numel);
    free(o.m.boundary);
    return rc;
}
