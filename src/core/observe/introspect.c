/* Read-only questions about registered parameters (zc_param_name ... and
 * lookups by index and name). Registration and build never move or rename a
 * parameter, so these need no lock once registration is over; they validate
 * their handles and answer a sentinel for bad ones instead of failing. */
#include <string.h>

#include "core/engine.h"

static bool param_ok(const zc_param *p)
{
    return p && p->magic == ZC_PARAM_MAGIC;
}

static bool engine_ok(const zc_engine *e)
{
    return e && e->magic == ZC_ENGINE_MAGIC;
}

ZC_API const char *zc_param_name(const zc_param *p)
{
    return param_ok(p) ? p->name : NULL;
}

ZC_API int64_t zc_param_numel(const zc_param *p)
{
    return param_ok(p) ? p->numel : -1;
}

ZC_API int zc_param_shape(const zc_param *p, int64_t *shape, int cap)
{
    if (!param_ok(p) || cap < 0 || (cap > 0 && !shape))
        return -1;
    for (int i = 0; i < p->ndim && i < cap; i++)
        shape[i] = p->shape[i];
    return p->ndim;
}

ZC_API int zc_param_group(const zc_param *p)
{
    return param_ok(p) ? p->group : -1;
}

ZC_API zc_dtype zc_param_dtype(const zc_param *p)
{
    return param_ok(p) && engine_ok(p->eng) ? p->eng->pdt : ZC_DTYPE_INVALID;
}

ZC_API int zc_param_count(const zc_engine *e)
{
    return engine_ok(e) ? e->nparams : -1;
}

ZC_API zc_param *zc_param_at(const zc_engine *e, int index)
{
    if (!engine_ok(e) || index < 0 || index >= e->nparams)
        return NULL;
    return e->params[index];
}

ZC_API zc_param *zc_param_find(const zc_engine *e, const char *name)
{
    if (!engine_ok(e) || !name)
        return NULL;
    /* Linear: a lookup by name is for setup code, not the training loop. */
    for (int i = 0; i < e->nparams; i++)
        if (!strcmp(e->params[i]->name, name))
            return e->params[i];
    return NULL;
}
