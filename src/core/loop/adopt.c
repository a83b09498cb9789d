/* Adopted storage: a block of consecutive parameters registered over the
 * caller's memory, which its chunk then uses in place as the working
 * parameters (stages 0-2 on the host device).
 *
 * The block becomes exactly one chunk (a boundary before it and after it, no
 * bucket split inside), so the chunk layout guarantee (zeroc.h) makes the
 * caller's array and the chunk the same memory. The memory must also hold
 * the chunk's padding (world * ZC_CHUNK_ALIGN elements at most), because
 * stages 1/2 all-gather the full padded chunk in place. Only the working
 * copy is adopted: the fp32 master, m and v stay in the chunk's optimizer
 * home (device, cpu or nvme offload, opt_state.c), and the optimizer writes
 * the updated working values into the adopted memory as it would into its
 * own. Stage 3 is refused: it keeps only a shard of the working parameters,
 * so there is no full copy to place in the caller's memory. */
#include <string.h>

#include "base/dtype.h"
#include "core/engine.h"

static zc_status padded_bytes(const zc_engine *e, const zc_block *b, int n, size_t *out)
{
    int64_t used = 0;
    for (int i = 0; i < n; i++)
        if (__builtin_add_overflow(used, zc_block_param(b, i)->numel, &used))
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt: the block's size overflows");
    /* The padding rule of layout.c, over the shard group the build will
     * make (MiCS: mics_shard_size ranks). */
    const int64_t shard_world = e->cfg->zero.mics_shard_size > 0
                                    ? e->cfg->zero.mics_shard_size : (int64_t)e->world;
    const int64_t align = shard_world * ZC_CHUNK_ALIGN;
    int64_t padded = 0;
    size_t bytes = 0;
    if (__builtin_add_overflow(used, align - 1, &padded) ||
        __builtin_mul_overflow((size_t)(padded / align * align), e->pesz, &bytes))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt: the block's size overflows");
    *out = bytes;
    return ZC_OK;
}

ZC_API zc_status zc_block_adopt_bytes(zc_engine *e, const zc_block *b, size_t *bytes)
{
    ZC_CHECK(zc__eng_enter(e, "zc_block_adopt_bytes", false));
    const int n = zc_block_size(b);
    if (n < 1 || !bytes)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt_bytes: bad block or NULL bytes");
    if (zc_block_param(b, 0)->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt_bytes: the block is another engine's");
    return padded_bytes(e, b, n, bytes);
}

ZC_API zc_status zc_block_adopt(zc_engine *e, zc_block *b, void *memory, size_t bytes)
{
    ZC_CHECK(zc__eng_enter(e, "zc_block_adopt", false));
    const int n = zc_block_size(b);
    if (n < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt: %p is not a block handle",
                      (const void *)b);
    zc_param *first = zc_block_param(b, 0);
    if (first->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_adopt: the block is another engine's");
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_block_adopt: adopt memory before zc_engine_build (it decides the "
                      "chunks)");
    if (!e->pol->full_params)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_block_adopt: stage %d keeps only a shard of the working parameters, so "
                      "there is no full copy to keep in the caller's memory; load values with "
                      "zc_param_load and use zc_block_base while the block is acquired",
                      e->stage);
    if (strcmp(e->dev->ops->name, "host") != 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_block_adopt: the working parameters live on the %s device; adopting "
                      "caller memory is for the host path",
                      e->dev->ops->name);
    if (!memory || (uintptr_t)memory % e->pesz != 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_block_adopt: memory %p is NULL or not aligned to the %zu-byte %s "
                      "element",
                      memory, e->pesz, zc_dtype_name(e->pdt));
    for (int i = 0; i < n; i++) {
        const zc_param *p = zc_block_param(b, i);
        if (p->index != first->index + i)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_block_adopt: parameter %d of %d ('%s') does not follow '%s' in "
                          "registration order; adopted memory holds consecutive parameters",
                          i, n, p->name, zc_block_param(b, i - 1)->name);
        if (p->adopt_mem || p->adopt_inner)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_block_adopt: parameter '%s' is already in adopted memory", p->name);
    }
    size_t need = 0;
    ZC_CHECK(padded_bytes(e, b, n, &need));
    if (bytes < need)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_block_adopt: %zu bytes given, the block's chunk needs %zu (its "
                      "parameters plus padding to a multiple of world x %d elements: "
                      "zc_block_adopt_bytes)",
                      bytes, need, ZC_CHUNK_ALIGN);
    first->adopt_mem = memory;
    first->adopt_bytes = bytes;
    for (int i = 1; i < n; i++)
        zc_block_param(b, i)->adopt_inner = true;
    return ZC_OK;
}

int zc__adopt_starts_chunk(const zc_engine *e, int i)
{
    const zc_param *p = e->params[i];
    if (p->adopt_mem)
        return 1;
    if (p->adopt_inner)
        return 0;
    const zc_param *prev = i > 0 ? e->params[i - 1] : NULL;
    if (prev && (prev->adopt_mem || prev->adopt_inner))
        return 1;
    return -1;
}

zc_status zc__adopt_load(zc_engine *e)
{
    zc_status rc = ZC_OK;
    float *tmp = NULL;
    size_t tmp_bytes = 0;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (!c->adopted)
            continue;
        /* The padding is zeroc's: zero, as an allocated chunk's is. */
        rc = e->dev->ops->memset0(e->dev, zc__elem(c->param, c->used, e->pesz),
                                  (size_t)(c->padded - c->used) * e->pesz, e->stream);
        for (int i = c->first; i < c->first + c->count && rc == ZC_OK; i++) {
            zc_param *p = e->params[i];
            const size_t bytes = (size_t)p->numel * sizeof(float);
            if (bytes > tmp_bytes) {
                zc__host_free(&e->acct, ZC_MEM_OTHER, tmp, tmp_bytes);
                tmp = NULL;
                tmp_bytes = 0;
                rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, bytes, "adopted values", (void **)&tmp);
                if (rc != ZC_OK)
                    break;
                tmp_bytes = bytes;
            }
            /* Host device (zc_block_adopt checked it): the CPU reads the
             * caller's values, widened to fp32 exactly, and loads them as
             * zc_param_load would (the working copy gets the same bits). */
            const void *src = zc__elem(c->param, p->offset, e->pesz);
            for (int64_t j = 0; j < p->numel; j++)
                tmp[j] = zc__load_f32(src, e->pdt, (size_t)j);
            rc = zc_param_load(e, p, tmp);
        }
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, tmp, tmp_bytes);
    if (rc != ZC_OK)
        zc__error_context("zc_engine_build: loading the values of adopted memory");
    return rc;
}
