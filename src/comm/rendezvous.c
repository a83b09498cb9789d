/* The TCP rendezvous (see rendezvous.h for the protocol).
 *
 * Every socket is non-blocking and every wait is a poll() bounded by one
 * deadline for the whole exchange, so a missing or dead peer turns into an
 * error naming who is missing, never a hang. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/rendezvous.h"
#include "base/clock.h"
#include "base/alloc.h"
#include "base/log.h"

#define RDV_MAGIC 0x5a435256u /* "ZCRV" */
#define RDV_VERSION 1u
#define RDV_ACK 0x41434b21u   /* "ACK!" */
#define RDV_GO 0x474f2121u    /* "GO!!" */

enum { ST_OK = 0, ST_WORLD = 1, ST_LEN = 2, ST_DUP = 3 };

static int ms_left(double deadline)
{
    double l = deadline - zc__now_s();
    if (l <= 0)
        return 0;
    return l > 1e6 ? 1000000000 : (int)(l * 1000.0) + 1;
}

/* Moves exactly n bytes before the deadline. 0, or -1 with errno (ETIMEDOUT
 * at the deadline, ECONNRESET when the peer closed). */
static int io_full(int fd, void *buf, size_t n, double deadline, int writing)
{
    char *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int pr = poll(&pf, 1, ms_left(deadline));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -1;
        if (pr == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (r == 0 && !writing) {
            errno = ECONNRESET;
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_u32s(int fd, const uint32_t *v, int k, double deadline)
{
    uint32_t be[8];
    for (int i = 0; i < k; i++)
        be[i] = htonl(v[i]);
    return io_full(fd, be, (size_t)k * 4, deadline, 1);
}

static int recv_u32s(int fd, uint32_t *v, int k, double deadline)
{
    uint32_t be[8];
    if (io_full(fd, be, (size_t)k * 4, deadline, 0))
        return -1;
    for (int i = 0; i < k; i++)
        v[i] = ntohl(be[i]);
    return 0;
}

static const char *err_text(int e)
{
    return e == ETIMEDOUT ? "timed out" : strerror(e);
}

/* ---- rank 0 ------------------------------------------------------------ */

static zc_status open_listener(const zc_rdv_opts *o, int *out)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(NULL, port, &hints, &res);
    if (gai)
        return ZC_ERR(ZC_ERR_COMM, "rendezvous: rank 0 cannot listen on port %d: %s", o->port,
                      gai_strerror(gai));
    int last = 0;
    /* Prefer a dual-stack IPv6 socket (reachable over IPv4 and IPv6), else
     * the first address that binds. */
    for (int pass = 0; pass < 2; pass++) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((pass == 0) != (ai->ai_family == AF_INET6))
                continue;
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
            if (fd < 0) {
                last = errno;
                continue;
            }
            int one = 1, zero = 0;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, o->world) == 0) {
                freeaddrinfo(res);
                *out = fd;
                return ZC_OK;
            }
            last = errno;
            close(fd);
        }
    }
    freeaddrinfo(res);
    return ZC_ERR(ZC_ERR_COMM,
                  "rendezvous: rank 0 cannot listen on port %d: %s%s", o->port, strerror(last),
                  last == EADDRINUSE ? " (another job or process holds it: choose another "
                                       "MASTER_PORT)" : "");
}

static zc_status missing_ranks(const zc_rdv_opts *o, const int *fds, const char *phase)
{
    char list[256];
    size_t used = 0;
    int missing = 0;
    list[0] = 0;
    for (int r = 1; r < o->world; r++) {
        if (fds[r] >= 0)
            continue;
        missing++;
        if (used < sizeof list - 16)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", used ? "," : "", r);
    }
    return ZC_ERR(ZC_ERR_COMM,
                  "rendezvous: rank 0 (port %d) timed out after %.0f s %s: %d of %d ranks "
                  "missing (%s); check that every rank was started with the same MASTER_ADDR, "
                  "MASTER_PORT and WORLD_SIZE=%d",
                  o->port, o->timeout_s, phase, missing, o->world - 1, list, o->world);
}

static zc_status root_run(const zc_rdv_opts *o, const void *blob, size_t len, int lfd, int *fds,
                          double deadline)
{
    int got = 0;
    while (got < o->world - 1) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int pr = poll(&pf, 1, ms_left(deadline));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return missing_ranks(o, fds, "waiting for connections");
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        uint32_t h[5];
        if (recv_u32s(fd, h, 5, deadline) || h[0] != RDV_MAGIC || h[1] != RDV_VERSION) {
            /* Not one of ours (a port scanner, a stale client): ignore it. */
            ZC_LOGW("comm", "rendezvous: ignoring a connection on port %d that is not a zeroc "
                    "rank", o->port);
            close(fd);
            continue;
        }
        uint32_t rank = h[2], world = h[3], blen = h[4];
        uint32_t st = ST_OK;
        if (world != (uint32_t)o->world)
            st = ST_WORLD;
        else if (blen != (uint32_t)len)
            st = ST_LEN;
        else if (rank < 1 || rank >= (uint32_t)o->world || fds[rank] >= 0)
            st = ST_DUP;
        if (st != ST_OK) {
            uint32_t reply[2] = {st, (uint32_t)o->world};
            (void)send_u32s(fd, reply, 2, deadline);
            close(fd);
            if (st == ST_WORLD)
                return ZC_ERR(ZC_ERR_COMM,
                              "rendezvous: rank %u says WORLD_SIZE=%u but rank 0 has %d",
                              rank, world, o->world);
            if (st == ST_LEN)
                return ZC_ERR(ZC_ERR_COMM,
                              "rendezvous: rank %u expects %u bytes but rank 0 sends %zu "
                              "(different zeroc builds?)", rank, blen, len);
            return ZC_ERR(ZC_ERR_COMM,
                          "rendezvous: rank %u is out of range or connected twice (WORLD_SIZE=%d): "
                          "two processes were given the same RANK", rank, o->world);
        }
        fds[rank] = fd;
        got++;
    }
    for (int r = 1; r < o->world; r++) {
        uint32_t ok[2] = {ST_OK, (uint32_t)o->world};
        if (send_u32s(fds[r], ok, 2, deadline) || io_full(fds[r], (void *)blob, len, deadline, 1))
            return ZC_ERR(ZC_ERR_COMM, "rendezvous: sending to rank %d: %s", r, err_text(errno));
    }
    for (int r = 1; r < o->world; r++) {
        uint32_t ack;
        if (recv_u32s(fds[r], &ack, 1, deadline) || ack != RDV_ACK)
            return ZC_ERR(ZC_ERR_COMM, "rendezvous: rank %d did not acknowledge: %s", r,
                          err_text(errno));
    }
    for (int r = 1; r < o->world; r++) {
        uint32_t go = RDV_GO;
        if (send_u32s(fds[r], &go, 1, deadline))
            return ZC_ERR(ZC_ERR_COMM, "rendezvous: releasing rank %d: %s", r, err_text(errno));
    }
    return ZC_OK;
}

static zc_status root_side(const zc_rdv_opts *o, const void *blob, size_t len, double deadline)
{
    int lfd = -1;
    ZC_CHECK(open_listener(o, &lfd));
    int *fds = NULL;
    zc_status rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(int) * (size_t)o->world,
                                  "rendezvous sockets", (void **)&fds);
    if (rc == ZC_OK) {
        for (int r = 0; r < o->world; r++)
            fds[r] = -1;
        rc = root_run(o, blob, len, lfd, fds, deadline);
        for (int r = 0; r < o->world; r++)
            if (fds[r] >= 0)
                close(fds[r]);
        zc__host_free(NULL, ZC_MEM_OTHER, fds, sizeof(int) * (size_t)o->world);
    }
    close(lfd);
    return rc;
}

/* ---- other ranks ------------------------------------------------------- */

/* One connection attempt to each resolved address; the connected socket or
 * -1 with *err set. */
static int try_connect(struct addrinfo *res, double deadline, int *err)
{
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            *err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            return fd;
        if (errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int wait = ms_left(deadline);
            if (wait > 2000)
                wait = 2000; /* a silent host: retry rather than wait out the deadline */
            if (poll(&pf, 1, wait) == 1) {
                int so = 0;
                socklen_t sl = sizeof so;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
                if (so == 0)
                    return fd;
                *err = so;
            } else {
                *err = ETIMEDOUT;
            }
        } else {
            *err = errno;
        }
        close(fd);
    }
    return -1;
}

static zc_status peer_side(const zc_rdv_opts *o, void *blob, size_t len, double deadline)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(o->addr, port, &hints, &res);
    if (gai)
        return ZC_ERR(ZC_ERR_CONFIG, "rendezvous: rank %d cannot resolve rank 0's address '%s': %s",
                      o->rank, o->addr, gai_strerror(gai));
    int fd = -1, err = ECONNREFUSED;
    for (;;) {
        fd = try_connect(res, deadline, &err);
        if (fd >= 0 || ms_left(deadline) == 0)
            break;
        /* Rank 0 may not be listening yet: retry every 100 ms. */
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ZC_ERR(ZC_ERR_COMM,
                      "rendezvous: rank %d could not connect to %s port %d within %.0f s: %s "
                      "(is rank 0 running, and is '%s' its address as seen from here?)",
                      o->rank, o->addr, o->port, o->timeout_s, strerror(err), o->addr);
    zc_status rc = ZC_OK;
    uint32_t hello[5] = {RDV_MAGIC, RDV_VERSION, (uint32_t)o->rank, (uint32_t)o->world,
                         (uint32_t)len};
    uint32_t reply[2];
    if (send_u32s(fd, hello, 5, deadline) || recv_u32s(fd, reply, 2, deadline)) {
        rc = ZC_ERR(ZC_ERR_COMM, "rendezvous: rank %d talking to %s port %d: %s", o->rank,
                    o->addr, o->port, err_text(errno));
        goto out;
    }
    if (reply[0] != ST_OK) {
        rc = ZC_ERR(ZC_ERR_COMM, "rendezvous: rank 0 at %s port %d refused rank %d: %s",
                    o->addr, o->port, o->rank,
                    reply[0] == ST_WORLD   ? "WORLD_SIZE differs from rank 0's"
                    : reply[0] == ST_LEN ? "blob size differs (different zeroc builds?)"
                                         : "this RANK is out of range or already taken");
        goto out;
    }
    uint32_t ack = RDV_ACK, go = 0;
    if (io_full(fd, blob, len, deadline, 0) || send_u32s(fd, &ack, 1, deadline) ||
        recv_u32s(fd, &go, 1, deadline) || go != RDV_GO)
        rc = ZC_ERR(ZC_ERR_COMM,
                    "rendezvous: rank %d lost rank 0 (%s port %d) before every rank joined: %s",
                    o->rank, o->addr, o->port, err_text(errno));
out:
    close(fd);
    return rc;
}

zc_status zc__rendezvous(const zc_rdv_opts *o, void *blob, size_t len)
{
    if (!o || o->world < 1 || o->rank < 0 || o->rank >= o->world || (len && !blob) ||
        len > UINT32_MAX || o->timeout_s <= 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "rendezvous: bad options (rank %d, world %d, %zu bytes)",
                      o ? o->rank : -1, o ? o->world : -1, len);
    if (o->world == 1)
        return ZC_OK;
    if (o->port < 1 || o->port > 65535 || (o->rank > 0 && (!o->addr || !*o->addr)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "rendezvous: bad address '%s' port %d",
                      o->addr ? o->addr : "(null)", o->port);
    double deadline = zc__now_s() + o->timeout_s;
    return o->rank == 0 ? root_side(o, blob, len, deadline) : peer_side(o, blob, len, deadline);
}
