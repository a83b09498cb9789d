/* What was enqueued on each stream since its last successful wait (internal).
 *
 * The CUDA backend notes every operation it enqueues (static text and sizes,
 * no formatting), clears a stream's record when a wait on it succeeds, and
 * formats the record into the error when a wait fails or an enqueue finds
 * the context already broken: asynchronous faults surface at whichever call
 * notices them, and this names the work that can have caused them instead of
 * blaming that call. Pure host logic (no CUDA), so it is unit-tested without
 * a GPU. Thread-safe: one mutex, never held while calling out. */
#ifndef ZC_DEVICE_OPTRACK_H
#define ZC_DEVICE_OPTRACK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Streams remembered at once; the least recently noted one is reused. */
#define ZC_OPTRACK_STREAMS 16

typedef struct zc_op_note {
    const char *what; /* static text: "cast kernel", "cudaMemcpyAsync D2H", ... */
    int dt;           /* zc_dtype, or -1 when n is a byte count (0: none) */
    size_t n;         /* elements, or bytes when dt is -1 */
} zc_op_note;

typedef struct zc_op_stream {
    void *stream;
    int live;
    uint64_t used; /* tick of the last note */
    uint64_t nops; /* since the last successful wait */
    zc_op_note first, last;
} zc_op_stream;

typedef struct zc_optrack {
    pthread_mutex_t mu;
    zc_op_stream s[ZC_OPTRACK_STREAMS];
    uint64_t tick;
} zc_optrack;

void zc__optrack_init(zc_optrack *t);
void zc__optrack_destroy(zc_optrack *t);

/* One more operation enqueued on `stream` (NULL is a stream like any). */
void zc__optrack_note(zc_optrack *t, void *stream, const char *what, int dt, size_t n);

/* A wait on `stream` succeeded: nothing enqueued on it so far can fault. */
void zc__optrack_waited(zc_optrack *t, void *stream);

/* `stream` was destroyed: a new stream with the same handle starts empty. */
void zc__optrack_forget(zc_optrack *t, void *stream);

/* Writes "; enqueued on stream P since its last wait: N operations, first
 * X, last Y" for `stream` (one_stream) or for every stream with pending
 * work, then a hint to rerun with CUDA_LAUNCH_BLOCKING=1; or a sentence
 * saying no work of ours was pending. Always NUL-terminates buf (len > 0). */
void zc__optrack_describe(zc_optrack *t, void *stream, int one_stream, char *buf, size_t len);

#endif
