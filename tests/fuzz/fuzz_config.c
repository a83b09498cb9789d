/* libFuzzer target for the DeepSpeed JSON loader.
 *
 * Input: arbitrary bytes. They are loaded as a config (strict, then lenient);
 * a config that loads is resolved for a small world and read back key by key.
 * The same bytes are also applied as the value of zc_config_set on a block
 * and on a leaf key, the path the setter shares with the loader, loaded
 * through the checker's path (messages counted past the cap, the engine's
 * acceptance rule), and read as zc_program_values. Any crash,
 * sanitizer report or leak (the counting allocator must return to zero) is a
 * finding. The file system is never touched (nvme_path checks are skipped). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/internal.h"
#include "base/alloc.h"
#include "zeroc/zeroc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    zc_log_set_level(ZC_LOG_OFF);
    return 0;
}

static void exercise(zc_config *cfg)
{
    char buf[256];
    /* The engine's own acceptance rule, as zc_engine_create and config check
     * run it. */
    (void)zc__config_engine_check(cfg);
    for (int i = 0; i < zc__cfg_nkeys; i++)
        if (zc__cfg_keys[i].type != ZC_KT_IGNORED)
            zc_config_get(cfg, zc__cfg_keys[i].path, buf, sizeof buf);
    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    pv.micro_batch_per_gpu = 2;
    pv.gradient_accumulation_steps = 2;
    pv.total_num_steps = 100;
    zc_config_set_program_values(cfg, &pv);
    zc_config_resolve(cfg, 2);
    zc__config_resolve_model_auto(cfg, 64);
    for (int64_t s = 0; s < 3000; s += 997)
        (void)zc_config_lr_at(cfg, s, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 16))
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;

    static const unsigned flags[2] = {ZC__CFG_SKIP_PATH_CHECK,
                                      ZC__CFG_SKIP_PATH_CHECK | ZC_CONFIG_LENIENT};
    for (int f = 0; f < 2; f++) {
        zc_config *cfg = NULL;
        if (zc_config_load_string(&cfg, text, "fuzz.json", flags[f]) == ZC_OK) {
            exercise(cfg);
            zc_config_destroy(cfg);
        }
    }
    /* The checker's path: every message collected, most only counted. */
    {
        zc_cfg_diag d = {0};
        zc_config *c = NULL;
        if (zc__config_load_text(&c, text, size, "fuzz.json", ZC__CFG_SKIP_PATH_CHECK, &d) ==
            ZC_OK) {
            zc__cfg_resolve(c, 0, true, &d);
            zc__cfg_engine_support(c, &d);
        }
        zc_config_destroy(c);
        zc__diag_free(&d);
    }
    /* The input's first bytes as program values: any bit pattern, nan and
     * inf included, must be refused or recorded, never misread. */
    if (size >= 2 * sizeof(int64_t) + 2 * sizeof(double)) {
        zc_config *c = NULL;
        if (zc_config_create(&c) == ZC_OK) {
            zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
            memcpy(&pv.micro_batch_per_gpu, data, sizeof(int64_t));
            memcpy(&pv.total_num_steps, data + 8, sizeof(int64_t));
            memcpy(&pv.lr, data + 16, sizeof(double));
            memcpy(&pv.beta2, data + 24, sizeof(double));
            if (zc_config_set_program_values(c, &pv) == ZC_OK) {
                zc_config_set(c, "train_micro_batch_size_per_gpu", "\"auto\"");
                zc_config_set(c, "optimizer.params.lr", "\"auto\"");
                zc_config_resolve(c, 3);
            }
            zc_config_destroy(c);
        }
    }
    zc_config *cfg = NULL;
    if (zc_config_create(&cfg) == ZC_OK) {
        zc_config_set(cfg, "zero_optimization", text);
        zc_config_set(cfg, "scheduler", text);
        zc_config_set(cfg, "optimizer.params.betas", text);
        /* First line as a key, the rest as its value. */
        char *nl = strchr(text, '\n');
        if (nl) {
            *nl = 0;
            zc_config_set(cfg, text, nl + 1);
        }
        exercise(cfg);
        zc_config_destroy(cfg);
    }
    free(text);
    if (zc__mem_global_bytes(ZC_MEMKIND_HOST) != 0 || zc__mem_global_count(ZC_MEMKIND_HOST) != 0) {
        fprintf(stderr, "fuzz_config: counting allocator holds %lld bytes in %lld allocations\n",
                (long long)zc__mem_global_bytes(ZC_MEMKIND_HOST),
                (long long)zc__mem_global_count(ZC_MEMKIND_HOST));
        abort();
    }
    return 0;
}
