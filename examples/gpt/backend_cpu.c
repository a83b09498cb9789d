/* The CPU backend of train_gpt (backend.h): model.c over host memory. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend.h"
#include "matmul_cpu.h"
#include "precision.h"

typedef struct cpu_model {
    gpt_config c;
    gpt_acts a;
} cpu_model;

static const char *err_str(int code) { return code ? "out of memory" : "success"; }
static int select_device(int index) { (void)index; return 0; }
static int stream_create(void **s) { *s = NULL; return 0; }
static void stream_destroy(void *s) { (void)s; }

static bool model_create(void **out, const gpt_config *c, int B, zc_dtype dt, bool ckpt,
                         void *stream, char *err, size_t errlen)
{
    cpu_model *m = calloc(1, sizeof *m);
    if (!m) return false;
    m->c = *c;
    if (!gpt_acts_create(&m->a, c, B, ckpt, err, errlen)) {
        free(m);
        return false;
    }
    /* bf16 training computes its matmuls in bf16 (fp32 sums) where the CPU
     * has bf16 instructions, as torch.autocast and the CUDA layers do; else
     * in fp32. This rank thread's matmuls use as many threads as OpenBLAS
     * was given (1 when ranks run as threads of one process). */
    if (dt == ZC_DTYPE_BF16 && gpt_matmul_bf16_available(NULL, 0))
        m->a.matmul = GPT_MATMUL_BF16;
    gpt_matmul_set_threads(openblas_get_num_threads());
    *out = m;
    return true;
}

static void model_destroy(void *p)
{
    cpu_model *m = p;
    if (!m) return;
    gpt_acts_destroy(&m->a);
    free(m);
}

static float *alloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static int *alloc_ints(size_t n) { return calloc(n ? n : 1, sizeof(int)); }
static void release_mem(void *p) { free(p); }

static int upload_ints(int *dst, const int *host, size_t n, void *s)
{
    memcpy(dst, host, n * sizeof(int));
    return 0;
}

static int zero(float *p, size_t n, void *s)
{
    memset(p, 0, n * sizeof(float));
    return 0;
}

static int widen(float *dst, const void *src, zc_dtype dt, size_t n, void *s)
{
    gpt_load_f32(dst, src, dt, n);
    return 0;
}

static int narrow(void *dst, zc_dtype dt, const float *src, size_t n, void *s)
{
    gpt_store_dtype(dst, dt, src, n);
    return 0;
}

static float *block_input(void *p, int l)
{
    cpu_model *m = p;
    return gpt_block_input(&m->c, &m->a, l);
}

static int embed_forward(void *p, const float *wte, const float *wpe, const int *tok)
{
    cpu_model *m = p;
    gpt_embed_forward_piece(&m->c, &m->a, wte, wpe, tok);
    return 0;
}

static int block_forward(void *p, int l, const float *const w[GPT_BLOCK_TENSORS])
{
    cpu_model *m = p;
    gpt_block_forward(&m->c, &m->a, l, w);
    return 0;
}

static int head_forward(void *p, const float *lnfw, const float *lnfb, const float *wte,
                        const int *tgt, double *loss)
{
    cpu_model *m = p;
    *loss = gpt_head_forward(&m->c, &m->a, lnfw, lnfb, wte, tgt);
    return 0;
}

static int head_backward(void *p, const float *lnfw, const float *wte, const int *tgt,
                         float scale, float *dwte, float *dlnfw, float *dlnfb)
{
    cpu_model *m = p;
    gpt_head_backward(&m->c, &m->a, lnfw, wte, tgt, scale, dwte, dlnfw, dlnfb);
    return 0;
}

static int block_backward(void *p, int l, const float *const w[GPT_BLOCK_TENSORS],
                          float *const g[GPT_BLOCK_TENSORS])
{
    cpu_model *m = p;
    gpt_block_backward(&m->c, &m->a, l, w, g);
    return 0;
}

static int embed_backward(void *p, const int *tok, float *dwte, float *dwpe)
{
    cpu_model *m = p;
    gpt_embed_backward_piece(&m->c, &m->a, tok, dwte, dwpe);
    return 0;
}

static int loss_sum(void *p, const int *tgt, size_t rows, double *sum)
{
    cpu_model *m = p;
    const size_t V = (size_t)m->c.vocab;
    double s = 0.0;
    for (size_t r = 0; r < rows; r++) {
        float q = m->a.probs[r * V + (size_t)tgt[r]];
        s -= log(q > 1.17549435e-38f ? (double)q : 1.17549435e-38);
    }
    *sum = s;
    return 0;
}

static int probs_row(void *p, size_t row, float *host)
{
    cpu_model *m = p;
    memcpy(host, m->a.probs + row * (size_t)m->c.vocab, (size_t)m->c.vocab * sizeof(float));
    return 0;
}

static int peak_flops(double *flops, char *how, size_t cap)
{
    if (zc_host_peak_flops(flops, how, cap) == ZC_OK)
        return 0;
    *flops = 0;
    snprintf(how, cap, "%s", zc_last_error());
    return 0;
}

const gpt_backend gpt_backend_cpu = {
    .name = "cpu", .device = ZC_DEVICE_HOST, .error_str = err_str,
    .select_device = select_device, .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .model_create = model_create, .model_destroy = model_destroy, .alloc = alloc,
    .alloc_ints = alloc_ints, .free = release_mem, .upload_ints = upload_ints, .zero = zero,
    .widen = widen, .narrow = narrow, .block_input = block_input, .embed_forward = embed_forward,
    .block_forward = block_forward, .head_forward = head_forward,
    .head_backward = head_backward, .block_backward = block_backward,
    .embed_backward = embed_backward, .loss_sum = loss_sum, .probs_row = probs_row,
    .peak_flops = peak_flops};
