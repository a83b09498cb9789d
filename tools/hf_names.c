/* Hugging Face GPT-2 names (hf_names.h). */
#include "hf_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const conv1d[] = {"attn.c_attn.weight", "attn.c_proj.weight",
                                     "mlp.c_fc.weight", "mlp.c_proj.weight"};
static const char *const block[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
                                    "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

/* "h.N.<rest>": the rest, with N a plain decimal; NULL otherwise. */
static const char *block_rest(const char *name)
{
    if (strncmp(name, "h.", 2) || name[2] < '0' || name[2] > '9')
        return NULL;
    const char *p = name + 2;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '.' && p - name <= 8 ? p + 1 : NULL;
}

static bool in(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return true;
    return false;
}

zc_load_map_result zc__hf_gpt2_import(void *user, const char *file_name, const int64_t *shape,
                                      int ndim, char *param, size_t cap, bool *transposed)
{
    (void)user;
    (void)shape;
    (void)ndim;
    const char *n = !strncmp(file_name, "transformer.", 12) ? file_name + 12 : file_name;
    *transposed = false;
    if (!strcmp(file_name, "lm_head.weight")) /* tied to wte */
        return ZC_LOAD_SKIP;
    if (!strcmp(n, "wte.weight") || !strcmp(n, "wpe.weight")) {
        snprintf(param, cap, "%.3s", n);
        return ZC_LOAD_MAPPED;
    }
    if (!strcmp(n, "ln_f.weight") || !strcmp(n, "ln_f.bias")) {
        snprintf(param, cap, "%s", n);
        return ZC_LOAD_MAPPED;
    }
    const char *rest = block_rest(n);
    if (rest && (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias")))
        return ZC_LOAD_SKIP; /* the causal mask, a buffer */
    if (rest && in(rest, block, sizeof block / sizeof block[0])) {
        snprintf(param, cap, "%s", n);
        *transposed = in(rest, conv1d, sizeof conv1d / sizeof conv1d[0]);
        return ZC_LOAD_MAPPED;
    }
    return ZC_LOAD_UNMAPPED;
}

bool zc__hf_gpt2_export(const char *param, char *out, size_t cap, bool *transposed)
{
    *transposed = false;
    if (!strcmp(param, "wte") || !strcmp(param, "wpe")) {
        snprintf(out, cap, "transformer.%s.weight", param);
        return true;
    }
    if (!strcmp(param, "ln_f.weight") || !strcmp(param, "ln_f.bias")) {
        snprintf(out, cap, "transformer.%s", param);
        return true;
    }
    const char *rest = block_rest(param);
    if (!rest || !in(rest, block, sizeof block / sizeof block[0]))
        return false;
    snprintf(out, cap, "transformer.%s", param);
    *transposed = in(rest, conv1d, sizeof conv1d / sizeof conv1d[0]);
    return true;
}
