/* zc_load_list: the tensors of a safetensors file or set (zeroc.h). */
#include "load/load.h"

ZC_API zc_status zc_load_list(const char *path,
                              int (*fn)(void *user, const zc_load_tensor *tensor), void *user)
{
    zc__error_clear();
    if (!fn)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_list: fn is NULL");
    zc_st_set set;
    ZC_CHECK(zc__st_set_open(&set, path));
    for (int64_t i = 0; i < set.ntensors; i++) {
        const zc_st_tensor *t = &set.tensors[i];
        zc_load_tensor x = {.name = t->name, .dtype = t->dtype_name, .ndim = t->ndim,
                            .numel = t->numel, .file = set.files[t->file].path};
        for (int d = 0; d < t->ndim; d++)
            x.shape[d] = t->shape[d];
        if (fn(user, &x))
            break;
    }
    zc__st_set_free(&set);
    return ZC_OK;
}
