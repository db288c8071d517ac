/*
 * The TCP plugin's progress: callers polling their own epoll set inside
 * wait/test, the progress thread for asynchronous transfers, abort,
 * communicator registration, engine start and stop. See tcp.h.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tcp.h"

#define MAX_EVENTS 64

/* ---- progress ----------------------------------------------------------- */

/* Handle epoll events; mu held. */
static void handle_events(tcp_engine *e, struct epoll_event *evs, int n) {
    for (int i = 0; i < n; i++) {
        void *p = evs[i].data.ptr;
        if (p == &e->wake_fd || p == &e->cwake_fd) {
            uint64_t v;
            ssize_t r = read(*(int *)p, &v, sizeof v);
            (void)r;
            if (p == &e->cwake_fd) e->cwake_pending = 0;
            continue;
        }
        tcp_conn *c = p;
        if (c->fd < 0) continue;
        if (evs[i].events & EPOLLOUT) tcp_conn_flush(e, c);
        if (c->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) tcp_conn_read(e, c);
    }
}

/* Poll `ep` once and handle what it reports; releases mu around epoll_wait. */
static void poll_once(tcp_engine *e, int ep, int timeout_ms) {
    struct epoll_event evs[MAX_EVENTS];
    pthread_mutex_unlock(&e->mu);
    int n = epoll_wait(ep, evs, MAX_EVENTS, timeout_ms);
    pthread_mutex_lock(&e->mu);
    if (n > 0) handle_events(e, evs, n);
}

/* A caller polls its own set; others waiting get the news. mu held.
 * A caller that will block first polls without sleeping for up to
 * [comm.tcp] spin_us, yielding the CPU between polls (Open MPI's
 * yield-when-idle): on 4 ranks sharing 2 cores a small message's reply
 * often comes within tens of microseconds, and sleeping in epoll_wait then
 * costs a sleep and a wake-up per hop (4 KiB allreduce at 4 ranks: loop
 * 110-124 us sleeping at once, 64-81 us with 30-60 us of polling). The
 * yield hands the core to any other runnable rank, so training steps did
 * not slow down (gpt-tiny dp 2 and dp 4, gpt-3d: within noise). */
static void caller_poll(tcp_engine *e, int timeout_ms) {
    struct epoll_event evs[MAX_EVENTS];
    e->caller_polling = 1;
    pthread_mutex_unlock(&e->mu);
    int n = 0;
    if (timeout_ms > 0 && e->cfg.spin_s > 0) {
        double spin = e->cfg.spin_s < timeout_ms * 1e-3 ? e->cfg.spin_s : timeout_ms * 1e-3; /* not past the deadline */
        double until = e->host->now() + spin;
        while ((n = epoll_wait(e->cep, evs, MAX_EVENTS, 0)) == 0 && e->host->now() < until) sched_yield();
    }
    if (n == 0) n = epoll_wait(e->cep, evs, MAX_EVENTS, timeout_ms);
    pthread_mutex_lock(&e->mu);
    e->caller_handling = 1;
    if (n > 0) handle_events(e, evs, n);
    e->caller_handling = 0;
    e->caller_polling = 0;
    if (e->waiting) pthread_cond_broadcast(&e->cv);
}

static void *progress_main(void *arg) {
    tcp_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        if (e->caller_polling || e->waiting > 0 || !tcp_async_work(e)) {
            e->pt_sleeping = 1;
            pthread_cond_wait(&e->pcv, &e->mu);
            e->pt_sleeping = 0;
            continue;
        }
        e->pt_polling = 1;
        poll_once(e, e->ep, -1);
        e->pt_polling = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void release(tcp_engine *e, tcp_req *r, size_t *bytes, plait_status *st) {
    if (bytes) *bytes = r->len;
    *st = r->status;
    if (r->status != PLAIT_OK) e->host->set_error(r->status, "%s", r->err);
    tcp_req_release(e, r);
}

plait_status tcp_test(tcp_comm *cm, tcp_req *r, int *done, size_t *bytes) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    if (!r->done && !e->caller_polling) caller_poll(e, 0);
    plait_status st = PLAIT_OK;
    *done = r->done;
    if (r->done) release(e, r, bytes, &st);
    else tcp_maybe_kick(e);
    pthread_mutex_unlock(&e->mu);
    return st;
}

plait_status tcp_wait(tcp_comm *cm, tcp_req *r, double timeout_s, size_t *bytes) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    double deadline = plait_deadline(e->host, timeout_s);
    while (!r->done) {
        double left = deadline - e->host->now();
        if (left <= 0) break;
        if (!e->caller_polling) {
            int ms = left > 2e6 ? 2000000000 : (int)(left * 1000.0) + 1;
            caller_poll(e, ms);
            continue;
        }
        /* another caller polls: it wakes us on every completion and when
         * it stops polling */
        struct timespec ts; /* the condition variables use CLOCK_MONOTONIC, host->now()'s clock */
        plait_deadline_timespec(deadline, &ts);
        e->waiting++;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        e->waiting--;
    }
    plait_status st;
    if (!r->done) {
        char name[96], note[160];
        tcp_peer_name(cm, r->peer, name, sizeof name);
        st = plait_req_timeout(e->host, "tcp", r->kind == TCP_SEND, name, r->tag, r->cap, timeout_s,
                               tcp_ended_note(e, r->peer, note, sizeof note));
    } else {
        release(e, r, bytes, &st);
    }
    tcp_maybe_kick(e);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- abort, registration, start/stop ------------------------------------ */

void tcp_abort(tcp_comm *cm, const char *reason) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    if (!cm->aborted) {
        cm->aborted = 1;
        snprintf(cm->abort_why, sizeof cm->abort_why, "%s", reason ? reason : "aborted");
        char why[448];
        snprintf(why, sizeof why, "communicator %u aborted: %s", cm->id, cm->abort_why);
        if (cm->is_world) {
            /* the job is going down: say why, then drop every connection */
            tcp_notify_peers(e, cm->abort_why);
            for (int p = 0; p < e->size; p++)
                if (p != e->rank) tcp_fail_peer(e, p, PLAIT_ERR_PEER_LOST, why);
        } else {
            /* this communicator's requests; a half-written frame poisons its
             * stream, so such a peer's connections go too */
            for (int p = 0; p < e->size; p++) {
                if (p == e->rank || e->peers[p].lost) continue;
                int poisoned = 0;
                for (int s = 0; s < e->cfg.streams; s++)
                    for (tcp_chunk *k = e->peers[p].conns[s].txq; k; k = k->next)
                        if (k->req->kind != TCP_CTRL && k->req->comm == cm && k->sent > 0) poisoned = 1;
                if (poisoned) tcp_fail_peer(e, p, PLAIT_ERR_PEER_LOST, why);
            }
            for (int p = 0; p < e->size; p++) {
                if (p == e->rank || e->peers[p].lost) continue;
                for (int s = 0; s < e->cfg.streams; s++) {
                    tcp_conn *c = &e->peers[p].conns[s];
                    tcp_chunk **pp = &c->txq;
                    c->txq_tail = NULL;
                    while (*pp) {
                        tcp_chunk *k = *pp;
                        if (k->req->kind != TCP_CTRL && k->req->comm == cm) {
                            c->tx_queued -= sizeof k->hdr + k->len - k->sent;
                            tcp_req_fail(e, k->req, PLAIT_ERR_PEER_LOST, "tcp: send to rank %d: %s", k->req->comm_peer,
                                     why);
                            *pp = k->next;
                        } else {
                            c->txq_tail = k;
                            pp = &k->next;
                        }
                    }
                }
            }
            for (int p = 0; p < e->size; p++)
                for (tcp_req **rp = &e->peers[p].awaiting; *rp;) {
                    tcp_req *r = *rp;
                    if (r->comm != cm) {
                        rp = &r->anext;
                        continue;
                    }
                    *rp = r->anext;
                    r->anext = NULL;
                    tcp_req_fail(e, r, PLAIT_ERR_PEER_LOST, "tcp: send to rank %d: %s", r->comm_peer, why);
                }
            for (size_t b = 0; b < e->n_chan_buckets; b++)
                for (tcp_chan *ch = e->chans[b]; ch; ch = ch->hnext) {
                    if (ch->comm_id != cm->id) continue;
                    for (tcp_req *r = ch->posted; r; r = r->next)
                        tcp_req_fail(e, r, PLAIT_ERR_PEER_LOST, "tcp: receive from rank %d: %s", r->comm_peer, why);
                    ch->posted = ch->posted_tail = NULL;
                    for (tcp_inmsg *m = ch->msgs; m; m = m->next)
                        if (m->req) {
                            tcp_req_fail(e, m->req, PLAIT_ERR_PEER_LOST, "tcp: receive from rank %d: %s",
                                     m->req->comm_peer, why);
                            m->req->msg = NULL;
                            m->req = NULL;
                            m->buf = NULL; /* keep consuming its bytes, into nothing */
                        }
                }
        }
        /* recount conns with queued data */
        e->tx_pending = 0;
        for (int p = 0; p < e->size; p++)
            for (int s = 0; p != e->rank && s < e->cfg.streams; s++)
                if (e->peers[p].conns[s].fd >= 0 && e->peers[p].conns[s].tx_queued) e->tx_pending++;
        if (e->pt_polling) tcp_wake(e->wake_fd);
        if (e->caller_polling) tcp_wake(e->cwake_fd);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

plait_status tcp_comm_register(tcp_engine *e, tcp_comm *c) {
    pthread_mutex_lock(&e->mu);
    plait_status st = PLAIT_OK;
    if (tcp_comm_by_id(e, c->id))
        st = e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: communicator id %u is already in use on rank %d", c->id,
                                e->rank);
    else {
        c->next = e->comms;
        e->comms = c;
        e->n_comms++;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void tcp_comm_unregister(tcp_comm *c) {
    tcp_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    for (tcp_comm **pp = &e->comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            e->n_comms--;
            break;
        }
    for (size_t b = 0; b < e->n_chan_buckets; b++)
        for (tcp_chan **pp = &e->chans[b]; *pp;) {
            tcp_chan *ch = *pp;
            if (ch->comm_id != c->id) {
                pp = &ch->hnext;
                continue;
            }
            /* a connection still reading into one of these messages keeps
             * reading, into nothing */
            for (int p = 0; p < e->size; p++)
                for (int s = 0; p != e->rank && s < e->cfg.streams; s++) {
                    tcp_conn *cc = &e->peers[p].conns[s];
                    for (tcp_inmsg *m = ch->msgs; m; m = m->next)
                        if (cc->rx_msg == m) cc->rx_msg = NULL;
                }
            for (tcp_inmsg *m = ch->msgs, *nx; m; m = nx) {
                nx = m->next;
                tcp_msg_free(e, m);
            }
            *pp = ch->hnext;
            free(ch);
            e->n_chans--;
        }
    pthread_mutex_unlock(&e->mu);
}

plait_status tcp_engine_start(tcp_engine *e) {
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_cond_init(&e->pcv, &ca);
    pthread_condattr_destroy(&ca);
    e->n_chan_buckets = 256;
    e->chans = calloc(e->n_chan_buckets, sizeof *e->chans);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    e->cep = epoll_create1(EPOLL_CLOEXEC);
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->cwake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!e->chans || e->ep < 0 || e->cep < 0 || e->wake_fd < 0 || e->cwake_fd < 0)
        return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: cannot create the progress engine: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->wake_fd};
    epoll_ctl(e->ep, EPOLL_CTL_ADD, e->wake_fd, &ev);
    ev.data.ptr = &e->cwake_fd;
    epoll_ctl(e->cep, EPOLL_CTL_ADD, e->cwake_fd, &ev);
    /* Every peer is connected: nothing may connect any more, so the port
     * closes (a stray client now gets "connection refused"). */
    close(e->listen_fd);
    e->listen_fd = -1;
    for (int p = 0; p < e->size; p++) {
        if (p == e->rank) continue;
        for (int s = 0; s < e->cfg.streams; s++) {
            tcp_conn *c = &e->peers[p].conns[s];
            c->rx = malloc(TCP_RX_BUF);
            if (!c->rx) return e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
            c->events = EPOLLIN;
            struct epoll_event ce = {.events = EPOLLIN, .data.ptr = c};
            if ((e->cfg.progress_thread && epoll_ctl(e->ep, EPOLL_CTL_ADD, c->fd, &ce) != 0) ||
                epoll_ctl(e->cep, EPOLL_CTL_ADD, c->fd, &ce) != 0)
                return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: epoll_ctl: %s", strerror(errno));
        }
    }
    if (e->cfg.progress_thread) {
        if (pthread_create(&e->thread, NULL, progress_main, e) != 0)
            return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: cannot start the progress thread");
        e->has_thread = 1;
    }
    return PLAIT_OK;
}

void tcp_engine_stop(tcp_engine *e) {
    if (e->has_thread) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_signal(&e->pcv);
        tcp_wake(e->wake_fd);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        e->has_thread = 0;
    }
    for (int p = 0; e->peers && p < e->size; p++) {
        if (!e->peers[p].conns) continue;
        for (int s = 0; s < e->cfg.streams; s++) {
            tcp_conn *c = &e->peers[p].conns[s];
            if (c->fd >= 0) {
                shutdown(c->fd, SHUT_WR);
                close(c->fd);
            }
            free(c->rx);
        }
        free(e->peers[p].conns);
    }
    free(e->peers);
    e->peers = NULL;
    if (e->chans)
        for (size_t b = 0; b < e->n_chan_buckets; b++)
            for (tcp_chan *ch = e->chans[b], *nx; ch; ch = nx) {
                nx = ch->hnext;
                for (tcp_inmsg *m = ch->msgs, *mn; m; m = mn) {
                    mn = m->next;
                    tcp_msg_free(e, m);
                }
                free(ch);
            }
    free(e->chans);
    e->chans = NULL;
    for (tcp_req *r = e->free_reqs, *nx; r; r = nx) {
        nx = r->next;
        free(r);
    }
    e->free_reqs = NULL;
    if (e->stat_msgs)
        e->host->log(PLAIT_LOG_DEBUG, TCP_COMPONENT,
                     "rank %d received %llu messages (%llu bytes); %llu of them (%.1f%% of the bytes) arrived before "
                     "their receive was posted and took an extra copy",
                     e->rank, (unsigned long long)e->stat_msgs, (unsigned long long)e->stat_bytes,
                     (unsigned long long)e->stat_unexpected,
                     e->stat_bytes ? 100.0 * (double)e->stat_unexpected_bytes / (double)e->stat_bytes : 0.0);
    if (e->stat_cma)
        e->host->log(PLAIT_LOG_DEBUG, TCP_COMPONENT, "rank %d copied %llu messages (%llu bytes) directly from senders",
                     e->rank, (unsigned long long)e->stat_cma, (unsigned long long)e->stat_cma_bytes);
    for (int i = 0; i < TCP_UBUF_SLOTS; i++) free(e->ubuf[i].ptr);
    free(e->scratch);
    if (e->listen_fd >= 0) close(e->listen_fd);
    if (e->ep >= 0) close(e->ep);
    if (e->cep >= 0) close(e->cep);
    if (e->wake_fd >= 0) close(e->wake_fd);
    if (e->cwake_fd >= 0) close(e->cwake_fd);
    e->listen_fd = e->ep = e->cep = e->wake_fd = e->cwake_fd = -1;
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->pcv);
    pthread_mutex_destroy(&e->mu);
}
