#include "launch/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"

plait_status plait_net_split_hostport(const char *text, const char *what, char *host, size_t host_cap,
                                      int *port) {
    const char *colon;
    const char *h = text;
    size_t hl;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s '%s' is not [ipv6-address]:port", what, text);
        h = text + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s '%s' has no port (expected host:port)",
                                   what, text);
        hl = (size_t)(colon - text);
    }
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (hl == 0 || hl >= host_cap || errno || !end || *end || end == colon + 1 || p < 1 || p > 65535)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s '%s' is not host:port with a port in 1..65535", what, text);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return PLAIT_OK;
}

plait_status plait_net_resolve(const char *host, int port, struct sockaddr_storage *out,
                               socklen_t *out_len) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0 || !res)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot resolve host '%s': %s", host,
                               rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    /* Prefer IPv4 when both exist: it is what loopback-only setups have. */
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    memcpy(out, pick->ai_addr, pick->ai_addrlen);
    *out_len = pick->ai_addrlen;
    freeaddrinfo(res);
    return PLAIT_OK;
}

const char *plait_net_addr_str(const struct sockaddr *sa, char *buf, size_t cap) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(buf, cap, "%s:%d", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(buf, cap, "[%s]:%d", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, cap, "?");
    }
    return buf;
}

const char *plait_net_peer_str(int fd, char *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    return plait_net_addr_str((struct sockaddr *)&ss, buf, cap);
}

int plait_net_listen(const struct sockaddr *addr, socklen_t len, int backlog) {
    char where[80];
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        plait_set_error(PLAIT_ERR_SYSTEM, "socket(): %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, addr, len) != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        plait_set_error(PLAIT_ERR_SYSTEM, "cannot listen on %s: %s",
                        plait_net_addr_str(addr, where, sizeof where), strerror(e));
        return -1;
    }
    return fd;
}

/* One non-blocking connect bounded by `deadline`; returns fd or -1 (errno). */
static int connect_once(const struct sockaddr *addr, socklen_t len, double deadline) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, addr, len) != 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        for (;;) {
            double left = deadline - plait_clock_now();
            if (left <= 0) {
                close(fd);
                errno = ETIMEDOUT;
                return -1;
            }
            struct pollfd p = {fd, POLLOUT, 0};
            int r = poll(&p, 1, (int)(left * 1000) + 1);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
            if (r == 0) continue;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (err) {
                close(fd);
                errno = err;
                return -1;
            }
            break;
        }
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int plait_net_connect_retry(const struct sockaddr *addr, socklen_t len, double deadline,
                            const char *what) {
    int last = 0;
    char where[80];
    for (;;) {
        int fd = connect_once(addr, len, deadline);
        if (fd >= 0) return fd;
        last = errno;
        if (last != ECONNREFUSED && last != ENETUNREACH && last != EHOSTUNREACH &&
            last != ETIMEDOUT && last != ECONNRESET && last != EAGAIN)
            break;
        if (plait_clock_now() + 0.05 >= deadline) break;
        plait_clock_sleep(0.05);
    }
    plait_net_addr_str(addr, where, sizeof where);
    /* `what` may name the address already ("the job's store ... at HOST:PORT") */
    plait_set_error(last == ETIMEDOUT ? PLAIT_ERR_TIMEOUT : PLAIT_ERR_SYSTEM, "cannot connect to %s%s%s: %s", what,
                    strstr(what, where) ? "" : " at ", strstr(what, where) ? "" : where, strerror(last));
    return -1;
}

static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - plait_clock_now();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, events, 0};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r > 0) return 0;
    }
}

int plait_net_write_all(int fd, const void *buf, size_t len, double deadline) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline) != 0) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

int plait_net_read_all(int fd, void *buf, size_t len, double deadline) {
    char *p = buf;
    while (len > 0) {
        ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, deadline) != 0) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

plait_status plait_net_random(void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t r = getrandom(p, len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "getrandom(): %s", strerror(errno));
        p += r;
        len -= (size_t)r;
    }
    return PLAIT_OK;
}

void plait_net_hex(const void *bytes, size_t len, char *out) {
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = bytes;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = '\0';
}

int plait_net_ct_equal(const void *a, size_t alen, const void *b, size_t blen) {
    const volatile unsigned char *x = a, *y = b;
    unsigned diff = (unsigned)(alen ^ blen);
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(x[i] ^ y[i]);
    return diff == 0;
}

int plait_net_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}
