/* The registry: parameter groups, parameters and chunk boundaries, as the
 * caller registers them between zc_engine_create and zc_engine_build. The
 * layout (layout.c) packs what is registered here into chunks at build. */
#include <string.h>

#include "core/engine.h"

zc_status zc__registry_init(zc_engine *e)
{
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, 4 * sizeof(zc_group), "groups", &mem));
    e->groups = mem;
    e->groups_cap = 4;
    e->groups[0] = (zc_group){e->cfg->optimizer.weight_decay, 1.0};
    e->ngroups = 1;
    return ZC_OK;
}

void zc__registry_free(zc_engine *e)
{
    for (int i = 0; i < e->nparams; i++) {
        zc_param *p = e->params[i];
        zc__host_free(&e->acct, ZC_MEM_OTHER, p->name, p->name_bytes);
        p->magic = 0;
        zc__host_free(&e->acct, ZC_MEM_OTHER, p, sizeof *p);
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->params, (size_t)e->params_cap * sizeof *e->params);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->groups, (size_t)e->groups_cap * sizeof *e->groups);
}

/* Grows a host array of elem-sized items to hold at least need items. */
static zc_status grow(zc_engine *e, void **arr, int *cap, int need, size_t elem, const char *what)
{
    if (need <= *cap)
        return ZC_OK;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *n = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)ncap * elem, what, &n));
    if (*arr)
        memcpy(n, *arr, (size_t)*cap * elem);
    zc__host_free(&e->acct, ZC_MEM_OTHER, *arr, (size_t)*cap * elem);
    *arr = n;
    *cap = ncap;
    return ZC_OK;
}

ZC_API zc_status zc_group_add(zc_engine *e, double weight_decay, double lr_scale, int *group_id)
{
    ZC_CHECK(zc__eng_enter(e, "zc_group_add", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_group_add: groups must be added before "
                                            "zc_engine_build");
    if (!group_id)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_group_add: group_id is NULL");
    if (!(weight_decay >= 0) || !(lr_scale >= 0) || weight_decay > 1e30 || lr_scale > 1e30)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_group_add: weight_decay %g and lr_scale %g must be finite and >= 0",
                      weight_decay, lr_scale);
    void *arr = e->groups;
    ZC_CHECK(grow(e, &arr, &e->groups_cap, e->ngroups + 1, sizeof(zc_group), "groups"));
    e->groups = arr;
    e->groups[e->ngroups] = (zc_group){weight_decay, lr_scale};
    *group_id = e->ngroups++;
    return ZC_OK;
}

/* zc_param_add_status; zc_param_add is it without the status. */
static zc_status param_add(zc_engine *e, const char *name, const int64_t *shape, int ndim,
                           int group, zc_param **out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_param_add", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_param_add('%s'): parameters must be added before zc_engine_build",
                      name ? name : "(null)");
    if (!name || !*name)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add: name is NULL or empty");
    if (!shape || ndim < 1 || ndim > ZC_PARAM_MAX_NDIM)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_param_add('%s'): ndim %d must be 1..%d with a shape", name, ndim,
                      ZC_PARAM_MAX_NDIM);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_param_add('%s'): dimension %d is %lld; every dimension must be "
                          "> 0",
                          name, d, (long long)shape[d]);
        if (numel > INT64_MAX / 4 / shape[d])
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add('%s'): shape is too large", name);
        numel *= shape[d];
    }
    /* Every size derived from the model (padded totals, fp32 and Adam bytes,
     * stats) is int64: bound the sum like a single parameter. */
    if (numel > INT64_MAX / 4 - e->registered_elems)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_param_add('%s'): %lld elements on top of the %lld registered exceed "
                      "the engine's limit of %lld elements in all",
                      name, (long long)numel, (long long)e->registered_elems,
                      (long long)(INT64_MAX / 4));
    if (group < 0 || group >= e->ngroups)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_param_add('%s'): unknown group %d (this engine has %d; see "
                      "zc_group_add)",
                      name, group, e->ngroups);
    for (int i = 0; i < e->nparams; i++)
        if (!strcmp(e->params[i]->name, name))
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_param_add: a parameter named '%s' already exists", name);

    void *arr = e->params;
    ZC_CHECK(grow(e, &arr, &e->params_cap, e->nparams + 1, sizeof(zc_param *), "param table"));
    e->params = arr;
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, sizeof(zc_param), "param", &mem));
    zc_param *p = mem;
    size_t nb = strlen(name) + 1;
    zc_status rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, nb, "param name", &mem);
    if (rc != ZC_OK) {
        zc__host_free(&e->acct, ZC_MEM_OTHER, p, sizeof *p);
        return rc;
    }
    memcpy(mem, name, nb);
    p->name = mem;
    p->name_bytes = nb;
    p->magic = ZC_PARAM_MAGIC;
    p->eng = e;
    memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->ndim = ndim;
    p->numel = numel;
    p->group = group;
    p->index = e->nparams;
    p->chunk_start = e->boundary_pending;
    p->chunk = -1;
    e->boundary_pending = false;
    e->registered_elems += numel;
    e->params[e->nparams++] = p;
    *out = p;
    return ZC_OK;
}

ZC_API zc_status zc_param_add_status(zc_engine *e, const char *name, const int64_t *shape,
                                     int ndim, int group, zc_param **out)
{
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add_status: out is NULL");
    *out = NULL;
    return param_add(e, name, shape, ndim, group, out);
}

ZC_API zc_param *zc_param_add(zc_engine *e, const char *name, const int64_t *shape, int ndim,
                              int group)
{
    zc_param *p = NULL;
    return param_add(e, name, shape, ndim, group, &p) == ZC_OK ? p : NULL;
}

ZC_API zc_status zc_chunk_boundary(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_chunk_boundary", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_chunk_boundary: chunk boundaries must be set before zc_engine_build");
    e->boundary_pending = true;
    return ZC_OK;
}
