/* The timeline's private state, shared by the files of src/trace:
 * timeline.c (create, window, recording), write.c (the file), comms.c (the
 * comms logger), hooks.c (what the other rooms call). */
#ifndef ZC_TRACE_TL_INTERNAL_H
#define ZC_TRACE_TL_INTERNAL_H

#include <stdatomic.h>

#include "trace/trace.h"

/* The comms logger's table: one row per (collective, caller when debug,
 * message size); fixed at create. A size that finds no free row is added to
 * its collective's overflow row (size -1, printed as "other sizes"). */
#define ZC_TL_COMMS_ROWS 96

typedef struct zc_tl_row {
    const char *op;      /* "all_gather", "all_gather_coalesced", ...; NULL: free */
    const char *site;    /* the caller (comms_logger.debug), else NULL */
    char site_buf[ZC_TL_TEXT];
    int64_t bytes;       /* message size S; -1: the overflow row */
    int kind;            /* zc_coll_kind */
    int ranks;           /* the communicator's size (busbw's n); 0: mixed (overflow) */
    int64_t count;
    int64_t total_ns;
} zc_tl_row;

/* A communicator group being filled (between zc__tl_group_open and _end):
 * what its collectives carry, by kind. */
typedef struct zc_tl_group {
    bool open;
    int ranks; /* the communicator's size */
    int64_t ops[ZC_COLL__COUNT], bytes[ZC_COLL__COUNT];
} zc_tl_group;

struct zc_tl {
    int rank, world;
    zc_tl_comms_opts comms;

    /* The window and the file. */
    bool has_file;
    zc_tl_steps steps;
    char file[512];
    int fd;                    /* created at build, -1 once closed */
    bool written;              /* the file holds the window */
    bool keeping;              /* spans are kept (the window is open) */
    bool due;                  /* the window ended: the file is to be written */
    int depth;                 /* open containers on the rank's thread: the
                                  step's window, an evaluation pass, a loop call */
    int64_t window_t0;         /* when keeping began */
    int64_t step_t0;           /* the open step window's start */
    int64_t last_close;        /* the end of the last closed step (destroy
                                  writes what lies before it) */
    int64_t steps_kept, first_kept, last_kept; /* steps closed while keeping */
    int stage;
    char dtype[16], device[16];

    /* The records. */
    zc_tl_rec *recs;
    int64_t cap;
    _Atomic int64_t next;      /* slots handed out (may pass cap: dropped) */
    _Atomic int64_t dropped;
    int64_t outside;           /* spans of the rank's thread outside any container */

    /* The writer's buffer (write.c). */
    char *wbuf;
    size_t wcap;

    /* The comms logger (comms.c). */
    zc_tl_row rows[ZC_TL_COMMS_ROWS];
    int64_t kind_ops[ZC_COLL__COUNT], kind_bytes[ZC_COLL__COUNT];
    int64_t kind_payload[ZC_COLL__COUNT], kind_ns[ZC_COLL__COUNT];
    /* Each collective's bytes x its bus factor over its communicator's
     * ranks, summed: the numerator of the kind's bus bandwidth. */
    double kind_bus[ZC_COLL__COUNT];
    zc_tl_group group;
};

#define ZC_TL_WBUF_BYTES ((size_t)1 << 16)

/* comms.c: one collective (not batched: it ran from t0 to t1) and a
 * group's launch. */
void zc__tl_comms_add(zc_tl *t, int kind, int64_t bytes, const char *site, unsigned flags,
                      int64_t ns, int ranks);
void zc__tl_comms_group(zc_tl *t, int64_t ns);
/* The collective kind's name ("all_reduce", ...). */
const char *zc__tl_coll_name(int kind);

#endif
