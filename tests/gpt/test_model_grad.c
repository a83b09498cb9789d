/* The whole GPT of examples/gpt (every piece chained as train_gpt runs them)
 * on a tiny shape: its loss against the double reference model (ref.c) and
 * its fp32 gradient of every parameter against central finite differences of
 * the double reference. The parameters are drawn large (not GPT-2's 0.02) so
 * that every path, attention included, carries a gradient worth checking. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "model.h"
#include "ref.h"

static void check_model(gpt_config c, int B, uint64_t seed)
{
    char err[256];
    cr_assert(gpt_config_check(&c, err, sizeof err), "%s", err);
    const size_t np = gpt_num_params(&c);
    const int nt = gpt_num_tensors(&c), N = B * c.seq;
    float *pf = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
    double *pd = malloc(np * sizeof(double));
    int *tok = malloc(sizeof(int) * (size_t)N), *tgt = malloc(sizeof(int) * (size_t)N);
    uint64_t s = seed;
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        bool gain = strstr(name, "ln_") && strstr(name, ".weight");
        for (size_t k = 0; k < n; k++) {
            float v = (float)((gain ? 1.0 : 0.0) + 0.4 * ref_uniform(&s));
            pf[off + k] = v;
            pd[off + k] = v;
        }
        off += n;
    }
    cr_assert_eq(off, np);
    for (int n = 0; n < N; n++) {
        tok[n] = (int)(ref_rand(&s) % (uint64_t)c.vocab);
        tgt[n] = (int)(ref_rand(&s) % (uint64_t)c.vocab);
    }
    gpt_acts a;
    cr_assert(gpt_acts_create(&a, &c, B, false, err, sizeof err), "%s", err);
    double loss = gpt_forward_backward(&c, &a, pf, g, tok, tgt);
    double want = ref_gpt_loss(&c, pd, tok, tgt, B);
    cr_assert_leq(fabs(loss - want), 1e-5 * want, "loss %.9g, the double reference %.9g", loss,
                  want);

    /* Tensor by tensor: each is held to its own largest gradient, so a
     * wrong small tensor cannot hide behind a large one. */
    const double h = 1e-6;
    off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        double *fd = malloc(n * sizeof(double)), scale = 0;
        for (size_t k = 0; k < n; k++) {
            double keep = pd[off + k];
            pd[off + k] = keep + h;
            double lp = ref_gpt_loss(&c, pd, tok, tgt, B);
            pd[off + k] = keep - h;
            double lm = ref_gpt_loss(&c, pd, tok, tgt, B);
            pd[off + k] = keep;
            fd[k] = (lp - lm) / (2 * h);
            if (fabs(fd[k]) > scale) scale = fabs(fd[k]);
        }
        cr_assert_gt(scale, 1e-4, "%s: the reference gradient is all but zero", name);
        for (size_t k = 0; k < n; k++)
            cr_assert_leq(fabs(g[off + k] - fd[k]), 1e-3 * scale + 1e-6,
                          "%s[%zu]: gradient %.8g, finite differences %.8g (largest %.3g)", name,
                          k, g[off + k], fd[k], scale);
        free(fd);
        off += n;
    }
    gpt_acts_destroy(&a);
    free(pf); free(g); free(pd); free(tok); free(tgt);
}

Test(gpt_model, gradient_two_layers)
{
    check_model((gpt_config){.vocab = 11, .seq = 4, .layers = 2, .heads = 2, .dim = 8}, 2, 21);
}

/* One head and a longer sequence than batch: other index arithmetic. */
Test(gpt_model, gradient_one_head)
{
    check_model((gpt_config){.vocab = 7, .seq = 6, .layers = 1, .heads = 1, .dim = 4}, 1, 22);
}

Test(gpt_model, parameter_count)
{
    /* GPT-2 small's 124,439,808 parameters (tied head): an independent
     * figure for the table of tensors. */
    gpt_config c = {.vocab = 50257, .seq = 1024, .layers = 12, .heads = 12, .dim = 768};
    cr_assert_eq(gpt_num_params(&c), 124439808u);
}

Test(gpt_model, bad_shapes_are_refused)
{
    char err[256] = "";
    gpt_config c = {.vocab = 256, .seq = 64, .layers = 2, .heads = 3, .dim = 64};
    cr_assert(!gpt_config_check(&c, err, sizeof err));
    cr_assert(strstr(err, "multiple"), "message: %s", err);
    c.heads = 4;
    c.seq = 1025;
    cr_assert(!gpt_config_check(&c, err, sizeof err), "longer than the attention's limit");
    c.seq = 1024;
    c.dim = 4096;
    cr_assert(gpt_config_check(&c, err, sizeof err), "%s", err);
    /* 2^20 sequences of 1024 x 4096: sizes past int, refused before any
     * allocation */
    gpt_acts a;
    cr_assert(!gpt_acts_create(&a, &c, 1 << 20, false, err, sizeof err));
    cr_assert(strstr(err, "too large"), "message: %s", err);
}
