/* The activation store's refusals: every misuse zc_act_save and
 * zc_act_restore name (zeroc.h) returns its status with a message naming the
 * call and changes nothing - the checkpoints held before it restore exactly
 * afterwards - and the bound and the section are checked where the engine,
 * the planner and the config take them. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers.h"
#include "t_act.h"

#define B 1024

static zc_comm *comm;

static zc_engine *make(zc_config *cfg, int64_t slots, int64_t bytes, zc_param **p)
{
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.act_checkpoints = slots;
    o.act_checkpoint_bytes = bytes;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    const int64_t shape[1] = {64};
    cr_assert_eq(zc_param_add_status(e, "w", shape, 1, 0, p), ZC_OK);
    return e;
}

static void finish(zc_engine *e, zc_config *cfg)
{
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

#define REFUSED(call, code, text)                                                          \
    do {                                                                                   \
        zc_status rc_ = (call);                                                            \
        cr_assert_eq(rc_, code, "%s: %s (got %s)", #call, zc_last_error(),                 \
                     zc_status_str(rc_));                                                  \
        cr_assert_not_null(strstr(zc_last_error(), text), "%s: message '%s' lacks '%s'",   \
                           #call, zc_last_error(), text);                                  \
    } while (0)

static void held(zc_engine *e, int64_t n)
{
    zc_act_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_act_stats(e, &st), ZC_OK);
    cr_assert_eq(st.held, n, "held %lld, expected %lld", (long long)st.held, (long long)n);
}

static void restore_ok(zc_engine *e, zc_act_id id, size_t n, int k)
{
    uint8_t want[B], got[B];
    ta_fill(want, n, 0, 0, 0, k);
    memset(got, 0, sizeof got);
    cr_assert_eq(zc_act_restore(e, id, got, n, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(memcmp(want, got, n), 0, "checkpoint %d changed", k);
}

static zc_act_id save_ok(zc_engine *e, size_t n, int k)
{
    uint8_t buf[B];
    ta_fill(buf, n, 0, 0, 0, k);
    zc_act_id id = 0;
    cr_assert_eq(zc_act_save(e, buf, n, NULL, &id), ZC_OK, "%s", zc_last_error());
    cr_assert_neq(id, 0);
    return id;
}

static void run_misuse(const char *home)
{
    zc_config *cfg = ta_config(home, NULL, 1, 2, 1, 0);
    cr_assert_not_null(cfg);
    zc_param *p;
    zc_engine *e = make(cfg, 3, B, &p);
    uint8_t buf[B];
    zc_act_id id = 0;
    REFUSED(zc_act_save(e, buf, 64, NULL, &id), ZC_ERR_INVALID_STATE, "zc_act_save");
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());

    /* Arguments. */
    REFUSED(zc_act_save(e, NULL, 64, NULL, &id), ZC_ERR_INVALID_ARG, "src is NULL");
    REFUSED(zc_act_save(e, buf, 64, NULL, NULL), ZC_ERR_INVALID_ARG, "id is NULL");
    REFUSED(zc_act_save(e, buf, 0, NULL, &id), ZC_ERR_INVALID_ARG, "of 1 to 1024 bytes");
    REFUSED(zc_act_save(e, buf, B + 1, NULL, &id), ZC_ERR_INVALID_ARG, "1025 bytes");
    held(e, 0);

    const zc_act_id a = save_ok(e, 100, 0), b = save_ok(e, B, 1), c = save_ok(e, 64, 2);
    /* The bound: a fourth is refused, the three stay. */
    REFUSED(zc_act_save(e, buf, 64, NULL, &id), ZC_ERR_INVALID_STATE, "holds 3 checkpoints");
    held(e, 3);
    /* Names, order, sizes. */
    REFUSED(zc_act_restore(e, 0, buf, 64, NULL), ZC_ERR_INVALID_ARG, "names no checkpoint");
    REFUSED(zc_act_restore(e, c + 100, buf, 64, NULL), ZC_ERR_INVALID_ARG,
            "names no checkpoint");
    REFUSED(zc_act_restore(e, a, buf, 100, NULL), ZC_ERR_INVALID_STATE, "out of order");
    REFUSED(zc_act_restore(e, b, buf, B, NULL), ZC_ERR_INVALID_STATE, "out of order");
    REFUSED(zc_act_restore(e, c, buf, 65, NULL), ZC_ERR_INVALID_ARG, "holds 64 bytes; 65");
    REFUSED(zc_act_restore(e, c, NULL, 64, NULL), ZC_ERR_INVALID_ARG, "dst is NULL");
    held(e, 3);
    restore_ok(e, c, 64, 2);
    REFUSED(zc_act_restore(e, c, buf, 64, NULL), ZC_ERR_INVALID_STATE, "restored already");
    held(e, 2);
    /* An evaluation pass saves nothing. */
    cr_assert_eq(zc_pass_begin(e, ZC_PASS_EVAL), ZC_OK);
    REFUSED(zc_act_save(e, buf, 64, NULL, &id), ZC_ERR_INVALID_STATE, "evaluation pass");
    cr_assert_eq(zc_pass_end(e), ZC_OK);
    restore_ok(e, b, B, 1);

    /* The micro-step ends with a still held: its name is then refused. */
    cr_assert_not_null(zc_grad_buffer(e, p));
    cr_assert_eq(zc_grad_ready(e, p), ZC_OK);
    cr_assert_eq(zc_micro_step_end(e), ZC_OK, "%s", zc_last_error());
    held(e, 0);
    REFUSED(zc_act_restore(e, a, buf, 100, NULL), ZC_ERR_INVALID_STATE, "earlier micro-step");
    REFUSED(zc_act_restore(e, b, buf, B, NULL), ZC_ERR_INVALID_STATE, "earlier micro-step");
    /* The slots serve the next micro-step; the names never repeat. */
    const zc_act_id d = save_ok(e, 200, 3);
    cr_assert_gt(d, c);
    restore_ok(e, d, 200, 3);
    cr_assert_not_null(zc_grad_buffer(e, p));
    cr_assert_eq(zc_grad_ready(e, p), ZC_OK);
    cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error());
    zc_act_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_act_stats(e, &st), ZC_OK);
    cr_assert_eq(st.saves, 4);
    cr_assert_eq(st.restores, 3);
    cr_assert_eq(st.peak_held, 3);
    finish(e, cfg);
}

Test(act_refuse, misuse_device) { run_misuse("device"); }
Test(act_refuse, misuse_cpu) { run_misuse("cpu"); }

/* Without a store the calls say what is missing; the figures say none. */
Test(act_refuse, no_store)
{
    zc_config *cfg = ta_config("device", NULL, 0, 1, 1, 0);
    zc_param *p;
    zc_engine *e = make(cfg, 4, 0, &p); /* a count without a size: no store */
    cr_assert_eq(zc_engine_build(e), ZC_OK);
    uint8_t buf[64];
    zc_act_id id;
    REFUSED(zc_act_save(e, buf, 64, NULL, &id), ZC_ERR_INVALID_STATE, "act_checkpoint_bytes");
    REFUSED(zc_act_restore(e, 1, buf, 64, NULL), ZC_ERR_INVALID_STATE, "no activation store");
    zc_act_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_act_stats(e, &st), ZC_OK);
    cr_assert_eq(st.home, ZC_ACT_ON_NONE);
    cr_assert_eq(st.slots, 0);
    st.size = 8;
    cr_assert_eq(zc_engine_act_stats(e, &st), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_engine_act_stats(e, NULL), ZC_ERR_INVALID_ARG);
    finish(e, cfg);
}

/* number_checkpoints is the count when the options give none. */
Test(act_refuse, number_checkpoints)
{
    zc_config *cfg = ta_config("device", NULL, 0, 1, 1, 0);
    cr_assert_eq(zc_config_set_int(cfg, "activation_checkpointing.number_checkpoints", 2), ZC_OK);
    zc_param *p;
    zc_engine *e = make(cfg, 0, 256, &p);
    cr_assert_eq(zc_engine_build(e), ZC_OK);
    zc_act_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_act_stats(e, &st), ZC_OK);
    cr_assert_eq(st.slots, 2);
    cr_assert_eq(st.slot_bytes, 256);
    uint8_t buf[64] = {0};
    zc_act_id id;
    cr_assert_eq(zc_act_save(e, buf, 64, NULL, &id), ZC_OK);
    cr_assert_eq(zc_act_save(e, buf, 64, NULL, &id), ZC_OK);
    REFUSED(zc_act_save(e, buf, 64, NULL, &id), ZC_ERR_INVALID_STATE, "number_checkpoints");
    finish(e, cfg);
}

/* The bound out of range, and partition_activations without a group:
 * refused by zc_engine_create and zc_plan_memory alike. */
Test(act_refuse, bound_and_partition)
{
    zc_config *cfg = ta_config("device", NULL, 0, 1, 1, 0);
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    const int64_t bad[][2] = {{-1, 64}, {((int64_t)1 << 20) + 1, 64}, {2, -1},
                              {2, ((int64_t)1 << 40) + 1}};
    const int64_t shape[1] = {64};
    const zc_plan_tensor t = {shape, 1, false};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
        o.device = ZC_DEVICE_HOST;
        o.act_checkpoints = bad[i][0];
        o.act_checkpoint_bytes = bad[i][1];
        zc_engine *e = NULL;
        REFUSED(zc_engine_create(&e, cfg, comm, &o), ZC_ERR_INVALID_ARG, "zc_engine_options.act");
        cr_assert_null(e);
        zc_memory_plan plan = {.size = sizeof plan};
        REFUSED(zc_plan_memory(cfg, 1, &t, 1, &o, &plan), ZC_ERR_INVALID_ARG,
                "zc_engine_options.act");
    }
    cr_assert_eq(zc_config_set_bool(cfg, "activation_checkpointing.partition_activations", true),
                 ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.act_checkpoints = 2;
    o.act_checkpoint_bytes = 256;
    zc_engine *e = NULL;
    REFUSED(zc_engine_create(&e, cfg, comm, &o), ZC_ERR_CONFIG, "no model-parallel group");
    zc_memory_plan plan = {.size = sizeof plan};
    REFUSED(zc_plan_memory(cfg, 1, &t, 1, &o, &plan), ZC_ERR_CONFIG, "partition_activations");
    /* The data-parallel communicator is not a model-parallel group. */
    o.act_mp_comm = comm;
    REFUSED(zc_engine_create(&e, cfg, comm, &o), ZC_ERR_INVALID_ARG, "engine's own");
    /* Without a store the key asks for nothing. */
    o.act_checkpoint_bytes = 0;
    o.act_mp_comm = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* The section's keys, held to their ranges and rules. */
Test(act_refuse, config_keys)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    REFUSED(zc_config_set_int(cfg, "activation_checkpointing.buffer_count", 1), ZC_ERR_CONFIG,
            "buffer_count");
    REFUSED(zc_config_set_int(cfg, "activation_checkpointing.number_checkpoints", 0),
            ZC_ERR_CONFIG, "number_checkpoints");
    REFUSED(zc_config_set(cfg, "activation_checkpointing.cpu_checkpoint", "true"),
            ZC_ERR_INVALID_ARG, "cpu_checkpointing");
    REFUSED(zc_config_load_string(&(zc_config *){NULL},
                                  "{\"activation_checkpointing\": {\"nvme_checkpointing\": true}}",
                                  "t.json", 0),
            ZC_ERR_CONFIG, "activation_checkpointing.nvme_path");
    REFUSED(zc_config_load_string(&(zc_config *){NULL},
                                  "{\"activation_checkpointing\": {\"nvme_checkpointing\": true, "
                                  "\"nvme_path\": \"/nonexistent-zc-dir\"}}",
                                  "t.json", 0),
            ZC_ERR_CONFIG, "not a writable directory");
    /* DeepSpeed's real configs (tests/config holds the corpus) load. */
    zc_config *ok = NULL;
    cr_assert_eq(zc_config_load_string(&ok,
                                       "{\"activation_checkpointing\": {\"partition_activations\": "
                                       "true, \"contiguous_memory_optimization\": true, "
                                       "\"cpu_checkpointing\": true, \"number_checkpoints\": 24, "
                                       "\"synchronize_checkpoint_boundary\": false, \"profile\": "
                                       "false}}",
                                       "t.json", 0),
                 ZC_OK, "%s", zc_last_error());
    zc_config_destroy(ok);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
