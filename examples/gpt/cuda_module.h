/* train_gpt's CUDA backend as a module, libgpt_cuda.so, that train_gpt
 * loads only for --device cuda (backend_cuda_load.c), so a CPU run maps
 * neither the CUDA runtime nor cuBLAS (src/cuda_plugin/abi.h has the same
 * reasoning for the library). The module holds backend_cuda.c, model_cuda.c
 * and the .cu layers, linked against cudart and cuBLAS; it does not link the
 * CPU model (model.c and the BLAS it pulls in), so the few functions of
 * model.h the CUDA model calls come from train_gpt through gpt_cuda_host.
 *
 * The handshake: the entry's name carries the version (_v1), and the entry
 * checks that the two sides agree on the sizes of what they share and that
 * the CUDA runtime and cuBLAS the loader found are no older than the
 * headers the module was built with. */
#ifndef GPT_CUDA_MODULE_H
#define GPT_CUDA_MODULE_H

#include <stddef.h>

#include "backend.h"
#include "model.h"

#define GPT_CUDA_MODULE_FILE "libgpt_cuda.so"
#define GPT_CUDA_MODULE_ENTRY "gpt_cuda_module_open_v1"

typedef struct gpt_cuda_host {
    size_t backend_size, config_size, acts_size; /* as train_gpt was compiled */
    __typeof__(&gpt_acts_create) acts_create;
    __typeof__(&gpt_acts_destroy) acts_destroy;
    __typeof__(&gpt_num_tensors) num_tensors;
    __typeof__(&gpt_tensor_info) tensor_info;
} gpt_cuda_host;

/* The module's entry: 0 and *backend (static; the module is never
 * unloaded), or -1 and the reason in err. */
typedef int (*gpt_cuda_module_entry_fn)(const gpt_cuda_host *host, const gpt_backend **backend,
                                        char *err, size_t errlen);

/* In train_gpt: loads libgpt_cuda.so - beside train_gpt, else through the
 * dynamic loader's search (RUNPATH: scripts/gpu_bundle.sh's
 * $ORIGIN/../lib; LD_LIBRARY_PATH) - and returns its backend, or NULL with
 * a message naming the library that is missing and how to get it. */
const gpt_backend *gpt_backend_cuda_load(char *err, size_t errlen);

#endif
