/*
 * Deliberately broken copies of the example transport (sdk/examples/uds),
 * for the tests that show `plait plugin test` catches each broken rule. Each
 * build defines one BREAK_* macro; the plugin delegates everything to the
 * real "uds" plugin (found by name through host->plugin_ops, as a
 * delegating transport would) and breaks exactly one rule on the way:
 *   BREAK_REORDER  [order]     the first of two sends of one (peer, user tag)
 *                              is held back and posted after the second
 *   BREAK_DROP     [delivery]  every 4th user-tag send of 8+ bytes completes
 *                              without being sent
 *   BREAK_NEVER_COMPLETE [progress]  test() never reports completion (only
 *                              wait() does), so a request polled by test()
 *                              never completes
 *   BREAK_LEAK     [cleanup]   destroy() forgets the communicator: its
 *                              sockets stay open
 *   BREAK_FORK     (no rule)   init() forks a helper that sleeps 600 s holding
 *                              copies of the rank's descriptors (its store
 *                              sockets among them) and never execs
 *   BREAK_HANG     [timeout]   wait() ignores its timeout: it returns only
 *                              when the request completes, so a request
 *                              nobody completes holds the caller for ever
 *   BREAK_EXIT     (no rule)   init() on world rank 1 calls exit(0): the
 *                              rank ends "cleanly" before its run has
 *                              begun, its peers waiting for it
 *   BREAK_RAWEXIT  (no rule)   init() on world rank 1 calls _exit(0), which
 *                              no exit handler sees: only the launcher can
 *                              tell the rank did not finish its command
 *   BREAK_INITHANG, BREAK_DERIVEHANG, BREAK_DESTROYHANG  [setup]  init(),
 *                              derive() or destroy() never returns, on
 *                              every rank, whatever the bootstrap's timeout
 *   BREAK_CHDIR    (no rule)   init() changes the working directory to /
 *   BREAK_SETENV   (no rule)   init() sets PLAIT_COMM_TIMEOUT (a setting)
 *                              and PLAIT_JOB_TOKEN (a secret)
 *   BREAK_LOADENV  (no rule)   its entry, run as the file is loaded, sets
 *                              PLAIT_LOADED_BY
 *   BREAK_SENDENV  (no rule)   its 20th isend() on a communicator sets
 *                              PLAIT_SENT_BY (long after init: in a
 *                              collective)
 * Collective tags (bit 31 set) pass through untouched, so the core's
 * collectives keep working and each copy fails its own rule.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep */
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <plait/plait.h>

#ifndef BROKEN_NAME
#error "BROKEN_NAME must be defined"
#endif

static const plait_host *host;
static const plait_comm_ops *inner;

#define MAX_HELD 64

typedef struct wreq {
    void *in;          /* the real request; NULL while held or when dropped */
    int dropped;       /* completes at once, never sent */
    int received;      /* a receive (BREAK_FLIP flips a bit of what it delivers) */
    plait_buffer buf;
    int peer;
    uint32_t tag;
} wreq;

typedef struct wcomm {
    void *in;
    wreq *held[MAX_HELD];
    int n_held;
    unsigned sends;
} wcomm;

#if defined(BREAK_REORDER) || defined(BREAK_DROP)
/* The sends a broken copy tampers with: user tags, 8 bytes or more. */
static int user_tag(uint32_t tag, const plait_buffer *buf) { return tag < 0x80000000u && buf->bytes >= 8; }
#endif

#if defined(BREAK_INITHANG) || defined(BREAK_DERIVEHANG) || defined(BREAK_DESTROYHANG)
/* Waits for a peer that never answers, and never gives up. */
static void hang(void) {
    for (;;) {
        struct timespec d = {1, 0};
        nanosleep(&d, NULL);
    }
}
#endif

static plait_status w_init(const plait_comm_init *args, void **out) {
#ifdef BREAK_INITHANG
    hang();
#endif
#ifdef BREAK_CHDIR
    if (chdir("/") != 0) return host->set_error(PLAIT_ERR_SYSTEM, "chdir");
#endif
#ifdef BREAK_SETENV
    setenv("PLAIT_COMM_TIMEOUT", "1", 1);
    setenv("PLAIT_JOB_TOKEN", "hunter2", 1);
#endif
#ifdef BREAK_EXIT
    if (args->world_rank == 1) exit(0);
#endif
#ifdef BREAK_RAWEXIT
    if (args->world_rank == 1) _exit(0);
#endif
#ifdef BREAK_FORK
    if (fork() == 0) {
        struct timespec d = {600, 0};
        nanosleep(&d, NULL);
        _exit(0);
    }
#endif
    inner = host->plugin_ops(PLAIT_KIND_COMM, "uds");
    if (!inner) return PLAIT_ERR_UNSUPPORTED;
    wcomm *c = calloc(1, sizeof *c);
    if (!c) return host->set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = inner->init(args, &c->in);
    if (st != PLAIT_OK) free(c);
    else *out = c;
    return st;
}

static plait_status w_derive(void *parent, const plait_comm_derive *args, void **out) {
#ifdef BREAK_DERIVEHANG
    hang();
#endif
    wcomm *c = calloc(1, sizeof *c);
    if (!c) return host->set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = inner->derive(((wcomm *)parent)->in, args, &c->in);
    if (st != PLAIT_OK) free(c);
    else *out = c;
    return st;
}

static void w_destroy(void *comm) {
    wcomm *c = comm;
#ifdef BREAK_DESTROYHANG
    hang();
#endif
#ifndef BREAK_LEAK
    inner->destroy(c->in);
#endif
    for (int i = 0; i < c->n_held; i++) free(c->held[i]);
    free(c);
}

static void w_abort(void *comm, const char *reason) { inner->abort(((wcomm *)comm)->in, reason); }

static plait_status w_isend(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    wcomm *c = comm;
    wreq *r = calloc(1, sizeof *r);
    if (!r) return host->set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    *r = (wreq){.buf = *buf, .peer = peer, .tag = tag};
    *req = r;
#ifdef BREAK_SILENT
    /* fails without host->set_error, against plait/comm.h */
    if (++c->sends > 60) {
        free(r);
        *req = NULL;
        return PLAIT_ERR_SYSTEM;
    }
#endif
#ifdef BREAK_DROP
    if (user_tag(tag, buf) && ++c->sends % 4 == 0) {
        r->dropped = 1;
        return PLAIT_OK;
    }
#endif
#ifdef BREAK_REORDER
    if (user_tag(tag, buf)) {
        for (int i = 0; i < c->n_held; i++) {
            wreq *h = c->held[i];
            if (h->peer != peer || h->tag != tag) continue;
            c->held[i] = c->held[--c->n_held];
            plait_status st = inner->isend(c->in, buf, peer, tag, mr, &r->in);
            if (st == PLAIT_OK) st = inner->isend(c->in, &h->buf, peer, tag, NULL, &h->in);
            return st;
        }
        if (c->n_held < MAX_HELD) {
            c->held[c->n_held++] = r;
            return PLAIT_OK;
        }
    }
#endif
#ifdef BREAK_SENDENV
    if (++c->sends == 20) setenv("PLAIT_SENT_BY", BROKEN_NAME, 1);
#endif
    (void)c;
    return inner->isend(c->in, buf, peer, tag, mr, &r->in);
}

static plait_status w_irecv(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    wreq *r = calloc(1, sizeof *r);
    if (!r) return host->set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    *r = (wreq){.buf = *buf, .peer = peer, .tag = tag, .received = 1};
    *req = r;
    return inner->irecv(((wcomm *)comm)->in, buf, peer, tag, mr, &r->in);
}

/* A receive just completed: BREAK_FLIP corrupts it (bit 57 of its first
 * 8 bytes, whatever its tag), as a transport with a bad copy would. */
static void delivered(const wreq *r) {
#ifdef BREAK_FLIP
    if (r->received && r->buf.bytes >= 8 && r->buf.kind == PLAIT_MEM_HOST)
        ((unsigned char *)r->buf.ptr)[7] ^= 0x02;
#else
    (void)r;
#endif
}

static plait_status w_test(void *comm, void *req, int *done, size_t *bytes) {
    wreq *r = req;
#ifdef BREAK_NEVER_COMPLETE
    (void)comm;
    (void)bytes;
    (void)r;
    *done = 0;
    return PLAIT_OK;
#else
    if (r->dropped) {
        *done = 1;
        if (bytes) *bytes = r->buf.bytes;
        free(r);
        return PLAIT_OK;
    }
    if (!r->in) { /* held back */
        *done = 0;
        return PLAIT_OK;
    }
    plait_status st = inner->test(((wcomm *)comm)->in, r->in, done, bytes);
    if (st == PLAIT_OK && *done) delivered(r);
    if (st != PLAIT_OK || *done) free(r);
    return st;
#endif
}

static plait_status w_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    wreq *r = req;
    if (r->dropped) {
        if (bytes) *bytes = r->buf.bytes;
        free(r);
        return PLAIT_OK;
    }
    if (!r->in) { /* held back: nothing can complete it */
        struct timespec d = {(time_t)timeout_s, (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
        nanosleep(&d, NULL);
        return host->set_error(PLAIT_ERR_TIMEOUT, "%s: a held-back send timed out", BROKEN_NAME);
    }
#ifdef BREAK_HANG
    plait_status st;
    while ((st = inner->wait(((wcomm *)comm)->in, r->in, 3600, bytes)) == PLAIT_ERR_TIMEOUT) {}
    (void)timeout_s;
#else
    plait_status st = inner->wait(((wcomm *)comm)->in, r->in, timeout_s, bytes);
#endif
    if (st == PLAIT_OK) delivered(r);
    if (st != PLAIT_ERR_TIMEOUT) free(r);
    return st;
}

static const plait_comm_ops ops = {
    .struct_size = sizeof(plait_comm_ops),
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED),
    .init = w_init,
    .derive = w_derive,
    .destroy = w_destroy,
    .abort = w_abort,
    .isend = w_isend,
    .irecv = w_irecv,
    .test = w_test,
    .wait = w_wait,
};

static const plait_plugin_desc desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = 0,
    .kind = PLAIT_KIND_COMM,
    .name = BROKEN_NAME,
    .version = "0.0.1",
    .description = "a deliberately broken copy of the uds example (tests)",
    .ops = &ops,
};

static const plait_plugin_desc *const list[] = {&desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *h,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
#ifdef BREAK_LOADENV
    setenv("PLAIT_LOADED_BY", BROKEN_NAME, 1);
#endif
    host = h;
    *descs = list;
    *count = 1;
    return PLAIT_OK;
}
