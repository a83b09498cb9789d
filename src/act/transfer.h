/* Inside the activation store (src/act, private to the room): the store's
 * state, shared by store.c (order, names, refusals) and transfer.c (the
 * copies between the caller's memory, the slots and the host homes). */
#ifndef ZC_ACT_TRANSFER_H
#define ZC_ACT_TRANSFER_H

#include "act/act.h"
#include "base/clock.h"

typedef struct act_entry {
    zc_act_id id;
    size_t bytes;             /* whole checkpoint, as saved */
} act_entry;

struct zc_act_store {
    zc_act_params p;          /* p.dirs is not kept (the home copied them) */
    zc_act_layout lay;
    zc_device *dev;
    act_entry *stack;         /* slots entries; [0, depth) held */
    size_t stack_bytes;
    int64_t depth;
    zc_act_id next_id;        /* the next save's name */
    zc_act_id micro_first;    /* the first name of this micro-step */
    int mp_rank;              /* this rank's part (partition_activations) */

    /* Device home: every slot, one allocation. */
    char *dslots;
    size_t dslots_bytes;
    /* Host homes (offload/homes.h part 4). */
    zc_act_home *home;

    /* Staging (a host home on a GPU, or forced by tests): saves copy into a
     * device slot on the caller's stream, then the copy stream takes it to
     * the home's host memory. ev_filled[i]: the caller's copy into stage i;
     * ev_free[i]: the copy stream's copy out of it. A stage whose copy out
     * is pending names the home slot it fills (pend_slot[i], pend_bytes[i]):
     * an NVMe home's write is submitted once the data has landed. */
    char *stage;
    size_t stage_bytes, stage_stride;
    void *copy_stream;
    void *ev_filled[ZC_ACT_STAGE_SLOTS], *ev_free[ZC_ACT_STAGE_SLOTS];
    bool pend[ZC_ACT_STAGE_SLOTS];
    int pend_slot[ZC_ACT_STAGE_SLOTS];
    size_t pend_bytes[ZC_ACT_STAGE_SLOTS];
    int next_stage;
    /* A restore's copy to the device reads the home's host memory after the
     * call returns: an NVMe home's buffer goes back to the home (read_end)
     * once ev_restored has passed, at the next call that needs it; a pinned
     * slot's later writes are the copy stream's, which waits for
     * ev_restored on the device instead (transfer.c). */
    void *ev_restored;
    int release_slot;         /* -1: none pending */

    /* partition_activations: the status word of the group's exchange. */
    int32_t *status_dev;

    zc_act_stats st;          /* the figures zc__act_stats reports */
};

/* Text of a home for messages. */
const char *zc__act_home_name(int home);

/* transfer.c */
zc_status zc__act_transfer_init(zc_act_store *s);
void zc__act_transfer_free(zc_act_store *s);
/* This rank's part of the checkpoint at src (bytes, whole) into slot. */
zc_status zc__act_copy_out(zc_act_store *s, int slot, const void *src, size_t bytes,
                           void *stream);
/* Slot's part back into its place in dst; *hit false when the read was
 * waited for. */
zc_status zc__act_copy_in(zc_act_store *s, int slot, void *dst, size_t bytes, void *stream,
                          bool *hit);
/* Starts the home's reads of the slots from `from` down, as far as its
 * buffers allow. */
void zc__act_read_ahead(zc_act_store *s, int from);
/* Finishes every copy in flight (the micro-step's end, destroy). */
void zc__act_transfer_quiesce(zc_act_store *s);
/* synchronize_checkpoint_boundary: the caller's stream and the copy stream. */
zc_status zc__act_sync_all(zc_act_store *s, void *stream);

#endif
