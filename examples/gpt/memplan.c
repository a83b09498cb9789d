/* train_gpt's memory pre-check (memplan.h).
 *
 * Every allocation is overcommitted, so a run that does not fit would end in
 * the OOM killer minutes into its first step, not in a message. Before any
 * rank starts, the process's peak host memory is planned: each rank's
 * engine from the library's planner, fed the tensors and chunk boundaries
 * rank_main registers (the same plan `zeroc estimate --model gpt:...
 * --chunks per-block` prints and zc_engine_build checks), plus what this
 * program allocates itself, counted from the same sizes it allocates. */
#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static bool add(uint64_t *acc, uint64_t v) { return !__builtin_add_overflow(*acc, v, acc); }

static bool mul(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

/* The engine's plan for the model as rank_main registers it: a chunk
 * boundary before each piece but the first (one chunk set per block). */
static bool plan_engine(const gpt_opts *o, const zc_config *cfg, int world, zc_memory_plan *out,
                        char *err, size_t errlen)
{
    const gpt_config *c = &o->model;
    const int nt = gpt_num_tensors(c);
    zc_plan_tensor *t = calloc((size_t)nt, sizeof *t);
    int64_t (*shapes)[2] = calloc((size_t)nt, sizeof *shapes);
    if (!t || !shapes) {
        free(t);
        free(shapes);
        snprintf(err, errlen, "out of memory planning %d tensors", nt);
        return false;
    }
    int last_piece = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        size_t numel = 0;
        int ndim = 0, piece = 0;
        gpt_tensor_info(c, i, name, shapes[i], &ndim, &numel, &piece);
        t[i] = (zc_plan_tensor){shapes[i], ndim, piece != last_piece};
        last_piece = piece;
    }
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = o->cuda ? ZC_DEVICE_CUDA : ZC_DEVICE_HOST;
    /* --checkpoint-activations block: the activation store rank_main
     * reserves, one block input per block but the last. */
    if (o->ckpt && gpt_ckpt_blocks(c) > 0) {
        eo.act_checkpoints = gpt_ckpt_blocks(c);
        eo.act_checkpoint_bytes = (int64_t)gpt_block_input_bytes(c, o->batch);
    }
    out->size = sizeof *out;
    zc_status rc = zc_plan_memory(cfg, world, t, nt, &eo, out);
    if (rc != ZC_OK)
        snprintf(err, errlen, "planning the engine's memory: %s", zc_last_error());
    free(t);
    free(shapes);
    return rc == ZC_OK;
}

/* rank_main's own buffers (backend memory): fp32 copies of the embedding
 * (wte, wpe) and their gradients, of one block's tensors and their
 * gradients, of the final LayerNorm and its gradient; the token and target
 * ids in backend memory and on the host. */
static bool rank_buffers(const gpt_config *c, int B, uint64_t *out)
{
    const int nt = gpt_num_tensors(c);
    uint64_t floats = 0, ints = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        size_t numel = 0;
        int ndim = 0, piece = 0;
        gpt_tensor_info(c, i, name, shape, &ndim, &numel, &piece);
        /* the embedding, block 0 (every block is the same size) and lnf */
        if ((piece == 0 || piece == 1 || piece == c->layers + 1) && !add(&floats, 2 * numel))
            return false;
    }
    return mul((uint64_t)B * 4, (uint64_t)c->seq, &ints) && add(&floats, ints) &&
           mul(floats, sizeof(float), out);
}

bool gpt_mem_plan_make(const gpt_opts *o, const zc_config *cfg, int world, int local,
                       gpt_mem_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->local = local;
    p->host_model = !o->cuda;
    if (!plan_engine(o, cfg, world, &p->engine, err, errlen))
        return false;
    const gpt_config *c = &o->model;
    uint64_t sample = 0, one = 0, per_rank = 0, training = 0, tail = 0;
    bool ok = gpt_acts_bytes(c, o->batch, o->ckpt, &p->acts) &&
              rank_buffers(c, o->batch, &p->bufs) &&
              mul(gpt_num_params(c), sizeof(float), &p->master);
    /* --sample: a second model of one sequence, alive beside the first, and
     * a row of probabilities on the host. */
    if (ok && o->sample > 0)
        ok = gpt_acts_bytes(c, 1, o->ckpt, &sample) && add(&sample, 4 * (uint64_t)c->vocab) &&
             add(&p->acts, sample);
    const int64_t *k = p->engine.bytes_by_kind;
    /* On the host path the engine's "device" buffers are host memory (the
     * plan reports them as ZC_KIND_DEVICE, as a GPU's); pinned is host memory. */
    ok = ok && add(&one, (uint64_t)k[ZC_KIND_HOST]) && add(&one, (uint64_t)k[ZC_KIND_PINNED]) &&
         (!p->engine.host_device || add(&one, (uint64_t)k[ZC_KIND_DEVICE])) &&
         mul(one, (uint64_t)local, &p->engine_host);
    /* The model's memory is host memory on the CPU only. */
    if (ok && p->host_model)
        ok = add(&per_rank, p->acts) && add(&per_rank, p->bufs);
    ok = ok && mul(per_rank, (uint64_t)local, &training) && add(&training, p->engine_host) &&
         add(&training, p->master);
    /* At the end the engines are gone; report() hashes a little-endian copy
     * of the master. */
    ok = ok && mul(p->master, 2, &tail);
    if (!ok) {
        snprintf(err, errlen, "the model and batch sizes overflow a memory estimate");
        return false;
    }
    p->host = training > tail ? training : tail;
    /* The import's rings (zc_load_options.ring_bytes left at its 32 MiB). */
    p->import_ring = o->init_from ? ((uint64_t)32 << 20) * (uint64_t)local : 0;
    if (p->engine_host + p->import_ring > p->host)
        p->host = p->engine_host + p->import_ring;
    return true;
}

bool gpt_mem_plan_fits(const gpt_mem_plan *p, uint64_t avail, char *err, size_t errlen)
{
    if (p->host <= avail)
        return true;
    const int64_t *k = p->engine.bytes_by_kind;
    char model[200] = " (the model's own memory is on the device)";
    if (p->host_model)
        snprintf(model, sizeof model, ", and the model %.2f GiB of activations and %.2f GiB of "
                 "weight and gradient copies", gib(p->acts), gib(p->bufs));
    snprintf(err, errlen,
             "not enough host memory: %d rank%s need %.2f GiB at the peak; %.2f GiB are "
             "available (MemAvailable). Per rank the engine plans %.2f GiB of pageable%s and "
             "%.2f GiB of pinned host memory (zc_plan_memory; its %.2f GiB of NVMe swap are "
             "checked by zc_engine_build)%s; the gathered fp32 master takes %.2f GiB once. Use a "
             "smaller --batch, --seq or model, more ranks at stage 3, or offload "
             "(zero_optimization.offload_optimizer and, at stage 3, offload_param with device "
             "\"nvme\" and max_in_cpu 0)",
             p->local, p->local == 1 ? "" : "s", gib(p->host), gib(avail),
             gib((uint64_t)k[ZC_KIND_HOST] +
                 (p->engine.host_device ? (uint64_t)k[ZC_KIND_DEVICE] : 0)),
             p->engine.host_device ? " (its device buffers included)" : "",
             gib((uint64_t)k[ZC_KIND_PINNED]), gib((uint64_t)k[ZC_KIND_NVME]), model,
             gib(p->master));
    return false;
}

void gpt_mem_plan_json(const gpt_mem_plan *p, char *buf, size_t cap)
{
    const int64_t *k = p->engine.bytes_by_kind;
    snprintf(buf, cap,
             "{\"plan\":{\"ranks\":%d,\"engine_per_rank\":{\"device\":%lld,\"pinned\":%lld,"
             "\"host\":%lld,\"nvme\":%lld},\"grad_buffers_per_rank\":%lld,\"chunks\":%lld,"
             "\"activations_per_rank\":%llu,\"buffers_per_rank\":%llu,\"master\":%llu,"
             "\"import_ring\":%llu,\"host_peak\":%llu,\"act_store_per_rank\":{\"device\":%lld,"
             "\"pinned\":%lld,\"nvme\":%lld}}}",
             p->local, (long long)k[ZC_KIND_DEVICE], (long long)k[ZC_KIND_PINNED],
             (long long)k[ZC_KIND_HOST], (long long)k[ZC_KIND_NVME],
             (long long)p->engine.grad_buffer_bytes, (long long)p->engine.num_chunks,
             (unsigned long long)(p->host_model ? p->acts : 0),
             (unsigned long long)(p->host_model ? p->bufs : 0),
             (unsigned long long)p->master, (unsigned long long)p->import_ring,
             (unsigned long long)p->host,
             (long long)p->engine.bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_ACTIVATIONS],
             (long long)p->engine.bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_ACTIVATIONS],
             (long long)p->engine.bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_ACTIVATIONS]);
}
