/* `zeroc bench train`: the plot drawn by gnuplot, for a machine without a
 * python3 that has matplotlib (bench_train.h, bt_plot_gnuplot).
 *
 * The same chart as bench/train/plot_memory_time.py: each configuration
 * that ran at (median step time, peak memory per rank), a bar from its
 * fastest to its slowest timed step, the Pareto front, a number beside each
 * point and the key of numbers beside the axes; under --max-memory the step
 * time against the device budget (squares, with bars) joined to the device
 * memory each run used (circles). gnuplot places no label by itself without
 * overlap, so the numbers are placed here: the plot's area and ranges are
 * fixed in the script, so a data point's pixel is known, and each number
 * takes the first of a ring of offsets whose box (its digits at the font's
 * size) overlaps no number placed before it and no point. The script and
 * its data go to the bench's own directory; gnuplot runs from an argv. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_train.h"

#define W_PX 1300
#define L_PX 90   /* the axes' left edge */
#define R_PX 880  /* ... right edge; the key is to its right */
#define T_PX 50
#define B_PX_OFF 60 /* from the bottom */
#define FONT_PT 10

typedef struct pt {
    double x, y, lo, hi; /* data: x (or y) bar from lo to hi */
    double used;         /* budgets: the device memory used (x) */
    int n;               /* its number */
    const bt_result *r;
} pt;

static double mib(int64_t b) { return (double)b / 1048576.0; }

/* Bytes in the largest binary unit that keeps a digit before the point (the
 * plot script's size()). */
static void size_text(char *b, size_t cap, int64_t v)
{
    static const char *const units[] = {"GiB", "MiB", "KiB"};
    for (int i = 0; i < 3; i++) {
        const double scale = (double)((int64_t)1 << (30 - 10 * i));
        if ((double)v >= scale) {
            const double x = (double)v / scale;
            snprintf(b, cap, x < 10 ? "%.2f %s" : x < 100 ? "%.1f %s" : "%.0f %s", x, units[i]);
            return;
        }
    }
    snprintf(b, cap, "%lld B", (long long)v);
}

static void label_of(const bt_config *c, char *b, size_t cap)
{
    int n = snprintf(b, cap, "s%d", c->stage);
    if (strcmp(c->offload_optimizer, "none") && n > 0 && (size_t)n < cap)
        n += snprintf(b + n, cap - (size_t)n, " opt:%s", c->offload_optimizer);
    if (strcmp(c->offload_param, "none") && n > 0 && (size_t)n < cap)
        n += snprintf(b + n, cap - (size_t)n, " par:%s", c->offload_param);
    if (n > 0 && (size_t)n < cap)
        snprintf(b + n, cap - (size_t)n, " w%d %s", c->world, c->dtype);
}

/* The ring of offsets (pixels: right, up) a number may take. */
static const int offs[][2] = {{8, 6},   {8, -14},  {-18, 6},  {-18, -14}, {8, 18},  {-18, 18},
                              {8, -26}, {-18, -26}, {20, -4}, {-30, -4},  {0, 24},  {0, -32},
                              {26, 14}, {-36, 14},  {26, -22}, {-36, -22}};

typedef struct box {
    double x0, y0, x1, y1;
} box;

/* Where x lies between the axis' ends, 0..1 (log axis: in decades). */
static double frac(double x, double x0, double x1, bool logx)
{
    if (logx)
        return (log10(x) - log10(x0)) / (log10(x1) - log10(x0));
    return (x - x0) / (x1 - x0);
}

static bool hit(box a, box b) { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1; }

bool bt_plot_gnuplot(const char *gnuplot, const char *workdir, const bt_result *rs, int n,
                     const char *svg, const char *png, char *err, size_t errlen)
{
    bool budgets = false;
    int m = 0;
    for (int i = 0; i < n; i++)
        budgets |= rs[i].status == BT_OK && rs[i].cfg.budgeted;
    pt *p = calloc(n > 0 ? (size_t)n : 1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        const bt_result *r = &rs[i];
        if (r->status != BT_OK || !r->have_peak || r->nsteps <= 0 || r->cfg.budgeted != budgets)
            continue;
        pt q = {.r = r};
        if (budgets) {
            q.x = mib(r->cfg.budget[0]);
            q.y = 1e3 * r->step_med;
            q.lo = 1e3 * r->step_min;
            q.hi = 1e3 * r->step_max;
            q.used = mib(r->peak[0]);
        } else {
            q.x = 1e3 * r->step_med;
            q.y = mib(r->peak[0] + r->peak[1] + r->peak[2]);
            q.lo = 1e3 * r->step_min;
            q.hi = 1e3 * r->step_max;
        }
        p[m++] = q;
    }
    /* Numbers down the chart: by memory, then time (budgets: by budget). */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0; j--) {
            const bool swap_it = budgets ? p[j].x < p[j - 1].x
                                         : p[j].y > p[j - 1].y ||
                                               (p[j].y == p[j - 1].y && p[j].x < p[j - 1].x);
            if (!swap_it)
                break;
            pt t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
    for (int i = 0; i < m; i++)
        p[i].n = i + 1;
    /* Ranges with an 8% margin, as the matplotlib chart. */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < m; i++) {
        const double xa = budgets ? fmin(p[i].x, p[i].used) : p[i].lo;
        const double xb = budgets ? fmax(p[i].x, p[i].used) : p[i].hi;
        const double ya = budgets ? p[i].lo : p[i].y, yb = budgets ? p[i].hi : p[i].y;
        x0 = fmin(x0, xa), x1 = fmax(x1, xb), y0 = fmin(y0, ya), y1 = fmax(y1, yb);
    }
    if (m == 0 || !(x1 >= x0))
        x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    const double dx = (x1 - x0) > 0 ? (x1 - x0) : fabs(x0) + 1, dy = (y1 - y0) > 0 ? (y1 - y0)
                                                                                : fabs(y0) + 1;
    /* Budgets often span orders of magnitude: a log axis keeps the tight
     * ones apart (as the plot script does). */
    const bool logx = budgets && x0 > 0 && x1 / x0 > 20;
    if (logx) {
        const double l0 = log10(x0), l1 = log10(x1), d = l1 - l0;
        x0 = pow(10, l0 - 0.08 * d), x1 = pow(10, l1 + 0.08 * d);
    } else {
        x0 -= 0.08 * dx, x1 += 0.08 * dx;
    }
    y0 -= 0.08 * dy, y1 += 0.08 * dy;
    const int key_lines = budgets ? 2 * m : m;
    const int h_px = (int)fmax(650, 14.0 * (key_lines + 2) + 120);
    const double ax_w = R_PX - L_PX, ax_h = h_px - T_PX - B_PX_OFF;
    /* Data to pixels (y down), and the numbers' places. */
    box placed[512];
    int np = 0;
    int (*at)[2] = calloc(m > 0 ? (size_t)m : 1, sizeof *at);
    if (!at) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (int i = 0; i < m; i++) {
        const double px = L_PX + frac(p[i].x, x0, x1, logx) * ax_w;
        const double py = T_PX + (y1 - p[i].y) / (y1 - y0) * ax_h;
        const double tw = 0.62 * FONT_PT * 1.33 * (p[i].n >= 10 ? 2 : 1) + 2, th = FONT_PT * 1.4;
        int k = 0;
        for (; k < (int)(sizeof offs / sizeof offs[0]); k++) {
            box b = {px + offs[k][0], py - offs[k][1] - th, px + offs[k][0] + tw,
                     py - offs[k][1]};
            bool clash = false;
            for (int j = 0; j < np && !clash; j++)
                clash = hit(b, placed[j]);
            for (int j = 0; j < m && !clash; j++) {
                const double qx = L_PX + frac(p[j].x, x0, x1, logx) * ax_w;
                const double qy = T_PX + (y1 - p[j].y) / (y1 - y0) * ax_h;
                clash = j != i && qx > b.x0 - 3 && qx < b.x1 + 3 && qy > b.y0 - 3 &&
                        qy < b.y1 + 3;
            }
            if (!clash)
                break;
        }
        if (k == (int)(sizeof offs / sizeof offs[0]))
            k--;
        at[i][0] = offs[k][0];
        at[i][1] = offs[k][1];
        if (np < 512)
            placed[np++] = (box){px + offs[k][0], py - offs[k][1] - th, px + offs[k][0] + tw,
                                 py - offs[k][1]};
    }
    /* The data file and the script. */
    char dat[PATH_MAX + 16], gp[PATH_MAX + 16], front[PATH_MAX + 16];
    snprintf(dat, sizeof dat, "%s/plot.dat", workdir);
    snprintf(front, sizeof front, "%s/front.dat", workdir);
    snprintf(gp, sizeof gp, "%s/plot.gp", workdir);
    FILE *fd = NULL, *ff = NULL, *fg = NULL;
    int fdd = open(dat, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int fdf = open(front, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int fdg = open(gp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fdd >= 0)
        fd = fdopen(fdd, "w");
    if (fdf >= 0)
        ff = fdopen(fdf, "w");
    if (fdg >= 0)
        fg = fdopen(fdg, "w");
    bool ok = fd && ff && fg;
    if (!ok) {
        snprintf(err, errlen, "cannot write the gnuplot files in %s: %s", workdir,
                 strerror(errno));
        goto out;
    }
    for (int i = 0; i < m; i++)
        fprintf(fd, "%d %.6g %.6g %.6g %.6g %.6g\n", p[i].n, p[i].x, p[i].y, p[i].lo, p[i].hi,
                p[i].used);
    if (!budgets) {
        /* The Pareto front, by time: each point faster and with less memory
         * than every one before it is beaten by none. */
        int *ord = calloc(m > 0 ? (size_t)m : 1, sizeof *ord);
        if (!ord) {
            ok = false;
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        for (int i = 0; i < m; i++)
            ord[i] = i;
        for (int i = 1; i < m; i++)
            for (int j = i; j > 0 && (p[ord[j]].x < p[ord[j - 1]].x ||
                                      (p[ord[j]].x == p[ord[j - 1]].x &&
                                       p[ord[j]].y < p[ord[j - 1]].y)); j--) {
                int t = ord[j];
                ord[j] = ord[j - 1];
                ord[j - 1] = t;
            }
        double best = INFINITY;
        for (int i = 0; i < m; i++)
            if (p[ord[i]].y < best) {
                best = p[ord[i]].y;
                fprintf(ff, "%.6g %.6g\n", p[ord[i]].x, p[ord[i]].y);
            }
        free(ord);
    } else {
        fprintf(ff, "0 0\n");
    }
    const char *title = budgets ? "zeroc bench train: step time against the memory budget"
                                : "zeroc bench train: memory against step time";
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            fprintf(fg, "set terminal svg size %d,%d font 'sans,%d' noenhanced\n"
                    "set output '%s'\n", W_PX, h_px, FONT_PT, svg);
        else
            fprintf(fg, "set terminal pngcairo size %d,%d font 'sans,%d' noenhanced\n"
                    "set output '%s'\n", W_PX, h_px, FONT_PT - 1, png);
        if (pass)
            continue;
        fprintf(fg, "set title '%s'\n", title);
        fprintf(fg, "set xlabel '%s'\nset ylabel '%s'\n",
                budgets ? "device budget per rank, zero_optimization.max_memory.device (MiB)"
                        : "step time, median after warm-up (ms)",
                budgets ? "step time, median after warm-up (ms)"
                        : "peak memory per rank: device + pinned + host (MiB)");
        fprintf(fg, "set grid\nset lmargin at screen %.5f\nset rmargin at screen %.5f\n"
                "set tmargin at screen %.5f\nset bmargin at screen %.5f\n",
                (double)L_PX / W_PX, (double)R_PX / W_PX, 1.0 - (double)T_PX / h_px,
                (double)B_PX_OFF / h_px);
        fprintf(fg, "%sset xrange [%.6g:%.6g]\nset yrange [%.6g:%.6g]\n",
                logx ? "set logscale x\n" : "", x0, x1, y0, y1);
        fprintf(fg, "set key at screen %.5f, screen %.5f left bottom font ',8' noopaque\n",
                (double)(R_PX + 20) / W_PX, 0.02);
        /* The key of numbers, a label per line (monospace). */
        fprintf(fg, "set label 1 '%s' at screen %.5f, screen %.5f left font 'monospace,8'\n",
                budgets ? "key (stage 3): the budgets, what the run used, its step"
                        : "key: configuration, median step, peak",
                (double)(R_PX + 20) / W_PX, 1.0 - 40.0 / h_px);
        for (int i = 0, row = 0; i < m; i++) {
            char l[160], line[256], more[256] = "";
            label_of(&p[i].r->cfg, l, sizeof l);
            if (budgets) {
                char d[24], c[24], v[24], ud[24], up[24];
                size_text(d, sizeof d, p[i].r->cfg.budget[0]);
                size_text(c, sizeof c, p[i].r->cfg.budget[1]);
                size_text(v, sizeof v, p[i].r->cfg.budget[2]);
                size_text(ud, sizeof ud, p[i].r->peak[0]);
                size_text(up, sizeof up, p[i].r->peak[1]);
                snprintf(line, sizeof line, "%2d  w%d %s: device %s, cpu %s, nvme %s", p[i].n,
                         p[i].r->cfg.world, p[i].r->cfg.dtype, d, c, v);
                snprintf(more, sizeof more, "      used %s device, %s pinned; %.1f ms", ud, up,
                         p[i].y);
            } else {
                snprintf(line, sizeof line, "%2d  %s  %.1f ms  %.1f MiB", p[i].n, l, p[i].x,
                         p[i].y);
            }
            fprintf(fg, "set label %d '%s' at screen %.5f, screen %.5f left font 'monospace,8'\n",
                    2 + row, line, (double)(R_PX + 20) / W_PX, 1.0 - (54.0 + 14.0 * row) / h_px);
            row++;
            if (more[0]) {
                fprintf(fg, "set label %d '%s' at screen %.5f, screen %.5f left "
                        "font 'monospace,8'\n", 2 + row, more, (double)(R_PX + 20) / W_PX,
                        1.0 - (54.0 + 14.0 * row) / h_px);
                row++;
            }
            fprintf(fg, "set label %d '%d' at first %.6g, first %.6g offset %.1f,%.1f "
                    "font ',9' front\n", i + 1000, p[i].n, p[i].x, p[i].y,
                    at[i][0] / (0.62 * FONT_PT * 1.33), at[i][1] / (FONT_PT * 1.4));
        }
        int fails = 0;
        for (int i = 0; i < n; i++)
            fails += rs[i].status != BT_OK;
        if (fails) {
            fprintf(fg, "set label 999 'not run to the end:");
            for (int i = 0; i < n; i++)
                if (rs[i].status != BT_OK) {
                    char l[160];
                    label_of(&rs[i].cfg, l, sizeof l);
                    fprintf(fg, " %s %s;", l, rs[i].status == BT_KILLED ? "killed" : "failed");
                }
            fprintf(fg, "' at screen 0.01, screen 0.01 left font ',7'\n");
        }
        if (budgets)
            fprintf(fg, "plot '%s' using 2:3:4:5 with yerrorbars pt 5 ps 1.2 lc rgb '#1f77b4' "
                    "title 'budget point (bar: fastest to slowest step)', \\\n"
                    "     '%s' using 6:3 with points pt 6 ps 1.2 lc rgb '#595959' "
                    "title 'device memory the run used', \\\n"
                    "     '%s' using 6:3:($2-$6):(0) with vectors nohead dt 3 lc rgb '#999999' "
                    "notitle\n", dat, dat, dat);
        else
            fprintf(fg, "plot '%s' using 2:3:4:5 with xerrorbars pt 7 ps 1 lc rgb '#1f77b4' "
                    "title 'configuration (bar: fastest to slowest timed step)', \\\n"
                    "     '%s' using 1:2 with linespoints pt 6 ps 2 lw 1.5 lc rgb '#d62728' "
                    "title 'Pareto front (less memory or less time)'\n", dat, front);
    }
    fprintf(fg, "replot\n");
    ok = !ferror(fd) && !ferror(ff) && !ferror(fg);
out:
    if (fd) {
        if (fclose(fd) != 0)
            ok = false;
    } else if (fdd >= 0) {
        close(fdd);
    }
    if (ff) {
        if (fclose(ff) != 0)
            ok = false;
    } else if (fdf >= 0) {
        close(fdf);
    }
    if (fg) {
        if (fclose(fg) != 0)
            ok = false;
    } else if (fdg >= 0) {
        close(fdg);
    }
    free(p);
    free(at);
    if (!ok) {
        if (!err[0])
            snprintf(err, errlen, "cannot write the gnuplot script: %s", strerror(errno));
        return false;
    }
    char out_log[PATH_MAX + 32], err_log[PATH_MAX + 32];
    snprintf(out_log, sizeof out_log, "%s/gnuplot.log", workdir);
    snprintf(err_log, sizeof err_log, "%s/gnuplot.err", workdir);
    char *argv[] = {(char *)gnuplot, gp, NULL};
    int st = 0;
    long rss = 0;
    bool to = false;
    if (!bt_spawn(argv, out_log, err_log, 300, NULL, NULL, &st, &rss, &to)) {
        snprintf(err, errlen, "cannot start %s: %s", gnuplot, strerror(errno));
        return false;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(err, errlen, "%s %s failed%s (its messages: %s)", gnuplot, gp,
                 to ? " (timed out)" : "", err_log);
        return false;
    }
    return true;
}
