/* A rank's side of the replica keeper (agent_client.h). */
#include "elastic/agent_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "elastic/agent_wire.h"
#include "runtime/error.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* The keeper answers at once (it only keeps or hands back descriptors): a
 * reply later than the rank's [comm] timeout means its launcher is stopped
 * or stuck. After one missed reply the conversation is out of step, so the
 * keeper is lost. */
static double g_timeout_s = 300; /* under g_lock */
static int g_lost;               /* under g_lock */

void plait_agent_set_timeout(double seconds) {
    pthread_mutex_lock(&g_lock);
    if (seconds > 0) g_timeout_s = seconds;
    pthread_mutex_unlock(&g_lock);
}

static int agent_fd(void) {
    const char *v = getenv("PLAIT_AGENT_FD");
    char *end = NULL;
    long fd = v ? strtol(v, &end, 10) : -1;
    if (!v || !*v || *end || fd < 3 || fd > (1 << 20) || fcntl((int)fd, F_GETFD) < 0) return -1;
    return (int)fd;
}

int plait_agent_present(void) { return agent_fd() >= 0; }

/* One request (with `fd` attached when >= 0) and its reply (into rep,
 * rep_len bytes at most; *got its length; *rfd an attached fd or -1). */
static plait_status ask(const agent_msg *req, int fd, void *rep, size_t rep_len, size_t *got, int *rfd) {
    int sock = agent_fd();
    if (sock < 0)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "no replica keeper (this rank was not started by an elastic "
                                                      "launcher)");
    *rfd = -1;
    pthread_mutex_lock(&g_lock);
    if (g_lost) {
        pthread_mutex_unlock(&g_lock);
        return plait_set_error(PLAIT_ERR_PEER_LOST, "the launcher's replica keeper stopped answering earlier");
    }
    ssize_t r = agent_send(sock, req, sizeof *req, fd);
    if (r != (ssize_t)sizeof *req) {
        int e = errno;
        pthread_mutex_unlock(&g_lock);
        return plait_set_error(PLAIT_ERR_PEER_LOST, "the launcher's replica keeper: %s", strerror(e));
    }
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int pr;
    int ms = g_timeout_s * 1000 < 2e9 ? (int)(g_timeout_s * 1000) + 1 : 2000000000;
    do pr = poll(&p, 1, ms);
    while (pr < 0 && errno == EINTR);
    if (pr == 0) {
        g_lost = 1;
        pthread_mutex_unlock(&g_lock);
        return plait_set_error(PLAIT_ERR_TIMEOUT, "the launcher's replica keeper did not answer within %g s "
                                                  "([comm] timeout): this rank's launcher is stopped or stuck",
                               g_timeout_s);
    }
    int cut = 0;
    r = agent_recv(sock, rep, rep_len, rfd, &cut);
    int e = errno;
    pthread_mutex_unlock(&g_lock);
    if (r < (ssize_t)sizeof(agent_msg) || cut) {
        if (*rfd >= 0) close(*rfd);
        *rfd = -1;
        return plait_set_error(PLAIT_ERR_PEER_LOST, "the launcher's replica keeper did not answer (%s)",
                               r < 0 ? strerror(e) : "a short reply");
    }
    *got = (size_t)r;
    return PLAIT_OK;
}

static void to_info(const agent_entry *e, plait_replica_info *i) {
    *i = (plait_replica_info){.step = e->step, .shard = e->shard, .n_shards = e->n_shards, .bytes = e->bytes,
                              .crc = e->crc, .origin = e->origin};
}

plait_status plait_agent_put(const plait_replica_info *info, int fd) {
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_PUT};
    m.e = (agent_entry){.step = info->step, .shard = info->shard, .n_shards = info->n_shards, .bytes = info->bytes,
                        .crc = info->crc, .origin = info->origin};
    agent_msg rep;
    size_t got = 0;
    int rfd;
    plait_status st = ask(&m, fd, &rep, sizeof rep, &got, &rfd);
    if (rfd >= 0) close(rfd);
    if (st == PLAIT_OK && rep.status != 0)
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "the launcher's replica keeper could not keep the image of shard "
                                                  "%d at step %lld", info->shard, (long long)info->step);
    return st;
}

plait_status plait_agent_list(plait_replica_info *out, int cap, int *n) {
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_LIST};
    struct {
        agent_msg h;
        agent_entry e[AGENT_MAX_LIST];
    } rep;
    size_t got = 0;
    int rfd;
    *n = 0;
    plait_status st = ask(&m, -1, &rep, sizeof rep, &got, &rfd);
    if (rfd >= 0) close(rfd);
    if (st != PLAIT_OK) return st;
    int count = rep.h.count;
    if (count < 0 || count > AGENT_MAX_LIST || got != sizeof rep.h + sizeof(agent_entry) * (size_t)count)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "the launcher's replica keeper sent a malformed list");
    for (int i = 0; i < count && i < cap; i++) to_info(&rep.e[i], &out[(*n)++]);
    return PLAIT_OK;
}

plait_status plait_agent_get(int64_t step, int shard, int n_shards, int *fd, plait_replica_info *info) {
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_GET};
    m.e.step = step;
    m.e.shard = shard;
    m.e.n_shards = n_shards;
    agent_msg rep;
    size_t got = 0;
    *fd = -1;
    plait_status st = ask(&m, -1, &rep, sizeof rep, &got, fd);
    if (st != PLAIT_OK) return st;
    if (rep.status != 0 || *fd < 0) {
        if (*fd >= 0) close(*fd);
        *fd = -1;
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "this host holds no image of shard %d of %d at step %lld",
                               shard, n_shards, (long long)step);
    }
    to_info(&rep.e, info);
    return PLAIT_OK;
}

plait_status plait_agent_regroup(int *yes) {
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_REGROUP};
    agent_msg rep;
    size_t got = 0;
    int rfd;
    *yes = 0;
    plait_status st = ask(&m, -1, &rep, sizeof rep, &got, &rfd);
    if (rfd >= 0) close(rfd);
    if (st == PLAIT_OK) *yes = rep.status == 1;
    return st;
}

plait_status plait_replica_mem_create(size_t bytes, int *fd, void **map) {
    *fd = memfd_create("plait-replica", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (*fd < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
    if (ftruncate(*fd, (off_t)bytes) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return plait_set_error(e == ENOMEM || e == ENOSPC ? PLAIT_ERR_NO_MEMORY : PLAIT_ERR_SYSTEM,
                               "a replica of %zu bytes: %s", bytes, strerror(e));
    }
    *map = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*map == MAP_FAILED) {
        int e = errno;
        close(*fd);
        *fd = -1;
        *map = NULL;
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "mapping a replica of %zu bytes: %s", bytes, strerror(e));
    }
    return PLAIT_OK;
}

plait_status plait_replica_mem_seal(int fd, size_t bytes, void **map) {
    munmap(*map, bytes ? bytes : 1);
    *map = NULL;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "sealing a replica: %s", strerror(errno));
    const void *ro = NULL;
    plait_status st = plait_replica_mem_map(fd, bytes, &ro);
    *map = (void *)ro;
    return st;
}

plait_status plait_replica_mem_map(int fd, size_t bytes, const void **map) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        *map = NULL;
        return plait_set_error(PLAIT_ERR_SYSTEM, "mapping a replica of %zu bytes: %s", bytes, strerror(errno));
    }
    *map = p;
    return PLAIT_OK;
}
