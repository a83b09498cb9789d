/* `zeroc bench train` (internal): the sweep's configurations, how one runs
 * in a child process, and what comes back. cmd_bench_train.c parses the flags
 * and drives the sweep, bench_train_run.c runs one configuration,
 * bench_train_out.c writes results.jsonl, results.md and the plot. */
#ifndef ZC_TOOLS_BENCH_TRAIN_H
#define ZC_TOOLS_BENCH_TRAIN_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#define BT_KINDS 4 /* device, pinned, host, nvme: the order of every bytes object */
extern const char *const bt_kind_names[BT_KINDS];

/* One point of the sweep. */
typedef struct bt_config {
    int stage;
    const char *offload_optimizer; /* "none", "cpu", "nvme" */
    const char *offload_param;     /* "none", "cpu", "nvme" (stage 3 only) */
    int world;
    const char *dtype;             /* "fp32", "bf16", "fp16" */
    /* --max-memory: stage 3 with both offload blocks "auto" placed by these
     * per-rank budgets (zero_optimization.max_memory: device, cpu, nvme in
     * bytes; 0 = none of that kind), the offload fields then "auto". */
    bool budgeted;
    int64_t budget[3];
    /* The activation axis: NULL or "none" (every activation kept), or
     * "device", "cpu", "nvme": train_gpt --checkpoint-activations block with
     * the activation store there (activation_checkpointing). */
    const char *act;
    /* The optimizer-state axis: NULL or "fp32" (fp32 master and moments),
     * "bf16" (bf16.bf16_master_weights_and_grads and bf16_optimizer_states:
     * master and moments in bf16), "bf16_master" (a bf16 master beside fp32
     * moments: DeepSpeed keeps it only under optimizer offload) or
     * "bf16_moments" (bf16.exp_avg_dtype and exp_avg_sq_dtype bf16 beside an
     * fp32 master), each with stochastic rounding (docs/config.md). */
    const char *state;
} bt_config;

/* The activation axis's value of c ("none" for NULL). */
static inline const char *bt_act(const bt_config *c) { return c->act ? c->act : "none"; }
/* The optimizer-state axis's value of c ("fp32" for NULL). */
static inline const char *bt_state(const bt_config *c) { return c->state ? c->state : "fp32"; }

/* What the whole sweep shares. */
typedef struct bt_setup {
    const char *workload;          /* train_gpt */
    const char *self;              /* this zeroc, for `zeroc estimate` */
    const char *data;              /* --data: the workload's text file, or NULL */
    int layers, dim, heads, seq, vocab, batch;
    int steps, warmup;
    double timeout_s;
    bool cuda;                     /* --device cuda */
    char work[PATH_MAX];           /* the bench's own directory (mkdtemp) */
} bt_setup;

typedef enum bt_status { BT_OK = 0, BT_FAILED, BT_KILLED } bt_status;

/* One configuration's outcome. */
typedef struct bt_result {
    bt_config cfg;
    bt_status status;
    char reason[512];              /* why it failed or was killed */
    bool have_peak, have_estimate;
    int64_t peak[BT_KINDS];        /* the library's accounting, rank 0 */
    int64_t estimate[BT_KINDS];    /* `zeroc estimate` of the same configuration */
    int64_t activations;           /* its activation term (not in estimate[]) */
    int64_t vmhwm;                 /* the child's peak resident set (ru_maxrss) */
    int64_t nvme_files;            /* largest total size of the swap files seen */
    int nsteps;                    /* steps timed after warm-up */
    double step_med, step_min, step_max;
    double breakdown[6];           /* median per phase over the timed steps (s) */
    bool have_breakdown;
    double samples_per_s, tokens_per_s;
    double step_over_ddp;          /* median / stage 0's (same world and dtype, this
                                      sweep): the reference in the same run; 0 unknown */
    /* Activations (train_gpt --json; docs/bench_train.md "Activations"): the
     * example's own activation buffers and the activation store's bytes by
     * kind (device, pinned, nvme: the engine's accounting, rank 0) as the
     * final line reports them, and what the plan line planned for both and
     * for the whole process (host_peak); the store's time in each timed step
     * (act_s) over the step, as a median. */
    bool have_act, have_plan;
    int64_t act_model, act_store[3];
    int64_t plan_act_model, plan_act_store[3], plan_host_peak;
    double act_s_med, act_exposed_med; /* -1: no step reported it */
    /* Against the same configuration without checkpointing in this sweep (0
     * unknown): the median step, the device-side activation bytes (the
     * model's and the store's device slots), and the drop of the measured
     * VmHWM over the drop the plans predict. */
    double step_over_none, device_acts_over_none, vmhwm_drop_over_plan;
    /* Against the same configuration with fp32 optimizer state in this sweep
     * (have_fp32_pair false when there is none or either failed): the median
     * step over its, and the bytes this one saves by kind (its peaks and its
     * estimates subtracted from the fp32 run's) and on disk (the largest
     * swap files seen). */
    bool have_fp32_pair;
    double step_over_fp32_state;
    int64_t state_saved_peak[BT_KINDS], state_saved_estimate[BT_KINDS], state_saved_files;
} bt_result;

/* Whether DeepSpeed allows c's optimizer state (bench_train_axes.c): a bf16
 * master needs bf16 parameters at stage >= 1, and beside fp32 moments an
 * offloaded optimizer (cpu or nvme; not under budgets, where the planner
 * picks the home). The sweep holds only the points it allows. */
bool bt_state_allowed(const bt_config *c);

/* Fills rs[i]'s figures against the references among rs[0..i] that the
 * sweep ran before it: step_over_ddp (stage 0, no offload, every activation
 * kept, fp32 state, same world and dtype), the activation axis's against the
 * same configuration with checkpoint_activations none, and the state axis's
 * against the same configuration with fp32 state. A reference that failed
 * leaves its figures unset (0 / false). */
void bt_pair_with_references(bt_result *rs, int i);

/* The activation bytes a configuration keeps on the device (on the host
 * path: the memory that stands for the device's): the example's own buffers
 * and the store's device slots; planned: as the plan line plans them. */
int64_t bt_device_acts(const bt_result *r, bool planned);

/* Set by the signal handler: the sweep stops, kills its child and cleans up. */
extern volatile sig_atomic_t bt_stop_signal;

/* Runs one configuration in its own process (its config file and swap
 * directory under setup->work, named by index) and fills *r. Returns false
 * only when the harness itself failed (the message in r->reason); a
 * configuration that fails or is killed is a result, not an error. */
bool bt_run_config(const bt_setup *s, int index, const bt_config *c, bt_result *r);

/* A result as the JSON object of the interface (issue 13): config, status,
 * peak, estimate, step_s, samples_per_s, and the rest. New reference. */
json_t *bt_result_json(const bt_setup *s, const bt_result *r);
/* results.md: one table row per configuration. false with errno. */
bool bt_write_markdown(const char *path, const bt_setup *s, const bt_result *rs, int n);
/* Which program draws the plot (--plot-with). */
typedef enum bt_plotter {
    BT_PLOT_AUTO = 0,   /* matplotlib by the python3 on PATH, else by Debian's
                           /usr/bin/python3 (where scripts/deps.sh installs
                           python3-matplotlib), else gnuplot from PATH */
    BT_PLOT_MATPLOTLIB, /* the first two only */
    BT_PLOT_GNUPLOT,    /* gnuplot only */
    BT_PLOT_NONE
} bt_plotter;
/* Draws memory_vs_time.svg and .png - from results.jsonl with the plot
 * script (python3 + matplotlib), or from the results rs[0..n) with gnuplot -
 * each started from an argv. true with what drew it in `used` (usedcap
 * bytes: the program and why it was the one); false with a message naming
 * every program tried. */
bool bt_plot(const char *script, bt_plotter with, const char *workdir, const char *jsonl,
             const bt_result *rs, int n, const char *svg, const char *png, char *used,
             size_t usedcap, char *err, size_t errlen);
/* The gnuplot chart (bench_train_gnuplot.c): the script and its data in
 * workdir, run by `gnuplot` (a path). false with a message. */
bool bt_plot_gnuplot(const char *gnuplot, const char *workdir, const bt_result *rs, int n,
                     const char *svg, const char *png, char *err, size_t errlen);

/* Runs argv (no shell) with stdout and stderr to the given files (created
 * O_EXCL), env extra added; kills it after timeout_s (> 0) or when
 * bt_stop_signal is set. *wstatus, *maxrss_kib from wait4; *timed_out.
 * poll(arg, pid) is called every 20 ms while it runs (may be NULL). Returns
 * false when it could not be started (errno). */
bool bt_spawn(char *const argv[], const char *out_path, const char *err_path,
              double timeout_s, void (*poll)(void *arg, pid_t pid), void *arg, int *wstatus,
              long *maxrss_kib, bool *timed_out);

#endif
