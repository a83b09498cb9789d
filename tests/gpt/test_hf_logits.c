/* The GPT example computes what Hugging Face's GPT2LMHeadModel computes: a
 * checkpoint made by transformers (tests/oracle/make_hf_gpt2.py) loads
 * through zc_load_safetensors under the Hugging Face names, and the model's
 * logits for the first window of the fixture's tokens equal the ones
 * transformers computed, within 1e-4 (fp32; the same GELU tanh
 * approximation, LayerNorm eps 1e-5, tied head, learned positions). The
 * fixture directory is ZC_HF_FIXTURE. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zeroc/zeroc.h>

#include "data.h"
#include "hf_names.h"
#include "layers_cpu.h"
#include "model.h"

static char path_of[512];

static const char *fixture(const char *name)
{
    const char *d = getenv("ZC_HF_FIXTURE");
    cr_assert(d && *d, "ZC_HF_FIXTURE is not set");
    snprintf(path_of, sizeof path_of, "%s/%s", d, name);
    return path_of;
}

Test(hf_gpt2, logits_match_transformers)
{
    json_error_t je;
    json_t *ex = json_load_file(fixture("expected.json"), 0, &je);
    cr_assert(ex, "expected.json: %s", je.text);
    const json_t *m = json_object_get(ex, "model");
    gpt_config c = {.vocab = (int)json_integer_value(json_object_get(m, "vocab")),
                    .layers = (int)json_integer_value(json_object_get(m, "layers")),
                    .heads = (int)json_integer_value(json_object_get(m, "heads")),
                    .dim = (int)json_integer_value(json_object_get(m, "dim")),
                    .ctx = (int)json_integer_value(json_object_get(m, "ctx"))};
    const json_t *dd = json_object_get(ex, "data");
    c.seq = (int)json_integer_value(json_object_get(dd, "seq"));
    const int rows = (int)json_integer_value(json_object_get(json_object_get(ex, "logits"),
                                                             "rows"));
    char err[256];
    cr_assert(gpt_config_check(&c, err, sizeof err), "%s", err);

    /* One rank, stage 0, fp32: the master is the checkpoint's values. */
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 0), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int nt = gpt_num_tensors(&c);
    zc_param **p = calloc((size_t)nt, sizeof *p);
    const size_t total = gpt_num_params(&c);
    float *w = malloc(total * sizeof(float));
    const float **pp = calloc((size_t)nt, sizeof *pp);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        p[i] = zc_param_add(e, name, shape, ndim, 0);
        cr_assert(p[i], "%s", zc_last_error());
        pp[i] = w + off;
        off += n;
    }
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    zc_load_options lo = ZC_LOAD_OPTIONS_INIT;
    lo.map = zc__hf_gpt2_import;
    zc_load_stats st = {.size = sizeof st};
    cr_assert_eq(zc_load_safetensors(e, fixture("model.safetensors"), &lo, &st), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(st.tensors, nt);
    for (int i = 0; i < nt; i++)
        cr_assert_eq(zc_param_gather_master(e, p[i], (float *)pp[i]), ZC_OK);

    /* Window 0 of the tokens, its first `rows` positions' logits. */
    gpt_data d;
    cr_assert(gpt_data_load_tokens(&d, fixture("tokens.bin"), c.seq, c.vocab, err, sizeof err),
              "%s", err);
    int *tok = calloc((size_t)c.seq, sizeof *tok), *tgt = calloc((size_t)c.seq, sizeof *tgt);
    for (int t = 0; t < c.seq; t++) {
        tok[t] = gpt_data_token(&d, (size_t)t);
        tgt[t] = gpt_data_token(&d, (size_t)t + 1);
    }
    gpt_acts a;
    cr_assert(gpt_acts_create(&a, &c, 1, false, err, sizeof err), "%s", err);
    gpt_embed_forward_piece(&c, &a, pp[0], pp[1], tok);
    for (int l = 0; l < c.layers; l++)
        gpt_block_forward(&c, &a, l, pp + 2 + GPT_BLOCK_TENSORS * l);
    (void)gpt_head_forward(&c, &a, pp[nt - 2], pp[nt - 1], pp[0], tgt);
    /* The head leaves probabilities; the logits are lnf's output times wte. */
    float *logits = malloc((size_t)c.seq * (size_t)c.vocab * sizeof(float));
    gpt_linear_forward(logits, a.lnf, pp[0], NULL, c.seq, c.dim, c.vocab);
    FILE *f = fopen(fixture("logits.bin"), "rb");
    cr_assert(f);
    float *want = malloc((size_t)rows * (size_t)c.vocab * sizeof(float));
    cr_assert_eq(fread(want, sizeof(float), (size_t)rows * (size_t)c.vocab, f),
                 (size_t)rows * (size_t)c.vocab);
    fclose(f);
    double worst = 0.0;
    for (int i = 0; i < rows * c.vocab; i++) {
        const double diff = fabs((double)logits[i] - (double)want[i]);
        worst = diff > worst ? diff : worst;
        cr_assert_leq(diff, 1e-4, "logit %d (position %d, token %d): %.7g, transformers %.7g", i,
                      i / c.vocab, i % c.vocab, logits[i], want[i]);
    }
    cr_log_info("largest logit difference %.3g over %d logits", worst, rows * c.vocab);

    gpt_acts_destroy(&a);
    gpt_data_destroy(&d);
    free(logits);
    free(want);
    free(tok);
    free(tgt);
    free(w);
    free(pp);
    free(p);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    json_decref(ex);
}
