/*
 * The messages between a rank and its launcher's replica keeper
 * (elastic/agent.h, elastic/agent_client.h): one SOCK_SEQPACKET socket
 * pair per rank, one request and one reply at a time, a memfd passed
 * with SCM_RIGHTS where a message carries one. Internal to elastic/.
 */
#ifndef PLAIT_CORE_ELASTIC_AGENT_WIRE_H
#define PLAIT_CORE_ELASTIC_AGENT_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AGENT_MAGIC 0x504c4147u
#define AGENT_MAX_LIST 64

enum {
    AGENT_PUT = 1,     /* keep this replica (fd attached); reply: status */
    AGENT_LIST = 2,    /* reply: count entries */
    AGENT_GET = 3,     /* reply: status, the entry and its fd when present */
    AGENT_REGROUP = 4  /* reply: status 1 when a host waits to join */
};

/* What a launcher holds: one image of a checkpoint shard (checkpoint/ckpt_image.h). */
typedef struct agent_entry {
    int64_t step;
    int32_t shard, n_shards;
    uint64_t bytes;
    uint32_t crc;      /* the image's own CRC32C, as its writer computed it */
    int32_t origin;    /* the node that wrote it (for messages) */
} agent_entry;

typedef struct agent_msg {
    uint32_t magic;
    uint32_t op;
    int32_t status;    /* reply: 0 ok, 1 not found / yes, -1 refused */
    int32_t count;     /* LIST reply: entries that follow */
    agent_entry e;     /* PUT, GET: the entry; GET reply: the one found */
} agent_msg;

/* One message on a socket pair, with `fd` attached when >= 0 (SCM_RIGHTS).
 * Returns what sendmsg returns (EINTR retried). */
ssize_t agent_send(int sock, const void *buf, size_t len, int fd);
/* One message into buf (at most len bytes): its length (0 at the end, -1
 * on error), *fd the attached fd or -1 (close-on-exec), *cut 1 when the
 * message or its fd did not fit. */
ssize_t agent_recv(int sock, void *buf, size_t len, int *fd, int *cut);

#endif
