/* The activation store test harness (t_act.h). */
#include "t_act.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "act/act.h"
#include "core/engine.h" /* the store of one engine, for a fault on that rank alone */
#include "offload/offload.h"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ta_fill(uint8_t *p, size_t n, int rank, int step, int micro, int k)
{
    uint64_t s = ((uint64_t)rank << 48) ^ ((uint64_t)step << 32) ^ ((uint64_t)micro << 16) ^
                 (uint64_t)k ^ 0x5a43414354ull;
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t v = mix(&s);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

size_t ta_size(int64_t bytes, int k)
{
    const size_t unit = 64; /* 16 words: exact in 1, 2 and 4 parts */
    size_t n = (size_t)bytes / unit * unit - (size_t)k * unit;
    return n < unit ? unit : n;
}

void ta_run_init(ta_run *r, const char *home, int world)
{
    memset(r, 0, sizeof *r);
    r->home = home;
    r->world = world;
    r->gas = 1;
    r->steps = 2;
    r->slots = 6;
    r->bytes = 8192 + 12;
    r->fault_thread = -1;
}

zc_config *ta_config(const char *home, const char *nvme_json, int stage, int gas, int world,
                     int64_t buffer_count)
{
    zc_config *c = NULL;
    if (zc_config_create(&c) != ZC_OK)
        return NULL;
    bool ok = zc_config_set_int(c, "zero_optimization.stage", stage) == ZC_OK &&
              zc_config_set_int(c, "train_micro_batch_size_per_gpu", 1) == ZC_OK &&
              zc_config_set_int(c, "gradient_accumulation_steps", gas) == ZC_OK &&
              zc_config_set_int(c, "train_batch_size", (int64_t)gas * world) == ZC_OK;
    if (ok && !strcmp(home, "cpu"))
        ok = zc_config_set_bool(c, "activation_checkpointing.cpu_checkpointing", true) == ZC_OK;
    if (ok && !strcmp(home, "nvme")) {
        ok = zc_config_set_bool(c, "activation_checkpointing.nvme_checkpointing", true) ==
                 ZC_OK &&
             zc_config_set(c, "activation_checkpointing.nvme_path", nvme_json) == ZC_OK;
        if (ok && buffer_count > 0)
            ok = zc_config_set_int(c, "activation_checkpointing.buffer_count", buffer_count) ==
                 ZC_OK;
    }
    if (!ok) {
        zc_config_destroy(c);
        return NULL;
    }
    return c;
}

typedef struct shared {
    ta_run *r;
    zc_comm *dp[TA_MAX_WORLD][TA_MAX_WORLD]; /* [mp_rank][dp_rank] */
    zc_comm *mp[TA_MAX_WORLD][TA_MAX_WORLD]; /* [dp_rank][mp_rank] */
} shared;

static void fail(ta_run *r, int t, zc_status rc, const char *what)
{
    if (r->rc[t] == ZC_OK) {
        r->rc[t] = rc;
        snprintf(r->err[t], sizeof r->err[t], "%s: %s", what, zc_last_error());
    }
}

/* One micro-step's checkpoints, saved in order and restored in reverse (or
 * interleaved as a stack); every byte checked. false after a failure. */
static bool micro_step(ta_run *r, int t, int data_rank, zc_engine *e, int step, int micro,
                       uint8_t *in, uint8_t *out)
{
    zc_act_id id[64];
    const int n = (int)r->slots;
    int order[128], depth = 0, nops = 0;
    /* The operations: +k saves k, -1 restores the top. */
    if (!r->interleave) {
        for (int k = 0; k < n; k++) order[nops++] = k;
        for (int k = 0; k < n; k++) order[nops++] = -1;
    } else {
        /* s0 s1 r s2 r s3 s4 r r s5 r r ... a stack's valid interleaving */
        for (int k = 0; k < n; k++) {
            order[nops++] = k;
            if (k % 2) order[nops++] = -1;
        }
        for (int k = 0; k < n - n / 2; k++) order[nops++] = -1;
    }
    int stack[64];
    for (int i = 0; i < nops; i++) {
        if (order[i] >= 0) {
            const int k = order[i];
            const size_t sz = ta_size(r->bytes, k);
            ta_fill(in, sz, data_rank, step, micro, k);
            zc_status rc = zc_act_save(e, in, sz, NULL, &id[k]);
            if (rc != ZC_OK) {
                fail(r, t, rc, "zc_act_save");
                return false;
            }
            /* The caller's buffer is reused at once. */
            memset(in, 0xEE, sz);
            stack[depth++] = k;
            if (depth > r->peak[t])
                r->peak[t] = depth;
        } else {
            const int k = stack[--depth];
            const size_t sz = ta_size(r->bytes, k);
            memset(out, 0x11, sz);
            zc_status rc = zc_act_restore(e, id[k], out, sz, NULL);
            if (rc != ZC_OK) {
                fail(r, t, rc, "zc_act_restore");
                return false;
            }
            ta_fill(in, sz, data_rank, step, micro, k);
            for (size_t b = 0; b < sz; b++)
                r->bad_bytes[t] += in[b] != out[b];
            r->restores[t]++;
        }
    }
    return true;
}

static void *rank_main(void *arg)
{
    void **a = arg;
    shared *sh = a[0];
    const int t = (int)(intptr_t)a[1];
    ta_run *r = sh->r;
    const int mp = r->mp > 0 ? r->mp : 1;
    const int dp_rank = t / mp, mp_rank = t % mp;
    zc_config *cfg = ta_config(r->home, r->nvme_json, r->stage, r->gas, r->world,
                               r->buffer_count);
    if (!cfg) {
        fail(r, t, ZC_ERR_CONFIG, "config");
        return NULL;
    }
    if (r->mp > 0)
        zc_config_set_bool(cfg, "activation_checkpointing.partition_activations", true);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.act_checkpoints = r->slots;
    o.act_checkpoint_bytes = r->bytes;
    if (r->mp > 0)
        o.act_mp_comm = sh->mp[dp_rank][mp_rank];
    zc_engine *e = NULL;
    zc_status rc = zc_engine_create(&e, cfg, sh->dp[mp_rank][dp_rank], &o);
    zc_config_destroy(cfg);
    if (rc != ZC_OK) {
        fail(r, t, rc, "zc_engine_create");
        return NULL;
    }
    zc_param *p = NULL;
    const int64_t shape[1] = {256};
    rc = zc_param_add_status(e, "w", shape, 1, 0, &p);
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    if (rc != ZC_OK) {
        fail(r, t, rc, "zc_engine_build");
        zc_engine_destroy(e);
        return NULL;
    }
    r->es[t].size = sizeof r->es[t];
    zc_engine_stats(e, &r->es[t]);
    if (t == r->fault_thread) {
        const zc_nvme_faults f = {.enospc_write_at = r->fault.enospc_write_at,
                                  .eio_at = r->fault.eio_at};
        zc__act_set_nvme_faults(e->act, &f);
    }
    uint8_t *in = malloc((size_t)r->bytes), *out = malloc((size_t)r->bytes);
    bool ok = in && out;
    for (int step = 0; ok && step < r->steps; step++)
        for (int micro = 0; ok && micro < r->gas; micro++) {
            /* Every member of a model-parallel group saves the same
             * activations (replicated, as a tensor-parallel block's input). */
            ok = micro_step(r, t, dp_rank, e, step, micro, in, out);
            if (!ok)
                break;
            void *g = zc_grad_buffer(e, p);
            rc = g ? zc_grad_ready(e, p) : ZC_ERR_NO_MEMORY;
            if (rc == ZC_OK)
                rc = micro + 1 < r->gas ? zc_micro_step_end(e) : zc_step(e, NULL);
            if (rc != ZC_OK) {
                fail(r, t, rc, "step");
                ok = false;
            }
        }
    if (!ok) {
        zc_act_id id;
        r->broken_after[t] = in && zc_act_save(e, in, 64, NULL, &id) != ZC_OK;
    }
    r->st[t].size = sizeof r->st[t];
    zc_engine_act_stats(e, &r->st[t]);
    free(in);
    free(out);
    zc_engine_destroy(e);
    return NULL;
}

void ta_run_go(ta_run *r)
{
    const int mp = r->mp > 0 ? r->mp : 1;
    const int n = r->world * mp;
    cr_assert(n >= 1 && n <= TA_MAX_WORLD, "world %d x mp %d", r->world, mp);
    shared sh = {.r = r};
    zc_comm *tmp[TA_MAX_WORLD];
    for (int m = 0; m < mp; m++) {
        cr_assert_eq(zc_comm_local_world(r->world, tmp), ZC_OK, "%s", zc_last_error());
        for (int d = 0; d < r->world; d++) sh.dp[m][d] = tmp[d];
    }
    if (r->mp > 0)
        for (int d = 0; d < r->world; d++) {
            cr_assert_eq(zc_comm_local_world(mp, tmp), ZC_OK, "%s", zc_last_error());
            for (int m = 0; m < mp; m++) sh.mp[d][m] = tmp[m];
        }
    /* Set for every rank before any creates its engine: the ranks' stores
     * must be alike (zc_engine_build agrees on them). */
    zc__act_force_staging(r->staging);
    pthread_t th[TA_MAX_WORLD];
    void *args[TA_MAX_WORLD][2];
    for (int t = 0; t < n; t++) {
        args[t][0] = &sh;
        args[t][1] = (void *)(intptr_t)t;
        cr_assert_eq(pthread_create(&th[t], NULL, rank_main, args[t]), 0);
    }
    for (int t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    zc__act_force_staging(false);
    for (int m = 0; m < mp; m++)
        for (int d = 0; d < r->world; d++) {
            zc_comm_destroy(sh.dp[m][d]);
            if (r->mp > 0)
                zc_comm_destroy(sh.mp[d][m]);
        }
}
