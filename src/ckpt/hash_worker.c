/* Hashing a shard's entries on a worker thread (hash_worker.h).
 *
 * A queue of pieces under one mutex: the writer appends at `tail`, the worker
 * takes up to BATCH pieces at `head`, hashes them without the lock, then
 * publishes their digests and `done` under it. Nothing spins: the machine may
 * have two cores shared with other work, and the writer waits on the disk
 * most of the time anyway. A sleeping worker is woken by a kick (the writer
 * handed the disk a buffer) or a wait, not by every piece: a wake-up per
 * 256 KiB piece cost as much system time as the hashing saved. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/hash.h"
#include "ckpt/hash_worker.h"

/* Pieces queued: the writer feeds at most a ring's worth (32 MiB in pieces of
 * 256 KiB = 128) before it waits for a buffer, more only for entries smaller
 * than a piece. */
#define QUEUE 256
/* Pieces the worker takes per lock. */
#define BATCH 32

typedef struct piece {
    const void *p;
    size_t n;
    bool first, last;
} piece;

struct zc_ck_hasher {
    pthread_mutex_t lock;
    pthread_cond_t fed;    /* to the worker: a piece was queued, or stop */
    pthread_cond_t hashed; /* to the writer: `done` moved */
    pthread_t thread;
    piece q[QUEUE];        /* piece i is q[i % QUEUE] */
    uint64_t head, tail;   /* pieces taken by the worker, pieces fed */
    uint64_t done;         /* pieces hashed */
    bool stop;
    bool sleeping;         /* the worker waits on `fed` */
    XXH3_state_t *state;   /* the worker's */
    uint64_t *digests;     /* written by the worker under the lock; grown by
                              the writer under the lock before it feeds a
                              piece that ends an entry */
    int64_t ndigests, cap, ends_fed;
};

/* Tests: a pause before each piece (hash_worker.h). */
static _Atomic unsigned slow_us;

void zc__ck_hasher_slow_for_tests(unsigned usec_per_piece)
{
    atomic_store(&slow_us, usec_per_piece);
}

static void *worker_main(void *arg)
{
    zc_ck_hasher *h = arg;
    piece mine[BATCH];
    uint64_t d[BATCH];
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->head == h->tail && !h->stop) {
            h->sleeping = true;
            pthread_cond_wait(&h->fed, &h->lock);
            h->sleeping = false;
        }
        if (h->stop)
            break;
        int k = 0;
        for (; k < BATCH && h->head < h->tail; k++)
            mine[k] = h->q[h->head++ % QUEUE];
        pthread_mutex_unlock(&h->lock);
        int nd = 0;
        for (int i = 0; i < k; i++) {
            const unsigned us = atomic_load_explicit(&slow_us, memory_order_relaxed);
            if (us)
                nanosleep(&(struct timespec){0, (long)us * 1000}, NULL);
            if (mine[i].first)
                XXH3_64bits_reset(h->state);
            XXH3_64bits_update(h->state, mine[i].p, mine[i].n);
            if (mine[i].last)
                d[nd++] = XXH3_64bits_digest(h->state);
        }
        pthread_mutex_lock(&h->lock);
        /* Room was made when the pieces ending these entries were fed. A
         * batch that ends no entry may meet no array at all (digests NULL
         * until the first entry ends): memcpy of nothing from or to NULL is
         * still undefined. */
        if (nd > 0)
            memcpy(h->digests + h->ndigests, d, (size_t)nd * sizeof d[0]);
        h->ndigests += nd;
        h->done += (uint64_t)k;
        pthread_cond_signal(&h->hashed);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

zc_status zc__ck_hasher_start(zc_ck_hasher **out, const char *what)
{
    *out = NULL;
    zc_ck_hasher *h = calloc(1, sizeof *h);
    if (!h)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: checksum worker", what);
    if (!(h->state = XXH3_createState())) {
        free(h);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: xxHash state", what);
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->fed, NULL);
    pthread_cond_init(&h->hashed, NULL);
    /* The worker takes no signals: they stay with the application's threads
     * (a tool removes its files from its own handler). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&h->thread, NULL, worker_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        pthread_cond_destroy(&h->hashed);
        pthread_cond_destroy(&h->fed);
        pthread_mutex_destroy(&h->lock);
        XXH3_freeState(h->state);
        free(h);
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: cannot start the checksum thread: %s", what,
                      strerror(err));
    }
    *out = h;
    return ZC_OK;
}

/* Under the lock: wakes a sleeping worker when pieces are queued. */
static void wake_locked(zc_ck_hasher *h)
{
    if (h->sleeping && h->head < h->tail)
        pthread_cond_signal(&h->fed);
}

zc_status zc__ck_hasher_feed(zc_ck_hasher *h, const void *p, size_t n, bool first, bool last,
                             uint64_t *seq)
{
    pthread_mutex_lock(&h->lock);
    while (h->tail - h->head >= QUEUE) {
        wake_locked(h);
        pthread_cond_wait(&h->hashed, &h->lock);
    }
    if (last && h->ends_fed == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 64;
        uint64_t *d = realloc(h->digests, (size_t)cap * sizeof *d);
        if (!d) {
            pthread_mutex_unlock(&h->lock);
            return ZC_ERR(ZC_ERR_NO_MEMORY, "checksums of %lld entries", (long long)cap);
        }
        h->digests = d;
        h->cap = cap;
    }
    h->ends_fed += last;
    h->q[h->tail++ % QUEUE] = (piece){p, n, first, last};
    *seq = h->tail;
    pthread_mutex_unlock(&h->lock);
    return ZC_OK;
}

void zc__ck_hasher_kick(zc_ck_hasher *h)
{
    pthread_mutex_lock(&h->lock);
    wake_locked(h);
    pthread_mutex_unlock(&h->lock);
}

void zc__ck_hasher_wait(zc_ck_hasher *h, uint64_t seq)
{
    pthread_mutex_lock(&h->lock);
    wake_locked(h);
    while (h->done < seq)
        pthread_cond_wait(&h->hashed, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

const uint64_t *zc__ck_hasher_digests(zc_ck_hasher *h, int64_t *n)
{
    pthread_mutex_lock(&h->lock);
    *n = h->ndigests;
    pthread_mutex_unlock(&h->lock);
    return h->digests;
}

void zc__ck_hasher_stop(zc_ck_hasher *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->fed);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->hashed);
    pthread_cond_destroy(&h->fed);
    pthread_mutex_destroy(&h->lock);
    XXH3_freeState(h->state);
    free(h->digests);
    free(h);
}
