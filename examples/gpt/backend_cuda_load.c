/* Loading train_gpt's CUDA backend, libgpt_cuda.so, for --device cuda
 * (cuda_module.h says why it is a module). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_module.h"

static const gpt_cuda_host host = {
    .backend_size = sizeof(gpt_backend),
    .config_size = sizeof(gpt_config),
    .acts_size = sizeof(gpt_acts),
    .acts_create = gpt_acts_create,
    .acts_destroy = gpt_acts_destroy,
    .num_tensors = gpt_num_tensors,
    .tensor_info = gpt_tensor_info,
};

/* What each library the module needs is, for the message when the dynamic
 * loader cannot find it. */
static const struct {
    const char *prefix, *what;
} known_libs[] = {
    {"libcudart.so", "the CUDA runtime (NVIDIA's cuda-cudart package, or the toolkit under "
                     "/usr/local/cuda)"},
    {"libcublasLt.so", "cuBLASLt, part of cuBLAS (NVIDIA's libcublas package)"},
    {"libcublas.so", "cuBLAS (NVIDIA's libcublas package)"},
    {GPT_CUDA_MODULE_FILE, "train_gpt's CUDA backend, built beside it when meson finds CUDA and "
                           "cuBLAS"},
};

static void describe(const char *err, char *out, size_t cap)
{
    static const char missing[] = ": cannot open shared object file";
    const char *cut = err ? strstr(err, missing) : NULL;
    if (cut) {
        const char *name = err;
        for (const char *p = err; p < cut; p++)
            if (*p == '/') name = p + 1;
        for (size_t i = 0; i < sizeof known_libs / sizeof known_libs[0]; i++) {
            if (!strncmp(name, known_libs[i].prefix, strlen(known_libs[i].prefix))) {
                snprintf(out, cap, "%.*s cannot be found (%s); it is %s: install it, or put "
                         "its directory on LD_LIBRARY_PATH", (int)(cut - name), name, err,
                         known_libs[i].what);
                return;
            }
        }
    }
    snprintf(out, cap, "cannot load %s: %s", GPT_CUDA_MODULE_FILE, err ? err : "unknown error");
}

const gpt_backend *gpt_backend_cuda_load(char *err, size_t errlen)
{
    /* Beside this program (the build tree), else by name: the loader's
     * search from train_gpt, whose RUNPATH leads to the bundle's lib/. */
    char path[PATH_MAX + sizeof GPT_CUDA_MODULE_FILE + 1] = GPT_CUDA_MODULE_FILE;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        struct stat st;
        if (slash) {
            *slash = '\0';
            char beside[sizeof path];
            snprintf(beside, sizeof beside, "%s/%s", self, GPT_CUDA_MODULE_FILE);
            if (stat(beside, &st) == 0 && S_ISREG(st.st_mode))
                snprintf(path, sizeof path, "%s", beside);
        }
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        describe(dlerror(), err, errlen);
        return NULL;
    }
    void *sym = dlsym(h, GPT_CUDA_MODULE_ENTRY);
    if (!sym) {
        snprintf(err, errlen, "%s has no %s: it is from another version of train_gpt", path,
                 GPT_CUDA_MODULE_ENTRY);
        return NULL;
    }
    gpt_cuda_module_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as dlsym's users do */
    const gpt_backend *be = NULL;
    return entry(&host, &be, err, errlen) == 0 ? be : NULL;
}
