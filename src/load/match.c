/* Which tensor of the set fills which parameter (import.h).
 *
 * Each tensor is looked up in the caller's table, then asked of the
 * callback, then matched by its exact name; a tensor that maps to nothing is
 * an extra (refused unless allow_extra), one marked skip is left alone. Then
 * every parameter must have exactly one tensor, of its shape (transposed:
 * the swapped 2-D shape) and of a dtype that loads. Nothing here reads a
 * payload, so a refusal leaves the engine as it was. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/import.h"

void zc__ld_match_free(zc_ld_match *m)
{
    free(m->tensor);
    free(m->transposed);
    memset(m, 0, sizeof *m);
}

static void shape_text(const int64_t *sh, int nd, char *b, size_t cap)
{
    size_t n = (size_t)snprintf(b, cap, "[");
    for (int d = 0; d < nd && n < cap; d++)
        n += (size_t)snprintf(b + n, cap - n, "%s%" PRId64, d ? ", " : "", sh[d]);
    if (n < cap)
        snprintf(b + n, cap - n, "]");
}

static int param_index(const zc_engine *e, const char *name)
{
    for (int i = 0; i < e->nparams; i++)
        if (!strcmp(e->params[i]->name, name))
            return i;
    return -1;
}

/* The parameter tensor t goes to (-1: none; *skip: deliberately none). */
static zc_status lookup(const zc_engine *e, const zc_st_set *set, const zc_load_options *o,
                        int64_t t, int *param, bool *transposed, bool *skip)
{
    const zc_st_tensor *x = &set->tensors[t];
    const char *file = set->files[x->file].path;
    *param = -1;
    *transposed = *skip = false;
    for (int i = 0; i < o->n_names; i++) {
        const zc_load_name *n = &o->names[i];
        if (!n->file_name || strcmp(n->file_name, x->name))
            continue;
        if (!n->param_name) {
            *skip = true;
            return ZC_OK;
        }
        if ((*param = param_index(e, n->param_name)) < 0)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s': the names table maps it to "
                          "'%s', which is not a parameter of the engine", file, x->name,
                          n->param_name);
        *transposed = n->transposed;
        return ZC_OK;
    }
    if (o->map) {
        char name[1024] = "";
        bool tr = false;
        const zc_load_map_result r =
            o->map(o->map_user, x->name, x->shape, x->ndim, name, sizeof name, &tr);
        if (r == ZC_LOAD_SKIP) {
            *skip = true;
            return ZC_OK;
        }
        if (r == ZC_LOAD_MAPPED) {
            name[sizeof name - 1] = '\0';
            if ((*param = param_index(e, name)) < 0)
                return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s': the name map maps it to "
                              "'%s', which is not a parameter of the engine", file, x->name,
                              name);
            *transposed = tr;
            return ZC_OK;
        }
        if (r != ZC_LOAD_UNMAPPED)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s': the name map returned %d, not "
                          "a zc_load_map_result", file, x->name, (int)r);
    }
    *param = param_index(e, x->name);
    return ZC_OK;
}

/* The tensor's shape against the parameter's. */
static zc_status check_shape(const zc_st_set *set, int64_t t, const zc_param *p, bool tr)
{
    const zc_st_tensor *x = &set->tensors[t];
    const char *file = set->files[x->file].path;
    char a[200], b[200];
    shape_text(x->shape, x->ndim, a, sizeof a);
    shape_text(p->shape, p->ndim, b, sizeof b);
    if (tr && (x->ndim != 2 || p->ndim != 2))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' has shape %s and parameter '%s' %s: "
                      "only a 2-D tensor loads transposed into a 2-D parameter", file, x->name,
                      a, p->name, b);
    const bool same = tr ? x->shape[0] == p->shape[1] && x->shape[1] == p->shape[0]
                         : x->ndim == p->ndim &&
                               !memcmp(x->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    if (!same)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' has shape %s (%" PRId64 " elements)%s, "
                      "parameter '%s' has %s (%" PRId64 " elements)", file, x->name, a, x->numel,
                      tr ? ", loaded transposed" : "", p->name, b, p->numel);
    if ((int)x->dtype < 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' has dtype %s: only F32, BF16 and F16 "
                      "load into parameters", file, x->name, x->dtype_name);
    return ZC_OK;
}

zc_status zc__ld_match(const zc_engine *e, const zc_st_set *set, const zc_load_options *o,
                       const char *where, zc_ld_match *m)
{
    memset(m, 0, sizeof *m);
    m->tensor = malloc((size_t)(e->nparams ? e->nparams : 1) * sizeof *m->tensor);
    m->transposed = calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *m->transposed);
    if (!m->tensor || !m->transposed) {
        zc__ld_match_free(m);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: a map of %d parameters",
                      e->nparams);
    }
    for (int i = 0; i < e->nparams; i++)
        m->tensor[i] = -1;
    zc_status rc = ZC_OK;
    for (int64_t t = 0; t < set->ntensors && rc == ZC_OK; t++) {
        int pi;
        bool tr, skip;
        rc = lookup(e, set, o, t, &pi, &tr, &skip);
        if (rc != ZC_OK)
            break;
        const zc_st_tensor *x = &set->tensors[t];
        if (skip || (pi < 0 && o->allow_extra)) {
            m->skipped++;
            continue;
        }
        if (pi < 0) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' is not a parameter of the engine "
                        "(%" PRId64 " tensors in %s, %d parameters registered): map its name, "
                        "or allow extra tensors", set->files[x->file].path, x->name,
                        set->ntensors, where, e->nparams);
            break;
        }
        if (m->tensor[pi] >= 0) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensors '%s' and '%s' both map to parameter '%s'",
                        where, set->tensors[m->tensor[pi]].name, x->name, e->params[pi]->name);
            break;
        }
        rc = check_shape(set, t, e->params[pi], tr);
        m->tensor[pi] = t;
        m->transposed[pi] = tr;
        m->loaded++;
    }
    for (int i = 0; i < e->nparams && rc == ZC_OK; i++)
        if (m->tensor[i] < 0)
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: no tensor for parameter '%s' (the engine's "
                        "parameter %d): the file is missing it, or its name maps elsewhere",
                        where, e->params[i]->name, i);
    if (rc != ZC_OK)
        zc__ld_match_free(m);
    return rc;
}
