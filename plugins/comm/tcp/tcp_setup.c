/* Settings, interface choice and connection setup of the TCP plugin. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcp.h"

plait_status tcp_read_settings(const plait_host *h, const plait_config *cfg, tcp_settings *s) {
    memset(s, 0, sizeof *s);
    s->streams = (int)plait_cfg_int(h, cfg, "comm.tcp", "streams");
    snprintf(s->ifname, sizeof s->ifname, "%s", plait_cfg_str(h, cfg, "comm.tcp", "ifname"));
    s->sndbuf = plait_cfg_int(h, cfg, "comm.tcp", "sndbuf");
    s->rcvbuf = plait_cfg_int(h, cfg, "comm.tcp", "rcvbuf");
    s->chunk_size = (uint64_t)plait_cfg_int(h, cfg, "comm.tcp", "chunk_size");
    s->max_message = (uint64_t)plait_cfg_int(h, cfg, "comm.tcp", "max_message");
    s->progress_thread = (int)plait_cfg_int(h, cfg, "comm.tcp", "progress_thread");
    s->cma = strcmp(plait_cfg_str(h, cfg, "comm.tcp", "cma"), "off") != 0;
    s->cma_min = (uint64_t)plait_cfg_int(h, cfg, "comm.tcp", "cma_min");
    s->spin_s = (double)plait_cfg_int(h, cfg, "comm.tcp", "spin_us") * 1e-6;
    if (s->streams < 1 || s->chunk_size < 4096 || s->max_message < 1)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "[comm.tcp] settings could not be read (streams %d, chunk_size %llu); "
                            "was the plugin's section declared?",
                            s->streams, (unsigned long long)s->chunk_size);
    if (s->chunk_size > 0xffffffffull) s->chunk_size = 0xffffffffull;
    return PLAIT_OK;
}

static int skipped_by_default(const char *name) {
    static const char *const prefixes[] = {"docker", "virbr", "veth", "br-", "lo", NULL};
    for (int i = 0; prefixes[i]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

static int usable(const struct ifaddrs *a) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) return 0;
    if (a->ifa_addr->sa_family == AF_INET) return 1;
    if (a->ifa_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a->ifa_addr;
        return !IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
    }
    return 0;
}

static void fill(const struct ifaddrs *a, tcp_addr_info *info, struct sockaddr_storage *ss, socklen_t *sl) {
    memset(ss, 0, sizeof *ss);
    if (a->ifa_addr->sa_family == AF_INET) {
        memcpy(ss, a->ifa_addr, sizeof(struct sockaddr_in));
        ((struct sockaddr_in *)ss)->sin_port = 0;
        *sl = sizeof(struct sockaddr_in);
        info->family = AF_INET;
        memcpy(info->addr, &((struct sockaddr_in *)ss)->sin_addr, 4);
    } else {
        memcpy(ss, a->ifa_addr, sizeof(struct sockaddr_in6));
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
        *sl = sizeof(struct sockaddr_in6);
        info->family = AF_INET6;
        memcpy(info->addr, &((struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
    snprintf(info->ifname, sizeof info->ifname, "%s", a->ifa_name);
}

/* Pick the best entry matching `want` (NULL = any suitable): IPv4 first. */
static const struct ifaddrs *pick(const struct ifaddrs *list, const char *want, int prefix) {
    for (int fam = 0; fam < 2; fam++)
        for (const struct ifaddrs *a = list; a; a = a->ifa_next) {
            if (!usable(a)) continue;
            if ((fam == 0) != (a->ifa_addr->sa_family == AF_INET)) continue;
            if (want) {
                if (prefix ? strncmp(a->ifa_name, want, strlen(want)) != 0 : strcmp(a->ifa_name, want) != 0)
                    continue;
            } else if (skipped_by_default(a->ifa_name) || (a->ifa_flags & IFF_LOOPBACK)) {
                continue;
            }
            return a;
        }
    return NULL;
}

plait_status tcp_pick_address(const plait_host *h, const tcp_settings *cfg, int all_local,
                              tcp_addr_info *info, struct sockaddr_storage *ss, socklen_t *sl) {
    if (!cfg->ifname[0] && all_local) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        memset(ss, 0, sizeof *ss);
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *sl = sizeof *in;
        info->family = AF_INET;
        memcpy(info->addr, &in->sin_addr, 4);
        snprintf(info->ifname, sizeof info->ifname, "lo");
        return PLAIT_OK;
    }
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return h->set_error(PLAIT_ERR_SYSTEM, "tcp: cannot list network interfaces: %s", strerror(errno));
    const struct ifaddrs *a = NULL;
    if (cfg->ifname[0]) {
        a = pick(list, cfg->ifname, 0);
        if (!a) a = pick(list, cfg->ifname, 1);
    } else {
        a = pick(list, NULL, 0);
    }
    if (!a) {
        char names[512] = "";
        size_t off = 0;
        for (const struct ifaddrs *x = list; x && off + 64 < sizeof names; x = x->ifa_next) {
            if (!usable(x)) continue;
            char ip[INET6_ADDRSTRLEN];
            const void *p = x->ifa_addr->sa_family == AF_INET
                                ? (const void *)&((struct sockaddr_in *)x->ifa_addr)->sin_addr
                                : (const void *)&((struct sockaddr_in6 *)x->ifa_addr)->sin6_addr;
            inet_ntop(x->ifa_addr->sa_family, p, ip, sizeof ip);
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s (%s)", off ? ", " : "", x->ifa_name, ip);
        }
        freeifaddrs(list);
        if (cfg->ifname[0])
            return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                                "[comm.tcp] ifname = '%s' matches no interface that is up with an address; "
                                "interfaces here: %s", cfg->ifname, off ? names : "(none)");
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "tcp: ranks run on several hosts but this one has no usable network interface "
                            "(interfaces here: %s); set [comm.tcp] ifname", off ? names : "(none)");
    }
    fill(a, info, ss, sl);
    freeifaddrs(list);
    return PLAIT_OK;
}

void tcp_tune_socket(const tcp_engine *eng, int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (eng->cfg.sndbuf > 0) {
        int v = eng->cfg.sndbuf > (1 << 30) ? (1 << 30) : (int)eng->cfg.sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    if (eng->cfg.rcvbuf > 0) {
        int v = eng->cfg.rcvbuf > (1 << 30) ? (1 << 30) : (int)eng->cfg.rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    }
}

static const char *addr_text(const tcp_addr_info *i, char *buf, size_t cap) {
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(i->family, i->addr, ip, sizeof ip);
    snprintf(buf, cap, i->family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, i->port);
    return buf;
}

static const char *peer_text(int fd, char *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    snprintf(buf, cap, "%s:%d", ip, port);
    return buf;
}

/* One connection being set up. */
struct pend {
    int fd;
    int outgoing;
    int peer, stream;  /* outgoing: target; incoming: from the hello */
    int state;         /* 0 connecting, 1 sending hello, 2 reading ack / hello */
    size_t off;
    unsigned char buf[sizeof(tcp_hello)];
    char who[64];
};

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n) {
    unsigned d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned)(a[i] ^ b[i]);
    return d == 0;
}

static void stray(tcp_engine *eng, struct pend *p, const char *why) {
    eng->rejected++;
    eng->host->log(PLAIT_LOG_WARN, TCP_COMPONENT,
                   "rejected a connection from %s on the transport port: %s (the job goes on)", p->who, why);
    close(p->fd);
    p->fd = -1;
}

static void install(tcp_engine *eng, struct pend *p) {
    tcp_conn *c = &eng->peers[p->peer].conns[p->stream];
    c->fd = p->fd;
    c->peer = p->peer;
    c->stream = p->stream;
    p->fd = -1;
}

/* Validate a complete hello on an incoming connection; 1 = accepted. */
static int accept_hello(tcp_engine *eng, struct pend *p) {
    tcp_hello h;
    memcpy(&h, p->buf, sizeof h);
    char why[160];
    if (h.magic != TCP_HELLO_MAGIC) snprintf(why, sizeof why, "bad hello magic 0x%08x (not a plait rank)", h.magic);
    else if (h.version != TCP_WIRE_VERSION) snprintf(why, sizeof why, "wire version %u, expected %u", h.version, TCP_WIRE_VERSION);
    else if (!ct_equal(h.secret, eng->secret, TCP_SECRET_BYTES)) snprintf(why, sizeof why, "wrong secret (claims rank %d)", h.from_rank);
    else if (h.to_rank != eng->rank || h.world_size != eng->size) snprintf(why, sizeof why, "addressed to rank %d of %d", h.to_rank, h.world_size);
    else if (h.from_rank < 0 || h.from_rank >= eng->rank) snprintf(why, sizeof why, "claims rank %d, which does not connect to rank %d", h.from_rank, eng->rank);
    else if (h.streams != eng->cfg.streams || h.stream >= eng->cfg.streams) snprintf(why, sizeof why, "stream %u of %u, expected %d streams", h.stream, h.streams, eng->cfg.streams);
    else if (eng->peers[h.from_rank].conns[h.stream].fd >= 0) snprintf(why, sizeof why, "duplicate stream %u from rank %d", h.stream, h.from_rank);
    else why[0] = '\0';
    if (why[0]) {
        stray(eng, p, why);
        return 0;
    }
    tcp_ack ack = {TCP_ACK_MAGIC, eng->rank};
    if (send(p->fd, &ack, sizeof ack, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof ack) {
        stray(eng, p, "could not answer its hello");
        return 0;
    }
    p->peer = h.from_rank;
    p->stream = h.stream;
    install(eng, p);
    return 1;
}

/* The connections of tcp_connect_all being set up: the outgoing ones first
 * (n_out: one per later rank and stream), then the incoming ones as they
 * are accepted (strays included, up to cap). */
typedef struct setup {
    tcp_engine *eng;
    const tcp_addr_info *infos;
    struct pend *pends;
    struct pollfd *pfd; /* the listening socket, then each open connection */
    int *pidx;          /* pfd's connection index, -1 the listening socket */
    size_t cap, np;
    int n_out, in_needed, out_done, in_done;
} setup;

/* The address a peer listens on, from its published info. */
static void peer_address(const tcp_addr_info *info, struct sockaddr_storage *ss, socklen_t *sl) {
    memset(ss, 0, sizeof *ss);
    if (info->family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, info->addr, 16);
        a->sin6_port = htons(info->port);
        *sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, info->addr, 4);
        a->sin_port = htons(info->port);
        *sl = sizeof *a;
    }
}

/* Every outgoing connection started (to each later rank, one per stream),
 * its hello ready to send. */
static plait_status start_outgoing(setup *su) {
    tcp_engine *eng = su->eng;
    const plait_host *h = eng->host;
    int S = eng->cfg.streams, me = eng->rank, n = eng->size;
    for (int peer = me + 1; peer < n; peer++)
        for (int s = 0; s < S; s++) {
            struct pend *p = &su->pends[su->np++];
            p->outgoing = 1;
            p->peer = peer;
            p->stream = s;
            addr_text(&su->infos[peer], p->who, sizeof p->who);
            struct sockaddr_storage ss;
            socklen_t sl;
            peer_address(&su->infos[peer], &ss, &sl);
            p->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (p->fd < 0) return h->set_error(PLAIT_ERR_SYSTEM, "tcp: socket(): %s", strerror(errno));
            tcp_tune_socket(eng, p->fd);
            if (connect(p->fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS)
                return h->set_error(PLAIT_ERR_PEER_LOST, "tcp: rank %d cannot connect to rank %d at %s: %s", me, peer,
                                    p->who, strerror(errno));
            tcp_hello hello = {.magic = TCP_HELLO_MAGIC, .version = TCP_WIRE_VERSION, .stream = (uint16_t)s,
                               .from_rank = me, .to_rank = peer, .world_size = n, .streams = (uint16_t)S};
            memcpy(hello.secret, su->infos[peer].secret, TCP_SECRET_BYTES);
            memcpy(p->buf, &hello, sizeof hello);
        }
    return PLAIT_OK;
}

/* The incoming connections waiting on the listening socket, each in a free
 * incoming slot (one a stray left), its hello to be read. */
static void accept_incoming(setup *su) {
    tcp_engine *eng = su->eng;
    for (;;) {
        int fd = accept4(eng->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        size_t slot = su->np;
        for (size_t i = (size_t)su->n_out; i < su->np; i++)
            if (su->pends[i].fd < 0 && !su->pends[i].outgoing) {
                slot = i;
                break;
            }
        if (slot == su->np && su->np == su->cap) { /* too many strays at once */
            eng->rejected++;
            close(fd);
            continue;
        }
        if (slot == su->np) su->np++;
        struct pend *p = &su->pends[slot];
        memset(p, 0, sizeof *p);
        p->fd = fd;
        p->state = 2;
        peer_text(fd, p->who, sizeof p->who);
        tcp_tune_socket(eng, fd);
    }
}

/* An outgoing connection that is writable: connected (or refused), then its
 * hello sent as far as the socket takes it. */
static plait_status send_hello(setup *su, struct pend *p) {
    const plait_host *h = su->eng->host;
    int me = su->eng->rank;
    if (p->state == 0) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err)
            return h->set_error(PLAIT_ERR_PEER_LOST, "tcp: rank %d cannot connect to rank %d at %s (stream %d): %s", me,
                                p->peer, p->who, p->stream, strerror(err));
        p->state = 1;
    }
    ssize_t w = send(p->fd, p->buf + p->off, sizeof(tcp_hello) - p->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EINTR)
        return h->set_error(PLAIT_ERR_PEER_LOST, "tcp: rank %d lost its new connection to rank %d at %s: %s", me,
                            p->peer, p->who, strerror(errno));
    if (w > 0) p->off += (size_t)w;
    if (p->off == sizeof(tcp_hello)) {
        p->state = 2;
        p->off = 0;
    }
    return PLAIT_OK;
}

/* A connection that is readable: an outgoing one's ack (the connection is
 * then installed), an incoming one's hello (checked, answered, installed,
 * or the connection rejected as a stray). */
static plait_status read_reply(setup *su, struct pend *p) {
    tcp_engine *eng = su->eng;
    const plait_host *h = eng->host;
    int me = eng->rank;
    size_t want = p->outgoing ? sizeof(tcp_ack) : sizeof(tcp_hello);
    ssize_t r = recv(p->fd, p->buf + p->off, want - p->off, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        if (p->outgoing)
            return h->set_error(PLAIT_ERR_PEER_LOST,
                                "tcp: rank %d at %s closed the connection from rank %d during setup (%s): "
                                "it refused our hello or exited",
                                p->peer, p->who, me, r == 0 ? "end of stream" : strerror(errno));
        stray(eng, p, r == 0 ? "closed before completing its hello" : strerror(errno));
        return PLAIT_OK;
    }
    if (r < 0) return PLAIT_OK;
    p->off += (size_t)r;
    if (p->off < want) return PLAIT_OK;
    if (p->outgoing) {
        tcp_ack ack;
        memcpy(&ack, p->buf, sizeof ack);
        if (ack.magic != TCP_ACK_MAGIC || ack.rank != p->peer)
            return h->set_error(PLAIT_ERR_PROTOCOL,
                                "tcp: %s answered rank %d's hello with garbage: it is "
                                "not rank %d of this job",
                                p->who, me, p->peer);
        install(eng, p);
        su->out_done++;
    } else if (accept_hello(eng, p)) {
        su->in_done++;
    }
    return PLAIT_OK;
}

/* Poll every connection until all are installed or the time is up. */
static plait_status connect_until(setup *su, double timeout_s) {
    tcp_engine *eng = su->eng;
    const plait_host *h = eng->host;
    double deadline = h->now() + timeout_s;
    while (su->out_done < su->n_out || su->in_done < su->in_needed) {
        double left = deadline - h->now();
        if (left <= 0) break;
        size_t k = 0;
        su->pfd[k] = (struct pollfd){eng->listen_fd, POLLIN, 0};
        su->pidx[k++] = -1;
        for (size_t i = 0; i < su->np; i++) {
            if (su->pends[i].fd < 0) continue;
            short ev = su->pends[i].state == 2 ? POLLIN : POLLOUT;
            su->pfd[k] = (struct pollfd){su->pends[i].fd, ev, 0};
            su->pidx[k++] = (int)i;
        }
        int rc = poll(su->pfd, (nfds_t)k, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return h->set_error(PLAIT_ERR_SYSTEM, "tcp: poll: %s", strerror(errno));
        for (size_t j = 0; j < k; j++) {
            if (!su->pfd[j].revents) continue;
            if (su->pidx[j] < 0) {
                accept_incoming(su);
                continue;
            }
            struct pend *p = &su->pends[su->pidx[j]];
            plait_status st = p->outgoing && p->state < 2 ? send_hello(su, p) : read_reply(su, p);
            if (st != PLAIT_OK) return st;
        }
    }
    return PLAIT_OK;
}

/* The time ran out: which peers did not connect, or did not answer. */
static plait_status report_missing(const setup *su, double timeout_s) {
    const tcp_engine *eng = su->eng;
    int S = eng->cfg.streams, me = eng->rank;
    char failure[512] = "";
    size_t off = 0;
    for (int peer = 0; peer < me && off + 40 < sizeof failure; peer++)
        for (int s = 0; s < S; s++)
            if (eng->peers[peer].conns[s].fd < 0) {
                off += (size_t)snprintf(failure + off, sizeof failure - off, "%sno connection from rank %d",
                                        off ? "; " : "", peer);
                break;
            }
    const struct pend *pends = su->pends;
    for (size_t i = 0; i < (size_t)su->n_out && off + 80 < sizeof failure; i++)
        if (pends[i].fd >= 0) {
            off += (size_t)snprintf(failure + off, sizeof failure - off, "%srank %d at %s %s", off ? "; " : "",
                                    pends[i].peer, pends[i].who,
                                    pends[i].state == 0 ? "did not accept the connection" : "did not answer the hello");
            /* one line per peer is enough */
            while (i + 1 < (size_t)su->n_out && pends[i + 1].peer == pends[i].peer) i++;
        }
    return eng->host->set_error(PLAIT_ERR_TIMEOUT, "tcp: rank %d could not connect to every peer within %.3g s: %s", me,
                                timeout_s, failure);
}

plait_status tcp_connect_all(tcp_engine *eng, const tcp_addr_info *infos, double timeout_s) {
    int S = eng->cfg.streams, me = eng->rank, n = eng->size;
    setup su = {.eng = eng, .infos = infos, .n_out = (n - 1 - me) * S, .in_needed = me * S};
    su.cap = (size_t)su.n_out + 64;
    su.pends = calloc(su.cap, sizeof *su.pends);
    su.pfd = calloc(su.cap + 1, sizeof *su.pfd);
    su.pidx = calloc(su.cap + 1, sizeof *su.pidx);
    plait_status st = PLAIT_OK;
    if (!su.pends || !su.pfd || !su.pidx)
        st = eng->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory setting up connections");
    if (st == PLAIT_OK) st = start_outgoing(&su);
    if (st == PLAIT_OK) st = connect_until(&su, timeout_s);
    if (st == PLAIT_OK && (su.out_done < su.n_out || su.in_done < su.in_needed)) st = report_missing(&su, timeout_s);
    if (su.pends)
        for (size_t i = 0; i < su.np; i++)
            if (su.pends[i].fd >= 0) close(su.pends[i].fd);
    free(su.pends);
    free(su.pfd);
    free(su.pidx);
    return st;
}
