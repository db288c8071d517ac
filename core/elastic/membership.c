/* A launcher's side of elastic membership (membership.h). */
#include "elastic/membership.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "elastic/coordinator.h"
#include "elastic/membership_wire.h"
#include "elastic/store_keys.h"
#include "launch/net.h"
#include "launch/store.h"
#include "runtime/clock.h"
#include "runtime/error.h"

struct plait_membership {
    plait_membership_opts o;
    char store_host[256];
    char token[PLAIT_STORE_MAX_TOKEN + 1];
    plait_store *st;
    plait_store_server *srv;     /* the store host only */
    elastic_coordinator *coord;  /* the store host only */
    uint64_t lid;
    pthread_t hb;
    int hb_started;
    atomic_int hb_stop;
    int stop_efd;
    pthread_mutex_t lock;        /* stop_reason, store_error */
    char stop_reason[ELASTIC_REASON];
    char store_error[2048];
    atomic_int stopped;          /* the current round's ranks were told to stop */
    atomic_int round;            /* the round this host trains in (0 none) */
    atomic_int grow;
    atomic_int store_lost;
    _Atomic int64_t last_beat_ms; /* plait_clock_now() of the last heartbeat that reached the store, in ms */
    int node;
    int last_round;              /* the last round this host arrived in */
};

static void signal_stop(plait_membership *m, const char *why) {
    pthread_mutex_lock(&m->lock);
    if (!atomic_load(&m->stopped)) {
        snprintf(m->stop_reason, sizeof m->stop_reason, "%s", why);
        atomic_store(&m->stopped, 1);
        uint64_t one = 1;
        ssize_t w = write(m->stop_efd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&m->lock);
}

/* SIGCONT: this launcher was stopped (SIGSTOP, Ctrl-Z, a suspended job)
 * and goes on; when, in ms of plait_clock_now (0: never). */
static _Atomic int64_t g_continued_ms;

static void on_continue(int sig) {
    (void)sig;
    atomic_store(&g_continued_ms, (int64_t)(plait_clock_now() * 1000));
}

/* Why the store cannot be reached, into out: a launcher that was stopped
 * while its heartbeat fell silent longer than [run] host_timeout was
 * dropped by the job, which went on without it: said so, rather than
 * blaming the store's host. */
static void lost_words(const plait_membership *m, const char *cause, char *out, size_t cap) {
    int64_t cont = atomic_load(&g_continued_ms), beat = atomic_load(&m->last_beat_ms);
    double silent = (double)(cont - beat) / 1000;
    if (cont > 0 && beat > 0 && silent > m->o.host_timeout)
        snprintf(out, cap,
                 "this host's launcher was stopped for about %.0f s, longer than [run] host_timeout = %g s, so the "
                 "job dropped this host and went on without it; its store (on %s) is gone now (%s): the job has "
                 "ended, with or without this host",
                 silent, m->o.host_timeout, m->store_host, cause);
    else
        snprintf(out, cap,
                 "the job's store host %s is lost (%s); an elastic job cannot go on without the host that serves its "
                 "store (docs/multi-node.md, \"Elastic jobs\")",
                 m->store_host, cause);
}

/* The heartbeat: the counter the coordinator watches, and on the way the
 * round's end and grow keys. Runs until close. */
static void *heartbeat(void *arg) {
    plait_membership *m = arg;
    double every = m->o.host_timeout / 5;
    if (every < 0.05) every = 0.05;
    if (every > 1) every = 1;
    char hb_key[64];
    elastic_key_lid(hb_key, sizeof hb_key, "m/hb/", m->lid);
    atomic_store(&m->last_beat_ms, (int64_t)(plait_clock_now() * 1000));
    while (!atomic_load(&m->hb_stop)) {
        if (plait_store_add(m->st, hb_key, 1, NULL) != PLAIT_OK) {
            pthread_mutex_lock(&m->lock);
            lost_words(m, plait_last_error(), m->store_error, sizeof m->store_error);
            pthread_mutex_unlock(&m->lock);
            atomic_store(&m->store_lost, 1);
            signal_stop(m, m->store_error);
            break;
        }
        int r = atomic_load(&m->round);
        if (r > 0 && !atomic_load(&m->stopped)) {
            char key[64], why[ELASTIC_REASON];
            size_t len = 0;
            snprintf(key, sizeof key, "m/r%d/end", r);
            if (elastic_get_now(m->st, key, why, sizeof why - 1, &len) == 1) {
                why[len < sizeof why ? len : sizeof why - 1] = '\0';
                signal_stop(m, why);
            }
        }
        if (r > 0 && !atomic_load(&m->grow)) {
            char key[64];
            snprintf(key, sizeof key, "m/r%d/grow", r);
            if (elastic_get_now(m->st, key, NULL, 0, NULL) == 1) atomic_store(&m->grow, 1);
        }
        atomic_store(&m->last_beat_ms, (int64_t)(plait_clock_now() * 1000));
        plait_clock_sleep(every);
    }
    return NULL;
}

/* This host serves the store when it can bind its address: 1 (the fd in
 * *fd), 0 when the address is another host's (or taken here), -1 error. */
static int try_bind(const char *host, int port, int *fd) {
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (plait_net_resolve(host, port, &ss, &len) != PLAIT_OK) return -1;
    *fd = plait_net_listen((struct sockaddr *)&ss, len, 1024);
    if (*fd >= 0) return 1;
    const char *e = plait_last_error();
    if (strstr(e, strerror(EADDRNOTAVAIL)) || strstr(e, strerror(EADDRINUSE))) {
        plait_clear_error();
        return 0;
    }
    return -1;
}

plait_status plait_membership_open(const plait_membership_opts *o, plait_membership **out) {
    if (o->min_hosts < 1 || o->min_hosts > o->max_hosts || o->max_hosts > ELASTIC_MAX_HOSTS)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "elastic membership: %d:%d hosts (1 <= MIN <= MAX <= %d)",
                               o->min_hosts, o->max_hosts, ELASTIC_MAX_HOSTS);
    plait_membership *m = calloc(1, sizeof *m);
    if (!m) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    m->o = *o;
    snprintf(m->store_host, sizeof m->store_host, "%s", o->store_host);
    snprintf(m->token, sizeof m->token, "%s", o->token);
    m->o.store_host = m->store_host;
    m->o.token = m->token;
    pthread_mutex_init(&m->lock, NULL);
    m->stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    plait_status st = m->stop_efd >= 0 ? PLAIT_OK : plait_set_error(PLAIT_ERR_SYSTEM, "eventfd: %s", strerror(errno));
    while (st == PLAIT_OK && m->lid == 0) st = plait_net_random(&m->lid, sizeof m->lid);
    int fd = -1, host = 0;
    if (st == PLAIT_OK) {
        host = try_bind(m->store_host, o->store_port, &fd);
        if (host < 0) st = plait_wrap_error(PLAIT_ERR_SYSTEM, "elastic membership: the store's address");
    }
    if (st == PLAIT_OK && host)
        st = plait_store_server_start(fd, NULL, 0, m->token, PLAIT_STORE_HANDSHAKE_S, &m->srv);
    char what[400];
    snprintf(what, sizeof what, "the elastic job's membership store (hosted by the launcher on %s) at %s:%d",
             m->store_host, m->store_host, o->store_port);
    if (st == PLAIT_OK)
        st = plait_store_connect(m->store_host, o->store_port, m->token, -1, o->join_timeout, what, &m->st);
    /* a store host that goes silent is lost as any host is */
    if (st == PLAIT_OK) plait_store_set_patience(m->st, 2 * o->host_timeout + 1);
    int64_t index = 0;
    if (st == PLAIT_OK && o->config_text) {
        char key[64];
        elastic_key_lid(key, sizeof key, "m/cfg/", m->lid);
        st = plait_store_set(m->st, key, o->config_text, strlen(o->config_text) + 1);
    }
    if (st == PLAIT_OK) st = plait_store_add(m->st, "m/nreg", 1, &index);
    if (st == PLAIT_OK) {
        elastic_member me;
        memset(&me, 0, sizeof me);
        me.lid = m->lid;
        me.ranks = o->ranks_per_host;
        me.pid = (int32_t)getpid();
        gethostname(me.host, sizeof me.host - 1);
        char key[64];
        snprintf(key, sizeof key, "m/reg/%lld", (long long)index - 1);
        st = plait_store_set(m->st, key, &me, sizeof me);
    }
    if (st == PLAIT_OK) {
        struct sigaction sa = {0};
        sa.sa_handler = on_continue;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCONT, &sa, NULL);
        if (pthread_create(&m->hb, NULL, heartbeat, m) != 0)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the heartbeat thread");
        else
            m->hb_started = 1;
    }
    if (st == PLAIT_OK && host) st = elastic_coordinator_start(m->st, &m->o, m->lid, &m->coord);
    if (st != PLAIT_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        plait_membership_close(m);
        return plait_set_error(st, "%s", msg);
    }
    *out = m;
    return PLAIT_OK;
}

int plait_membership_close(plait_membership *m) {
    if (!m) return 0;
    int all_gone = 0;
    if (m->hb_started) {
        atomic_store(&m->hb_stop, 1);
        pthread_join(m->hb, NULL);
    }
    if (m->st && !atomic_load(&m->store_lost)) {
        char key[64];
        elastic_key_lid(key, sizeof key, "m/bye/", m->lid);
        (void)plait_store_set(m->st, key, "1", 2);
    }
    /* the others learn the outcome and disconnect; then the store goes */
    double drain = m->o.host_timeout * 2 + 2;
    if (m->coord) {
        /* the job's outcome is in the store: wait until the coordinator has
         * said it (bounded: a failed launcher here ends the job) */
        double until = plait_clock_now() + m->o.host_timeout * 3 + 5;
        while (!elastic_coordinator_finished(m->coord) && plait_clock_now() < until) plait_clock_sleep(0.05);
        /* then until every other launcher has left or is lost: a lost
         * host's connection may never close, so the store need not wait for
         * connections beyond those of launchers closing now */
        if (elastic_coordinator_farewell(m->coord, plait_clock_now() + drain)) {
            drain = 1.0;
            all_gone = 1;
        }
        elastic_coordinator_stop(m->coord);
    }
    plait_store_close(m->st);
    if (m->srv) plait_store_server_stop(m->srv, drain);
    if (m->stop_efd >= 0) close(m->stop_efd);
    pthread_mutex_destroy(&m->lock);
    free(m);
    return all_gone;
}

int plait_membership_is_store_host(const plait_membership *m) { return m->srv != NULL; }
int plait_membership_stop_fd(const plait_membership *m) { return m->stop_efd; }
int plait_membership_grow_wanted(const plait_membership *m) { return atomic_load(&m->grow); }

const char *plait_membership_stop_reason(const plait_membership *m) {
    return atomic_load(&m->stopped) ? m->stop_reason : "";
}

static plait_status store_lost(plait_membership *m) {
    pthread_mutex_lock(&m->lock);
    plait_status s = plait_set_error(PLAIT_ERR_PEER_LOST, "%s", m->store_error[0] ? m->store_error : plait_last_error());
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* The job is over ("1": complete) or this launcher was dropped: fills out
 * and returns 1; 0 otherwise; -1 store error. */
static int over(plait_membership *m, plait_round *out) {
    char why[ELASTIC_REASON] = "";
    size_t len = 0;
    int got = elastic_get_now(m->st, "m/finished", why, sizeof why - 1, &len);
    if (got < 0) return -1;
    if (got == 1) {
        why[len < sizeof why ? len : sizeof why - 1] = '\0';
        out->status = strcmp(why, "1") == 0 ? PLAIT_ROUND_FINISHED : PLAIT_ROUND_FAILED;
        snprintf(out->reason, sizeof out->reason, "%s", strcmp(why, "1") == 0 ? "training is complete" : why);
        return 1;
    }
    char key[64];
    elastic_key_lid(key, sizeof key, "m/dropped/", m->lid);
    got = elastic_get_now(m->st, key, why, sizeof why - 1, &len);
    if (got < 0) return -1;
    if (got == 1) {
        why[len < sizeof why ? len : sizeof why - 1] = '\0';
        out->status = PLAIT_ROUND_DROPPED;
        snprintf(out->reason, sizeof out->reason, "%s", why);
        return 1;
    }
    return 0;
}

plait_status plait_membership_join(plait_membership *m, plait_round *out) {
    memset(out, 0, sizeof *out);
    atomic_store(&m->round, 0);
    /* a fresh stop signal for the next ranks */
    uint64_t drain;
    while (read(m->stop_efd, &drain, sizeof drain) == (ssize_t)sizeof drain) {
    }
    pthread_mutex_lock(&m->lock);
    m->stop_reason[0] = '\0';
    atomic_store(&m->stopped, 0);
    pthread_mutex_unlock(&m->lock);
    atomic_store(&m->grow, 0);
    elastic_result *res = malloc(sizeof *res);
    if (!res) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = PLAIT_OK;
    for (;;) {
        if (atomic_load(&m->store_lost)) {
            st = store_lost(m);
            break;
        }
        int done = over(m, out);
        if (done < 0) {
            st = PLAIT_ERR_PEER_LOST;
            break;
        }
        if (done) break;
        int64_t r = 0;
        if ((st = plait_store_add(m->st, "m/round", 0, &r)) != PLAIT_OK) break;
        if (r <= m->last_round) { /* the next round is not open yet */
            plait_clock_sleep(0.05);
            continue;
        }
        int64_t i = 0;
        char key[64];
        snprintf(key, sizeof key, "m/r%lld/n", (long long)r);
        if ((st = plait_store_add(m->st, key, 1, &i)) != PLAIT_OK) break;
        snprintf(key, sizeof key, "m/r%lld/a%lld", (long long)r, (long long)i - 1);
        if ((st = plait_store_set(m->st, key, &m->lid, sizeof m->lid)) != PLAIT_OK) break;
        m->last_round = (int)r;
        /* wait for the round to close, watching for the end of the job */
        snprintf(key, sizeof key, "m/r%lld/result", (long long)r);
        int got = 0;
        size_t len = 0;
        while (!got) {
            st = plait_store_get(m->st, key, res, sizeof *res, &len, 0.5);
            if (st == PLAIT_OK) {
                got = 1;
            } else if (st == PLAIT_ERR_TIMEOUT) {
                plait_clear_error();
                st = PLAIT_OK;
                if (atomic_load(&m->store_lost)) break;
                done = over(m, out);
                if (done) break;
            } else {
                break;
            }
        }
        if (st != PLAIT_OK || done) break;
        if (atomic_load(&m->store_lost)) continue;
        if (len != sizeof *res || res->magic != ELASTIC_RESULT_MAGIC || res->n < 0 || res->n > ELASTIC_MAX_HOSTS) {
            st = plait_set_error(PLAIT_ERR_PROTOCOL, "round %lld's result in the membership store is malformed",
                                 (long long)r);
            break;
        }
        res->reason[sizeof res->reason - 1] = res->names[sizeof res->names - 1] = '\0';
        if (res->status == ELASTIC_FAILED) {
            out->status = PLAIT_ROUND_FAILED;
            snprintf(out->reason, sizeof out->reason, "%s", res->reason);
            break;
        }
        int node = -1;
        for (int k = 0; k < res->n; k++)
            if (res->members[k] == m->lid) node = k;
        if (node < 0) continue; /* arrived after it closed (or not admitted): the next round */
        out->status = PLAIT_ROUND_TRAIN;
        out->round = (int)r;
        out->hosts = res->n;
        out->node = node;
        out->changes = res->changes;
        out->restarts = res->restarts;
        snprintf(out->reason, sizeof out->reason, "%s", res->reason);
        snprintf(out->names, sizeof out->names, "%s", res->names);
        m->node = node;
        atomic_store(&m->round, (int)r);
        break;
    }
    free(res);
    return st;
}

/* Wait for `key` (a member's), watching the round's stop: 1 found, 0
 * stopped, -1 store lost. */
static int wait_key(plait_membership *m, const char *key, void *buf, size_t cap, size_t *len) {
    for (;;) {
        if (atomic_load(&m->stopped)) return 0;
        plait_status st = plait_store_get(m->st, key, buf, cap, len, 0.25);
        if (st == PLAIT_OK) return 1;
        if (st != PLAIT_ERR_TIMEOUT) return -1;
        plait_clear_error();
    }
}

plait_status plait_membership_set_store_port(plait_membership *m, int port) {
    char key[64];
    snprintf(key, sizeof key, "m/r%d/store", atomic_load(&m->round));
    int32_t p = port;
    return plait_store_set(m->st, key, &p, sizeof p);
}

int plait_membership_store_port(plait_membership *m, int *port) {
    char key[64];
    snprintf(key, sizeof key, "m/r%d/store", atomic_load(&m->round));
    int32_t p = 0;
    size_t len = 0;
    int got = wait_key(m, key, &p, sizeof p, &len);
    if (got == 1) *port = p;
    return got;
}

int plait_membership_verdicts(plait_membership *m, const char *refusal, char *why, size_t cap) {
    int r = atomic_load(&m->round);
    char key[64];
    snprintf(key, sizeof key, "m/r%d/verdict/%d", r, m->node);
    const char *mine = refusal ? refusal : "";
    if (plait_store_set(m->st, key, mine, strlen(mine) + 1) != PLAIT_OK) return -1;
    char *text = malloc(ELASTIC_REASON * 4);
    if (!text) return -1;
    int n = 0, result = 0;
    /* the members: the round's result says how many */
    elastic_result *res = malloc(sizeof *res);
    size_t len = 0;
    snprintf(key, sizeof key, "m/r%d/result", r);
    if (!res || plait_store_get(m->st, key, res, sizeof *res, &len, 0) != PLAIT_OK || len != sizeof *res) {
        free(res);
        free(text);
        return -1;
    }
    n = res->n;
    free(res);
    for (int k = 0; k < n && result == 0; k++) {
        snprintf(key, sizeof key, "m/r%d/verdict/%d", r, k);
        int got = wait_key(m, key, text, ELASTIC_REASON * 4 - 1, &len);
        if (got <= 0) {
            result = got == 0 ? 2 : -1;
            break;
        }
        text[len < ELASTIC_REASON * 4 ? len : ELASTIC_REASON * 4 - 1] = '\0';
        if (text[0]) {
            snprintf(why, cap, "%s", text);
            result = 1;
        }
    }
    free(text);
    return result;
}

plait_status plait_membership_report(plait_membership *m, const plait_attempt_end *end) {
    if (atomic_load(&m->store_lost)) return store_lost(m);
    elastic_outcome o;
    memset(&o, 0, sizeof o);
    o.kind = end->kind;
    o.n_blamed = end->n_blamed < ELASTIC_BLAME ? end->n_blamed : ELASTIC_BLAME;
    o.n_failed = end->n_failed < ELASTIC_BLAME ? end->n_failed : ELASTIC_BLAME;
    for (int i = 0; i < o.n_blamed; i++) o.blamed[i] = end->blamed[i];
    for (int i = 0; i < o.n_failed; i++) o.failed[i] = end->failed[i];
    snprintf(o.message, sizeof o.message, "%s", end->message);
    char key[64];
    snprintf(key, sizeof key, "m/r%d/done/%d", atomic_load(&m->round), m->node);
    plait_status st = plait_store_set(m->st, key, &o, sizeof o);
    if (st != PLAIT_OK) {
        char why[2400];
        lost_words(m, plait_last_error(), why, sizeof why);
        st = plait_set_error(st, "%s", why);
    }
    return st;
}
