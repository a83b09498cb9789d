/* --init-from and --export: a Hugging Face GPT2LMHeadModel checkpoint in and
 * out (hf_init.h). */
#include "hf_init.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_names.h"

typedef struct shapes {
    int64_t wte[2], wpe[2];
    int layers;
    bool have_wte, have_wpe;
} shapes;

static int on_tensor(void *user, const zc_load_tensor *t)
{
    shapes *s = user;
    char name[256];
    bool tr;
    if (zc__hf_gpt2_import(NULL, t->name, t->shape, t->ndim, name, sizeof name, &tr) !=
        ZC_LOAD_MAPPED)
        return 0;
    if (t->ndim == 2 && !strcmp(name, "wte")) {
        memcpy(s->wte, t->shape, sizeof s->wte);
        s->have_wte = true;
    } else if (t->ndim == 2 && !strcmp(name, "wpe")) {
        memcpy(s->wpe, t->shape, sizeof s->wpe);
        s->have_wpe = true;
    } else if (!strncmp(name, "h.", 2)) {
        const int l = atoi(name + 2);
        if (l >= 0 && l < 1000 && l + 1 > s->layers)
            s->layers = l + 1;
    }
    return 0;
}

/* config.json beside the checkpoint, or NULL when there is none. */
static json_t *read_config(const char *path, char *where, size_t cap, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    snprintf(where, cap, "%.*sconfig.json", slash ? (int)(slash - path) + 1 : 0, path);
    if (access(where, F_OK) != 0)
        return NULL;
    json_error_t je;
    json_t *j = json_load_file(where, 0, &je);
    if (!j || !json_is_object(j)) {
        snprintf(err, errlen, "%s: %s", where, j ? "not a JSON object" : je.text);
        json_decref(j);
        return (json_t *)-1;
    }
    return j;
}

/* What this example computes must be what the checkpoint's config says. */
static bool config_matches(json_t *j, const char *where, char *err, size_t errlen)
{
    const json_t *act = json_object_get(j, "activation_function");
    if (act && (!json_is_string(act) || (strcmp(json_string_value(act), "gelu_new") &&
                                         strcmp(json_string_value(act), "gelu_pytorch_tanh")))) {
        snprintf(err, errlen, "%s: activation_function %s: this GPT-2 computes the tanh "
                 "approximation of GELU (gelu_new)", where,
                 json_is_string(act) ? json_string_value(act) : "(not a string)");
        return false;
    }
    const json_t *eps = json_object_get(j, "layer_norm_epsilon");
    if (eps && (!json_is_number(eps) || fabs(json_number_value(eps) - 1e-5) > 1e-12)) {
        snprintf(err, errlen, "%s: layer_norm_epsilon %g: this GPT-2's LayerNorm uses 1e-5",
                 where, json_is_number(eps) ? json_number_value(eps) : NAN);
        return false;
    }
    static const struct { const char *key; bool want; } flags[] = {
        {"tie_word_embeddings", true}, {"scale_attn_weights", true},
        {"scale_attn_by_inverse_layer_idx", false}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const json_t *v = json_object_get(j, flags[i].key);
        if (v && (!json_is_boolean(v) || json_is_true(v) != flags[i].want)) {
            snprintf(err, errlen, "%s: %s must be %s for this GPT-2", where, flags[i].key,
                     flags[i].want ? "true" : "false");
            return false;
        }
    }
    const json_t *inner = json_object_get(j, "n_inner");
    const json_t *embd = json_object_get(j, "n_embd");
    if (inner && !json_is_null(inner) &&
        (!json_is_integer(inner) || !json_is_integer(embd) ||
         json_integer_value(inner) != 4 * json_integer_value(embd))) {
        snprintf(err, errlen, "%s: n_inner must be null or 4 x n_embd (this GPT-2's MLP)", where);
        return false;
    }
    return true;
}

/* A size taken from the file, against the flag when one was given. */
static bool take(int *field, int64_t v, bool given, const char *flag, const char *src,
                 char *err, size_t errlen)
{
    if (v < 1 || v > 1 << 30) {
        snprintf(err, errlen, "%s: %s of %lld is out of range", src, flag, (long long)v);
        return false;
    }
    if (given && *field != v) {
        snprintf(err, errlen, "%s %d, but %s has %lld", flag, *field, src, (long long)v);
        return false;
    }
    *field = (int)v;
    return true;
}

bool gpt_hf_shape(const char *path, gpt_config *c, unsigned given, char *err, size_t errlen)
{
    shapes s = {0};
    if (zc_load_list(path, on_tensor, &s) != ZC_OK) {
        snprintf(err, errlen, "--init-from: %s", zc_last_error());
        return false;
    }
    if (!s.have_wte || !s.have_wpe || !s.layers) {
        snprintf(err, errlen, "--init-from %s: not a GPT-2 checkpoint (it needs "
                 "transformer.wte.weight, transformer.wpe.weight and transformer.h.N.*)", path);
        return false;
    }
    if (!take(&c->vocab, s.wte[0], given & GPT_GIVEN_VOCAB, "--vocab", path, err, errlen) ||
        !take(&c->dim, s.wte[1], given & GPT_GIVEN_DIM, "--dim", path, err, errlen) ||
        !take(&c->layers, s.layers, given & GPT_GIVEN_LAYERS, "--layers", path, err, errlen) ||
        !take(&c->ctx, s.wpe[0], given & GPT_GIVEN_CTX, "--ctx", path, err, errlen))
        return false;
    char where[4200];
    json_t *j = read_config(path, where, sizeof where, err, errlen);
    if (j == (json_t *)-1)
        return false;
    bool ok = true;
    if (j) {
        ok = config_matches(j, where, err, errlen);
        static const struct { const char *key; int off; } dims[] = {
            {"n_layer", 0}, {"n_embd", 1}, {"vocab_size", 2}, {"n_positions", 3}};
        const int have[4] = {c->layers, c->dim, c->vocab, c->ctx};
        for (size_t i = 0; ok && i < 4; i++) {
            const json_t *v = json_object_get(j, dims[i].key);
            if (v && (!json_is_integer(v) || json_integer_value(v) != have[dims[i].off])) {
                snprintf(err, errlen, "%s: %s does not match the checkpoint's shapes (%d)",
                         where, dims[i].key, have[dims[i].off]);
                ok = false;
            }
        }
        const json_t *h = json_object_get(j, "n_head");
        if (ok && json_is_integer(h))
            ok = take(&c->heads, json_integer_value(h), given & GPT_GIVEN_HEADS, "--heads", where,
                      err, errlen);
        else if (ok && !(given & GPT_GIVEN_HEADS)) {
            snprintf(err, errlen, "%s has no n_head: give --heads", where);
            ok = false;
        }
        json_decref(j);
    } else if (!(given & GPT_GIVEN_HEADS)) {
        snprintf(err, errlen, "--init-from %s: the number of heads is not in the tensors' "
                 "shapes and there is no config.json beside it: give --heads", path);
        ok = false;
    }
    if (ok && !(given & GPT_GIVEN_SEQ))
        c->seq = c->ctx < 64 ? c->ctx : 64;
    if (ok && c->seq > c->ctx) {
        snprintf(err, errlen, "--seq %d is longer than the checkpoint's context of %d", c->seq,
                 c->ctx);
        ok = false;
    }
    return ok;
}

/* ---- --export ------------------------------------------------------------ */

static bool write_all(int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n;) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool gpt_hf_export(const char *path, const gpt_config *c, const float *master, char *err,
                   size_t errlen)
{
    const int nt = gpt_num_tensors(c);
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < nt; i++) {
        char name[64], hf[128];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        bool tr;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        zc__hf_gpt2_export(name, hf, sizeof hf, &tr);
        json_t *t = json_object(), *sh = json_array(), *off = json_array();
        for (int d = 0; d < ndim; d++)
            json_array_append_new(sh, json_integer(shape[tr ? ndim - 1 - d : d]));
        json_array_append_new(off, json_integer((json_int_t)at));
        at += (uint64_t)n * 4;
        json_array_append_new(off, json_integer((json_int_t)at));
        json_object_set_new(t, "dtype", json_string("F32"));
        json_object_set_new(t, "shape", sh);
        json_object_set_new(t, "data_offsets", off);
        json_object_set_new(root, hf, t);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    const size_t hn = text ? strlen(text) : 0, padded = (hn + 7) / 8 * 8;
    int fd = text ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
    bool ok = fd >= 0;
    if (!ok)
        snprintf(err, errlen, "--export %s: cannot create it: %s%s", path, strerror(errno),
                 errno == EEXIST ? " (it is not overwritten)" : "");
    uint64_t le = padded;
    ok = ok && write_all(fd, &le, 8) && write_all(fd, text, hn) &&
         write_all(fd, "        ", padded - hn);
    /* Each tensor in the checkpoint's layout: the Conv1D weights as their
     * transposes. Little-endian floats (x86-64, aarch64). */
    float *tmp = NULL;
    size_t tmp_n = 0, off = 0;
    for (int i = 0; ok && i < nt; i++) {
        char name[64], hf[128];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        bool tr;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        zc__hf_gpt2_export(name, hf, sizeof hf, &tr);
        const float *src = master + off;
        if (tr) {
            if (n > tmp_n) {
                free(tmp);
                tmp = malloc(n * sizeof(float));
                tmp_n = tmp ? n : 0;
            }
            ok = tmp != NULL;
            for (int64_t r = 0; ok && r < shape[0]; r++)
                for (int64_t q = 0; q < shape[1]; q++)
                    tmp[q * shape[0] + r] = src[r * shape[1] + q];
            src = tmp;
        }
        ok = ok && write_all(fd, src, n * sizeof(float));
        off += n;
    }
    free(tmp);
    free(text);
    if (fd >= 0 && (!ok || fsync(fd) != 0 || close(fd) != 0)) {
        if (!err[0] || ok)
            snprintf(err, errlen, "--export %s: %s", path, strerror(errno));
        unlink(path);
        return false;
    }
    if (!ok)
        return false;
    /* config.json beside it, for from_pretrained, unless there is one. */
    char where[4200];
    const char *slash = strrchr(path, '/');
    snprintf(where, sizeof where, "%.*sconfig.json", slash ? (int)(slash - path) + 1 : 0, path);
    fd = open(where, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return true;
    char cfg[1024];
    const int len = snprintf(cfg, sizeof cfg,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
        "  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_layer\": %d,\n  \"n_positions\": %d,\n"
        "  \"vocab_size\": %d,\n  \"tie_word_embeddings\": true,\n  \"embd_pdrop\": 0.0,\n"
        "  \"attn_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0\n}\n",
        c->dim, c->heads, c->layers, c->ctx > 0 ? c->ctx : c->seq, c->vocab);
    ok = write_all(fd, cfg, (size_t)len);
    if (close(fd) != 0 || !ok) {
        snprintf(err, errlen, "--export: writing %s: %s", where, strerror(errno));
        unlink(where);
        return false;
    }
    return true;
}
