/* A recording device for the engine tests: a zc_device that forwards every
 * operation to the host backend and logs it (operation, stream, event), so a
 * test can say which stream waits on which recorded work and how often the
 * host waits. The host backend runs everything at once, so a missing event
 * cannot race here; what is checked is that the right ordering calls are
 * made. Its streams and events are distinct handles (nonblocking ones
 * marked). Assertions are Criterion's. */
#ifndef ZC_TESTS_T_RECDEV_H
#define ZC_TESTS_T_RECDEV_H

#include <stdbool.h>

#include "core/engine.h"

enum {
    R_SYNC, R_EVSYNC, R_RECORD, R_WAIT, R_MEMSET, R_COPY, R_ACCUM, R_SCALE, R_CAST,
    R_SUMSQ_ASYNC, R_SUMSQ, R_NONFINITE, R_NONFINITE_ASYNC, R_ADAM, R_REDUCE, R_CURRENT
};

typedef struct rec {
    int op;
    void *stream, *event;
} rec;

#define LOGMAX 32768
#define NHANDLES 64

typedef struct rec_dev {
    zc_device base; /* first: the engine sees a zc_device */
    zc_device_ops ops;
    char handles[NHANDLES];
    bool nonblocking[NHANDLES];
    int nhandles;
    rec log[LOGMAX];
    int n;
    bool overflow;
    int allocs;
} rec_dev;

/* Matches any stream or event in rec_find and rec_count_host_waits. */
#define ANY ((void *)-1)

/* Makes f a recording device over `under` (the host backend): empty log,
 * no handles. */
void rec_init(rec_dev *f, const zc_device *under);
/* Routes e's device calls (and its pools') through f from now on: call it
 * before build, so the streams and events the engine creates are f's
 * handles. The communicator keeps the device it was bound to (the host)
 * unless the test binds f too. */
void rec_install(zc_engine *e, rec_dev *f);
/* Whether s is a stream f created non-blocking. */
bool rec_is_nonblocking(const rec_dev *f, const void *s);
/* Index of the first entry in [from, to) matching op, stream and event
 * (ANY matches anything), or -1. */
int rec_find(const rec_dev *f, int from, int to, int op, void *stream, void *event);
/* Operations that wait on the host: stream and event syncs, and the
 * synchronous sumsq / nonfinite. */
bool rec_is_host_wait(int op);
/* Host waits in [from, to) on `stream` (ANY: on any stream). */
int rec_count_host_waits(const rec_dev *f, int from, int to, void *stream);
/* Work enqueued on a stream (not an ordering call). */
bool rec_is_work(int op);

#endif
