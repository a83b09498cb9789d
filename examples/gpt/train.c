/* train_gpt — a GPT-2-style decoder trained on a text file through zeroc's
 * public API, on the CPU (OpenBLAS for the matmuls) or, with --device cuda,
 * on a GPU (cuBLAS and the kernels of layers_cuda.cu; backend.h).
 *
 * How it uses the engine, as a ZeRO user would: every tensor is registered,
 * with a chunk boundary before each transformer block and before the final
 * LayerNorm, so a chunk is one piece of the model (embedding, block l, head).
 * Forward acquires each piece just before it runs and releases it after;
 * backward acquires it again (stage 3 gathers it twice, as DeepSpeed does)
 * and hands the piece's gradients back (zc_block_grad_ready) as soon as the
 * piece is done - one block call per piece (zc_block_span: a piece is the
 * tensors between two chunk boundaries) - so its reduction is launched
 * while the earlier blocks still run backward. The tied embedding receives gradient from the LM head first and
 * from the token lookup last: its gradient is summed in fp32 here and given
 * to the engine at the end of backward, so at most two chunk gradient
 * buffers are ever open (the engine reserves two in stages 2 and 3).
 *
 * Each rank is a thread with its own engine (zc_comm_local_world), or, when
 * mpirun or torchrun started this process (or with --launcher env), it is one
 * rank of the launched job (zc_comm_init_env). Either way the printed loss
 * is the mean over ranks (zc_all_reduce_f64), the same bits; the initial
 * values load, and the master is gathered, a piece at a time
 * (zc_block_load, zc_block_gather_master).
 * Run `train_gpt --help` for the flags; --json prints one object per step,
 * per evaluation and a final one (see README). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <zeroc/zeroc.h>

#include "cliarg.h"
#include "data.h"
#include "hf_init.h"
#include "hf_names.h"
#include "model.h"
#include "memplan.h"
#include "options.h"
#include "backend.h"
#ifdef GPT_HAVE_CUDA
#include "cuda_module.h"
#endif
#include "sha256.h"

typedef struct shared {
    gpt_opts o;
    zc_config *cfg;
    zc_comm **comms;
    int world;               /* ranks in the job */
    int local;               /* ranks run by this process */
    gpt_data data;
    double unigram_val;      /* entropy of the validation bytes, nats */
    double val_loss;         /* last validation loss (rank 0) */
    zc_stats stats0;         /* rank 0's engine stats before it is destroyed (--json) */
    zc_act_stats act0;       /* ... and its activation store's */
    float *master;           /* gathered fp32 master, registration order */
    const gpt_backend *be;   /* where the model runs (--device) */
    int cpu_threads;         /* BLAS/oneDNN threads of each rank (CPU device) */
} shared;

/* BLAS threads for each rank process when `local` of them share this
 * machine: the CPUs this process may run on, split between them, at least
 * one (as torchrun sets OMP_NUM_THREADS=1 for several processes). A launcher
 * that binds each rank to its own cores (mpirun's default) leaves one CPU,
 * hence one thread; one that does not would otherwise start a full pool of
 * threads in every rank, each spinning for its share of the same cores. The
 * user's OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is left as it is. */
static void size_process_blas(int local)
{
    if (local <= 1 || getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS"))
        return;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    openblas_set_num_threads(cpus / local > 1 ? cpus / local : 1);
}

typedef struct rank_arg {
    shared *sh;
    int index;               /* into sh->comms */
} rank_arg;

static const char *lib_error(void)
{
    const char *m = zc_last_error();
    return m && *m ? m : "(the library gave no detail)";
}

/* The calling rank thread's engine (NULL in other threads): an error path
 * destroys it before the process ends, as the normal end does
 * (zc_engine_destroy calls no collective: safe while other ranks wait). A
 * failure agreed across ranks reaches every rank at once: the process ends
 * when every engine is destroyed, or after 0.5 s. */
static _Thread_local zc_engine *rank_engine;
static atomic_int live_engines;

static _Noreturn void rank_quit(int code)
{
    zc_engine *e = rank_engine;
    rank_engine = NULL;
    if (e) {
        zc_engine_destroy(e);
        atomic_fetch_sub(&live_engines, 1);
    }
    for (int i = 0; i < 50 && atomic_load(&live_engines) > 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    gpt_quit(code);
}

static void die(int rank, const char *what)
{
    char who[32] = "";
    if (rank >= 0) /* -1: the main thread, before or after the ranks run */
        snprintf(who, sizeof who, "rank %d: ", rank);
    fprintf(stderr, "train_gpt: %s%s failed: %s\n", who, what, lib_error());
    rank_quit(1);
}

#define CHECK(call)                        \
    do {                                   \
        if ((call) != ZC_OK) die(rank, #call); \
    } while (0)

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "train_gpt: out of memory (%zu x %zu bytes)\n", n, sz);
        rank_quit(1);
    }
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct jnum_t { char s[32]; } jnum_t;

/* A JSON number, or null when not finite (a diverging run). */
static jnum_t jnum(double v)
{
    jnum_t j;
    snprintf(j.s, sizeof j.s, isfinite(v) ? "%.9g" : "null", v);
    return j;
}

/* ---- one rank's model state ----------------------------------------------- */

typedef struct rank_state {
    const shared *sh;
    const gpt_backend *be;
    void *stream;            /* the rank's stream (NULL on the CPU) */
    zc_engine *eng;
    int rank, nt;
    zc_param **P;
    size_t *numel;
    /* The pieces as blocks (one block call per piece and kind): the
     * embedding {wte, wpe}, each transformer block's 12 tensors, the final
     * LayerNorm {lnf.w, lnf.b}, and wte alone for the tied head. */
    zc_block *emb, **layer, *head, *wte_only;
    /* fp32 copies of acquired weights, in the backend's memory: the
     * embedding (kept for the tied head), one block, and lnf; gradients of
     * one block, of the embedding (summed through backward) and of lnf.
     * The block's two are unused where the layers work in place
     * (in_place: fp32 in host memory). */
    float *wte, *wpe, *blk[GPT_BLOCK_TENSORS], *lnfw, *lnfb;
    float *dwte, *dwpe, *gblk[GPT_BLOCK_TENSORS], *dlnfw, *dlnfb;
    int *tok, *tgt;          /* the micro-batch, in the backend's memory */
    /* --checkpoint-activations block: each block's saved input (zc_act_save
     * in forward, zc_act_restore in backward), and its bytes. */
    zc_act_id *ck;
    size_t ck_bytes;
} rank_state;

/* A failed backend call ends the program (a rank that stops would leave
 * the others waiting in a collective). */
#define BE(s, call)                                                                      \
    do {                                                                                 \
        int be_rc_ = (s)->be->call;                                                      \
        if (be_rc_) {                                                                    \
            fprintf(stderr, "train_gpt: rank %d: %s backend: %s failed: %s\n", (s)->rank, \
                    (s)->be->name, #call, (s)->be->error_str(be_rc_));                   \
            rank_quit(1);                                                                \
        }                                                                                \
    } while (0)

static zc_dtype dtype_of(const rank_state *s) { return s->sh->o.dtype; }

static float *balloc(rank_state *s, size_t n)
{
    float *p = s->be->alloc(n);
    if (!p) {
        fprintf(stderr, "train_gpt: rank %d: out of %s memory (%zu floats)\n", s->rank,
                s->be->name, n);
        rank_quit(1);
    }
    return p;
}

/* Acquires block b (one call for its tensors) and widens them into dst[]. */
static void acquire(rank_state *s, zc_block *b, float *const *dst)
{
    const int rank = s->rank;
    void *p[GPT_BLOCK_TENSORS];
    CHECK(zc_block_acquire(s->eng, b, s->stream, p));
    for (int k = 0; k < zc_block_size(b); k++)
        BE(s, widen(dst[k], p[k], dtype_of(s), (size_t)zc_param_numel(zc_block_param(b, k)),
                    s->stream));
}

/* fp32 weights and gradients in host memory are the engine's own buffers:
 * the layers read the acquired weights and write the gradient buffers
 * (zeroed by the engine per micro-step) in place, with no copies. */
static bool in_place(const rank_state *s)
{
    return dtype_of(s) == ZC_DTYPE_F32 && s->be->device == ZC_DEVICE_HOST;
}

/* Acquires block b; out[k] is its k-th weight in fp32: the engine's buffer
 * itself (in_place) or widened into scratch[k]. */
static void acquire_f32(rank_state *s, zc_block *b, float *const *scratch, float **out)
{
    const int rank = s->rank;
    void *p[GPT_BLOCK_TENSORS];
    CHECK(zc_block_acquire(s->eng, b, s->stream, p));
    for (int k = 0; k < zc_block_size(b); k++) {
        if (in_place(s)) {
            out[k] = p[k];
            continue;
        }
        BE(s, widen(scratch[k], p[k], dtype_of(s),
                    (size_t)zc_param_numel(zc_block_param(b, k)), s->stream));
        out[k] = scratch[k];
    }
}

static void release(rank_state *s, zc_block *b)
{
    const int rank = s->rank;
    CHECK(zc_block_release(s->eng, b, s->stream));
}

/* Writes the fp32 gradients src[] of block b into the engine's buffers and
 * hands them back: the chunk's reduction starts with the last one. */
static void give_grads(rank_state *s, zc_block *b, float *const *src)
{
    const int rank = s->rank;
    void *g[GPT_BLOCK_TENSORS];
    CHECK(zc_block_grad_buffers(s->eng, b, g));
    for (int k = 0; k < zc_block_size(b); k++)
        BE(s, narrow(g[k], dtype_of(s), src[k], (size_t)zc_param_numel(zc_block_param(b, k)),
                     s->stream));
    CHECK(zc_block_grad_ready(s->eng, b));
}

static int block_first(int l) { return 2 + GPT_BLOCK_TENSORS * l; }

/* The model's pieces as blocks, in registration order: the embedding, the
 * layers, the final LayerNorm (j in [0, layers + 2)); together every tensor
 * once, so their values back to back are the model's in registration order. */
static zc_block *piece(const rank_state *s, int j)
{
    return j == 0 ? s->emb : j <= s->sh->o.model.layers ? s->layer[j - 1] : s->head;
}

/* The elements of block b (one array of zc_block_load / _gather_master). */
static size_t block_numel(const zc_block *b)
{
    size_t n = 0;
    for (int k = 0; k < zc_block_size(b); k++)
        n += (size_t)zc_param_numel(zc_block_param(b, k));
    return n;
}

/* Forward of model m over s->tok / s->tgt through every piece, acquiring
 * each; returns the mean loss. keep_head: a training forward (the head stays
 * acquired for the backward that follows, and with --checkpoint-activations
 * block each block's input but the last's goes to the activation store
 * before it runs: gpt_ckpt_blocks). */
static double forward(rank_state *s, void *m, bool keep_head)
{
    const gpt_config *c = &s->sh->o.model;
    const int rank = s->rank;
    float *emb[2] = {s->wte, s->wpe};
    acquire(s, s->emb, emb);
    BE(s, embed_forward(m, s->wte, s->wpe, s->tok));
    release(s, s->emb);
    for (int l = 0; l < c->layers; l++) {
        float *w[GPT_BLOCK_TENSORS];
        if (s->ck && keep_head && l < gpt_ckpt_blocks(c))
            CHECK(zc_act_save(s->eng, s->be->block_input(m, l), s->ck_bytes, s->stream,
                              &s->ck[l]));
        acquire_f32(s, s->layer[l], s->blk, w);
        BE(s, block_forward(m, l, (const float *const *)w));
        release(s, s->layer[l]);
    }
    /* The head reads lnf and the tied wte; with keep_head they stay
     * acquired for the head's backward, which follows at once. */
    float *head[2] = {s->lnfw, s->lnfb};
    acquire(s, s->head, head);
    acquire(s, s->wte_only, emb);
    double loss = 0.0;
    BE(s, head_forward(m, s->lnfw, s->lnfb, s->wte, s->tgt, &loss));
    if (!keep_head) {
        release(s, s->wte_only);
        release(s, s->head);
    }
    return loss;
}

static void backward(rank_state *s, void *m)
{
    const int rank = s->rank;
    const gpt_config *c = &s->sh->o.model;
    const float scale = (float)zc_loss_scale(s->eng);
    BE(s, zero(s->dwte, s->numel[0], s->stream));
    BE(s, zero(s->dwpe, s->numel[1], s->stream));
    BE(s, zero(s->dlnfw, (size_t)c->dim, s->stream));
    BE(s, zero(s->dlnfb, (size_t)c->dim, s->stream));
    BE(s, head_backward(m, s->lnfw, s->wte, s->tgt, scale, s->dwte, s->dlnfw, s->dlnfb));
    float *dhead[2] = {s->dlnfw, s->dlnfb};
    give_grads(s, s->head, dhead); /* the head's chunk is complete */
    release(s, s->wte_only);
    release(s, s->head);
    for (int l = c->layers - 1; l >= 0; l--) {
        float *w[GPT_BLOCK_TENSORS];
        acquire_f32(s, s->layer[l], s->blk, w);
        if (s->ck && l < gpt_ckpt_blocks(c)) {
            /* The block's input back from the store, and its forward again:
             * the same arithmetic on the same values refills the block's
             * activations for its backward (the last block's are still
             * there from the forward). */
            CHECK(zc_act_restore(s->eng, s->ck[l], s->be->block_input(m, l), s->ck_bytes,
                                 s->stream));
            BE(s, block_forward(m, l, (const float *const *)w));
        }
        if (in_place(s)) {
            /* The engine's zeroed buffers, taken as the previous block's
             * are made ready (zc_block_grad_buffers' reservation). */
            float *g[GPT_BLOCK_TENSORS];
            CHECK(zc_block_grad_buffers(s->eng, s->layer[l], (void **)g));
            BE(s, block_backward(m, l, (const float *const *)w, g));
            CHECK(zc_block_grad_ready(s->eng, s->layer[l]));
        } else {
            for (int k = 0; k < GPT_BLOCK_TENSORS; k++)
                BE(s, zero(s->gblk[k], s->numel[block_first(l) + k], s->stream));
            BE(s, block_backward(m, l, (const float *const *)w, s->gblk));
            give_grads(s, s->layer[l], s->gblk);
        }
        release(s, s->layer[l]);
    }
    /* The lookup needs no weights, only the gradient of its output. */
    BE(s, embed_backward(m, s->tok, s->dwte, s->dwpe));
    float *demb[2] = {s->dwte, s->dwpe};
    give_grads(s, s->emb, demb);
}

/* Mean loss over every validation window (every rank computes the same
 * value: stage 3's acquires are collective, so all ranks run the same
 * forward passes). tok and tgt are host scratch of B x T. An evaluation
 * pass (zc_pass_begin): it changes nothing of the training, and stage 3
 * prefetches along its own acquire order instead of finding the training's
 * changed; *ps receives the pass's figures (prefetch hits and misses). */
static double validate(rank_state *s, void *m, int B, int *tok, int *tgt, zc_pass_stats *ps)
{
    const gpt_config *c = &s->sh->o.model;
    const gpt_data *d = &s->sh->data;
    const size_t nw = gpt_data_val_windows(d, c->seq);
    const int T = c->seq;
    const int rank = s->rank;
    double sum = 0.0;
    CHECK(zc_pass_begin(s->eng, ZC_PASS_EVAL));
    for (size_t w0 = 0; w0 < nw; w0 += (size_t)B) {
        size_t n = nw - w0 < (size_t)B ? nw - w0 : (size_t)B;
        for (int b = 0; b < B; b++) /* pad a short last batch with its first window */
            gpt_data_val_window(d, T, w0 + ((size_t)b < n ? (size_t)b : 0),
                                tok + (size_t)b * T, tgt + (size_t)b * T);
        BE(s, upload_ints(s->tok, tok, (size_t)B * T, s->stream));
        BE(s, upload_ints(s->tgt, tgt, (size_t)B * T, s->stream));
        forward(s, m, false);
        double part = 0.0;
        BE(s, loss_sum(m, tgt, n * (size_t)T, &part));
        sum += part;
    }
    CHECK(zc_pass_end(s->eng));
    *ps = (zc_pass_stats){.size = sizeof *ps};
    CHECK(zc_engine_pass_stats(s->eng, ps));
    return sum / ((double)nw * T);
}

/* Generates n bytes after the first seq bytes of the validation text,
 * sampling from the model's distribution; rank 0 prints them. Every rank
 * runs it (stage 3 gathers are collective), as an evaluation pass: its
 * forwards acquire in the validation's order, so the pass's trace serves
 * both. */
static void sample(rank_state *s, int n, bool print)
{
    const gpt_config *c = &s->sh->o.model;
    const gpt_data *d = &s->sh->data;
    const int T = c->seq, V = c->vocab;
    char err[256];
    void *m = NULL;
    if (!s->be->model_create(&m, c, 1, dtype_of(s), s->sh->o.ckpt, s->stream, err,
                             sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        rank_quit(1);
    }
    int *tok = xcalloc((size_t)T, sizeof(int)), *tgt = xcalloc((size_t)T, sizeof(int));
    float *p = xcalloc((size_t)V, sizeof(float));
    gpt_data_val_window(d, T, 0, tok, tgt);
    uint64_t rng = s->sh->o.seed ^ 0x73616d706c65ull;
    if (print) printf("--- sample ---\n");
    const int rank = s->rank;
    CHECK(zc_pass_begin(s->eng, ZC_PASS_EVAL));
    for (int i = 0; i < n; i++) {
        BE(s, upload_ints(s->tok, tok, (size_t)T, s->stream));
        BE(s, upload_ints(s->tgt, tgt, (size_t)T, s->stream));
        forward(s, m, false);
        BE(s, probs_row(m, (size_t)(T - 1), p));
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(rng >> 11) * 0x1p-53, acc = 0.0;
        int next = V - 1;
        for (int v = 0; v < V; v++) {
            acc += p[v];
            if (u < acc) { next = v; break; }
        }
        if (print && d->tokens) {
            printf("%s%d", i ? " " : "", next); /* token ids: no tokenizer here */
        } else if (print) {
            unsigned char ch = gpt_byte_of_token(next);
            putchar(ch == '\n' || (ch >= 32 && ch < 127) ? ch : '?');
        }
        memmove(tok, tok + 1, (size_t)(T - 1) * sizeof(int));
        tok[T - 1] = next;
    }
    CHECK(zc_pass_end(s->eng));
    if (print) printf("\n--- end of sample ---\n");
    free(tok);
    free(tgt);
    free(p);
    s->be->model_destroy(m);
}

static void *rank_main(void *argp)
{
    rank_arg *ra = argp;
    shared *sh = ra->sh;
    const gpt_opts *o = &sh->o;
    const gpt_config *c = &o->model;
    zc_comm *comm = sh->comms[ra->index];
    const int rank = zc_comm_rank(comm), B = o->batch, T = c->seq;
    const bool lead = rank == 0;
    char err[256];

    rank_state s = {.sh = sh, .be = sh->be, .rank = rank, .nt = gpt_num_tensors(c)};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    /* The rank's GPU first, on this thread: its stream and buffers must live
     * on the device the engine will use (under a launcher, the local rank's),
     * not on device 0, where a new thread starts. */
    if (s.be->device == ZC_DEVICE_CUDA) {
        CHECK(zc_cuda_device_index(-1, &eo.device_index));
        BE(&s, select_device(eo.device_index));
    }
    BE(&s, stream_create(&s.stream));
    /* The layers read parameters and write gradients where the backend
     * computes: host memory, or the device with gradients written on this
     * rank's stream. */
    eo.device = s.be->device;
    eo.stream = s.stream;
    /* --checkpoint-activations block: the store holds one input per block
     * but the last (gpt_ckpt_blocks; memplan.c plans the same); one layer
     * needs no store. */
    if (o->ckpt) {
        const int n = gpt_ckpt_blocks(c);
        eo.act_checkpoints = n;
        eo.act_checkpoint_bytes = n > 0 ? (int64_t)gpt_block_input_bytes(c, B) : 0;
        s.ck = xcalloc((size_t)c->layers, sizeof *s.ck);
        s.ck_bytes = gpt_block_input_bytes(c, B);
    }
    CHECK(zc_engine_create(&s.eng, sh->cfg, comm, &eo));
    rank_engine = s.eng;
    atomic_fetch_add(&live_engines, 1);
    /* Biases and LayerNorm gains train without weight decay, as in GPT-2
     * recipes: the 1-D tensors go to a group of their own. */
    int nodecay = 0;
    CHECK(zc_group_add(s.eng, 0.0, 1.0, &nodecay));
    s.P = xcalloc((size_t)s.nt, sizeof *s.P);
    s.numel = xcalloc((size_t)s.nt, sizeof *s.numel);
    int last_piece = 0;
    for (int i = 0; i < s.nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        gpt_tensor_info(c, i, name, shape, &ndim, &s.numel[i], &piece);
        if (piece != last_piece) /* one chunk per piece: stage 3 gathers a block at a time */
            CHECK(zc_chunk_boundary(s.eng));
        last_piece = piece;
        if (!(s.P[i] = zc_param_add(s.eng, name, shape, ndim, ndim == 1 ? nodecay : 0)))
            die(rank, "zc_param_add");
    }
    CHECK(zc_engine_build(s.eng));
    /* Each piece starts at a chunk boundary, so a span is the piece. */
    s.layer = xcalloc((size_t)c->layers, sizeof *s.layer);
    CHECK(zc_block_span(s.eng, s.P[0], &s.emb));
    for (int l = 0; l < c->layers; l++)
        CHECK(zc_block_span(s.eng, s.P[block_first(l)], &s.layer[l]));
    CHECK(zc_block_span(s.eng, s.P[s.nt - 2], &s.head));
    CHECK(zc_block_create(s.eng, &s.P[0], 1, &s.wte_only));
    size_t max_piece = 0; /* elements of the largest piece */
    for (int j = 0; j < c->layers + 2; j++)
        if (block_numel(piece(&s, j)) > max_piece) max_piece = block_numel(piece(&s, j));
    if (o->init_from) {
        /* Each rank reads its own part of the checkpoint (zc_load_safetensors),
         * under the Hugging Face names (tools/hf_names.h). */
        zc_load_options lo = ZC_LOAD_OPTIONS_INIT;
        lo.map = zc__hf_gpt2_import;
        zc_load_stats ls = {.size = sizeof ls};
        CHECK(zc_load_safetensors(s.eng, o->init_from, &lo, &ls));
        if (lead && o->json)
            printf("{\"import\":true,\"tensors\":%lld,\"skipped\":%lld,\"file_bytes\":%lld,"
                   "\"bytes_read\":%lld,\"seconds\":%s,\"ring_bytes\":%lld,\"direct\":%s}\n",
                   (long long)ls.tensors, (long long)ls.skipped, (long long)ls.file_bytes,
                   (long long)ls.bytes_read, jnum(ls.seconds).s, (long long)ls.ring_bytes,
                   ls.direct ? "true" : "false");
        else if (lead)
            printf("train_gpt: %lld tensors from %s (%lld skipped); rank 0 read %.1f of %.1f "
                   "MiB in %.2f s\n", (long long)ls.tensors, o->init_from, (long long)ls.skipped,
                   (double)ls.bytes_read / 1048576.0, (double)ls.file_bytes / 1048576.0,
                   ls.seconds);
        fflush(stdout);
    } else {
        /* One load per piece, its tensors' initial values back to back. */
        float *init = xcalloc(max_piece, sizeof(float));
        for (int j = 0, i = 0; j < c->layers + 2; j++) {
            size_t at = 0;
            for (int k = 0; k < zc_block_size(piece(&s, j)); k++, i++) {
                gpt_init_tensor(c, i, o->seed, init + at);
                at += s.numel[i];
            }
            CHECK(zc_block_load(s.eng, piece(&s, j), init, at));
        }
        free(init);
    }
    s.wte = balloc(&s, s.numel[0]);
    s.wpe = balloc(&s, s.numel[1]);
    s.dwte = balloc(&s, s.numel[0]);
    s.dwpe = balloc(&s, s.numel[1]);
    for (int k = 0; k < GPT_BLOCK_TENSORS; k++) {
        s.blk[k] = balloc(&s, s.numel[2 + k]);
        s.gblk[k] = balloc(&s, s.numel[2 + k]);
    }
    s.lnfw = balloc(&s, (size_t)c->dim);
    s.lnfb = balloc(&s, (size_t)c->dim);
    s.dlnfw = balloc(&s, (size_t)c->dim);
    s.dlnfb = balloc(&s, (size_t)c->dim);
    s.tok = s.be->alloc_ints((size_t)B * T);
    s.tgt = s.be->alloc_ints((size_t)B * T);
    if (!s.tok || !s.tgt) {
        fprintf(stderr, "train_gpt: rank %d: out of %s memory for tokens\n", rank, s.be->name);
        rank_quit(1);
    }

    void *m = NULL;
    if (!s.be->model_create(&m, c, B, dtype_of(&s), o->ckpt, s.stream, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        rank_quit(1);
    }
    int *tok = xcalloc((size_t)B * T, sizeof(int)), *tgt = xcalloc((size_t)B * T, sizeof(int));
    const double tokens_per_step = (double)B * T * o->accum * sh->world;
    /* What a step computes, for the throughput of the engine's progress
     * lines and ours: the model's FLOPs (gpt_flops_per_token) and one rank's
     * peak - --peak-flops, else the device's (a CPU's shared by the ranks
     * this process runs as threads). */
    const double flops_per_step = tokens_per_step * gpt_flops_per_token(c);
    double peak = o->peak_flops;
    char peak_how[160] = "--peak-flops";
    if (!(peak > 0)) {
        s.be->peak_flops(&peak, peak_how, sizeof peak_how);
        if (s.be->device == ZC_DEVICE_HOST && sh->local > 1)
            peak /= sh->local;
    }
    {
        zc_workload wl = {.size = sizeof wl, .tokens_per_step = tokens_per_step,
                          .flops_per_step = flops_per_step, .peak_flops = peak};
        CHECK(zc_engine_set_workload(s.eng, &wl));
    }
    if (lead && !o->json)
        printf("train_gpt: %.3g FLOPs per step (%.4g per token); MFU against %.4g TFLOP/s per "
               "rank (%s%s)\n", flops_per_step, gpt_flops_per_token(c), peak / 1e12, peak_how,
               s.be->device == ZC_DEVICE_HOST && sh->local > 1 && !(o->peak_flops > 0)
                   ? ", shared by the ranks of this process" : "");
    /* A progress line every steps_per_print steps (unset: --steps / 20 of
     * them): tokens/s and MFU over the steps since the last one. */
    const int every = o->print_every > 0 ? o->print_every : (o->steps / 20 > 1 ? o->steps / 20 : 1);
    double span_s = 0.0;
    int span_steps = 0;

    /* --resume: step numbers (and the data, a function of the step) go on
     * from the checkpoint. */
    int start = 0;
    if (o->resume) {
        CHECK(zc_checkpoint_load(s.eng, o->save_dir, NULL));
        zc_stats st = {.size = sizeof st};
        CHECK(zc_engine_stats(s.eng, &st));
        if (st.steps > INT_MAX - o->steps) {
            fprintf(stderr, "train_gpt: the checkpoint in %s is at step %lld; %d more steps go "
                    "past %d\n", o->save_dir, (long long)st.steps, o->steps, INT_MAX);
            rank_quit(1);
        }
        start = (int)st.steps;
    }
    const int end = start + o->steps;
    double act_mark = 0.0, wait_mark = 0.0; /* the store's times before the step */
    for (int step = start; step < end; step++) {
        double t0 = now(), loss = 0.0;
        for (int micro = 0; micro < o->accum; micro++) {
            gpt_data_rank_batch(&sh->data, T, o->seed, step, micro, rank, B, tok, tgt);
            BE(&s, upload_ints(s.tok, tok, (size_t)B * T, s.stream));
            BE(&s, upload_ints(s.tgt, tgt, (size_t)B * T, s.stream));
            loss += forward(&s, m, true);
            backward(&s, m);
            if (micro + 1 < o->accum) CHECK(zc_micro_step_end(s.eng));
        }
        zc_step_info info;
        CHECK(zc_step(s.eng, &info));
        if (o->save_every && (step + 1) % o->save_every == 0)
            CHECK(zc_checkpoint_save(s.eng, o->save_dir, NULL));
        double dt_s = now() - t0;
        /* The mean over ranks, threads or processes alike: the sum is taken
         * in rank order on every rank, so both launchers print the same
         * bits. Collective. */
        double l = loss / o->accum;
        CHECK(zc_all_reduce_f64(s.eng, &l, 1, ZC_REDUCE_SUM));
        l /= sh->world;
        if (lead) {
            if (o->json) {
                /* With wall_clock_breakdown, rank 0's step timers too. */
                char tm[400] = "";
                zc_timers t = {.size = sizeof t};
                if (zc_engine_timers(s.eng, &t) == ZC_OK && t.enabled && t.step == info.step) {
                    int n = snprintf(tm, sizeof tm, ",\"timers\":{");
                    for (int i = 0; i < ZC_TIMER__COUNT && n > 0 && (size_t)n < sizeof tm; i++)
                        n += snprintf(tm + n, sizeof tm - (size_t)n, "%s\"%s\":%s", i ? "," : "",
                                      zc_timer_name((zc_timer_phase)i), jnum(t.last[i]).s);
                    if (n > 0 && (size_t)n < sizeof tm)
                        snprintf(tm + n, sizeof tm - (size_t)n, "}");
                }
                /* With checkpointing, the time the step spent in the store's
                 * calls (the transfer it did not hide) and, of it, waiting
                 * for reads. */
                zc_act_stats as = {.size = sizeof as};
                if (s.ck && zc_engine_act_stats(s.eng, &as) == ZC_OK) {
                    const size_t u = strlen(tm);
                    snprintf(tm + u, sizeof tm - u, ",\"act_s\":%s,\"act_wait_s\":%s",
                             jnum(as.save_s + as.restore_s - act_mark).s,
                             jnum(as.restore_wait_s - wait_mark).s);
                    act_mark = as.save_s + as.restore_s;
                    wait_mark = as.restore_wait_s;
                }
                const double fps = flops_per_step / sh->world / dt_s;
                printf("{\"step\":%d,\"loss\":%s,\"grad_norm\":%s,\"loss_scale\":%s,"
                       "\"skipped\":%s,\"lr\":%s,\"tokens_per_s\":%s,\"step_s\":%s,"
                       "\"flops_per_s_per_rank\":%s,\"mfu\":%s%s}\n",
                       step + 1, jnum(l).s, jnum(info.grad_norm).s, jnum(info.loss_scale).s,
                       info.skipped ? "true" : "false", jnum(info.lr).s,
                       jnum(tokens_per_step / dt_s).s, jnum(dt_s).s, jnum(fps).s,
                       peak > 0 ? jnum(fps / peak).s : "null", tm);
                fflush(stdout);
            } else {
                span_s += dt_s;
                span_steps++;
                if ((step + 1) % every == 0 || step + 1 == end || info.skipped) {
                    const double tps = tokens_per_step * span_steps / span_s;
                    const double fps = flops_per_step * span_steps / sh->world / span_s;
                    char mfu[32] = "";
                    if (peak > 0)
                        snprintf(mfu, sizeof mfu, "  MFU %.1f%%", 100.0 * fps / peak);
                    printf("step %5d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tok/s  "
                           "%.3f TFLOP/s%s%s\n",
                           step + 1, end, l, info.grad_norm, info.lr, tps, fps / 1e12, mfu,
                           info.skipped ? "  (skipped: overflow)" : "");
                    fflush(stdout);
                    span_s = 0.0;
                    span_steps = 0;
                }
            }
        }
        if (o->eval_every > 0 && (step + 1) % o->eval_every == 0 && step + 1 < end) {
            zc_pass_stats ps;
            double v = validate(&s, m, B, tok, tgt, &ps);
            if (lead) {
                if (o->json)
                    printf("{\"eval\":true,\"step\":%d,\"val_loss\":%s,\"prefetch_hits\":%lld,"
                           "\"prefetch_misses\":%lld}\n", step + 1, jnum(v).s,
                           (long long)ps.prefetch_hits, (long long)ps.prefetch_misses);
                else
                    printf("step %5d  val_loss %.4f  (unigram entropy %.4f)\n", step + 1, v,
                           sh->unigram_val);
                fflush(stdout);
            }
        }
    }
    zc_pass_stats ps;
    double v = validate(&s, m, B, tok, tgt, &ps);
    if (lead) sh->val_loss = v;
    if (lead && o->json)
        printf("{\"eval\":true,\"step\":%d,\"val_loss\":%s,\"prefetch_hits\":%lld,"
               "\"prefetch_misses\":%lld}\n", end, jnum(v).s, (long long)ps.prefetch_hits,
               (long long)ps.prefetch_misses);
    if (o->sample > 0) sample(&s, o->sample, lead && !o->json);
    /* comms_logger: DeepSpeed's summary, as a script's log_summary() prints it. */
    if (lead && o->comms_logger && !o->json) {
        size_t need = 0;
        CHECK(zc_engine_comms_summary(s.eng, NULL, 0, &need));
        char *table = xcalloc(need, 1);
        CHECK(zc_engine_comms_summary(s.eng, table, need, NULL));
        printf("--- comms_logger (rank 0) ---\n%s", table);
        free(table);
    }

    /* Gathering the master is collective: every rank takes part, rank 0 keeps
     * it. A piece at a time, in registration order. */
    size_t off = 0;
    float *scratch = xcalloc(max_piece, sizeof(float));
    for (int j = 0; j < c->layers + 2; j++) {
        const size_t n = block_numel(piece(&s, j));
        CHECK(zc_block_gather_master(s.eng, piece(&s, j), lead ? sh->master + off : scratch, n));
        off += n;
    }
    free(scratch);
    free(tok);
    free(tgt);
    s.be->model_destroy(m);
    float *bufs[] = {s.wte, s.wpe, s.dwte, s.dwpe, s.lnfw, s.lnfb, s.dlnfw, s.dlnfb};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) s.be->free(bufs[k]);
    for (int k = 0; k < GPT_BLOCK_TENSORS; k++) {
        s.be->free(s.blk[k]);
        s.be->free(s.gblk[k]);
    }
    s.be->free(s.tok);
    s.be->free(s.tgt);
    zc_block_destroy(s.emb);
    for (int l = 0; l < c->layers; l++) zc_block_destroy(s.layer[l]);
    free(s.layer);
    zc_block_destroy(s.head);
    zc_block_destroy(s.wte_only);
    free(s.P);
    free(s.numel);
    free(s.ck);
    if (lead) {
        sh->stats0 = (zc_stats){.size = sizeof(zc_stats)};
        CHECK(zc_engine_stats(s.eng, &sh->stats0));
        sh->act0 = (zc_act_stats){.size = sizeof(zc_act_stats)};
        CHECK(zc_engine_act_stats(s.eng, &sh->act0));
    }
    rank_engine = NULL;
    zc_engine_destroy(s.eng);
    atomic_fetch_sub(&live_engines, 1);
    s.be->stream_destroy(s.stream);
    return NULL;
}

/* The final line's activation figures: the mode, this program's own
 * activation buffers per rank (model.c's table), the store's reservation by
 * kind (rank 0's engine, ZC_MEM_ACTIVATIONS) and what it did. */
static const char *act_json(const shared *sh)
{
    static char buf[1024];
    static const char *const home[] = {"device", "cpu", "nvme"};
    const gpt_opts *o = &sh->o;
    const zc_act_stats *a = &sh->act0;
    const int64_t(*k)[ZC_MEM__COUNT] = sh->stats0.bytes_by_kind_cat;
    uint64_t mine = 0;
    (void)gpt_acts_bytes(&o->model, o->batch, o->ckpt, &mine);
    snprintf(buf, sizeof buf,
             "\"checkpoint_activations\":\"%s\",\"checkpoint_offload\":%s%s%s,"
             "\"model_activation_bytes\":%llu,\"act_store\":{\"device\":%lld,\"pinned\":%lld,"
             "\"nvme\":%lld,\"saves\":%lld,\"restores\":%lld,\"restore_hits\":%lld,"
             "\"restore_misses\":%lld,\"nvme_write_bytes\":%lld,\"nvme_read_bytes\":%lld,"
             "\"save_s\":%s,\"restore_s\":%s,\"restore_wait_s\":%s}",
             o->ckpt ? "block" : "none", o->ckpt ? "\"" : "",
             o->ckpt ? home[o->ckpt_offload] : "null", o->ckpt ? "\"" : "",
             (unsigned long long)mine, (long long)k[ZC_KIND_DEVICE][ZC_MEM_ACTIVATIONS],
             (long long)k[ZC_KIND_PINNED][ZC_MEM_ACTIVATIONS],
             (long long)k[ZC_KIND_NVME][ZC_MEM_ACTIVATIONS], (long long)a->saves,
             (long long)a->restores, (long long)a->restore_hits, (long long)a->restore_misses,
             (long long)a->nvme_write_bytes, (long long)a->nvme_read_bytes, jnum(a->save_s).s,
             jnum(a->restore_s).s, jnum(a->restore_wait_s).s);
    return buf;
}

static void report(const shared *sh, size_t total, bool lead_here)
{
    const gpt_opts *o = &sh->o;
    if (!lead_here) return;
    /* Little-endian bytes in registration order, whatever the host order. */
    uint8_t *bytes = xcalloc(total, 4);
    for (size_t i = 0; i < total; i++) {
        uint32_t u;
        memcpy(&u, &sh->master[i], 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
    sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, bytes, total * 4);
    sha256_final_hex(&c, hex);
    free(bytes);
    const int64_t *pk = sh->stats0.peak_bytes_by_kind;
    if (o->json)
        printf("{\"final\":true,\"params_sha256\":\"%s\",\"num_params\":%zu,\"val_loss\":%s,"
               "\"unigram_entropy\":%s,\"stage\":%d,\"world\":%d,\"dtype\":\"%s\","
               "\"device\":\"%s\",\"cpu_threads\":%d,"
               "\"peak_bytes\":{\"device\":%lld,\"pinned\":%lld,"
               "\"host\":%lld,\"nvme\":%lld},\"placement\":{\"optimizer\":[%lld,%lld,%lld],"
               "\"params\":[%lld,%lld,%lld]},"
               "\"comm_bytes_per_step_by_link\":{\"intra_node\":%lld,\"inter_node\":%lld},"
               "\"nodes\":%d,%s}\n",
               hex, total, jnum(sh->val_loss).s, jnum(sh->unigram_val).s, sh->stats0.stage,
               sh->world,
               zc_dtype_name(o->dtype), sh->be->name, sh->cpu_threads,
               (long long)pk[ZC_KIND_DEVICE],
               (long long)pk[ZC_KIND_PINNED], (long long)pk[ZC_KIND_HOST],
               (long long)pk[ZC_KIND_NVME], (long long)sh->stats0.opt_chunks_by_place[0],
               (long long)sh->stats0.opt_chunks_by_place[1],
               (long long)sh->stats0.opt_chunks_by_place[2],
               (long long)sh->stats0.param_chunks_by_place[0],
               (long long)sh->stats0.param_chunks_by_place[1],
               (long long)sh->stats0.param_chunks_by_place[2],
               (long long)sh->stats0.comm_bytes_last_step_by_link[ZC_LINK_INTRA_NODE],
               (long long)sh->stats0.comm_bytes_last_step_by_link[ZC_LINK_INTER_NODE],
               sh->stats0.nodes, act_json(sh));
    else
        printf("\nval_loss %.4f nats/byte; unigram entropy of the validation bytes %.4f\n"
               "%zu parameters, ZeRO stage %d, %d ranks, %s; fp32 master sha256 %s\n",
               sh->val_loss, sh->unigram_val, total, sh->stats0.stage, sh->world,
               zc_dtype_name(o->dtype), hex);
}

/* Whether a launcher started this process as one rank of a job: mpirun
 * (Open MPI, MPICH/hydra, MVAPICH2) or torchrun. Not Slurm's variables,
 * which every program of a batch allocation inherits: srun users say
 * --launcher env. (The rule of train_mlp's --launcher auto.) */
static bool launched(void)
{
    /* Rank or size, as zc_comm_init_env recognises a launcher: a job with
     * only one of the two set is that call's error to name, not a run of
     * this process alone. */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                       "PMI_SIZE", "PMI_RANK", "MV2_COMM_WORLD_SIZE",
                                       "MV2_COMM_WORLD_RANK", "WORLD_SIZE", "RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    shared *sh = xcalloc(1, sizeof *sh);
    sh->o = gpt_parse_args(argc, argv);
    gpt_opts *o = &sh->o;
    const int rank = -1; /* for CHECK in the main thread */
    char err[512];

    zc_comm *env_comm = NULL;
    const bool per_process =
        o->launcher == GPT_LAUNCH_ENV || (o->launcher == GPT_LAUNCH_AUTO && launched());
    if (per_process) {
        CHECK(zc_comm_init_env(&env_comm));
        sh->world = zc_comm_world(env_comm);
        sh->local = 1;
        if ((o->given & GPT_GIVEN_WORLD) && o->world != sh->world) {
            fprintf(stderr, "train_gpt: --world %d but the launcher started %d ranks\n",
                    o->world, sh->world);
            gpt_quit(2);
        }
    } else {
        sh->world = sh->local = o->world;
    }
    sh->cfg = gpt_make_config(o, sh->world);
    sh->be = &gpt_backend_cpu;
    if (o->cuda) {
#ifdef GPT_HAVE_CUDA
        /* Loaded only now: a CPU run maps no CUDA library (cuda_module.h). */
        sh->be = gpt_backend_cuda_load(err, sizeof err);
        if (!sh->be) {
            fprintf(stderr, "train_gpt: --device cuda: %s\n", err);
            gpt_quit(2);
        }
#else
        fprintf(stderr, "train_gpt: --device cuda: this build has no CUDA (meson found no CUDA "
                "toolkit or cuBLAS)\n");
        gpt_quit(2);
#endif
    }

    if (o->tokens_path ? !gpt_data_load_tokens(&sh->data, o->tokens_path, o->model.seq,
                                               o->model.vocab, err, sizeof err)
                       : !gpt_data_load(&sh->data, o->data_path, o->model.seq, err, sizeof err)) {
        fprintf(stderr, "train_gpt: %s\n", err);
        gpt_quit(1);
    }
    sh->data.sequential = o->sequential;
    sh->data.accum = o->accum;
    sh->data.global_batch = (int64_t)o->batch * sh->world;
    sh->unigram_val = gpt_data_unigram_entropy(&sh->data, sh->data.n_train, sh->data.n);

    /* Host memory, planned before any rank starts (memplan.h): each rank's
     * engine by the library's planner, plus this program's activations and
     * buffers. Allocations are overcommitted, so a plan that does not fit
     * would otherwise end in the OOM killer, not in a message. */
    const gpt_config *c = &o->model;
    gpt_mem_plan mp;
    uint64_t avail = 0;
    char why[1024];
    if (!gpt_mem_plan_make(o, sh->cfg, sh->world, sh->local, &mp, why, sizeof why)) {
        fprintf(stderr, "train_gpt: %s\n", why);
        gpt_quit(2);
    }
    if (zc__mem_available(&avail) && !gpt_mem_plan_fits(&mp, avail, why, sizeof why)) {
        fprintf(stderr, "train_gpt: %s\n", why);
        gpt_quit(1);
    }
    if (o->json && (per_process ? zc_comm_rank(env_comm) == 0 : true)) {
        char line[800];
        gpt_mem_plan_json(&mp, line, sizeof line);
        printf("%s\n", line);
        fflush(stdout);
    }
    /* Ranks as threads: each rank's matmuls run single-threaded in its own
     * thread, so the ranks do not fight over one BLAS thread pool. Ranks as
     * processes: the machine's CPUs are split between the ones on it. */
    if (!o->cuda && sh->local > 1)
        openblas_set_num_threads(1);
    else if (!o->cuda && per_process)
        size_process_blas(zc_comm_local_size(env_comm));
    sh->cpu_threads = o->cuda ? 0 : openblas_get_num_threads();

    const size_t total = gpt_num_params(c);
    sh->master = xcalloc(total, sizeof(float));
    sh->comms = xcalloc((size_t)sh->local, sizeof(zc_comm *));
    if (per_process) {
        sh->comms[0] = env_comm;
    } else {
        CHECK(zc_comm_local_world(sh->world, sh->comms));
    }
    bool lead_here = zc_comm_rank(sh->comms[0]) == 0;
    if (lead_here && !o->json)
        printf("train_gpt: %zu parameters (%d layers, %d heads, dim %d, seq %d, vocab %d), "
               "ZeRO stage %s, %d ranks, %s, %d steps x %d micro-steps of %d sequences per "
               "rank; data %s (%zu %s, last %zu held out)\n",
               total, c->layers, c->heads, c->dim, c->seq, c->vocab,
               o->stage < 0 ? "auto" : (const char[2]){(char)('0' + o->stage), 0}, sh->world,
               zc_dtype_name(o->dtype), o->steps, o->accum, o->batch,
               o->tokens_path ? o->tokens_path : o->data_path, sh->data.n,
               o->tokens_path ? "tokens" : "bytes", sh->data.n - sh->data.n_train);

    pthread_t *th = xcalloc((size_t)sh->local, sizeof(pthread_t));
    rank_arg *args = xcalloc((size_t)sh->local, sizeof(rank_arg));
    for (int r = 0; r < sh->local; r++) {
        args[r] = (rank_arg){sh, r};
        int e = pthread_create(&th[r], NULL, rank_main, &args[r]);
        if (e != 0) {
            fprintf(stderr, "train_gpt: cannot start rank thread %d: %s\n", r, strerror(e));
            gpt_quit(1);
        }
    }
    for (int r = 0; r < sh->local; r++) pthread_join(th[r], NULL);
    report(sh, total, lead_here);
    if (lead_here && o->export_path) {
        if (!gpt_hf_export(o->export_path, c, sh->master, err, sizeof err)) {
            fprintf(stderr, "train_gpt: %s\n", err);
            gpt_quit(1);
        }
        if (!o->json)
            printf("exported the model to %s\n", o->export_path);
    }

    for (int r = 0; r < sh->local; r++) zc_comm_destroy(sh->comms[r]);
    zc_config_destroy(sh->cfg);
    gpt_data_destroy(&sh->data);
    free(th); free(args); free(sh->comms); free(sh->master);
    free(sh);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "train_gpt: cannot write the output: %s\n",
                errno ? strerror(errno) : "write error");
        return 1;
    }
    return 0;
}
