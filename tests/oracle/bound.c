/* How far zeroc's own Adam arithmetic may be from DeepSpeed's, derived per
 * element and step (o_arith_bound, oracle.h; README.md "The measure").
 *
 * The two arithmetics compute the same update from the same gradients and
 * differ in two ways: their coefficients (zeroc derives them in double and
 * rounds once, DeepSpeedCPUAdam in fp32 from fp32 betas with beta^t as a
 * running fp32 product: D6) and their roundings (zeroc unfused, DeepSpeed
 * with FMAs). A first-order forward error analysis bounds what either does
 * to a master after t steps, using magnitudes computed here in double from
 * the fixture's gradients (u = 2^-24, the fp32 unit roundoff; a rounding of x
 * errs by at most u |x|):
 *
 *   the coefficients, per step, as ratios DeepSpeed / zeroc, computed from
 *   both derivations (DeepSpeed's emulated below in fp32 from cpu_adam.h,
 *   zeroc's from its double formulas): with beta2 fixed, v_ds / v_zc =
 *   r(1 - beta2), so the bias-corrected v-hat = v * bc2_rsqrt^2 differs by
 *   e_v = |r(1 - beta2) r(bc2_rsqrt)^2 - 1| (which cancels where the two
 *   roundings do, as at step 1); m-hat = m * step_size by
 *   e_m = max_j |r(step_size) r(1 - beta1_j) - 1| over the steps j in m
 *   (beta1 moves with OneCycle);
 *   the gradient: on a clipped step the two clip factors differ by the two
 *   norms' relative difference plus 6 roundings (DeepSpeed's fp32 clip
 *   formula and unscale, zeroc's grad_scale); in L2 mode g also carries
 *   weight_decay times the masters' difference so far and 3 roundings;
 *   the roundings of both together: m 4 u of beta1 |m| + (1 - beta1) |g|
 *   (two products and a sum in zeroc, a product and an FMA in DeepSpeed),
 *   v 7 u of beta2 v + (1 - beta2) g^2, carried through the moments'
 *   recurrences with the magnitudes M (the moment of |g|) and V;
 *   d = sqrt(v) bc2_rsqrt + eps: half v-hat's relative error, 4 u of the
 *   square root's term (sqrt and the product, both sides) and 2 u of d;
 *   the step size times m / d: 4 u (the division and the product or FMA);
 *   the master: 4 u of |p| per step (the decay and the update, rounded in
 *   each arithmetic), and in AdamW mode the decay coefficient's difference
 *   times lr wd |p|.
 * With DeepSpeed's arithmetic on both sides (same_coeffs) the coefficient
 * terms are 0 and the rest stands: it bounds what DeepSpeed's scalar tail
 * (ds_layout.c) and a clip factor computed otherwise can move.
 * The terms add over the steps (a decoupled decay only shrinks an earlier
 * difference). The bound is multiplied by 1.02 for what the first-order
 * analysis leaves out: second-order terms (products of relative errors of at
 * most ~1e-4) and that the magnitudes here are the exact average gradient,
 * where a 16-bit reduction (bf16 at world 2) rounds it by up to 2^-8. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

#define U 0x1p-24

/* A number of the case's DeepSpeed config, or `def` when absent. */
static double cfg_num(json_t *o, const char *key, double def)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

typedef struct adam_cfg {
    double beta2, eps, wd, clip;
    bool adamw, bias_correction;
} adam_cfg;

/* DeepSpeed's FusedAdam defaults where the config is silent. */
static adam_cfg read_cfg(const o_case *C)
{
    json_t *root = json_loads(C->config_json, 0, NULL);
    cr_assert(root, "%s: config", C->name);
    json_t *op = json_object_get(root, "optimizer");
    json_t *pp = json_object_get(op, "params");
    json_t *betas = json_object_get(pp, "betas");
    const char *type = json_string_value(json_object_get(op, "type"));
    json_t *awm = json_object_get(pp, "adam_w_mode");
    adam_cfg a = {
        .beta2 = json_is_array(betas) ? json_number_value(json_array_get(betas, 1)) : 0.999,
        .eps = cfg_num(pp, "eps", 1e-8),
        .wd = cfg_num(pp, "weight_decay", 0.0),
        .clip = cfg_num(root, "gradient_clipping", 1.0),
        .adamw = (type && !strcmp(type, "AdamW")) || !json_is_false(awm),
        .bias_correction = !json_is_false(json_object_get(pp, "bias_correction")),
    };
    json_decref(root);
    return a;
}

/* The two derivations' coefficients for one step. */
typedef struct coeffs {
    float omb1, omb2, ss, bc2r, dd;
} coeffs;

/* DeepSpeed (cpu_adam.h IncrementStep, update_state, Step_AVX), in fp32. */
typedef struct ds_powers {
    float b1, b2, b1t, b2t;
    int64_t step;
} ds_powers;

static coeffs ds_coeffs(ds_powers *s, int64_t k, double beta1, double beta2, double lr,
                        double wd, bool bc)
{
    const float b1 = (float)beta1, b2 = (float)beta2;
    if (b1 != s->b1 || b2 != s->b2) {
        s->b1 = b1;
        s->b2 = b2;
        s->step = k;
        s->b1t = (float)pow((double)b1, (double)k);
        s->b2t = (float)pow((double)b2, (double)k);
    } else if (k == s->step + 1) {
        s->step = k;
        s->b1t = s->b1t * b1;
        s->b2t = s->b2t * b2;
    } else if (k != s->step) {
        s->step = k;
        s->b1t = (float)pow((double)b1, (double)k);
        s->b2t = (float)pow((double)b2, (double)k);
    }
    const float a = (float)lr;
    const float bc1 = bc ? 1.0f - s->b1t : 1.0f;
    const float bc2 = bc ? 1.0f / sqrtf(1.0f - s->b2t) : 1.0f;
    return (coeffs){.omb1 = 1.0f - b1, .omb2 = 1.0f - b2, .ss = a / bc1, .bc2r = bc2,
                    .dd = a * (float)wd};
}

/* zeroc (src/optim/adam_coeffs.c): double, rounded once. */
static coeffs zc_coeffs(int64_t k, double beta1, double beta2, double lr, double wd, bool bc)
{
    double ss = lr, bc2r = 1.0;
    if (bc) {
        ss = lr / (1.0 - pow(beta1, (double)k));
        bc2r = 1.0 / sqrt(1.0 - pow(beta2, (double)k));
    }
    return (coeffs){.omb1 = (float)(1.0 - beta1), .omb2 = (float)(1.0 - beta2),
                    .ss = (float)ss, .bc2r = (float)bc2r, .dd = (float)(lr * wd)};
}

/* ds / zc; 1 where both are 0 (a zero learning rate). */
static double rel(float ds, float zc)
{
    return ds == zc ? 1.0 : (double)ds / (double)zc;
}

void o_arith_bound(const o_fixtures *F, const o_case *C, const o_run *r, bool same_coeffs,
                   double *B)
{
    const int64_t n = F->n;
    const adam_cfg a = read_cfg(C);
    const bool l2 = !a.adamw && a.wd > 0;
    double *M = calloc((size_t)n, sizeof(double)), *V = calloc((size_t)n, sizeof(double));
    double *Em = calloc((size_t)n, sizeof(double)), *Ev = calloc((size_t)n, sizeof(double));
    double *Ep = calloc((size_t)n, sizeof(double)), *g = calloc((size_t)n, sizeof(double));
    cr_assert(M && V && Em && Ev && Ep && g);
    ds_powers pw = {.b1 = (float)C->beta1[0], .b2 = (float)a.beta2, .b1t = 1, .b2t = 1};
    double rb1_lo = INFINITY, rb1_hi = -INFINITY; /* extremes of r(1 - beta1) so far */
    int64_t k = 0;
    const float *prev = C->master0;
    for (int t = 0; t < C->steps; t++) {
        double *Bt = B + (size_t)t * (size_t)n;
        const float *pt = C->masters + (size_t)t * (size_t)n;
        if (C->skipped[t]) {
            memcpy(Bt, Ep, (size_t)n * sizeof(double));
            prev = pt;
            continue;
        }
        k++;
        const double b1 = C->beta1[t], b2 = a.beta2, lr = C->lr[t];
        const coeffs cd = ds_coeffs(&pw, k, b1, b2, lr, a.wd, a.bias_correction);
        const coeffs cz = zc_coeffs(k, b1, b2, lr, a.wd, a.bias_correction);
        const double rb1 = rel(cd.omb1, cz.omb1), rss = rel(cd.ss, cz.ss);
        rb1_lo = fmin(rb1_lo, rb1);
        rb1_hi = fmax(rb1_hi, rb1);
        const double rbc2 = rel(cd.bc2r, cz.bc2r);
        /* DeepSpeed's arithmetic on both sides: the same coefficients. */
        const double e_m =
            same_coeffs ? 0.0 : fmax(fabs(rss * rb1_lo - 1.0), fabs(rss * rb1_hi - 1.0));
        const double e_v = same_coeffs ? 0.0 : fabs(rel(cd.omb2, cz.omb2) * rbc2 * rbc2 - 1.0);
        const double e_dd =
            same_coeffs || cz.dd == 0.0f ? 0.0 : fabs(rel(cd.dd, cz.dd) - 1.0);
        /* The averaged gradient of the step, unscaled and clipped with
         * zeroc's norm (the gradient's); the two clip factors' difference. */
        const double bc1 = a.bias_correction ? 1.0 - pow(b1, (double)k) : 1.0;
        const double bc2 = a.bias_correction ? 1.0 - pow(b2, (double)k) : 1.0;
        double clip = 1.0, e_gs = 0.0;
        if (a.clip > 0 && (r->grad_norm[t] + 1e-6) / a.clip > 1.0) {
            clip = (r->grad_norm[t] + 1e-6) / a.clip;
            e_gs = fabs(r->grad_norm[t] / C->grad_norm[t] - 1.0) + 6 * U;
        }
        memset(g, 0, (size_t)n * sizeof(double));
        for (int m = 0; m < C->accum; m++)
            for (int q = 0; q < C->world; q++) {
                const size_t at = ((size_t)t * (size_t)C->accum + (size_t)m) * (size_t)C->world +
                                  (size_t)q;
                const double e = ldexp(1.0, C->grad_exp[at]);
                const int8_t *kk = C->grads + at * (size_t)n;
                for (int64_t i = 0; i < n; i++)
                    g[i] += (double)kk[i] * e;
            }
        const double avg = 1.0 / ((double)C->world * (double)C->accum * clip);
        const double ss = lr / bc1;
        for (int64_t i = 0; i < n; i++) {
            const double p = prev[i], gi = g[i] * avg;
            const double gt = l2 ? gi + a.wd * p : gi;
            const double gA = fabs(gi) + (l2 ? a.wd * fabs(p) : 0.0);
            const double Eg = fabs(gi) * e_gs +
                              (l2 ? a.wd * Ep[i] + 3 * U * (a.wd * fabs(p) + fabs(gi)) : 0.0);
            const double Mp = M[i], Vp = V[i];
            M[i] = b1 * Mp + (1.0 - b1) * gA;
            V[i] = b2 * Vp + (1.0 - b2) * gt * gt;
            Em[i] = b1 * Em[i] + (1.0 - b1) * Eg + 4 * U * M[i];
            Ev[i] = b2 * Ev[i] + (1.0 - b2) * 2.0 * gA * Eg + 7 * U * V[i];
            const double s = sqrt(V[i] / bc2), D = s + a.eps;
            double Eu = 0.0;
            if (D > 0) {
                const double ev_round = V[i] > 0 ? Ev[i] / V[i] : 0.0;
                const double Ed = s * (e_v / 2.0 + ev_round / 2.0 + 4 * U) + 2 * U * D;
                Eu = ss * ((Em[i] + e_m * M[i]) / D + M[i] * Ed / (D * D) + 4 * U * M[i] / D);
            }
            const double pa = fmax(fabs(p), fabs((double)pt[i]));
            Ep[i] += 1.02 * Eu + 4 * U * pa + (a.adamw ? fabs(p) * lr * a.wd * (e_dd + 2 * U) : 0);
        }
        memcpy(Bt, Ep, (size_t)n * sizeof(double));
        prev = pt;
    }
    free(M);
    free(V);
    free(Em);
    free(Ev);
    free(Ep);
    free(g);
}
