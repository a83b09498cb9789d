/* `zeroc bench train`: one configuration in its own process (bench_train.h).
 *
 * The configuration becomes a DeepSpeed JSON file in the bench's directory;
 * `zeroc estimate` plans it (the engine's planner, the workload's chunk per
 * block, the host or CUDA path as the workload runs) and the workload trains
 * it for a few steps, each in a child started from an argv (never a shell)
 * with its output in files of the bench's directory. A child that exits
 * non-zero failed (its last stderr line says why), one that dies of a signal
 * or outlives the timeout was killed; either way the sweep goes on. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/regfile.h"
#include "bench_train.h"

extern char **environ;

const char *const bt_kind_names[BT_KINDS] = {"device", "pinned", "host", "nvme"};
volatile sig_atomic_t bt_stop_signal;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool bt_spawn(char *const argv[], const char *out_path, const char *err_path,
              double timeout_s, void (*poll)(void *arg, pid_t pid), void *arg, int *wstatus,
              long *maxrss_kib, bool *timed_out)
{
    *timed_out = false;
    *maxrss_kib = 0;
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0)
        return false;
    /* No O_CLOEXEC: these become the child's stdout and stderr across exec. */
    const int flags = O_WRONLY | O_CREAT | O_EXCL;
    bool ok = !posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0) &&
              !posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path, flags, 0600) &&
              !posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path, flags, 0600);
    pid_t pid = -1;
    int e = ok ? posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        errno = e;
        return false;
    }
    const double end = timeout_s > 0 ? now_s() + timeout_s : INFINITY;
    struct rusage ru;
    for (;;) {
        pid_t w = wait4(pid, wstatus, WNOHANG, &ru);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return false;
        if (bt_stop_signal || now_s() > end) {
            *timed_out = !bt_stop_signal;
            kill(pid, SIGKILL);
            while (wait4(pid, wstatus, 0, &ru) < 0 && errno == EINTR)
                ;
            break;
        }
        if (poll)
            poll(arg, pid);
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    *maxrss_kib = ru.ru_maxrss;
    return true;
}

/* ---- reading what a child wrote ------------------------------------------- */

static char *slurp(const char *path)
{
    char why[600];
    FILE *f = zc__fopen_regular(path, NULL, why, sizeof why);
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (len + 1 == cap) {
            char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* The last non-empty line of a file, for a failure's reason. */
static void last_line(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    char *t = slurp(path);
    if (!t)
        return;
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r'))
        t[--n] = '\0';
    const char *l = strrchr(t, '\n');
    snprintf(out, cap, "%s", l ? l + 1 : t);
    free(t);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The store's bytes by kind of a train_gpt "act_store" object (device,
 * pinned, nvme); false when one is missing. */
static bool act_kinds(json_t *o, int64_t out[3])
{
    static const char *const names[3] = {"device", "pinned", "nvme"};
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(o, names[k]);
        if (!json_is_integer(v))
            return false;
        out[k] = json_integer_value(v);
    }
    return true;
}

/* The plan line: the example's activations, the store and the process's
 * host peak as planned. */
static void parse_plan(json_t *p, bt_result *r)
{
    json_t *a = json_object_get(p, "activations_per_rank"),
           *h = json_object_get(p, "host_peak");
    r->have_plan = json_is_integer(a) && json_is_integer(h) &&
                   act_kinds(json_object_get(p, "act_store_per_rank"), r->plan_act_store);
    if (r->have_plan) {
        r->plan_act_model = json_integer_value(a);
        r->plan_host_peak = json_integer_value(h);
    }
}

/* The workload's --json lines: the plan line, step lines (step_s, timers,
 * act_s) and the final one (peak_bytes, the activations). */
static bool parse_workload(const bt_setup *s, const char *path, bt_result *r)
{
    char *text = slurp(path);
    if (!text)
        return false;
    double st[4096], ph[6][4096], act[4096], exposed[4096];
    int n = 0, na = 0;
    bool all_timed = true, final = false;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        if (!j)
            continue; /* a line that is not JSON (a log line) */
        json_t *step = json_object_get(j, "step"), *dt = json_object_get(j, "step_s");
        if (json_is_object(json_object_get(j, "plan"))) {
            parse_plan(json_object_get(j, "plan"), r);
        } else if (json_is_true(json_object_get(j, "final"))) {
            json_t *pk = json_object_get(j, "peak_bytes");
            final = json_is_object(pk);
            for (int k = 0; final && k < BT_KINDS; k++) {
                json_t *v = json_object_get(pk, bt_kind_names[k]);
                final = json_is_integer(v);
                if (final)
                    r->peak[k] = json_integer_value(v);
            }
            json_t *m = json_object_get(j, "model_activation_bytes");
            r->have_act = json_is_integer(m) &&
                          act_kinds(json_object_get(j, "act_store"), r->act_store);
            if (r->have_act)
                r->act_model = json_integer_value(m);
        } else if (json_is_integer(step) && json_is_number(dt) &&
                   json_integer_value(step) > s->warmup && n < 4096) {
            st[n] = json_number_value(dt);
            /* With checkpointing: the step's time inside the store's calls. */
            json_t *as = json_object_get(j, "act_s");
            if (json_is_number(as) && st[n] > 0) {
                act[na] = json_number_value(as);
                exposed[na++] = json_number_value(as) / st[n];
            }
            json_t *t = json_object_get(j, "timers");
            for (int i = 0; i < 6; i++) {
                static const char *const names[6] = {"forward", "backward", "reduce",
                                                     "gather", "optimizer", "io_wait"};
                json_t *v = json_object_get(t, names[i]);
                all_timed &= json_is_number(v);
                ph[i][n] = json_is_number(v) ? json_number_value(v) : 0;
            }
            n++;
        }
        json_decref(j);
    }
    free(text);
    r->have_peak = final;
    r->nsteps = n;
    if (n > 0) {
        r->step_min = r->step_max = st[0];
        for (int i = 1; i < n; i++) {
            r->step_min = st[i] < r->step_min ? st[i] : r->step_min;
            r->step_max = st[i] > r->step_max ? st[i] : r->step_max;
        }
        r->step_med = median(st, n);
        r->act_s_med = na ? median(act, na) : -1;
        r->act_exposed_med = na ? median(exposed, na) : -1;
        r->have_breakdown = all_timed;
        for (int i = 0; i < 6 && all_timed; i++)
            r->breakdown[i] = median(ph[i], n);
        const double samples = (double)s->batch * (double)r->cfg.world;
        r->samples_per_s = r->step_med > 0 ? samples / r->step_med : 0;
        r->tokens_per_s = r->samples_per_s * (double)s->seq;
    }
    return final && n > 0;
}

/* ---- the configuration file ------------------------------------------------ */

static bool write_config(const bt_setup *s, const bt_config *c, const char *path,
                         const char *nvme_dir)
{
    json_t *zero = json_pack("{s:i}", "stage", c->stage);
    /* Stage 3 shards every chunk: DeepSpeed's persistence default (1e5
     * elements) would keep every parameter of the bench's small models
     * gathered, and stage 3 (with or without offload_param) would measure
     * stage 2's memory. */
    if (c->stage == 3)
        json_object_set_new(zero, "stage3_param_persistence_threshold", json_integer(0));
    if (strcmp(c->offload_optimizer, "none")) {
        json_t *o = json_pack("{s:s, s:b}", "device", c->offload_optimizer, "pin_memory", 1);
        if (!strcmp(c->offload_optimizer, "nvme") || c->budgeted)
            json_object_set_new(o, "nvme_path", json_string(nvme_dir));
        json_object_set_new(zero, "offload_optimizer", o);
    }
    if (strcmp(c->offload_param, "none")) {
        json_t *o = json_pack("{s:s, s:b}", "device", c->offload_param, "pin_memory", 1);
        /* max_in_cpu 0: every shard lives in the swap file (DeepSpeed's
         * default of 1e9 elements would cache the whole model in pinned
         * memory, and the configuration would measure cpu's). */
        if (!strcmp(c->offload_param, "nvme")) {
            json_object_set_new(o, "nvme_path", json_string(nvme_dir));
            json_object_set_new(o, "max_in_cpu", json_integer(0));
        } else if (c->budgeted) {
            json_object_set_new(o, "nvme_path", json_string(nvme_dir));
        }
        json_object_set_new(zero, "offload_param", o);
    }
    /* The activation axis: where the store keeps the blocks' inputs (the
     * workload gets --checkpoint-activations block). */
    json_t *act = NULL;
    if (strcmp(bt_act(c), "none")) {
        act = json_pack("{s:b, s:b}", "cpu_checkpointing", !strcmp(c->act, "cpu"),
                        "nvme_checkpointing", !strcmp(c->act, "nvme"));
        if (act && !strcmp(c->act, "nvme"))
            json_object_set_new(act, "nvme_path", json_string(nvme_dir));
    }
    /* The budgets place every chunk (docs/placement.md); 0 = none of a kind. */
    if (c->budgeted)
        json_object_set_new(zero, "max_memory",
                            json_pack("{s:I, s:I, s:I}", "device", (json_int_t)c->budget[0],
                                      "cpu", (json_int_t)c->budget[1], "nvme",
                                      (json_int_t)c->budget[2]));
    json_t *j = json_pack(
        "{s:i, s:i, s:f, s:b, s:{s:b}, s:{s:b}, s:{s:s, s:{s:f, s:[f, f], s:f, s:f}}, s:o}",
        "train_micro_batch_size_per_gpu", s->batch, "gradient_accumulation_steps", 1,
        "gradient_clipping", 1.0, "wall_clock_breakdown", 1, "bf16", "enabled",
        !strcmp(c->dtype, "bf16"), "fp16", "enabled", !strcmp(c->dtype, "fp16"), "optimizer",
        "type", "AdamW", "params", "lr", 3e-3, "betas", 0.9, 0.95, "eps", 1e-8, "weight_decay",
        0.1, "zero_optimization", zero);
    if (j && act)
        json_object_set_new(j, "activation_checkpointing", act);
    if (!j)
        return false;
    /* The optimizer-state axis: DeepSpeed's bf16 keys and zeroc's moment
     * dtypes (docs/config.md); stochastic rounding is their default. */
    json_t *bf16 = json_object_get(j, "bf16");
    const char *st = bt_state(c);
    if (!strcmp(st, "bf16") || !strcmp(st, "bf16_master"))
        json_object_set_new(bf16, "bf16_master_weights_and_grads", json_true());
    if (!strcmp(st, "bf16"))
        json_object_set_new(bf16, "bf16_optimizer_states", json_true());
    if (!strcmp(st, "bf16_moments")) {
        json_object_set_new(bf16, "exp_avg_dtype", json_string("bf16"));
        json_object_set_new(bf16, "exp_avg_sq_dtype", json_string("bf16"));
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && json_dumpfd(j, fd, JSON_INDENT(2)) == 0;
    if (fd >= 0)
        ok &= close(fd) == 0;
    json_decref(j);
    return ok;
}

/* ---- the swap files while the workload runs -------------------------------- */

/* The swap files have no name (O_TMPFILE, or unlinked once open): they are
 * found among the workload's open descriptors, /proc/PID/fd/N, whose link
 * names the directory they were made in ("DIR/#123 (deleted)"); stat through
 * that link gives the file's size. */
typedef struct nvme_watch {
    char dir[PATH_MAX];     /* the nvme directory, resolved (realpath) */
    int64_t max;
} nvme_watch;

static void watch_nvme(void *arg, pid_t pid)
{
    nvme_watch *w = arg;
    char fds[64];
    snprintf(fds, sizeof fds, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(fds);
    if (!d)
        return;
    const size_t n = strlen(w->dir);
    int64_t sum = 0;
    for (struct dirent *de; (de = readdir(d));) {
        char link[96], target[PATH_MAX];
        snprintf(link, sizeof link, "%s/%.20s", fds, de->d_name);
        ssize_t t = readlink(link, target, sizeof target - 1);
        struct stat st;
        if (t <= (ssize_t)n || strncmp(target, w->dir, n) || target[n] != '/')
            continue;
        if (stat(link, &st) == 0 && S_ISREG(st.st_mode))
            sum += (int64_t)st.st_size;
    }
    closedir(d);
    if (sum > w->max)
        w->max = sum;
}

/* ---- one configuration --------------------------------------------------------- */

static bool run_estimate(const bt_setup *s, const char *cfg_path, const char *out,
                         const char *err, const bt_config *c, bt_result *r)
{
    char model[128], world[16], micro[16];
    snprintf(model, sizeof model, "gpt:%d,%d,%d,%d,%d", s->layers, s->dim, s->heads, s->seq,
             s->vocab);
    snprintf(world, sizeof world, "%d", c->world);
    snprintf(micro, sizeof micro, "%d", s->batch);
    char *argv[] = {(char *)s->self, "estimate", "--model", model, "--world", world,
                    "--config", (char *)cfg_path, "--micro-batch", micro, "--chunks",
                    "per-block", "--device", s->cuda ? "cuda" : "host", "--json",
                    /* train_gpt's activations are fp32 whatever the dtype */
                    "--act-dtype", "fp32", NULL, NULL, NULL};
    if (strcmp(bt_act(c), "none")) {
        argv[sizeof argv / sizeof argv[0] - 3] = "--checkpoint-activations";
        argv[sizeof argv / sizeof argv[0] - 2] = "block";
    }
    int st = 0;
    long rss = 0;
    bool to = false;
    if (!bt_spawn(argv, out, err, 60, NULL, NULL, &st, &rss, &to))
        return false;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return true; /* no estimate (the configuration is one it cannot plan) */
    char *text = slurp(out);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    json_t *b = json_object_get(j, "bytes");
    const int64_t act = json_integer_value(json_object_get(j, "activations"));
    r->have_estimate = json_is_object(b);
    for (int k = 0; k < BT_KINDS && r->have_estimate; k++)
        r->estimate[k] = json_integer_value(json_object_get(b, bt_kind_names[k]));
    /* The library's accounting holds no activations: they come out of the
     * estimate's device (CUDA) or host (host path) figure. */
    if (r->have_estimate) {
        r->activations = act;
        r->estimate[s->cuda ? 0 : 2] -= act;
    }
    json_decref(j);
    return true;
}

bool bt_run_config(const bt_setup *s, int index, const bt_config *c, bt_result *r)
{
    memset(r, 0, sizeof *r);
    r->cfg = *c;
    char cfg_path[PATH_MAX + 64], nvme_dir[PATH_MAX + 64], out[PATH_MAX + 64],
        err[PATH_MAX + 64], eout[PATH_MAX + 64], eerr[PATH_MAX + 64];
    snprintf(cfg_path, sizeof cfg_path, "%s/config-%03d.json", s->work, index);
    snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme-%03d", s->work, index);
    snprintf(out, sizeof out, "%s/run-%03d.out", s->work, index);
    snprintf(err, sizeof err, "%s/run-%03d.err", s->work, index);
    snprintf(eout, sizeof eout, "%s/estimate-%03d.out", s->work, index);
    snprintf(eerr, sizeof eerr, "%s/estimate-%03d.err", s->work, index);
    if (mkdir(nvme_dir, 0700) != 0 || !write_config(s, c, cfg_path, nvme_dir)) {
        snprintf(r->reason, sizeof r->reason, "cannot write %.300s: %s", cfg_path, strerror(errno));
        return false;
    }
    /* Under budgets the placement is the planner's choice at build: the
     * bench holds the peaks to the budgets instead (bt_result_json). */
    if (!c->budgeted && !run_estimate(s, cfg_path, eout, eerr, c, r)) {
        snprintf(r->reason, sizeof r->reason, "cannot run %.300s estimate: %s", s->self,
                 strerror(errno));
        return false;
    }
    char steps[16], world[16], L[16], D[16], H[16], S[16], V[16], B[16];
    snprintf(steps, sizeof steps, "%d", s->steps);
    snprintf(world, sizeof world, "%d", c->world);
    snprintf(L, sizeof L, "%d", s->layers);
    snprintf(D, sizeof D, "%d", s->dim);
    snprintf(H, sizeof H, "%d", s->heads);
    snprintf(S, sizeof S, "%d", s->seq);
    snprintf(V, sizeof V, "%d", s->vocab);
    snprintf(B, sizeof B, "%d", s->batch);
    char *argv[] = {(char *)s->workload, "--config", cfg_path, "--steps", steps, "--world",
                    world, "--launcher", "threads", "--layers", L, "--dim", D, "--heads", H,
                    "--seq", S, "--vocab", V, "--batch", B, "--eval-every", "0", "--device",
                    s->cuda ? "cuda" : "cpu", "--json", NULL, NULL, NULL, NULL, NULL};
    size_t k = sizeof argv / sizeof argv[0] - 5;
    if (s->data) { /* --data FILE: the workload's text, in place of its default */
        argv[k++] = "--data";
        argv[k++] = (char *)s->data;
    }
    if (strcmp(bt_act(c), "none")) { /* the activation axis (write_config's section) */
        argv[k++] = "--checkpoint-activations";
        argv[k++] = "block";
    }
    nvme_watch w = {.max = 0};
    if (!realpath(nvme_dir, w.dir))
        snprintf(w.dir, sizeof w.dir, "%.4000s", nvme_dir);
    int st = 0;
    long rss = 0;
    bool timed_out = false;
    if (!bt_spawn(argv, out, err, s->timeout_s, watch_nvme, &w, &st, &rss, &timed_out)) {
        snprintf(r->reason, sizeof r->reason, "cannot start %.300s: %s", s->workload,
                 strerror(errno));
        return false;
    }
    r->vmhwm = (int64_t)rss * 1024;
    r->nvme_files = w.max;
    char tail[400];
    last_line(err, tail, sizeof tail);
    if (timed_out) {
        r->status = BT_KILLED;
        snprintf(r->reason, sizeof r->reason, "timed out after %g s (killed)", s->timeout_s);
    } else if (WIFSIGNALED(st)) {
        r->status = BT_KILLED;
        snprintf(r->reason, sizeof r->reason, "killed by signal %d (%s)%s%s", WTERMSIG(st),
                 strsignal(WTERMSIG(st)),
                 WTERMSIG(st) == SIGKILL ? ": the OOM killer, or a timeout outside" : "",
                 tail[0] ? "; last words: " : "");
        if (tail[0])
            strncat(r->reason, tail, sizeof r->reason - strlen(r->reason) - 1);
    } else if (WEXITSTATUS(st) != 0) {
        r->status = BT_FAILED;
        snprintf(r->reason, sizeof r->reason, "exit status %d: %s", WEXITSTATUS(st),
                 tail[0] ? tail : "(nothing on stderr)");
    } else if (!parse_workload(s, out, r)) {
        r->status = BT_FAILED;
        snprintf(r->reason, sizeof r->reason,
                 "the workload printed no step after warm-up or no final line (%d steps timed)",
                 r->nsteps);
    }
    return true;
}
