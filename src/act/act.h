/* The activation store (src/act's seam; the public calls are zc_act_save and
 * zc_act_restore in zeroc.h, docs/activations.md): the checkpoints of
 * activation checkpointing - each block's input, saved in forward and
 * restored last-in first-out in backward - kept where the config's
 * activation_checkpointing section says: device memory, the pinned host
 * memory of cpu_checkpointing, or NVMe (nvme_checkpointing, zeroc's), with
 * partition_activations split over a model-parallel group.
 *
 * Why it stands below the engine (layer 3, beside src/plan). The store's
 * memory is reserved at zc_engine_build from a bound the program states
 * (zc_engine_options.act_checkpoints x act_checkpoint_bytes), and the
 * planner counts it in every plan the build's pre-flight, zc_plan_memory,
 * max_memory's placement and `zeroc estimate` make: so the engine creates
 * the store while it builds, and the planner asks this header how many bytes
 * it takes (zc__act_layout). Both call down into it; it includes nothing of
 * src/core. What it needs of the engine - the device, its account, the rank,
 * the homes' environment, the model-parallel communicator - is handed to it
 * in zc_act_params; what only the engine can do - checking a public call's
 * engine, refusing saves in an evaluation pass, agreeing on a restore's
 * outcome across ranks and breaking every engine - stays in the engine's
 * side (src/core/state/act_state.c, src/core/loop/act_calls.c). The host
 * homes are the offload engine's (offload/homes.h part 4: pinned slots, or
 * a swap file through pinned buffers over its io_uring store); the store
 * drives them: it keeps the order, copies between the caller's memory and
 * theirs (on a GPU through device staging slots on a copy stream of its
 * own), and starts their reads ahead of the restores in the reverse order of
 * the saves, as stage 3 reads parameter shards ahead along its trace.
 *
 * Every size the store allocates is zc__act_layout's, so the planner and the
 * build cannot disagree (tests/act holds the build's accounting to it). */
#ifndef ZC_ACT_ACT_H
#define ZC_ACT_ACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "comm/comm.h"
#include "device/device.h"
#include "offload/homes.h"
#include "zeroc/zeroc.h"

/* The bounds of the stated reservation (zc_engine_options.act_checkpoints,
 * act_checkpoint_bytes; activation_checkpointing.number_checkpoints holds
 * the same count, src/config/schema.c). */
#define ZC_ACT_SLOTS_MAX ((int64_t)1 << 20)
#define ZC_ACT_BYTES_MAX ((int64_t)1 << 40)
/* Device staging slots of a host home on a GPU: a save copies the caller's
 * checkpoint into one (device to device, on the caller's stream) and the copy
 * stream takes it to the host from there, so the caller may overwrite its
 * buffer at once; two let a save proceed while the previous one is in
 * flight. */
#define ZC_ACT_STAGE_SLOTS 2
/* Device slots start 256-byte aligned (cudaMalloc's alignment, and the
 * engine's pools'); host slots and buffers on pages (ZC_SWAP_ALIGN). */
#define ZC_ACT_DEVICE_ALIGN 256

/* Where the checkpoints are kept (zc_act_home_kind of zeroc.h). */
enum { ZC_ACT_HOME_DEVICE = 0, ZC_ACT_HOME_CPU = 1, ZC_ACT_HOME_NVME = 2 };

/* What the store reserves: the planner's input and the build's. */
typedef struct zc_act_spec {
    int64_t slots;          /* checkpoints held at once; 0: no store */
    int64_t bytes;          /* the largest checkpoint, whole */
    int home;               /* ZC_ACT_HOME_* */
    int parts;              /* partition_activations: the model-parallel size (1: none) */
    int64_t buffer_count;   /* nvme: pinned buffers */
    bool staging;           /* a device with memory of its own and a host home:
                               saves stage through ZC_ACT_STAGE_SLOTS device slots */
    int64_t nvme_round;     /* nvme: the store's round-up unit, aio.block_size x
                               nvme_path directories (0: none) */
} zc_act_spec;

/* The bytes of a reservation, all of category ZC_MEM_ACTIVATIONS. */
typedef struct zc_act_layout {
    int64_t part_bytes;     /* what one rank keeps of the largest checkpoint */
    int64_t slot_stride;    /* one slot in its home's memory (aligned) */
    int64_t bytes[ZC_MEMKIND__COUNT]; /* by kind: device slots and staging, pinned
                                         slots or buffers, the swap file; on the host
                                         path the "device" slots are host memory
                                         counted as device, as the engine's buffers */
} zc_act_layout;

/* The layout of spec (slots 0: all zeros). ZC_ERR_INVALID_ARG for a spec
 * outside the bounds above (the message names zc_engine_options' fields),
 * ZC_ERR_NO_MEMORY when a byte count overflows int64. Pure; thread-safe. */
zc_status zc__act_layout(const zc_act_spec *spec, zc_act_layout *out);

/* What the engine hands the store at build. */
typedef struct zc_act_params {
    zc_act_spec spec;
    zc_device *dev;          /* the engine's device */
    zc_mem_account *acct;    /* the engine's account */
    zc_home_env env;         /* for the host homes (env.nchunks is set to the slots) */
    bool pin_memory;         /* host homes: page-locked (offload_param.pin_memory) */
    const char *const *dirs; /* nvme: the directories of nvme_path */
    int ndirs;
    zc_comm *mp;             /* spec.parts > 1: the model-parallel group (bound to dev) */
    bool sync_boundary;      /* synchronize_checkpoint_boundary */
    bool profile;            /* profile: a line per save and restore at INFO */
} zc_act_params;

typedef struct zc_act_store zc_act_store;

/* Allocates the whole reservation (zc__act_layout) and opens the home. On
 * failure nothing is held. The caller owns *out (zc__act_destroy). */
zc_status zc__act_create(const zc_act_params *p, zc_act_store **out);

/* Waits for the copies in flight and frees everything. NULL is a no-op. */
void zc__act_destroy(zc_act_store *s);

/* The refusals of a save or restore, checked before anything changes
 * (zc_act_save's and zc_act_restore's contracts; fn names the call).
 * check_restore may be called with a NULL dst to check the id alone. */
zc_status zc__act_check_save(const zc_act_store *s, const void *src, size_t bytes,
                             const char *fn);
zc_status zc__act_check_restore(const zc_act_store *s, zc_act_id id, const void *dst,
                                size_t bytes, const char *fn);

/* A checked save: pushes the checkpoint and copies it home, ordered on the
 * caller's stream. An NVMe write's failure is kept for the next restore, so
 * this fails only on a device error. */
zc_status zc__act_save(zc_act_store *s, const void *src, size_t bytes, void *stream,
                       zc_act_id *id);

/* A checked restore: the rank-local part - the checkpoint (this rank's part
 * of it) read back into dst, the slot popped, the next reads started - whose
 * status the engine agrees on across its ranks when zc__act_agrees says so,
 * before zc__act_gather completes a partitioned checkpoint. */
zc_status zc__act_restore(zc_act_store *s, zc_act_id id, void *dst, size_t bytes, void *stream);

/* partition_activations: all-gathers dst's parts over the model-parallel
 * group, after every member's restore succeeded (mp_ok: this rank's was
 * agreed by its engine's ranks). Collective over the group; a failure of a
 * member reaches the others through the group's own exchange of the
 * statuses first, so none waits in a gather another skipped. No-op without
 * partitioning. */
zc_status zc__act_gather(zc_act_store *s, zc_status local, void *dst, size_t bytes,
                         void *stream);

/* Whether a restore's outcome can differ between ranks (NVMe I/O), so the
 * engine agrees on it. */
bool zc__act_agrees(const zc_act_store *s);

/* The micro-step ended: what was not restored is forgotten (its ids now
 * name "an earlier micro-step"). */
void zc__act_micro_end(zc_act_store *s);

/* The store's figures (zc_engine_act_stats; s NULL: no store). */
void zc__act_stats(const zc_act_store *s, zc_act_stats *out);

/* Tests: saves stage through device slots and the copy stream even on the
 * host device (spec.staging is then set by the engine), so the GPU's path of
 * zc_act_save runs where CI runs. false restores the rule (a device with
 * memory of its own). */
void zc__act_force_staging(bool on);
bool zc__act_staging_forced(void);

/* Tests: the NVMe home's store faults (ZC_NVME_FAULTS syntax); no-op for
 * another home. */
void zc__act_set_nvme_faults(zc_act_store *s, const struct zc_nvme_faults *f);

#endif
