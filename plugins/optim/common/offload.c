/*
 * The offloaded optimizer state (offload.h): host memory or one file per
 * rank, and the chunked AdamW step over it.
 *
 * The file holds exp_avg then exp_avg_sq, each rounded up to 4 KiB so that
 * every chunk's transfer is aligned for O_DIRECT (the page cache would hold
 * a second copy of what the host buffer streams). Where O_DIRECT is refused
 * (tmpfs) the file is opened without it. The file is reserved in full when
 * it is made (posix_fallocate, where the file system can), so a disk that
 * other writers fill later cannot cut a step short; it is unlinked once
 * open, so nothing is left behind however the run ends.
 *
 * The transfers go through io_uring where the ring can be made and the file
 * takes O_DIRECT, else through pread/pwrite threads (offload_io.h; buffered
 * I/O through a ring would only move the page cache's copying into the
 * kernel's own worker threads). PLAIT_OFFLOAD_IO = auto (the default),
 * io_uring (required: a refusal where it cannot be made) or threads.
 * PLAIT_OFFLOAD_ISA chooses the host AdamW's vectors the same way
 * (offload_adamw.c), where the update runs there (a device of its own).
 *
 * ZeRO-3's parameter slices (offload_params) are read ahead of their
 * gathers into a room of their own through the same I/O, never beside a
 * step's transfers: the step waits for them and forgets them first, since
 * it rewrites what they read.
 */
#include "offload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "offload_copy.h"
#include "offload_io.h"

#define ALIGN_BYTES 4096u
#define ALIGN_FLOATS (ALIGN_BYTES / sizeof(float))
#define TMPFS_MAGIC_ 0x01021994

/* At most this many parameter slices read ahead at once: with the step's
 * requests never in flight beside them (the step drops them first), the
 * ring's depth holds them and a synchronous read. */
#define PF_MAX 16

/* One parameter slice read ahead: elements [at, at + count) of the
 * parameter array into pf_buf + buf_off. */
struct pf_entry {
    size_t at, count, buf_off;
    int live;        /* read or being read, not yet fetched */
    offload_req req; /* the pool or the ring holds its address: never moved while live */
};

/* A piece's place in the step's update order. */
struct piece_rank {
    int32_t layer;
    size_t i; /* its number in the order posted */
};

struct optim_offload {
    const plait_host *host;
    const char *who;
    plait_optim_offload cfg;
    size_t numel;             /* per moment */
    size_t chunk;             /* floats per moment per slot: a multiple of ALIGN_FLOATS */
    int on_device;            /* tensor memory is not host memory: stage parameters and gradients */
    int threads;              /* math threads of the host step */
    optim_host_isa isa;       /* its vectors (PLAIT_OFFLOAD_ISA) */
    int n_arr;                /* arrays in the store: exp_avg, exp_avg_sq (2), and the parameter slices (3) */
    float *arr[3];            /* host mode: the arrays */
    float *stage_p, *stage_g; /* on_device: a chunk of parameters and of gradients */
    offload_copy *copy;       /* host mode on a device with events: the copies overlapped (offload_copy.h) */
    offload_piece *pieces;    /* its step's pieces, grown as needed */
    size_t cap_pieces;
    struct piece_rank *order; /* the order the step updates them in, grown as needed */
    size_t cap_order;
    int defer; /* copies back beside the next forward (optim_offload_defer) */
    /* nvme */
    int fd, fd_plain;
    int direct; /* fd was opened with O_DIRECT */
    char path[4096];
    uint64_t region; /* bytes of one array in the file */
    float *slot[3];  /* a chunk of each array, one after the other */
    offload_req rd[3][3], wr[3][3];
    size_t slot_c0[3]; /* the first element of the chunk each slot last held */
    offload_io *io;
    double waited;       /* seconds the steps blocked on the disk */
    double fetch_waited; /* seconds the parameter fetches waited for the disk */
    double stepping;     /* seconds inside optim_offload_step */
    uint64_t bytes_read, bytes_written;
    int64_t steps;
    /* parameter slices read ahead of their fetch (optim_offload_prefetch) */
    float *pf_buf;
    size_t pf_cap, pf_used; /* floats */
    struct pf_entry pf[PF_MAX];
    int n_pf; /* live entries */
    uint64_t fetches, pf_started, pf_hits, pf_dropped;
};

static void *alloc_host(const plait_host *host, size_t bytes, const char *tag) {
    /* page-locked where the device has it: the staging copies and O_DIRECT
     * both want page-aligned, and copies to a GPU pinned, memory */
    plait_mem_kind kind = plait_has_device(host) ? PLAIT_MEM_HOST_PINNED : PLAIT_MEM_HOST;
    return host->alloc(bytes ? bytes : 1, kind, ALIGN_BYTES, tag);
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void prefetch_drop(optim_offload *o);

void optim_offload_close(optim_offload *o) {
    if (!o) return;
    const plait_host *h = o->host;
    if (o->steps > 0 && o->cfg.mode == PLAIT_OFFLOAD_NVME)
        h->log(PLAIT_LOG_INFO, o->who,
               "offload: %lld step(s) streamed %.3f GB in and %.3f GB out of %s; the updates took %.3f s, of which "
               "%.3f s waiting for the disk; the parameter fetches waited for it %.3f s",
               (long long)o->steps, (double)o->bytes_read / 1e9, (double)o->bytes_written / 1e9, o->path, o->stepping,
               o->waited, o->fetch_waited);
    if (o->fetches > 0 && o->cfg.mode == PLAIT_OFFLOAD_NVME)
        h->log(PLAIT_LOG_INFO, o->who,
               "offload: %llu of %llu parameter fetches were read ahead (%llu reads started, %llu dropped unused)",
               (unsigned long long)o->pf_hits, (unsigned long long)o->fetches, (unsigned long long)o->pf_started,
               (unsigned long long)o->pf_dropped);
    if (o->steps > 0 && o->on_device && o->cfg.mode != PLAIT_OFFLOAD_NVME)
        h->log(PLAIT_LOG_INFO, o->who, "offload: %lld step(s) updated in host memory (%s, %d thread(s)) in %.3f s",
               (long long)o->steps, optim_host_isa_name(o->isa), o->threads, o->stepping);
    if (o->io) {
        prefetch_drop(o);
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < o->n_arr; k++) {
                offload_io_wait(o->io, &o->rd[s][k]);
                offload_io_wait(o->io, &o->wr[s][k]);
            }
        offload_io_destroy(o->io);
    }
    if (o->fd >= 0) close(o->fd);
    if (o->fd_plain >= 0) close(o->fd_plain);
    for (int s = 0; s < 3; s++) h->free(o->slot[s]);
    for (int k = 0; k < 3; k++) h->free(o->arr[k]);
    h->free(o->pf_buf);
    h->free(o->stage_p);
    h->free(o->stage_g);
    offload_copy_close(o->copy);
    free(o->pieces);
    free(o->order);
    free(o);
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* long: the checks before step 1, each with its own message (a missing or
 * read-only directory, too little free space, tmpfs), then the file made,
 * reserved and unlinked */
static plait_status open_file(optim_offload *o, int rank) {
    const plait_host *h = o->host;
    const char *dir = o->cfg.path;
    uint64_t need = (uint64_t)o->n_arr * o->region;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return h->set_error(PLAIT_ERR_INVALID_ARG,
                            "%s: [optim] offload_path = %s: %s; it must be an existing directory on a local disk "
                            "(the state needs %.3f GiB there)",
                            o->who, dir, errno ? strerror(errno) : "not a directory", gib(need));
    struct statvfs vfs;
    uint64_t avail = 0;
    if (statvfs(dir, &vfs) == 0) {
        avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (vfs.f_flag & ST_RDONLY)
            return h->set_error(PLAIT_ERR_INVALID_ARG,
                                "%s: [optim] offload_path = %s is on a read-only file system (%.3f GiB free; the "
                                "state needs %.3f GiB)",
                                o->who, dir, gib(avail), gib(need));
        if (avail < need)
            return h->set_error(PLAIT_ERR_NO_MEMORY,
                                "%s: [optim] offload_path = %s has %.3f GiB free; this rank's optimizer state needs "
                                "%.3f GiB (every rank sharing the disk needs its own)",
                                o->who, dir, gib(avail), gib(need));
        struct statfs fs;
        if (statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC_ && rank == 0)
            h->log(PLAIT_LOG_WARN, o->who,
                   "[optim] offload_path = %s is a tmpfs: its %.3f GiB of state files live in memory, counting "
                   "against the host memory offload was to spare (%.3f GiB free there)",
                   dir, gib(need), gib(avail));
    }
    snprintf(o->path, sizeof o->path, "%s/plait-%s-state-%ld-rank%d.bin", dir, o->who, (long)getpid(), rank);
    o->fd = open(o->path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    o->direct = o->fd >= 0;
    if (o->fd < 0 && errno == EINVAL) o->fd = open(o->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (o->fd < 0)
        return h->set_error(PLAIT_ERR_SYSTEM,
                            "%s: [optim] offload_path: cannot create %s: %s (the state needs %.3f GiB)", o->who,
                            o->path, strerror(errno), gib(need));
    o->fd_plain = open(o->path, O_RDWR | O_CLOEXEC);
    int err = o->fd_plain < 0 ? errno : 0;
    if (!err) {
        err = posix_fallocate(o->fd, 0, (off_t)need);
        if (err == EOPNOTSUPP || err == EINVAL) err = ftruncate(o->fd, (off_t)need) == 0 ? 0 : errno;
    }
    unlink(o->path);
    if (err)
        return h->set_error(PLAIT_ERR_SYSTEM,
                            "%s: [optim] offload_path: reserving %.3f GiB for %s (%.3f GiB free there): %s", o->who,
                            gib(need), o->path, gib(avail), strerror(err));
    return PLAIT_OK;
}

/* The ring's depth: every request the step can have in flight (three slots'
 * reads and writes of each array) and a synchronous one, with room. */
#define RING_DEPTH 32u

/* Start the reads and writes: io_uring or the threads, as PLAIT_OFFLOAD_IO
 * and the file allow, said once in the log (rank 0, and any other rank
 * whose ring could not be made). */
static plait_status start_io(optim_offload *o, int rank) {
    const plait_host *h = o->host;
    const char *want = getenv("PLAIT_OFFLOAD_IO");
    if (!want || !*want) want = "auto";
    int force_threads = strcmp(want, "threads") == 0, need_ring = strcmp(want, "io_uring") == 0;
    if (!force_threads && !need_ring && strcmp(want, "auto") != 0)
        return h->set_error(PLAIT_ERR_INVALID_ARG,
                            "%s: PLAIT_OFFLOAD_IO = %s: not a way to read and write offload_path; use auto (io_uring "
                            "where it works, else threads), io_uring or threads",
                            o->who, want);
    unsigned depth = force_threads || (!o->direct && !need_ring) ? 0 : RING_DEPTH;
    int ring_err = 0;
    if (!(o->io = offload_io_create(4, depth, &ring_err)))
        return h->set_error(PLAIT_ERR_INTERNAL, "%s: cannot start the offload I/O threads: %s", o->who,
                            strerror(errno));
    char why[256];
    if (offload_io_uses_ring(o->io)) {
        if (rank == 0)
            h->log(PLAIT_LOG_INFO, o->who, "offload: %s read and written through io_uring (%u entries%s)", o->path,
                   depth, o->direct ? ", O_DIRECT" : "");
        return PLAIT_OK;
    }
    if (force_threads) snprintf(why, sizeof why, "PLAIT_OFFLOAD_IO = threads");
    else if (!o->direct) snprintf(why, sizeof why, "its file system refuses O_DIRECT");
#ifdef PLAIT_HAVE_LIBURING
    else snprintf(why, sizeof why, "io_uring_queue_init: %s (blocked by seccomp or the kernel)", strerror(ring_err));
#else
    else snprintf(why, sizeof why, "this build has no liburing");
#endif
    if (need_ring) return h->set_error(PLAIT_ERR_UNSUPPORTED, "%s: PLAIT_OFFLOAD_IO = io_uring, but %s", o->who, why);
    if (rank == 0 || ring_err)
        h->log(PLAIT_LOG_INFO, o->who, "offload: %s read and written by 4 pread/pwrite threads: %s", o->path, why);
    return PLAIT_OK;
}

/* offload = host on a device with streams and events copies on its
 * communication stream, overlapped with the host's update (offload_copy.h);
 * nvme, a device without events and PLAIT_OFFLOAD_COPY = sync copy each
 * chunk in and out in turn on the compute stream (the bounded buffer of
 * nvme has no room for whole mirrors). */
static plait_status pick_copies(optim_offload *o, int *overlap) {
    const char *want = getenv("PLAIT_OFFLOAD_COPY");
    if (!want || !*want) want = "overlap";
    int sync = strcmp(want, "sync") == 0;
    if (!sync && strcmp(want, "overlap") != 0)
        return o->host->set_error(PLAIT_ERR_INVALID_ARG,
                                  "%s: PLAIT_OFFLOAD_COPY = %s: not a way to copy offload = host's chunks; use "
                                  "overlap (the default: on the communication stream beside the host's update) or "
                                  "sync (each chunk in and out in turn)",
                                  o->who, want);
    const plait_device_ops *d = o->host->device;
    *overlap = !sync && o->on_device && o->cfg.mode == PLAIT_OFFLOAD_HOST && PLAIT_DEVICE_HAS_EVENTS(d) && d->copy_on &&
               d->event_wait && d->event_record;
    return PLAIT_OK;
}

plait_status optim_offload_open(const plait_host *host, const char *who, const plait_optim_offload *cfg, int rank,
                                size_t numel, int with_params, optim_offload **out) {
    *out = NULL;
    if (cfg->mode == PLAIT_OFFLOAD_NONE) return PLAIT_OK;
    optim_offload *o = calloc(1, sizeof *o);
    if (!o) return host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", who);
    o->host = host;
    o->who = who;
    o->cfg = *cfg;
    o->numel = numel;
    o->n_arr = with_params ? 3 : 2;
    o->fd = o->fd_plain = -1;
    o->on_device = plait_tensor_kind(host) != PLAIT_MEM_HOST;
    o->threads = host->math_threads ? host->math_threads() : 1;
    /* checked on every device, though the cpu device steps with its own
     * kernel: a bad value is refused wherever it is set */
    char why[256];
    if (optim_host_isa_pick(getenv("PLAIT_OFFLOAD_ISA"), &o->isa, why, sizeof why) != 0) {
        free(o);
        return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: %s", who, why);
    }
    if (o->on_device && rank == 0)
        host->log(PLAIT_LOG_INFO, who, "offload: the host's AdamW runs %s (%d floats a vector) on %d thread(s)",
                  optim_host_isa_name(o->isa), optim_host_isa_lanes(o->isa), o->threads);
    /* the buffer: three slots of every array (nvme) plus the staging of
     * parameters and gradients (on a device) */
    uint64_t buffer = cfg->buffer_bytes ? cfg->buffer_bytes : (64u << 20);
    size_t parts = (cfg->mode == PLAIT_OFFLOAD_NVME ? 3 * (size_t)o->n_arr : 0) + (o->on_device ? 2 : 0);
    size_t chunk = parts ? (size_t)(buffer / parts / sizeof(float)) / ALIGN_FLOATS * ALIGN_FLOATS : numel;
    if (chunk < ALIGN_FLOATS) chunk = ALIGN_FLOATS;
    o->chunk = chunk;
    o->region = round_up(numel * sizeof(float), ALIGN_BYTES);
    plait_status st = PLAIT_OK;
    if (cfg->mode == PLAIT_OFFLOAD_HOST) {
        static const char *const tags[] = {"offloaded exp_avg", "offloaded exp_avg_sq", "offloaded parameters"};
        for (int k = 0; k < o->n_arr && st == PLAIT_OK; k++) {
            if (!(o->arr[k] = alloc_host(host, numel * sizeof(float), tags[k]))) st = PLAIT_ERR_NO_MEMORY;
            else memset(o->arr[k], 0, numel * sizeof(float));
        }
    } else {
        st = open_file(o, rank);
        for (int s = 0; s < 3 && st == PLAIT_OK; s++) {
            if (!(o->slot[s] = alloc_host(host, (size_t)o->n_arr * chunk * sizeof(float), "offload buffer")))
                st = PLAIT_ERR_NO_MEMORY;
            for (int k = 0; k < 3; k++) o->rd[s][k].done = o->wr[s][k].done = 1;
        }
        if (st == PLAIT_OK) st = start_io(o, rank);
    }
    int overlap = 0;
    if (st == PLAIT_OK) st = pick_copies(o, &overlap);
    if (st == PLAIT_OK && overlap && !(o->copy = offload_copy_open(host, who, numel, !with_params)))
        st = PLAIT_ERR_NO_MEMORY;
    if (st == PLAIT_OK && o->copy && rank == 0)
        host->log(PLAIT_LOG_INFO, who,
                  "offload: gradients and parameters copied on the communication stream beside the host's update, "
                  "through %.1f MiB of page-locked mirrors",
                  (double)((with_params ? 1 : 2) * numel * sizeof(float)) / (1024.0 * 1024.0));
    if (st == PLAIT_OK && o->on_device && !o->copy) {
        o->stage_p = alloc_host(host, chunk * sizeof(float), "offload parameter staging");
        o->stage_g = alloc_host(host, chunk * sizeof(float), "offload gradient staging");
        if (!o->stage_p || !o->stage_g) st = PLAIT_ERR_NO_MEMORY;
    }
    if (st != PLAIT_OK) {
        optim_offload_close(o);
        return st;
    }
    *out = o;
    return PLAIT_OK;
}

static const char *moment_name(int which) { return which == 2 ? "param" : which ? "exp_avg_sq" : "exp_avg"; }

/* Synchronous transfer of host memory at element `at` of moment `which`
 * through the buffered descriptor (any alignment). */
static plait_status file_io(optim_offload *o, int write, int which, size_t at, float *buf, size_t count) {
    offload_req r = {.fd = o->fd_plain,
                     .write = write,
                     .buf = buf,
                     .bytes = count * sizeof(float),
                     .off = (off_t)((uint64_t)which * o->region + at * sizeof(float))};
    offload_io_submit(o->io, &r);
    int err = offload_io_wait(o->io, &r);
    if (err)
        return o->host->set_error(PLAIT_ERR_SYSTEM, "%s: %s %s of the optimizer state at element %zu in %s: %s", o->who,
                                  write ? "writing" : "reading", moment_name(which), at, o->path, strerror(err));
    return PLAIT_OK;
}

int optim_offload_load(optim_offload *o, int which, size_t at, const plait_value_source *src, int32_t index,
                       const char *name, size_t offset, size_t count) {
    const plait_host *h = o->host;
    if (o->cfg.mode == PLAIT_OFFLOAD_HOST) {
        float *dst = o->arr[which] + at;
        plait_status st = src && src->read ? src->read(src->ctx, index, name, offset, count, dst)
                                           : PLAIT_ERR_UNSUPPORTED;
        if (st == PLAIT_ERR_UNSUPPORTED) memset(dst, 0, count * sizeof(float));
        return st == PLAIT_OK ? 1 : st == PLAIT_ERR_UNSUPPORTED ? 0 : -1;
    }
    prefetch_drop(o); /* this load may rewrite slices read ahead */
    float *buf = o->slot[0];
    size_t cap = (size_t)o->n_arr * o->chunk;
    int got = -2;
    for (size_t done = 0; done < count; done += cap) {
        size_t n = count - done < cap ? count - done : cap;
        plait_status st = src && src->read ? src->read(src->ctx, index, name, offset + done, n, buf)
                                           : PLAIT_ERR_UNSUPPORTED;
        if (st != PLAIT_OK && st != PLAIT_ERR_UNSUPPORTED) return -1;
        if (st == PLAIT_ERR_UNSUPPORTED) memset(buf, 0, n * sizeof(float));
        got = st == PLAIT_OK;
        if (file_io(o, 1, which, at + done, buf, n) != PLAIT_OK) return -1;
    }
    (void)h;
    return got == -2 ? 0 : got;
}

plait_status optim_offload_get(optim_offload *o, int which, size_t at, float *dst, size_t count) {
    if (o->cfg.mode == PLAIT_OFFLOAD_HOST) {
        memcpy(dst, o->arr[which] + at, count * sizeof(float));
        return PLAIT_OK;
    }
    return file_io(o, 0, which, at, dst, count);
}

/* PLAIT_FAULT_OFFLOAD_READ=S: the first parameter slice read ahead in
 * step S (1-based: the forward and backward before update S) fails with
 * EIO, so tests can make the file unreadable mid-run. */
static int injected_read_failure(const optim_offload *o) {
    static int fired;
    const char *s = getenv("PLAIT_FAULT_OFFLOAD_READ");
    if (fired || !s || !*s || strtoll(s, NULL, 10) != o->steps + 1) return 0;
    fired = 1;
    return 1;
}

static plait_status ahead_failed(optim_offload *o, size_t at, size_t count, int err) {
    return o->host->set_error(PLAIT_ERR_SYSTEM,
                              "%s: step %lld: reading the parameter slice (elements %zu to %zu) read ahead from %s: "
                              "%s; the step cannot gather its layer, resume from the last checkpoint",
                              o->who, (long long)o->steps + 1, at, at + count, o->path, strerror(err));
}

/* Wait for every slice still being read ahead and forget them: before the
 * parameters are written (a step, a load), which would make them stale,
 * and when the room is full of predictions nobody fetched. */
static void prefetch_drop(optim_offload *o) {
    for (int i = 0; i < PF_MAX; i++)
        if (o->pf[i].live) {
            offload_io_wait(o->io, &o->pf[i].req);
            o->pf[i].live = 0;
            o->pf_dropped++;
        }
    o->n_pf = 0;
    o->pf_used = 0;
}

plait_status optim_offload_prefetch_room(optim_offload *o, size_t count) {
    if (!o || o->cfg.mode != PLAIT_OFFLOAD_NVME || o->n_arr < 3 || count == 0) return PLAIT_OK;
    /* off: every gather reads its slice itself, for a comparison */
    const char *want = getenv("PLAIT_OFFLOAD_READ_AHEAD");
    if (!want || !*want) want = "on";
    if (strcmp(want, "off") == 0) return PLAIT_OK;
    if (strcmp(want, "on") != 0)
        return o->host->set_error(PLAIT_ERR_INVALID_ARG,
                                  "%s: PLAIT_OFFLOAD_READ_AHEAD = %s: use on (the default: each layer's parameter "
                                  "slices read from offload_path one layer ahead of its gather) or off",
                                  o->who, want);
    o->pf_buf = alloc_host(o->host, count * sizeof(float), "offload parameter read-ahead");
    if (!o->pf_buf) return PLAIT_ERR_NO_MEMORY;
    o->pf_cap = count;
    return PLAIT_OK;
}

void optim_offload_prefetch(optim_offload *o, size_t at, size_t count) {
    if (!o || !o->pf_buf || count == 0 || count > o->pf_cap) return;
    int free_at = -1;
    for (int i = 0; i < PF_MAX; i++) {
        if (o->pf[i].live && o->pf[i].at == at && o->pf[i].count == count) return; /* already on its way */
        if (!o->pf[i].live && free_at < 0) free_at = i;
    }
    if (free_at < 0 || o->pf_used + count > o->pf_cap) prefetch_drop(o), free_at = 0;
    struct pf_entry *e = &o->pf[free_at];
    o->n_pf++;
    e->live = 1, e->at = at, e->count = count, e->buf_off = o->pf_used;
    o->pf_used += count;
    /* the buffered descriptor: a slice starts at any element */
    e->req = (offload_req){.fd = o->fd_plain,
                           .buf = o->pf_buf + e->buf_off,
                           .bytes = count * sizeof(float),
                           .off = (off_t)(2 * o->region + at * sizeof(float))};
    o->pf_started++;
    if (injected_read_failure(o)) {
        e->req.done = 1;
        e->req.err = EIO;
        return;
    }
    offload_io_submit(o->io, &e->req);
}

/* The slice read ahead into host memory, waited for, copied to `dst` and
 * forgotten; 0 when it was not read ahead. */
static int fetch_ahead(optim_offload *o, size_t at, float *dst, size_t count, plait_status *st) {
    int i = 0;
    while (i < PF_MAX && !(o->pf[i].live && o->pf[i].at == at && o->pf[i].count == count)) i++;
    if (i == PF_MAX) return 0;
    const plait_host *h = o->host;
    double t0 = h->now();
    int err = offload_io_wait(o->io, &o->pf[i].req);
    o->fetch_waited += h->now() - t0;
    o->pf_hits++;
    *st = err ? ahead_failed(o, at, count, err) : plait_tensor_from_host(h, dst, o->pf_buf + o->pf[i].buf_off, count);
    o->pf[i].live = 0;
    if (--o->n_pf == 0) o->pf_used = 0; /* every slice fetched: the room is free again */
    return 1;
}

plait_status optim_offload_fetch(optim_offload *o, int which, size_t at, float *dst, size_t count) {
    const plait_host *h = o->host;
    if (o->cfg.mode == PLAIT_OFFLOAD_HOST) return plait_tensor_from_host(h, dst, o->arr[which] + at, count);
    o->fetches++;
    plait_status st = PLAIT_OK;
    if (which == 2 && fetch_ahead(o, at, dst, count, &st)) return st;
    float *buf = o->slot[0]; /* no step is running: the slots are free */
    size_t cap = (size_t)o->n_arr * o->chunk;
    for (size_t done = 0; done < count && st == PLAIT_OK; done += cap) {
        size_t n = count - done < cap ? count - done : cap;
        double t0 = h->now();
        st = file_io(o, 0, which, at + done, buf, n);
        o->fetch_waited += h->now() - t0;
        if (st == PLAIT_OK) st = plait_tensor_from_host(h, dst + done, buf, n);
    }
    return st;
}

/* PLAIT_FAULT_OFFLOAD_WRITE=S: the first write of step S (1-based) fails
 * with ENOSPC, so tests can fill the disk mid-run without a small file
 * system of their own. */
static int injected_failure(int64_t step) {
    static int fired;
    const char *s = getenv("PLAIT_FAULT_OFFLOAD_WRITE");
    if (fired || !s || !*s || strtoll(s, NULL, 10) != step) return 0;
    fired = 1;
    return 1;
}

/* Element range [c0, c1) of every array into or out of slot s. */
static void submit_chunk(optim_offload *o, int s, int write, size_t c0, size_t c1, int64_t step) {
    size_t bytes = round_up((c1 - c0) * sizeof(float), ALIGN_BYTES);
    o->slot_c0[s] = c0;
    for (int k = 0; k < o->n_arr; k++) {
        offload_req *r = write ? &o->wr[s][k] : &o->rd[s][k];
        *r = (offload_req){.fd = o->fd,
                           .write = write,
                           .buf = o->slot[s] + (size_t)k * o->chunk,
                           .bytes = bytes,
                           .off = (off_t)((uint64_t)k * o->region + c0 * sizeof(float))};
        if (write) o->bytes_written += bytes;
        else o->bytes_read += bytes;
        if (write && injected_failure(step)) {
            r->done = 1;
            r->err = ENOSPC;
            continue;
        }
        offload_io_submit(o->io, r);
    }
}

/* Wait for slot s's reads or writes; a failure is reported once. */
static plait_status wait_chunk(optim_offload *o, int s, int write, int64_t step) {
    double t0 = o->host->now();
    int err = 0, bad = 0;
    for (int k = 0; k < o->n_arr; k++) {
        offload_req *r = write ? &o->wr[s][k] : &o->rd[s][k];
        int e = offload_io_wait(o->io, r);
        r->err = 0;
        if (e && !err) err = e, bad = k;
    }
    size_t c0 = o->slot_c0[s];
    o->waited += o->host->now() - t0;
    if (err)
        return o->host->set_error(PLAIT_ERR_SYSTEM,
                                  "%s: step %lld: %s %s of the optimizer state (elements from %zu) %s %s: %s; the "
                                  "parameters of this step are incomplete, resume from the last checkpoint",
                                  o->who, (long long)step, write ? "writing" : "reading", moment_name(bad), c0,
                                  write ? "to" : "from", o->path, strerror(err));
    return PLAIT_OK;
}

/* The update of segment part [s0, s1) (state positions) with moments at
 * m, v and, where the store holds the parameters (g->param NULL), those at
 * p (host memory all three). */
static plait_status update(optim_offload *o, const optim_offload_seg *g, size_t s0, size_t s1, float *m, float *v,
                           float *p, plait_adamw_args *args) {
    const plait_host *h = o->host;
    float *param = g->param ? g->param + (s0 - g->at) : p;
    const float *grad = g->grad + (s0 - g->at);
    size_t n = s1 - s0;
    args->weight_decay = g->weight_decay;
    if (!o->on_device) {
        h->kernels->adamw(param, grad, m, v, n, args);
        return PLAIT_OK;
    }
    plait_status st = plait_tensor_to_host(h, o->stage_g, grad, n);
    if (st == PLAIT_OK && g->param) st = plait_tensor_to_host(h, o->stage_p, param, n);
    if (st != PLAIT_OK) return st;
    optim_host_adamw(g->param ? o->stage_p : p, o->stage_g, m, v, n, args, o->threads, o->isa);
    return g->param ? plait_tensor_from_host(h, param, o->stage_p, n) : PLAIT_OK;
}

/* The segments' parts inside chunk [c0, c1), the store's arrays at a[]
 * (chunk-relative on disk, whole in host memory). */
static plait_status step_chunk(optim_offload *o, const optim_offload_seg *segs, size_t n_segs, size_t *next, size_t c0,
                               size_t c1, float *const *a, plait_adamw_args *args) {
    while (*next < n_segs && segs[*next].at + segs[*next].n <= c0) (*next)++;
    for (size_t i = *next; i < n_segs && segs[i].at < c1; i++) {
        const optim_offload_seg *g = &segs[i];
        size_t s0 = g->at > c0 ? g->at : c0, e = g->at + g->n, s1 = e < c1 ? e : c1;
        if (s0 >= s1) continue;
        /* host mode: a chunk is a staging window, m and v are the whole arrays */
        size_t base = o->cfg.mode == PLAIT_OFFLOAD_HOST ? 0 : c0;
        size_t at = s0 - base;
        plait_status st = update(o, g, s0, s1, a[0] + at, a[1] + at, o->n_arr > 2 ? a[2] + at : NULL, args);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

/* Post the segments' copies, cut into pieces of at most a chunk; with
 * `skip_posted`, those whose start was posted earlier this step are left
 * out. */
static plait_status post_segs(optim_offload *o, const optim_offload_seg *segs, size_t n_segs, int skip_posted) {
    size_t n = 0, C = o->chunk;
    for (size_t i = 0; i < n_segs; i++) n += (segs[i].n + C - 1) / C;
    if (n > o->cap_pieces) {
        offload_piece *p = realloc(o->pieces, n * sizeof *p);
        if (!p) return o->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", o->who);
        o->pieces = p, o->cap_pieces = n;
    }
    n = 0;
    for (size_t i = 0; i < n_segs; i++) {
        int seen = 0;
        offload_piece q;
        for (size_t k = 0; skip_posted && !seen && offload_copy_piece(o->copy, k, &q); k++) seen = q.at == segs[i].at;
        for (size_t d = 0; !seen && d < segs[i].n; d += C)
            o->pieces[n++] = (offload_piece){.param = segs[i].param ? segs[i].param + d : NULL,
                                             .grad = segs[i].grad + d,
                                             .at = segs[i].at + d,
                                             .n = segs[i].n - d < C ? segs[i].n - d : C,
                                             .weight_decay = segs[i].weight_decay,
                                             .layer = segs[i].layer};
    }
    return offload_copy_post(o->copy, o->pieces, n);
}

int optim_offload_posts(const optim_offload *o) { return o && o->copy; }

plait_status optim_offload_post(optim_offload *o, const optim_offload_seg *segs, size_t n_segs) {
    return o && o->copy ? post_segs(o, segs, n_segs, 0) : PLAIT_OK;
}

/* The order the step updates the n pieces posted in: as posted, or with
 * the copies back deferred, by layer (the next forward's order: the last
 * pieces updated, whose copies back are still running when the step
 * returns, are the last layers' the forward reaches), as posted within a
 * layer. The update is element-wise, so the order changes no value. */
static int by_layer(const void *a, const void *b) {
    const struct piece_rank *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static plait_status update_order(optim_offload *o, size_t n) {
    if (n > o->cap_order) {
        struct piece_rank *r = realloc(o->order, n * sizeof *r);
        if (!r) return o->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", o->who);
        o->order = r, o->cap_order = n;
    }
    offload_piece q;
    for (size_t i = 0; i < n; i++) {
        offload_copy_piece(o->copy, i, &q);
        o->order[i] = (struct piece_rank){o->defer ? q.layer : 0, i};
    }
    qsort(o->order, n, sizeof *o->order, by_layer);
    return PLAIT_OK;
}

/* Host memory's walk with the copies overlapped: what was not posted
 * during the backward posted now, then each piece (update_order) updated
 * in the mirrors as soon as its copy is in and released for the copy
 * back. */
static plait_status step_overlapped(optim_offload *o, const optim_offload_seg *segs, size_t n_segs,
                                    plait_adamw_args *args) {
    plait_status st = offload_copy_drain(o->copy);
    if (st == PLAIT_OK) st = post_segs(o, segs, n_segs, 1);
    size_t n = 0;
    offload_piece q;
    while (offload_copy_piece(o->copy, n, &q)) n++;
    if (st == PLAIT_OK) st = update_order(o, n);
    float *g = offload_copy_grad(o->copy), *p = o->n_arr > 2 ? o->arr[2] : offload_copy_param(o->copy);
    for (size_t k = 0; st == PLAIT_OK && k < n; k++) {
        size_t i = o->order[k].i;
        offload_copy_piece(o->copy, i, &q);
        st = offload_copy_wait_in(o->copy, i);
        if (st != PLAIT_OK) break;
        args->weight_decay = q.weight_decay;
        optim_host_adamw(p + q.at, g + q.at, o->arr[0] + q.at, o->arr[1] + q.at, q.n, args, o->threads, o->isa);
        offload_copy_release(o->copy, i);
    }
    plait_status fin = offload_copy_finish(o->copy, o->defer);
    return st != PLAIT_OK ? st : fin;
}

void optim_offload_defer(optim_offload *o) {
    if (o) o->defer = 1;
}

plait_status optim_offload_ready(optim_offload *o, int32_t layer) {
    return o && o->copy ? offload_copy_ready(o->copy, layer) : PLAIT_OK;
}

plait_status optim_offload_drain(optim_offload *o) { return o && o->copy ? offload_copy_drain(o->copy) : PLAIT_OK; }

/* The update of every segment: host memory's walk, or the disk's three-slot
 * pipeline. */
static plait_status step_all(optim_offload *o, const optim_offload_seg *segs, size_t n_segs, const plait_adamw_args *in,
                             int64_t step) {
    plait_adamw_args args = *in;
    size_t next = 0, C = o->chunk, N = o->numel;
    if (o->copy) return step_overlapped(o, segs, n_segs, &args);
    if (o->cfg.mode == PLAIT_OFFLOAD_HOST) {
        for (size_t c0 = 0; c0 < N; c0 += C) {
            plait_status st = step_chunk(o, segs, n_segs, &next, c0, c0 + C < N ? c0 + C : N, o->arr, &args);
            if (st != PLAIT_OK) return st;
        }
        return PLAIT_OK;
    }
    /* nvme: chunk k in slot k % 3; chunk k + 1's read is in flight while
     * chunk k steps, chunk k - 1's write drains */
    size_t n_chunks = (N + C - 1) / C;
    plait_status st = PLAIT_OK;
    if (n_chunks > 0) submit_chunk(o, 0, 0, 0, C < N ? C : N, step);
    for (size_t k = 0; k < n_chunks && st == PLAIT_OK; k++) {
        int s = (int)(k % 3), s_next = (int)((k + 1) % 3);
        size_t c0 = k * C, c1 = c0 + C < N ? c0 + C : N;
        if (k + 1 < n_chunks) {
            st = wait_chunk(o, s_next, 1, step); /* chunk k - 2's write left that slot */
            if (st != PLAIT_OK) break;
            submit_chunk(o, s_next, 0, c1, c1 + C < N ? c1 + C : N, step);
        }
        st = wait_chunk(o, s, 0, step);
        float *a[3] = {o->slot[s], o->slot[s] + C, o->slot[s] + 2 * C};
        if (st == PLAIT_OK) st = step_chunk(o, segs, n_segs, &next, c0, c1, a, &args);
        if (st == PLAIT_OK) submit_chunk(o, s, 1, c0, c1, step);
    }
    /* every read and write done before the step returns: the next step, a
     * checkpoint's export and a failure all find the file complete */
    for (int s = 0; s < 3; s++) {
        plait_status r = wait_chunk(o, s, 0, step);
        plait_status w = wait_chunk(o, s, 1, step);
        if (st == PLAIT_OK) st = r != PLAIT_OK ? r : w;
    }
    return st;
}

plait_status optim_offload_step(optim_offload *o, const optim_offload_seg *segs, size_t n_segs,
                                const plait_adamw_args *in, int64_t step) {
    double t0 = o->host->now();
    prefetch_drop(o); /* the step rewrites the slices read ahead */
    plait_status st = step_all(o, segs, n_segs, in, step);
    o->stepping += o->host->now() - t0;
    o->steps++;
    return st;
}

uint64_t optim_offload_host_bytes(const optim_offload *o) {
    if (!o) return 0;
    uint64_t b = (uint64_t)o->pf_cap * sizeof(float);
    b += o->copy        ? (o->n_arr > 2 ? 1 : 2) * (uint64_t)o->numel * sizeof(float)
         : o->on_device ? 2 * o->chunk * sizeof(float)
                        : 0;
    if (o->cfg.mode == PLAIT_OFFLOAD_HOST) return b + (uint64_t)o->n_arr * o->numel * sizeof(float);
    return b + 3 * (uint64_t)o->n_arr * o->chunk * sizeof(float);
}

uint64_t optim_offload_disk_bytes(const optim_offload *o) {
    return o && o->cfg.mode == PLAIT_OFFLOAD_NVME ? (uint64_t)o->n_arr * o->region : 0;
}

double optim_offload_wait_seconds(const optim_offload *o) { return o ? o->waited : 0; }
