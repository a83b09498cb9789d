/* `zeroc bench train`: memory against speed over a sweep of configurations.
 *
 * Every configuration of stages 0-3 x offload_optimizer none/cpu/nvme x
 * offload_param (stage 3) x dtype x world, narrowed by --only, trains the
 * GPT example (examples/gpt, train_gpt) for a few steps in a child process of
 * its own (bench_train_run.c), so a failure or a kill in one is reported and
 * the sweep goes on. What comes back per configuration: the peak bytes by
 * kind (the library's accounting and the process's VmHWM and swap files),
 * `zeroc estimate`'s bytes for the same configuration, step times after
 * warm-up, samples/s and tokens/s, and the wall_clock_breakdown phases.
 *
 * Files: --out DIR receives results.jsonl, results.md, memory_vs_time.svg
 * and memory_vs_time.png, each created here (O_EXCL: an existing one is
 * refused, never overwritten); the configs, the children's output and the
 * swap files live in a directory of the bench's own under DIR
 * (zeroc-bench-train.XXXXXX), removed at the end and on SIGINT, SIGTERM,
 * SIGHUP (the running child is killed first). Exit status: 0 the sweep ran
 * (configurations that failed are results, as long as one ran), 1 the bench
 * itself failed or every configuration failed, 2 a usage error. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/regfile.h"
#include "bench_train.h"
#include "cliarg.h"
#include "config/config.h"
#include "examples/gpt/gpt_limits.h"

int zc__cmd_bench_train(int argc, char **argv);

#ifndef ZC_BENCH_PLOT_SCRIPT
#define ZC_BENCH_PLOT_SCRIPT "bench/train/plot_memory_time.py"
#endif

#define MAX_VALUES 8
#define MAX_BUDGETS 8

/* --model's parts, in order, and the train_gpt flag each is. */
static const struct {
    const char *name, *flag;
    int lo, hi;
} model_parts[5] = {
    {"LAYERS", "--layers", GPT_LAYERS_MIN, GPT_LAYERS_MAX},
    {"DIM", "--dim", GPT_DIM_MIN, GPT_DIM_MAX},
    {"HEADS", "--heads", GPT_HEADS_MIN, GPT_HEADS_MAX},
    {"SEQ", "--seq", GPT_SEQ_MIN, GPT_SEQ_MAX},
    {"VOCAB", "--vocab", GPT_BYTE_VOCAB, GPT_VOCAB_MAX},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zeroc bench train --out DIR [--json] [--only KEY=V[,V...]]... [--steps N]\n"
            "                         [--warmup N] [--world W[,W...]] [--dtype D[,D...]]\n"
            "                         [--model L,D,H,S,V] [--batch B] [--timeout SECONDS]\n"
            "                         [--device cpu|cuda] [--workload PATH] [--data FILE]\n"
            "                         [--plot-script PATH] [--plot-with auto|matplotlib|gnuplot|none]\n"
            "                         [--max-memory BUDGETS]...\n"
            "  Trains the GPT example a few steps in every configuration of stages 0-3 x\n"
            "  offload_optimizer none/cpu/nvme x offload_param none/cpu/nvme (stage 3) x\n"
            "  --dtype x --world, each in its own process, and writes DIR/results.jsonl,\n"
            "  results.md, memory_vs_time.svg and memory_vs_time.png (docs/bench_train.md).\n"
            "  --only KEY=V,...  keep the configurations whose KEY is one of the values; KEY\n"
            "                    is stage, offload_optimizer, offload_param, world, dtype,\n"
            "                    checkpoint_activations or optimizer_state (repeat for\n"
            "                    several keys)\n"
            "                    checkpoint_activations, the activation axis: none (every\n"
            "                    activation kept; the only value unless this key is given),\n"
            "                    device, cpu, nvme (--checkpoint-activations block, the\n"
            "                    blocks' inputs in the activation store there)\n"
            "                    optimizer_state, the state-precision axis: fp32 (the only\n"
            "                    value unless this key is given), bf16 (master and moments),\n"
            "                    bf16_master (fp32 moments; optimizer offload only),\n"
            "                    bf16_moments (fp32 master); the bf16 masters need --dtype\n"
            "                    bf16 and stage >= 1, as DeepSpeed's do\n"
            "  --steps N         steps per configuration, [2, 100000] (default 6)\n"
            "  --warmup N        first steps left out of the timings, [0, steps-1] (default 2)\n"
            "  --world LIST      ranks (threads of the workload), each in [1, 64] (default 2)\n"
            "  --dtype LIST      fp32, bf16, fp16 (default bf16)\n"
            "  --model L,D,H,S,V the GPT's layers, dim, heads, seq, vocab (default\n"
            "                    2,64,4,64,256), the workload's ranges: LAYERS in [%d, %d],\n"
            "                    DIM in [%d, %d], HEADS in [%d, %d] dividing DIM, SEQ in\n"
            "                    [%d, %d], VOCAB in [%d, %d]\n"
            "  --batch B         sequences per rank and step, [1, 4096] (default 8)\n"
            "  --timeout S       seconds before a configuration is killed, [1, 86400]\n"
            "                    (default 600)\n"
            "  --workload PATH   train_gpt (default: the one built next to this zeroc)\n"
            "  --data FILE       the text the workload trains on (its --data; default its\n"
            "                    own)\n"
            "  --json            print each configuration's JSON line as it finishes\n"
            "  --max-memory device=SIZE,cpu=SIZE,nvme=SIZE  instead of the stage x offload\n"
            "                    sweep, stage 3 with the placement chosen from these per-rank\n"
            "                    budgets (zero_optimization.max_memory; a missing kind: none);\n"
            "                    repeat for up to 8 points; the peaks are held to them\n"
            "  --plot-with auto|matplotlib|gnuplot|none  what draws the plot: auto (the\n"
            "                    default) takes matplotlib by the python3 on PATH, else by\n"
            "                    Debian's /usr/bin/python3 (scripts/deps.sh installs its\n"
            "                    python3-matplotlib), else gnuplot, and says which; with none\n"
            "                    of them the plot is left out, saying why, and the sweep\n"
            "                    still succeeds.\n"
            "Exit status: 0 the sweep ran (some configurations may have failed), 1 the bench\n"
            "failed or every configuration did, 2 usage error.\n",
            GPT_LAYERS_MIN, GPT_LAYERS_MAX, GPT_DIM_MIN, GPT_DIM_MAX, GPT_HEADS_MIN, GPT_HEADS_MAX,
            GPT_SEQ_MIN, GPT_SEQ_MAX, GPT_BYTE_VOCAB, GPT_VOCAB_MAX);
}

typedef struct filter {
    const char *key;
    const char *values[MAX_VALUES];
    int n;
    char buf[256];
} filter;

static const char *const filter_keys[] = {"stage",           "offload_optimizer",
                                          "offload_param",   "world",
                                          "dtype",           "checkpoint_activations",
                                          "optimizer_state"};
/* The optimizer-state axis's values (bench_train.h, bt_config.state). */
static const char *const state_names[] = {"fp32", "bf16", "bf16_master", "bf16_moments"};

static int parse_only(const char *text, filter *f)
{
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || !eq[1] || (size_t)(eq - text) >= sizeof f->buf / 2) {
        fprintf(stderr, "zeroc bench train: --only '%s': expected KEY=V[,V...]\n", text);
        return 2;
    }
    snprintf(f->buf, sizeof f->buf, "%s", text);
    f->buf[eq - text] = '\0';
    f->key = NULL;
    for (size_t i = 0; i < sizeof filter_keys / sizeof filter_keys[0]; i++)
        if (!strcmp(f->buf, filter_keys[i]))
            f->key = filter_keys[i];
    if (!f->key) {
        fprintf(stderr, "zeroc bench train: --only '%s': unknown key '%s' (stage, "
                        "offload_optimizer, offload_param, world, dtype, "
                        "checkpoint_activations or optimizer_state)\n", text, f->buf);
        return 2;
    }
    f->n = 0;
    char *save = NULL;
    for (char *t = strtok_r(f->buf + (eq - text) + 1, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        if (f->n == MAX_VALUES) {
            fprintf(stderr, "zeroc bench train: --only '%s': more than %d values\n", text,
                    MAX_VALUES);
            return 2;
        }
        f->values[f->n++] = t;
    }
    if (!f->n || text[strlen(text) - 1] == ',' || strstr(text, ",,")) {
        fprintf(stderr, "zeroc bench train: --only '%s': an empty value\n", text);
        return 2;
    }
    /* The activation axis has no default values to narrow: its values are
     * checked here. */
    for (int k = 0; !strcmp(f->key, "checkpoint_activations") && k < f->n; k++)
        if (strcmp(f->values[k], "none") && strcmp(f->values[k], "device") &&
            strcmp(f->values[k], "cpu") && strcmp(f->values[k], "nvme")) {
            fprintf(stderr, "zeroc bench train: --only '%s': checkpoint_activations '%s': "
                            "expected none, device, cpu or nvme\n", text, f->values[k]);
            return 2;
        }
    for (int k = 0; !strcmp(f->key, "optimizer_state") && k < f->n; k++) {
        bool known = false;
        for (size_t i = 0; i < sizeof state_names / sizeof state_names[0]; i++)
            known |= !strcmp(f->values[k], state_names[i]);
        if (!known) {
            fprintf(stderr, "zeroc bench train: --only '%s': optimizer_state '%s': expected "
                            "fp32, bf16, bf16_master or bf16_moments\n", text, f->values[k]);
            return 2;
        }
    }
    return 0;
}

static bool keep(const filter *fs, int nf, const bt_config *c)
{
    for (int i = 0; i < nf; i++) {
        char v[16];
        const char *have = v;
        if (!strcmp(fs[i].key, "stage"))
            snprintf(v, sizeof v, "%d", c->stage);
        else if (!strcmp(fs[i].key, "world"))
            snprintf(v, sizeof v, "%d", c->world);
        else if (!strcmp(fs[i].key, "offload_optimizer"))
            have = c->offload_optimizer;
        else if (!strcmp(fs[i].key, "offload_param"))
            have = c->offload_param;
        else if (!strcmp(fs[i].key, "checkpoint_activations"))
            have = bt_act(c);
        else if (!strcmp(fs[i].key, "optimizer_state"))
            have = bt_state(c);
        else
            have = c->dtype;
        bool any = false;
        for (int k = 0; k < fs[i].n; k++)
            any |= !strcmp(fs[i].values[k], have);
        if (!any)
            return false;
    }
    return true;
}

/* ---- cleanup ----------------------------------------------------------------- */

static char work_dir[PATH_MAX];
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

/* Only sets the flag: the sweep kills its child, removes its directory and
 * then dies of the same signal (main). */
static void on_signal(int sig) { bt_stop_signal = sig; }

static int remove_entry(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)f;
    return type == FTW_DP ? rmdir(p) : unlink(p);
}

/* Removes the bench's own directory: everything in it was made by this run
 * (the configs, the children's output, their swap files). */
static void remove_work(void)
{
    if (work_dir[0])
        nftw(work_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    work_dir[0] = '\0';
}

/* ---- the sweep ------------------------------------------------------------------- */

static int open_excl(const char *path, FILE **f)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || !(*f = fdopen(fd, "w"))) {
        fprintf(stderr, "zeroc bench train: cannot create %s: %s%s\n", path, strerror(errno),
                errno == EEXIST ? " (the bench writes only files it creates: remove it or "
                                  "choose another --out)" : "");
        if (fd >= 0)
            close(fd);
        return 1;
    }
    return 0;
}

/* The workload next to this zeroc in a build tree (tools/zeroc ->
 * examples/gpt/train_gpt). */
static void default_workload(char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    out[0] = '\0';
    if (n <= 0)
        return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, cap, "%s/../examples/gpt/train_gpt", self);
}

typedef struct opts {
    const char *out, *workload, *plot_script;
    bt_plotter plot_with;
    bool json;
    filter only[8];
    int nonly;
    uint64_t worlds[MAX_VALUES];
    int nworlds;
    const char *dtypes[3];
    int ndtypes;
    char dtype_buf[64];
    int64_t budgets[MAX_BUDGETS][3]; /* --max-memory: device, cpu, nvme bytes */
    int nbudgets;
} opts;

/* --max-memory device=SIZE,cpu=SIZE,nvme=SIZE: each kind at most once, sizes
 * as zero_optimization.max_memory takes them (zc__parse_size), a missing
 * kind none of it. false after a message. */
static bool parse_budgets(const char *spec, int64_t out[3])
{
    static const char *const kinds[3] = {"device", "cpu", "nvme"};
    bool seen[3] = {false, false, false};
    char buf[256];
    if (strlen(spec) >= sizeof buf || !*spec) {
        fprintf(stderr, "zeroc bench train: --max-memory '%.64s': want "
                        "device=SIZE,cpu=SIZE,nvme=SIZE\n", spec);
        return false;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    out[0] = out[1] = out[2] = 0;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        int k = -1;
        for (int i = 0; eq && i < 3; i++)
            if ((size_t)(eq - item) == strlen(kinds[i]) && !strncmp(item, kinds[i], eq - item))
                k = i;
        char err[256];
        if (k < 0 || seen[k]) {
            fprintf(stderr, "zeroc bench train: --max-memory '%s': '%s' is not one of "
                            "device=, cpu=, nvme= (each once)\n", spec, item);
            return false;
        }
        if (!zc__parse_size(eq + 1, &out[k], err, sizeof err)) {
            fprintf(stderr, "zeroc bench train: --max-memory %s: %s\n", kinds[k], err);
            return false;
        }
        seen[k] = true;
    }
    return true;
}

static int parse(int argc, char **argv, opts *o, bt_setup *s)
{
    char err[ZC_ARG_ERRLEN];
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
        if (i + 1 >= argc) {
            fprintf(stderr, "zeroc bench train: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--out")) {
            o->out = v;
        } else if (!strcmp(a, "--only")) {
            if (o->nonly == 8) {
                fprintf(stderr, "zeroc bench train: more than 8 --only\n");
                return 2;
            }
            int rc = parse_only(v, &o->only[o->nonly++]);
            if (rc)
                return rc;
        } else if (!strcmp(a, "--steps")) {
            ok = zc__arg_int(a, v, 2, 100000, &s->steps, err, sizeof err);
        } else if (!strcmp(a, "--warmup")) {
            ok = zc__arg_int(a, v, 0, 99999, &s->warmup, err, sizeof err);
        } else if (!strcmp(a, "--world")) {
            ok = zc__arg_u64_list(a, v, 1, 64, 0, o->worlds, MAX_VALUES, &o->nworlds, err,
                                  sizeof err);
        } else if (!strcmp(a, "--dtype")) {
            snprintf(o->dtype_buf, sizeof o->dtype_buf, "%s", v);
            o->ndtypes = 0;
            char *save = NULL;
            for (char *t = strtok_r(o->dtype_buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if ((strcmp(t, "fp32") && strcmp(t, "bf16") && strcmp(t, "fp16")) ||
                    o->ndtypes == 3) {
                    fprintf(stderr, "zeroc bench train: --dtype '%s': expected up to three of "
                                    "fp32, bf16, fp16\n", v);
                    return 2;
                }
                o->dtypes[o->ndtypes++] = t;
            }
            if (!o->ndtypes || v[strlen(v) - 1] == ',' || strstr(v, ",,")) {
                fprintf(stderr, "zeroc bench train: --dtype '%s': an empty value\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--max-memory")) {
            if (o->nbudgets == MAX_BUDGETS) {
                fprintf(stderr, "zeroc bench train: at most %d --max-memory\n", MAX_BUDGETS);
                return 2;
            }
            if (!parse_budgets(v, o->budgets[o->nbudgets]))
                return 2;
            o->nbudgets++;
        } else if (!strcmp(a, "--model")) {
            uint64_t m[5];
            int n = 0;
            ok = zc__arg_u64_list(a, v, 0, UINT32_MAX, 0, m, 5, &n, err, sizeof err);
            if (ok && n != 5) {
                fprintf(stderr, "zeroc bench train: --model '%s': expected five numbers "
                                "LAYERS,DIM,HEADS,SEQ,VOCAB\n", v);
                return 2;
            }
            /* The workload's own ranges (examples/gpt/gpt_limits.h): a shape
             * train_gpt refuses would fail every configuration. */
            for (int k = 0; ok && k < 5; k++)
                if (m[k] < (uint64_t)model_parts[k].lo || m[k] > (uint64_t)model_parts[k].hi) {
                    fprintf(stderr, "zeroc bench train: --model '%s': %s %llu is out of range "
                                    "[%d, %d] (train_gpt's %s)\n", v, model_parts[k].name,
                            (unsigned long long)m[k], model_parts[k].lo, model_parts[k].hi,
                            model_parts[k].flag);
                    return 2;
                }
            if (ok) {
                s->layers = (int)m[0], s->dim = (int)m[1], s->heads = (int)m[2];
                s->seq = (int)m[3], s->vocab = (int)m[4];
            }
        } else if (!strcmp(a, "--batch")) {
            ok = zc__arg_int(a, v, 1, 4096, &s->batch, err, sizeof err);
        } else if (!strcmp(a, "--timeout")) {
            ok = zc__arg_double(a, v, 1, 86400, &s->timeout_s, err, sizeof err);
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "zeroc bench train: --device '%s': expected cpu or cuda\n", v);
                return 2;
            }
            s->cuda = !strcmp(v, "cuda");
        } else if (!strcmp(a, "--workload")) {
            o->workload = v;
        } else if (!strcmp(a, "--data")) {
            s->data = v;
        } else if (!strcmp(a, "--plot-script")) {
            o->plot_script = v;
        } else if (!strcmp(a, "--plot-with")) {
            static const char *const names[] = {"auto", "matplotlib", "gnuplot", "none"};
            int k = 0;
            while (k < 4 && strcmp(v, names[k]))
                k++;
            if (k == 4) {
                fprintf(stderr, "zeroc bench train: --plot-with '%s': expected auto, "
                        "matplotlib, gnuplot or none\n", v);
                return 2;
            }
            o->plot_with = (bt_plotter)k;
        } else {
            fprintf(stderr, "zeroc bench train: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "zeroc bench train: %s\n", err);
            return 2;
        }
    }
    if (!o->out) {
        fprintf(stderr, "zeroc bench train: --out DIR is required\n");
        return 2;
    }
    if (s->warmup >= s->steps) {
        fprintf(stderr, "zeroc bench train: --warmup %d leaves no step of --steps %d to time\n",
                s->warmup, s->steps);
        return 2;
    }
    /* The workloads' text: a directory, FIFO or device is refused here, once,
     * instead of in every child. */
    if (s->data) {
        int fd;
        char why[640];
        if (zc__open_regular(s->data, 0, "a regular file of text", &fd, NULL, why, sizeof why) !=
            ZC_OPEN_OK) {
            fprintf(stderr, "zeroc bench train: --data: %s\n", why);
            return 2;
        }
        close(fd);
    }
    return 0;
}

/* The activation axis's values: --only's, else none alone. none runs first
 * in each configuration: it is the reference of the others (sweep's
 * pairing). */
static int act_values(const opts *o, const char **vals)
{
    for (int i = 0; i < o->nonly; i++)
        if (!strcmp(o->only[i].key, "checkpoint_activations")) {
            int n = 0;
            for (int k = 0; k < o->only[i].n; k++)
                if (!strcmp(o->only[i].values[k], "none"))
                    vals[n++] = "none";
            for (int k = 0; k < o->only[i].n; k++)
                if (strcmp(o->only[i].values[k], "none"))
                    vals[n++] = o->only[i].values[k];
            return n;
        }
    vals[0] = "none";
    return 1;
}

/* The optimizer-state axis's values: --only's, else fp32 alone. fp32 runs
 * first in each configuration: it is the reference of the others. */
static int state_values(const opts *o, const char **vals)
{
    for (int i = 0; i < o->nonly; i++)
        if (!strcmp(o->only[i].key, "optimizer_state")) {
            int n = 0;
            for (int k = 0; k < o->only[i].n; k++)
                if (!strcmp(o->only[i].values[k], "fp32"))
                    vals[n++] = "fp32";
            for (int k = 0; k < o->only[i].n; k++)
                if (strcmp(o->only[i].values[k], "fp32"))
                    vals[n++] = o->only[i].values[k];
            return n;
        }
    vals[0] = "fp32";
    return 1;
}

/* Every configuration of the sweep, in order, that the filters keep. */
static int make_sweep(const opts *o, bt_config *out, int cap)
{
    static const char *const offs[] = {"none", "cpu", "nvme"};
    const char *acts[MAX_VALUES], *states[MAX_VALUES];
    const int nacts = act_values(o, acts), nstates = state_values(o, states);
    int n = 0;
    /* --max-memory: the budgets are the axis (stage 3, the planner places). */
    for (int w = 0; w < o->nworlds && o->nbudgets; w++)
        for (int d = 0; d < o->ndtypes; d++)
            for (int b = 0; b < o->nbudgets; b++)
                for (int a = 0; a < nacts; a++)
                    for (int t = 0; t < nstates; t++) {
                        bt_config c = {3, "auto", "auto", (int)o->worlds[w], o->dtypes[d], true,
                                       {o->budgets[b][0], o->budgets[b][1], o->budgets[b][2]},
                                       acts[a], states[t]};
                        if (bt_state_allowed(&c) && keep(o->only, o->nonly, &c) && n < cap)
                            out[n++] = c;
                    }
    if (o->nbudgets)
        return n;
    for (int w = 0; w < o->nworlds; w++)
        for (int d = 0; d < o->ndtypes; d++)
            for (int stage = 0; stage <= 3; stage++)
                for (int oo = 0; oo < (stage ? 3 : 1); oo++)
                    for (int op = 0; op < (stage == 3 ? 3 : 1); op++)
                        for (int a = 0; a < nacts; a++)
                            for (int t = 0; t < nstates; t++) {
                                bt_config c = {stage,        offs[oo], offs[op],
                                               (int)o->worlds[w], o->dtypes[d], false,
                                               {0, 0, 0},    acts[a],  states[t]};
                                if (bt_state_allowed(&c) && keep(o->only, o->nonly, &c) && n < cap)
                                    out[n++] = c;
                            }
    return n;
}

static int sweep(const opts *o, bt_setup *s)
{
    bt_config cfgs[512];
    const int n = make_sweep(o, cfgs, 512);
    if (n == 0) {
        bool states = false;
        for (int i = 0; i < o->nonly; i++)
            states |= !strcmp(o->only[i].key, "optimizer_state");
        fprintf(stderr, "zeroc bench train: --only leaves no configuration%s\n",
                states ? " (optimizer_state bf16 and bf16_master need --dtype bf16 and stage "
                         ">= 1; bf16_master also offload_optimizer cpu or nvme)"
                       : "");
        return 2;
    }
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "zeroc bench train: cannot make --out '%s': %s\n", o->out,
                strerror(errno));
        return 1;
    }
    char jsonl[PATH_MAX + 32], md[PATH_MAX + 32], svg[PATH_MAX + 32], png[PATH_MAX + 32];
    snprintf(jsonl, sizeof jsonl, "%s/results.jsonl", o->out);
    snprintf(md, sizeof md, "%s/results.md", o->out);
    snprintf(svg, sizeof svg, "%s/memory_vs_time.svg", o->out);
    snprintf(png, sizeof png, "%s/memory_vs_time.png", o->out);
    /* Every output must be new before anything runs. */
    const char *outs[] = {jsonl, md, svg, png};
    for (int i = 0; i < 4; i++)
        if (access(outs[i], F_OK) == 0) {
            fprintf(stderr, "zeroc bench train: %s exists: the bench writes only files it "
                            "creates; remove it or choose another --out\n", outs[i]);
            return 1;
        }
    FILE *fj = NULL;
    if (open_excl(jsonl, &fj))
        return 1;
    snprintf(s->work, sizeof s->work, "%s/zeroc-bench-train.XXXXXX", o->out);
    if (!mkdtemp(s->work)) {
        fprintf(stderr, "zeroc bench train: cannot make a directory under '%s': %s\n", o->out,
                strerror(errno));
        fclose(fj);
        return 1;
    }
    snprintf(work_dir, sizeof work_dir, "%s", s->work);
    bt_result *rs = calloc((size_t)n, sizeof *rs);
    int rc = rs ? 0 : 1, done = 0;
    for (int i = 0; i < n && rc == 0 && !bt_stop_signal; i++) {
        if (!o->json)
            fprintf(stderr, "zeroc bench train: [%d/%d] stage %d, offload_optimizer %s, "
                            "offload_param %s, world %d, %s, checkpoint_activations %s, "
                            "optimizer_state %s\n",
                    i + 1, n, cfgs[i].stage, cfgs[i].offload_optimizer, cfgs[i].offload_param,
                    cfgs[i].world, cfgs[i].dtype, bt_act(&cfgs[i]), bt_state(&cfgs[i]));
        if (!bt_run_config(s, i, &cfgs[i], &rs[i])) {
            fprintf(stderr, "zeroc bench train: %s\n", rs[i].reason);
            rc = 1;
            break;
        }
        if (bt_stop_signal)
            break; /* the child was killed by us: not a result */
        bt_pair_with_references(rs, i);
        json_t *j = bt_result_json(s, &rs[i]);
        char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (!line || fprintf(fj, "%s\n", line) < 0 || fflush(fj) != 0) {
            fprintf(stderr, "zeroc bench train: cannot write %s\n", jsonl);
            free(line);
            rc = 1;
            break;
        }
        if (o->json)
            printf("%s\n", line), fflush(stdout);
        free(line);
        done++;
    }
    if (fclose(fj) != 0 && rc == 0) {
        fprintf(stderr, "zeroc bench train: cannot write %s: %s\n", jsonl, strerror(errno));
        rc = 1;
    }
    if (rc == 0 && !bt_stop_signal) {
        if (!bt_write_markdown(md, s, rs, done)) {
            fprintf(stderr, "zeroc bench train: cannot write %s: %s\n", md, strerror(errno));
            rc = 1;
        }
    }
    bool plotted = false;
    /* A sweep with no configuration that ran measured nothing: its results
     * (every reason) are written, with no plot of no point, and the exit
     * status says it failed. */
    int ran = 0;
    for (int i = 0; i < done; i++)
        ran += rs[i].status == BT_OK;
    if (rc == 0 && !bt_stop_signal && ran > 0 && o->plot_with != BT_PLOT_NONE) {
        char err[1400], used[1400];
        /* The plot is a view of results.jsonl, which is complete: a missing
         * python3 or matplotlib costs the picture, not the sweep. */
        plotted = bt_plot(o->plot_script, o->plot_with, s->work, jsonl, rs, done, svg, png,
                          used, sizeof used, err, sizeof err);
        if (plotted)
            fprintf(stderr, "zeroc bench train: plot drawn with %s\n", used);
        else
            fprintf(stderr, "zeroc bench train: no plot (results.jsonl and results.md are "
                            "complete): %s\n", err);
    }
    if (rc == 0 && !o->json && !bt_stop_signal && ran > 0)
        fprintf(stderr, "zeroc bench train: %d configurations; %s, %s%s%s%s%s\n", done, jsonl,
                md, plotted ? ", " : "", plotted ? svg : "", plotted ? ", " : "",
                plotted ? png : "");
    if (rc == 0 && !bt_stop_signal && done > 0 && ran == 0) {
        fprintf(stderr, "zeroc bench train: every one of the %d configurations failed (the "
                        "reasons are in %s)\n", done, jsonl);
        rc = 1;
    }
    free(rs);
    return rc;
}

int zc__cmd_bench_train(int argc, char **argv)
{
    opts o = {.plot_script = ZC_BENCH_PLOT_SCRIPT, .worlds = {2}, .nworlds = 1,
              .dtypes = {"bf16"}, .ndtypes = 1};
    bt_setup s = {.layers = 2, .dim = 64, .heads = 4, .seq = 64, .vocab = 256, .batch = 8,
                  .steps = 6, .warmup = 2, .timeout_s = 600};
    int rc = parse(argc, argv, &o, &s);
    if (rc)
        return rc;
    if (s.dim % s.heads) {
        fprintf(stderr, "zeroc bench train: --model: DIM %d is not a multiple of HEADS %d\n",
                s.dim, s.heads);
        return 2;
    }
    static char workload[PATH_MAX + 32], self[PATH_MAX];
    if (o.workload) {
        snprintf(workload, sizeof workload, "%s", o.workload);
    } else {
        default_workload(workload, sizeof workload);
    }
    if (!workload[0] || access(workload, X_OK) != 0) {
        fprintf(stderr, "zeroc bench train: the workload '%s' is not an executable (%s); build "
                        "examples/gpt or give --workload PATH\n", workload, strerror(errno));
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "zeroc bench train: cannot find this program (/proc/self/exe): %s\n",
                strerror(errno));
        return 1;
    }
    self[n] = '\0';
    s.workload = workload;
    s.self = self;
    struct sigaction sa = {0}, old[3];
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++)
        sigaction(stop_signals[i], &sa, &old[i]);
    rc = sweep(&o, &s);
    remove_work();
    for (int i = 0; i < 3; i++)
        sigaction(stop_signals[i], &old[i], NULL);
    if (bt_stop_signal) {
        fprintf(stderr, "zeroc bench train: stopped by signal %d; results so far are in %s\n",
                (int)bt_stop_signal, o.out);
        fflush(NULL);
        raise(bt_stop_signal);
        return 1;
    }
    return rc;
}
