/* `zeroc bench train`: the results as JSON lines, a markdown table and the
 * plot (bench_train.h). */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/regfile.h"
#include "bench_train.h"

static const char *const status_names[] = {"ok", "failed", "killed"};
static const char *const phase_names[6] = {"forward", "backward", "reduce",
                                           "gather",  "optimizer", "io_wait"};

static json_t *bytes_obj(const int64_t *v)
{
    json_t *o = json_object();
    for (int k = 0; k < BT_KINDS; k++)
        json_object_set_new(o, bt_kind_names[k], json_integer(v[k]));
    return o;
}

int64_t bt_device_acts(const bt_result *r, bool planned)
{
    return planned ? r->plan_act_model + r->plan_act_store[0] : r->act_model + r->act_store[0];
}

static json_t *real_or_null(double v, bool have) { return have ? json_real(v) : json_null(); }

/* The "activations" object (docs/bench_train.md): what the configuration
 * keeps, what was planned, and what checkpointing cost against the same
 * configuration without it in this run. */
static json_t *acts_json(const bt_result *r)
{
    if (!r->have_act)
        return json_null();
    const int64_t dev = bt_device_acts(r, false), pdev = bt_device_acts(r, true);
    json_t *a = json_pack("{s:I, s:{s:I, s:I, s:I}, s:I}", "model", (json_int_t)r->act_model,
                          "store", "device", (json_int_t)r->act_store[0], "pinned",
                          (json_int_t)r->act_store[1], "nvme", (json_int_t)r->act_store[2],
                          "device_side", (json_int_t)dev);
    json_object_set_new(a, "planned",
                        r->have_plan
                            ? json_pack("{s:I, s:{s:I, s:I, s:I}, s:I}", "model",
                                        (json_int_t)r->plan_act_model, "store", "device",
                                        (json_int_t)r->plan_act_store[0], "pinned",
                                        (json_int_t)r->plan_act_store[1], "nvme",
                                        (json_int_t)r->plan_act_store[2], "device_side",
                                        (json_int_t)pdev)
                            : json_null());
    json_object_set_new(a, "device_side_over_plan",
                        real_or_null((double)dev / (double)pdev, r->have_plan && pdev > 0));
    json_object_set_new(a, "store_s", real_or_null(r->act_s_med, r->act_s_med >= 0));
    json_object_set_new(a, "exposed_fraction",
                        real_or_null(r->act_exposed_med, r->act_exposed_med >= 0));
    json_object_set_new(a, "step_over_none",
                        real_or_null(r->step_over_none, r->step_over_none > 0));
    json_object_set_new(a, "device_side_over_none",
                        real_or_null(r->device_acts_over_none, r->device_acts_over_none > 0));
    json_object_set_new(a, "vmhwm_drop_over_plan",
                        real_or_null(r->vmhwm_drop_over_plan, r->vmhwm_drop_over_plan > 0));
    return a;
}

json_t *bt_result_json(const bt_setup *s, const bt_result *r)
{
    const bt_config *c = &r->cfg;
    json_t *j = json_pack("{s:{s:i, s:s, s:s, s:i, s:s}, s:s}", "config", "stage", c->stage,
                          "offload_optimizer", c->offload_optimizer, "offload_param",
                          c->offload_param, "world", c->world, "dtype", c->dtype, "status",
                          status_names[r->status]);
    if (r->status != BT_OK)
        json_object_set_new(j, "reason", json_string(r->reason));
    json_object_set_new(json_object_get(j, "config"), "checkpoint_activations",
                        json_string(bt_act(c)));
    json_object_set_new(json_object_get(j, "config"), "optimizer_state",
                        json_string(bt_state(c)));
    /* The optimizer-state axis against the same configuration with fp32
     * state in this run (docs/bench_train.md "Optimizer state"). */
    json_object_set_new(
        j, "state_over_fp32",
        r->have_fp32_pair
            ? json_pack("{s:f, s:o, s:o, s:I}", "step", r->step_over_fp32_state, "saved_peak",
                        bytes_obj(r->state_saved_peak), "saved_estimate",
                        r->have_estimate ? bytes_obj(r->state_saved_estimate) : json_null(),
                        "saved_nvme_files", (json_int_t)r->state_saved_files)
            : json_null());
    /* --max-memory: the budgets, and whether every peak kept them - the
     * library's device and pinned high-water marks (the device's bookkeeping
     * included; pageable host bookkeeping is not budgeted, docs/placement.md),
     * its NVMe bytes against the nvme budget, and the swap files seen on disk
     * - every rank's, the ranks being threads of the one child - against
     * world x the per-rank nvme budget. */
    json_object_set_new(j, "max_memory",
                        c->budgeted ? json_pack("{s:I, s:I, s:I}", "device",
                                                (json_int_t)c->budget[0], "cpu",
                                                (json_int_t)c->budget[1], "nvme",
                                                (json_int_t)c->budget[2])
                                    : json_null());
    int64_t files_cap = INT64_MAX; /* world x nvme budget, saturated */
    if (c->budgeted && __builtin_mul_overflow((int64_t)c->world, c->budget[2], &files_cap))
        files_cap = INT64_MAX;
    json_object_set_new(j, "within_budget",
                        c->budgeted && r->have_peak
                            ? json_boolean(r->peak[0] <= c->budget[0] &&
                                           r->peak[1] <= c->budget[1] &&
                                           r->peak[3] <= c->budget[2] &&
                                           r->nvme_files <= files_cap)
                            : json_null());
    json_object_set_new(j, "peak", r->have_peak ? bytes_obj(r->peak) : json_null());
    json_object_set_new(j, "estimate", r->have_estimate ? bytes_obj(r->estimate) : json_null());
    json_object_set_new(j, "estimate_activations",
                        r->have_estimate ? json_integer(r->activations) : json_null());
    json_t *ratio = json_null();
    if (r->have_peak && r->have_estimate) {
        /* estimate / peak per kind (1 = exact; null where the peak is 0:
         * the estimate is then compared as a number of bytes). */
        ratio = json_object();
        for (int k = 0; k < BT_KINDS; k++)
            json_object_set_new(ratio, bt_kind_names[k],
                                r->peak[k] ? json_real((double)r->estimate[k] / (double)r->peak[k])
                                           : json_null());
    }
    json_object_set_new(j, "estimate_over_peak", ratio);
    json_object_set_new(j, "process", json_pack("{s:I, s:I}", "vmhwm", (json_int_t)r->vmhwm,
                                                "nvme_files", (json_int_t)r->nvme_files));
    /* The host path's plan covers the whole process (train_gpt's plan line,
     * host_peak): VmHWM against it. */
    json_t *proc = json_object_get(j, "process");
    const bool host_plan = !s->cuda && r->have_plan && r->plan_host_peak > 0 && r->vmhwm > 0;
    json_object_set_new(proc, "planned_host_peak",
                        host_plan ? json_integer((json_int_t)r->plan_host_peak) : json_null());
    json_object_set_new(proc, "vmhwm_over_plan",
                        real_or_null((double)r->vmhwm / (double)r->plan_host_peak, host_plan));
    json_object_set_new(j, "activations", acts_json(r));
    if (r->status == BT_OK && r->nsteps > 0) {
        json_object_set_new(j, "step_s", json_pack("{s:f, s:f, s:f}", "median", r->step_med,
                                                   "min", r->step_min, "max", r->step_max));
        json_object_set_new(j, "samples_per_s", json_real(r->samples_per_s));
        json_object_set_new(j, "tokens_per_s", json_real(r->tokens_per_s));
        json_object_set_new(j, "step_over_ddp",
                            r->step_over_ddp > 0 ? json_real(r->step_over_ddp) : json_null());
    } else {
        json_object_set_new(j, "step_s", json_null());
        json_object_set_new(j, "samples_per_s", json_null());
        json_object_set_new(j, "tokens_per_s", json_null());
        json_object_set_new(j, "step_over_ddp", json_null());
    }
    json_t *bd = json_null();
    if (r->status == BT_OK && r->have_breakdown) {
        bd = json_object();
        for (int i = 0; i < 6; i++)
            json_object_set_new(bd, phase_names[i], json_real(r->breakdown[i]));
    }
    json_object_set_new(j, "breakdown_s", bd);
    json_object_set_new(j, "steps_timed", json_integer(r->nsteps));
    json_object_set_new(j, "warmup", json_integer(s->warmup));
    return j;
}

static void mib(char *b, size_t cap, bool have, int64_t v)
{
    if (have)
        snprintf(b, cap, "%.2f", (double)v / 1048576.0);
    else
        snprintf(b, cap, "-");
}

/* The optimizer-state axis's table, when the sweep has one: the bytes each
 * configuration saves against the same one with fp32 state (the reference
 * measured in the same run), by the library's peaks, by the estimate and on
 * disk, and its step against that one's. */
static void write_state_table(FILE *f, const bt_result *rs, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= rs[i].have_fp32_pair;
    if (!any)
        return;
    fprintf(f, "\nOptimizer state against the same configuration with fp32 state in this run "
               "(MiB per rank saved; the swap files are every rank's):\n\n"
               "| stage | opt offload | param offload | world | dtype | state | saved peak "
               "dev / pinned / host / nvme | saved estimate dev / pinned / host / nvme | saved "
               "swap files | step x fp32 state |\n|---|---|---|---|---|---|---|---|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const bt_result *r = &rs[i];
        if (!r->have_fp32_pair)
            continue;
        char p[BT_KINDS][32], e[BT_KINDS][32], disk[32];
        for (int k = 0; k < BT_KINDS; k++) {
            mib(p[k], sizeof p[k], true, r->state_saved_peak[k]);
            mib(e[k], sizeof e[k], r->have_estimate, r->state_saved_estimate[k]);
        }
        mib(disk, sizeof disk, true, r->state_saved_files);
        fprintf(f, "| %d | %s | %s | %d | %s | %s | %s / %s / %s / %s | %s / %s / %s / %s | %s | "
                   "%.3f |\n", r->cfg.stage, r->cfg.offload_optimizer, r->cfg.offload_param,
                r->cfg.world, r->cfg.dtype, bt_state(&r->cfg), p[0], p[1], p[2], p[3], e[0],
                e[1], e[2], e[3], disk, r->step_over_fp32_state);
    }
}

/* The activation axis's table, when the sweep has one: each configuration's
 * activations against its plan and against the same configuration without
 * checkpointing (the reference measured in the same run). */
static void write_acts_table(FILE *f, const bt_result *rs, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= strcmp(bt_act(&rs[i].cfg), "none") != 0;
    if (!any)
        return;
    fprintf(f, "\nActivations per rank (MiB): the device side is the example's own buffers "
               "and the activation store's device slots (the host path's stand-in for the "
               "device), measured (the final line) / planned (the plan line); x none is "
               "against the same configuration without checkpointing in this run; store time "
               "is the median share of the step spent in zc_act_save and zc_act_restore.\n\n"
               "| stage | opt offload | param offload | world | dtype | checkpoint | device side "
               "| store pinned / nvme | bytes x none | step x none | store time | VmHWM drop / "
               "planned |\n|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const bt_result *r = &rs[i];
        if (r->status != BT_OK || !r->have_act)
            continue;
        char x[4][32];
        const double v[4] = {r->device_acts_over_none, r->step_over_none, r->act_exposed_med,
                             r->vmhwm_drop_over_plan};
        for (int k = 0; k < 4; k++) {
            if (k == 2 ? v[k] >= 0 : v[k] > 0)
                snprintf(x[k], sizeof x[k], k == 2 ? "%.2f%%" : "%.3f", k == 2 ? 100 * v[k] : v[k]);
            else
                snprintf(x[k], sizeof x[k], "-");
        }
        fprintf(f, "| %d | %s | %s | %d | %s | %s | %.2f / %.2f | %.2f / %.2f | %s | %s | %s | "
                   "%s |\n", r->cfg.stage, r->cfg.offload_optimizer, r->cfg.offload_param,
                r->cfg.world, r->cfg.dtype,
                strcmp(bt_act(&r->cfg), "none") ? bt_act(&r->cfg) : "none (every activation)",
                (double)bt_device_acts(r, false) / 1048576.0,
                r->have_plan ? (double)bt_device_acts(r, true) / 1048576.0 : 0.0,
                (double)r->act_store[1] / 1048576.0, (double)r->act_store[2] / 1048576.0, x[0],
                x[1], x[2], x[3]);
    }
}

bool bt_write_markdown(const char *path, const bt_setup *s, const bt_result *rs, int n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    fprintf(f, "GPT %d layers, dim %d, %d heads, seq %d, vocab %d; %d sequences per rank per "
               "step; %d steps, the first %d not timed; %s path. Memory in MiB per rank: "
               "peak from the library's accounting (rank 0), estimate from `zeroc estimate` "
               "(activations left out), VmHWM of the whole process (every rank's thread and "
               "the activations). Step times in ms: median (min-max); the breakdown is the "
               "median of each wall_clock_breakdown phase; x DDP is the median over stage "
               "0's (fp32 state, every activation kept) at the same world and dtype in this "
               "run.\n\n",
            s->layers, s->dim, s->heads, s->seq, s->vocab, s->batch, s->steps, s->warmup,
            s->cuda ? "CUDA" : "host");
    fprintf(f, "| stage | opt offload | param offload | world | dtype | status | peak dev / "
               "pinned / host / nvme | estimate dev / pinned / host / nvme | VmHWM | step ms | "
               "x DDP | samples/s | tokens/s | fwd / bwd / reduce / gather / opt / io ms |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---:|---|---:|---:|---:|---|\n");
    for (int i = 0; i < n; i++) {
        const bt_result *r = &rs[i];
        char p[BT_KINDS][32], e[BT_KINDS][32], hwm[32];
        for (int k = 0; k < BT_KINDS; k++) {
            mib(p[k], sizeof p[k], r->have_peak, r->peak[k]);
            mib(e[k], sizeof e[k], r->have_estimate, r->estimate[k]);
        }
        mib(hwm, sizeof hwm, r->vmhwm > 0, r->vmhwm);
        /* Under --max-memory the offload columns say "auto" and the budgets. */
        char opt[96];
        snprintf(opt, sizeof opt, "%s", r->cfg.offload_optimizer);
        if (r->cfg.budgeted)
            snprintf(opt, sizeof opt, "auto (max_memory %.1f / %.1f / %.1f MiB)",
                     (double)r->cfg.budget[0] / 1048576.0, (double)r->cfg.budget[1] / 1048576.0,
                     (double)r->cfg.budget[2] / 1048576.0);
        /* The activation and state axes ride in the dtype column, as
         * "bf16, ckpt cpu, state bf16". */
        char dt[80];
        snprintf(dt, sizeof dt, "%s%s%s%s%s", r->cfg.dtype,
                 strcmp(bt_act(&r->cfg), "none") ? ", ckpt " : "",
                 strcmp(bt_act(&r->cfg), "none") ? bt_act(&r->cfg) : "",
                 strcmp(bt_state(&r->cfg), "fp32") ? ", state " : "",
                 strcmp(bt_state(&r->cfg), "fp32") ? bt_state(&r->cfg) : "");
        fprintf(f, "| %d | %s | %s | %d | %s | %s | %s / %s / %s / %s | %s / %s / %s / %s | %s |",
                r->cfg.stage, opt, r->cfg.offload_param, r->cfg.world,
                dt, status_names[r->status], p[0], p[1], p[2], p[3], e[0], e[1], e[2],
                e[3], hwm);
        if (r->status == BT_OK) {
            fprintf(f, " %.1f (%.1f-%.1f) |", 1e3 * r->step_med, 1e3 * r->step_min,
                    1e3 * r->step_max);
            if (r->step_over_ddp > 0)
                fprintf(f, " %.2f |", r->step_over_ddp);
            else
                fprintf(f, " - |");
            fprintf(f, " %.1f | %.0f |", r->samples_per_s, r->tokens_per_s);
            if (r->have_breakdown)
                fprintf(f, " %.1f / %.1f / %.1f / %.1f / %.1f / %.1f |\n", 1e3 * r->breakdown[0],
                        1e3 * r->breakdown[1], 1e3 * r->breakdown[2], 1e3 * r->breakdown[3],
                        1e3 * r->breakdown[4], 1e3 * r->breakdown[5]);
            else
                fprintf(f, " - |\n");
        } else {
            /* The reason in the table, without a '|' that would split it. */
            char why[400]; /* the engine's message is long; its key is near the end */
            snprintf(why, sizeof why, "%s", r->reason);
            for (char *q = why; *q; q++)
                if (*q == '|' || *q == '\n')
                    *q = '/';
            fprintf(f, " - | - | - | - | %s |\n", why);
        }
    }
    write_acts_table(f, rs, n);
    write_state_table(f, rs, n);
    bool ok = !ferror(f);
    ok &= fclose(f) == 0;
    return ok;
}

/* The first executable regular file `name` in PATH's directories, as
 * execvp would find it; false when there is none. */
static bool find_in_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* An empty entry is the current directory, as for execvp. */
        int n = snprintf(out, cap, "%.*s%s%s", (int)len, p, len ? "/" : "./", name);
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return true;
        if (!colon)
            return false;
        p = colon + 1;
    }
}

/* Runs `python script jsonl svg png`; false with the script's last line of
 * stderr in err. */
static bool run_script(const char *python, const char *script, const char *workdir,
                       const char *jsonl, const char *svg, const char *png, char *err,
                       size_t errlen)
{
    char out[PATH_MAX + 32], perr[PATH_MAX + 32];
    /* The script's output goes to the bench's own directory, read back on
     * failure; one log per interpreter tried. */
    static int tries;
    tries++;
    snprintf(out, sizeof out, "%s/plot%d.log", workdir, tries);
    snprintf(perr, sizeof perr, "%s/plot%d.err", workdir, tries);
    char *argv[] = {(char *)python, (char *)script, (char *)jsonl, (char *)svg, (char *)png,
                    NULL};
    int st = 0;
    long rss = 0;
    bool to = false;
    if (!bt_spawn(argv, out, perr, 300, NULL, NULL, &st, &rss, &to)) {
        snprintf(err, errlen, "cannot start %s %s: %s", python, script, strerror(errno));
        return false;
    }
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
        char why[600];
        FILE *f = zc__fopen_regular(perr, NULL, why, sizeof why);
        char line[512] = "", last[512] = "";
        while (f && fgets(line, sizeof line, f))
            if (line[0] != '\n')
                snprintf(last, sizeof last, "%s", line);
        if (f)
            fclose(f);
        last[strcspn(last, "\n")] = '\0';
        snprintf(err, errlen, "%s %s failed%s: %s", python, script, to ? " (timed out)" : "",
                 last);
    }
    return ok;
}

/* Whether `python` imports matplotlib (a quick run of its own). */
static bool has_matplotlib(const char *python, const char *workdir)
{
    char out[PATH_MAX + 32], perr[PATH_MAX + 32];
    static int probes;
    probes++;
    snprintf(out, sizeof out, "%s/probe%d.log", workdir, probes);
    snprintf(perr, sizeof perr, "%s/probe%d.err", workdir, probes);
    char *argv[] = {(char *)python, "-c", "import matplotlib", NULL};
    int st = 0;
    long rss = 0;
    bool to = false;
    return bt_spawn(argv, out, perr, 60, NULL, NULL, &st, &rss, &to) && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0;
}

/* The interpreter scripts/deps.sh provisions: Debian's, where apt installs
 * python3-matplotlib (a python3 first on PATH - pyenv's, a venv's - may lack
 * it). */
#define BT_DEBIAN_PYTHON "/usr/bin/python3"

/* Appends "; " and a formatted note to buf (cap bytes, *len used). */
static void add_tried(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_tried(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len && *len + 2 < cap) {
        memcpy(buf + *len, "; ", 3);
        *len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < cap ? *len + (size_t)k : cap - 1;
}

bool bt_plot(const char *script, bt_plotter with, const char *workdir, const char *jsonl,
             const bt_result *rs, int n, const char *svg, const char *png, char *used,
             size_t usedcap, char *err, size_t errlen)
{
    char tried[1024] = "", e[600] = "";
    size_t tl = 0;
    if (with == BT_PLOT_AUTO || with == BT_PLOT_MATPLOTLIB) {
        char path_py[PATH_MAX] = "";
        const bool on_path = find_in_path("python3", path_py, sizeof path_py);
        const char *cands[2] = {on_path ? path_py : NULL, BT_DEBIAN_PYTHON};
        char real0[PATH_MAX] = "";
        if (on_path && !realpath(path_py, real0))
            real0[0] = '\0';
        for (int i = 0; i < 2; i++) {
            const char *py = cands[i];
            if (!py || access(py, X_OK) != 0)
                continue;
            char real[PATH_MAX];
            if (i == 1 && on_path && realpath(py, real) && !strcmp(real, real0))
                continue; /* the same interpreter */
            if (!has_matplotlib(py, workdir)) {
                add_tried(tried, sizeof tried, &tl, "%s (%s) has no matplotlib", py,
                      i == 0 ? "the python3 on PATH" : "Debian's");
                continue;
            }
            if (run_script(py, script, workdir, jsonl, svg, png, e, sizeof e)) {
                snprintf(used, usedcap, "matplotlib by %s (%s)%s%s", py,
                         i == 0 ? "the python3 on PATH" : "Debian's, which scripts/deps.sh "
                                                          "provisions",
                         tl ? "; " : "", tried);
                return true;
            }
            add_tried(tried, sizeof tried, &tl, "%s", e);
        }
        if (!on_path)
            add_tried(tried, sizeof tried, &tl, "no python3 on PATH");
    }
    if (with == BT_PLOT_AUTO || with == BT_PLOT_GNUPLOT) {
        char gp[PATH_MAX];
        if (!find_in_path("gnuplot", gp, sizeof gp)) {
            add_tried(tried, sizeof tried, &tl, "no gnuplot on PATH");
        } else if (bt_plot_gnuplot(gp, workdir, rs, n, svg, png, e, sizeof e)) {
            snprintf(used, usedcap, "gnuplot (%s)%s%s", gp, tl ? ", since " : "", tried);
            return true;
        } else {
            add_tried(tried, sizeof tried, &tl, "%s", e);
        }
    }
    snprintf(err, errlen, "%s (bash scripts/deps.sh --tests installs python3-matplotlib and "
             "gnuplot)", tl ? tried : "--plot-with none");
    return false;
}
