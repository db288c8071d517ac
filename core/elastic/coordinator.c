/* The rounds of an elastic job, decided on the store host (coordinator.h). */
#include "elastic/coordinator.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "elastic/membership_wire.h"
#include "elastic/store_keys.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* A launcher the coordinator has heard of. */
typedef struct known {
    elastic_member info;
    int64_t beats;   /* its heartbeat counter when last read */
    double seen;     /* when that counter last moved (this clock) */
    int bye;         /* it left on its own */
    int dropped;     /* the coordinator dropped it */
    int lost;        /* its heartbeat stopped */
    int told_full;   /* it was said to wait for room (the job at --nnodes MAX) */
    int cfg_same;    /* its config's fingerprint was found equal to the store host's */
} known;

struct elastic_coordinator {
    plait_store *st;
    plait_membership_opts o;
    uint64_t anchor;
    known *k;
    int nk, cap;
    pthread_t thread;
    atomic_int stop, finished;
    /* the previous round */
    uint64_t prev[ELASTIC_MAX_HOSTS];
    int n_prev;
    int changes, restarts, failures;
};

static known *find(elastic_coordinator *c, uint64_t lid) {
    for (int i = 0; i < c->nk; i++)
        if (c->k[i].info.lid == lid) return &c->k[i];
    return NULL;
}

static const char *name_of(elastic_coordinator *c, uint64_t lid) {
    known *k = find(c, lid);
    return k ? k->info.host : "?";
}

static int fresh(const elastic_coordinator *c, const known *k, double now) {
    return !k->bye && !k->dropped && !k->lost && now - k->seen < c->o.host_timeout;
}

/* Learn new launchers and read every heartbeat. -1 when the store failed. */
static int refresh(elastic_coordinator *c) {
    int64_t n = 0;
    if (plait_store_add(c->st, "m/nreg", 0, &n) != PLAIT_OK) return -1;
    double now = plait_clock_now();
    while (c->nk < n) {
        char key[64];
        snprintf(key, sizeof key, "m/reg/%d", c->nk);
        elastic_member m;
        size_t len = 0;
        if (plait_store_get(c->st, key, &m, sizeof m, &len, 5.0) != PLAIT_OK || len != sizeof m) return -1;
        m.host[sizeof m.host - 1] = '\0';
        if (c->nk == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            known *k = realloc(c->k, sizeof *k * (size_t)cap);
            if (!k) return -1;
            c->k = k;
            c->cap = cap;
        }
        c->k[c->nk++] = (known){.info = m, .beats = -1, .seen = now};
    }
    for (int i = 0; i < c->nk; i++) {
        known *k = &c->k[i];
        if (k->bye || k->dropped || k->lost) continue;
        char key[64];
        int64_t beats = 0;
        elastic_key_lid(key, sizeof key, "m/hb/", k->info.lid);
        if (plait_store_add(c->st, key, 0, &beats) != PLAIT_OK) return -1;
        if (beats != k->beats) {
            k->beats = beats;
            k->seen = now;
        }
        if (now - k->seen >= c->o.host_timeout) {
            elastic_key_lid(key, sizeof key, "m/bye/", k->info.lid);
            k->bye = elastic_get_now(c->st, key, NULL, 0, NULL) == 1;
        }
    }
    return 0;
}

static int live_count(elastic_coordinator *c) {
    double now = plait_clock_now();
    int n = 0;
    for (int i = 0; i < c->nk; i++) n += fresh(c, &c->k[i], now);
    return n;
}

/* The job is over: `why` ("1" when training completed) for every launcher,
 * waiting ones included. */
static void finish(elastic_coordinator *c, const char *why) {
    (void)plait_store_set(c->st, "m/finished", why, strlen(why) + 1);
}

static void publish_failed(elastic_coordinator *c, int r, const char *why) {
    elastic_result *res = calloc(1, sizeof *res);
    if (!res) return;
    res->magic = ELASTIC_RESULT_MAGIC;
    res->status = ELASTIC_FAILED;
    res->round = r;
    snprintf(res->reason, sizeof res->reason, "%s", why);
    char key[64];
    snprintf(key, sizeof key, "m/r%d/result", r);
    (void)plait_store_set(c->st, key, res, sizeof *res);
    free(res);
    finish(c, why);
    fprintf(stderr, "plait: elastic: the job ends: %s\n", why);
}

/* Order of two launchers by host name, then id. */
static int by_name(elastic_coordinator *c, uint64_t a, uint64_t b) {
    int d = strcmp(name_of(c, a), name_of(c, b));
    return d ? d : (a > b) - (a < b);
}

static int in_list(const uint64_t *v, int n, uint64_t lid) {
    for (int i = 0; i < n; i++)
        if (v[i] == lid) return 1;
    return 0;
}

/* Drop launcher `k` with `why` (it reads m/dropped/<lid> and exits). */
static void drop(elastic_coordinator *c, known *k, const char *why) {
    char key[64];
    k->dropped = 1;
    elastic_key_lid(key, sizeof key, "m/dropped/", k->info.lid);
    (void)plait_store_set(c->st, key, why, strlen(why) + 1);
}

/* Drop launcher `k`, which may not join the job, saying why on this host. */
static void not_admitted(elastic_coordinator *c, known *k, const char *why) {
    drop(c, k, why);
    fprintf(stderr, "plait: elastic: %s: it is not admitted\n", why);
}

/* 1 when launcher `k`'s config differs from the store host's in a key
 * that must be equal on every host (`why` says which); 0 when equal or
 * when either published none (an older launcher: the ranks' own check
 * stands); -1 when the store failed. */
static int config_differs(elastic_coordinator *c, known *k, char *why, size_t cap) {
    if (k->cfg_same || k->info.lid == c->anchor) return 0;
    char key[64];
    char *text[2] = {NULL, NULL};
    uint64_t lid[2] = {k->info.lid, c->anchor};
    int got = 1;
    for (int i = 0; i < 2 && got == 1; i++) {
        size_t len = 0;
        elastic_key_lid(key, sizeof key, "m/cfg/", lid[i]);
        got = elastic_get_now(c->st, key, NULL, 0, &len);
        if (got == 1 && !(text[i] = calloc(1, len + 1))) got = -1;
        if (got == 1) got = elastic_get_now(c->st, key, text[i], len, &len);
    }
    int differs = got;
    if (got == 1) {
        char diff[768];
        differs = plait_config_fingerprint_diff(text[0], text[1], "the job", diff, sizeof diff);
        if (differs)
            snprintf(why, cap,
                     "host %s's configuration differs from the job's in a key that must be equal on every host: "
                     "%s (start it with the job's config to rejoin)",
                     k->info.host, diff);
    }
    k->cfg_same = got == 1 && !differs;
    free(text[0]);
    free(text[1]);
    return differs;
}

/* Collect round r's arrivals until it can close. Returns the members
 * (node order) in res, 0; 1 when the job ended (published); -1 store lost. */
static int collect(elastic_coordinator *c, int r, elastic_result *res) {
    double opened = plait_clock_now();
    char key[64];
    snprintf(key, sizeof key, "m/r%d/n", r);
    uint64_t arrived[ELASTIC_MAX_HOSTS];
    int n_read = 0;
    for (;;) {
        if (atomic_load(&c->stop)) return 1;
        if (refresh(c) != 0) return -1;
        int64_t n = 0;
        if (plait_store_add(c->st, key, 0, &n) != PLAIT_OK) return -1;
        if (n > ELASTIC_MAX_HOSTS) n = ELASTIC_MAX_HOSTS;
        for (; n_read < n; n_read++) { /* who they are, in arrival order */
            char ak[64];
            size_t len = 0;
            snprintf(ak, sizeof ak, "m/r%d/a%d", r, n_read);
            if (plait_store_get(c->st, ak, &arrived[n_read], sizeof arrived[n_read], &len, 5.0) != PLAIT_OK ||
                len != sizeof(uint64_t))
                return -1;
        }
        /* the members: the store host first, then earlier members in their
         * order, then newcomers by arrival; never a dropped or lost one, and
         * only hosts running as many ranks as the store host */
        double now = plait_clock_now();
        known *anchor = find(c, c->anchor);
        int m = 0;
        uint64_t order[ELASTIC_MAX_HOSTS];
        int n_order = 0;
        if (in_list(arrived, n_read, c->anchor)) order[n_order++] = c->anchor;
        for (int i = 0; i < c->n_prev; i++)
            if (c->prev[i] != c->anchor && in_list(arrived, n_read, c->prev[i])) order[n_order++] = c->prev[i];
        int first_new = n_order;
        for (int i = 0; i < n_read; i++)
            if (!in_list(order, n_order, arrived[i])) order[n_order++] = arrived[i];
        /* newcomers by host name, so a job started together always gets
         * the same node order, whoever arrived first */
        for (int i = first_new + 1; i < n_order; i++)
            for (int j = i; j > first_new && by_name(c, order[j - 1], order[j]) > 0; j--) {
                uint64_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (int i = 0; i < n_order && m < c->o.max_hosts; i++) {
            known *k = find(c, order[i]);
            if (!k || k->dropped || k->bye || !fresh(c, k, now)) continue;
            if (anchor && k->info.ranks != anchor->info.ranks) {
                char why[512];
                snprintf(why, sizeof why, "host %s runs %d ranks, the job's hosts %d each (every host must run the "
                         "same config)", k->info.host, (int)k->info.ranks, (int)anchor->info.ranks);
                not_admitted(c, k, why);
                continue;
            }
            /* once the job has trained, its config is the store host's: a
             * host that comes back with another is refused alone (at the
             * start the ranks' own check ends the job, naming the key) */
            char why[1024];
            int differs = c->n_prev > 0 ? config_differs(c, k, why, sizeof why) : 0;
            if (differs < 0) return -1;
            if (differs) {
                not_admitted(c, k, why);
                continue;
            }
            res->members[m++] = order[i];
        }
        int live = live_count(c);
        double waited = now - opened;
        int anchor_in = m > 0 && res->members[0] == c->anchor;
        if (anchor_in && (m >= c->o.max_hosts ||
                          (m >= c->o.min_hosts && ((c->n_prev > 0 && m >= live) || waited >= c->o.join_wait)))) {
            res->n = m;
            return 0;
        }
        if (waited >= c->o.join_timeout) {
            char names[ELASTIC_REASON] = "";
            size_t off = 0;
            for (int i = 0; i < m && off + 80 < sizeof names; i++)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                                        name_of(c, res->members[i]));
            char why[ELASTIC_REASON + 256];
            snprintf(why, sizeof why, "only %d host%s joined within %.3g s ([run] join_timeout), fewer than the %d "
                     "--nnodes %d:%d needs%s%s", m, m == 1 ? "" : "s", c->o.join_timeout, c->o.min_hosts,
                     c->o.min_hosts, c->o.max_hosts, m ? ": " : "", names);
            publish_failed(c, r, why);
            return 1;
        }
        plait_clock_sleep(0.05);
    }
}

/* The world ranks one host's failed ranks named as the ones they waited
 * for, less every rank that failed on its own: the ranks that stopped
 * progressing. Returns the first such rank, or -1. */
static int stuck_rank(const elastic_outcome *out, const int *done, int n) {
    for (int h = 0; h < n; h++) {
        if (!done[h] || out[h].kind != ELASTIC_DONE_FAILED) continue;
        for (int b = 0; b < out[h].n_blamed && b < ELASTIC_BLAME; b++) {
            int w = out[h].blamed[b], self = 0;
            for (int g = 0; g < n && !self; g++)
                for (int f = 0; done[g] && f < out[g].n_failed && f < ELASTIC_BLAME; f++)
                    if (out[g].failed[f] == w) self = 1;
            if (!self) return w;
        }
    }
    return -1;
}

/* Watch round r (members in res) until every member is done or lost.
 * Writes the next round's reason; returns 0 (go on: `failure` 1 when the
 * round ended by a failure), 1 when the job is over, -1 store lost.
 * long: one loop over the round's members whose per-host state (done,
 * lost, outcomes) every branch reads and writes */
static int watch(elastic_coordinator *c, int r, const elastic_result *res, char *next_reason, size_t cap,
                 int *failure, char *over, size_t over_cap) {
    int n = res->n, done[ELASTIC_MAX_HOSTS] = {0}, lost[ELASTIC_MAX_HOSTS] = {0};
    elastic_outcome *out = calloc((size_t)n, sizeof *out);
    if (!out) return -1;
    char end[ELASTIC_REASON] = "";
    int grow = 0, rc = 0;
    *failure = 0;
    next_reason[0] = '\0';
    for (;;) {
        if (atomic_load(&c->stop)) {
            rc = 1;
            break;
        }
        if (refresh(c) != 0) {
            rc = -1;
            break;
        }
        double now = plait_clock_now();
        int all = 1;
        for (int h = 0; h < n; h++) {
            if (done[h]) continue;
            char key[64];
            size_t len = 0;
            snprintf(key, sizeof key, "m/r%d/done/%d", r, h);
            int got = elastic_get_now(c->st, key, &out[h], sizeof out[h], &len);
            if (got < 0) {
                rc = -1;
                break;
            }
            known *k = find(c, res->members[h]);
            if (got == 1 && len == sizeof out[h]) {
                out[h].message[sizeof out[h].message - 1] = '\0';
                done[h] = 1;
            } else if (k && !fresh(c, k, now) && !k->bye) {
                k->lost = 1;
                done[h] = lost[h] = 1;
            } else if (k && k->bye) {
                done[h] = lost[h] = 1; /* left without a word: gone as well */
            } else {
                all = 0;
            }
        }
        if (rc) break;
        /* why the round ends, first come */
        for (int h = 0; h < n && !end[0]; h++) {
            if (lost[h])
                snprintf(end, sizeof end, "host %s lost (no heartbeat for %.3g s)", name_of(c, res->members[h]),
                         c->o.host_timeout);
            else if (done[h] && (out[h].kind == ELASTIC_DONE_FAILED || out[h].kind == ELASTIC_DONE_REFUSED))
                snprintf(end, sizeof end, "%s", out[h].message);
        }
        if (end[0] && !all) {
            char key[64];
            snprintf(key, sizeof key, "m/r%d/end", r);
            size_t len = 0;
            if (elastic_get_now(c->st, key, NULL, 0, &len) == 0) (void)plait_store_set(c->st, key, end, strlen(end) + 1);
        }
        if (!grow && !end[0]) { /* a host waiting to join: regroup at the next boundary */
            for (int i = 0; i < c->nk && !grow; i++) {
                known *k = &c->k[i];
                if (!fresh(c, k, now) || in_list(res->members, n, k->info.lid)) continue;
                char why[1024];
                int differs = config_differs(c, k, why, sizeof why);
                if (differs < 0) break;
                if (differs) { /* refused before the ranks stop for it */
                    not_admitted(c, k, why);
                    continue;
                }
                if (n >= c->o.max_hosts) { /* no room: it waits, the ranks go on (torchrun's wait list) */
                    if (!k->told_full)
                        fprintf(stderr, "plait: elastic: host %s waits to join: the job has its --nnodes maximum "
                                "of %d hosts; it joins when one leaves\n", k->info.host, c->o.max_hosts);
                    k->told_full = 1;
                    continue;
                }
                char key[64];
                snprintf(key, sizeof key, "m/r%d/grow", r);
                (void)plait_store_set(c->st, key, "1", 2);
                grow = 1;
                fprintf(stderr, "plait: elastic: host %s waits to join: the ranks regroup at their next checkpoint\n",
                        k->info.host);
            }
        }
        if (all) break;
        plait_clock_sleep(0.1);
    }
    if (rc) {
        free(out);
        return rc;
    }
    /* what it was */
    int ok = 0, refused = -1, regroup = 0, failed = 0, n_lost = 0;
    for (int h = 0; h < n; h++) {
        if (lost[h]) {
            n_lost++;
            continue;
        }
        if (out[h].kind == ELASTIC_DONE_OK && h == 0) ok = 1; /* rank 0 finished: the run is complete */
        if (out[h].kind == ELASTIC_DONE_REFUSED && refused < 0) refused = h;
        if (out[h].kind == ELASTIC_DONE_REGROUP) regroup++;
        if (out[h].kind == ELASTIC_DONE_FAILED) failed++;
    }
    if (ok || refused >= 0 || lost[0]) {
        if (ok) snprintf(over, over_cap, "1");
        else if (refused >= 0) snprintf(over, over_cap, "%s", out[refused].message);
        else snprintf(over, over_cap, "the store host's own launcher is gone");
        free(out);
        return 1;
    }
    size_t off = 0;
    for (int h = 0; h < n; h++)
        if (lost[h] && off + 200 < cap)
            off += (size_t)snprintf(next_reason + off, cap - off, "%shost %s lost (no heartbeat for %.3g s)",
                                    off ? "; " : "", name_of(c, res->members[h]), c->o.host_timeout);
    int stuck = n_lost == 0 && failed ? stuck_rank(out, done, n) : -1;
    int ranks = find(c, c->anchor) ? find(c, c->anchor)->info.ranks : 1;
    if (stuck >= 0 && stuck / ranks < n) {
        known *k = find(c, res->members[stuck / ranks]);
        char why[ELASTIC_REASON];
        snprintf(why, sizeof why, "world rank %d on host %s stopped progressing (the ranks waiting for it timed out: "
                 "[comm] timeout), so host %s is dropped from the job", stuck, k ? k->info.host : "?",
                 k ? k->info.host : "?");
        if (k && k->info.lid != c->anchor) drop(c, k, why);
        snprintf(next_reason, cap, "%s", why);
    } else if (!off && failed) {
        for (int h = 0; h < n; h++)
            if (out[h].kind == ELASTIC_DONE_FAILED) {
                snprintf(next_reason, cap, "%s", out[h].message);
                break;
            }
    } else if (!off && regroup) {
        next_reason[0] = '\0'; /* the next round names who joined */
    } else if (!off) {
        snprintf(next_reason, cap, "%s", end[0] ? end : "the ranks ended");
    }
    *failure = n_lost > 0 || failed > 0;
    free(out);
    return 0;
}

static void *run(void *arg) {
    elastic_coordinator *c = arg;
    char reason[ELASTIC_REASON] = "", over[ELASTIC_REASON] = "";
    elastic_result *res = calloc(1, sizeof *res);
    for (int iter = 0; res && !atomic_load(&c->stop); iter++) {
        int64_t r64 = 0;
        if (plait_store_add(c->st, "m/round", 1, &r64) != PLAIT_OK) break;
        int r = (int)r64;
        memset(res, 0, sizeof *res);
        if (iter > 0 && c->failures > c->o.max_restarts) {
            char why[ELASTIC_REASON + 128];
            snprintf(why, sizeof why, "%d failures, more than --max-restarts %d allows; the last: %s", c->failures,
                     c->o.max_restarts, reason);
            publish_failed(c, r, why);
            break;
        }
        int rc = collect(c, r, res);
        if (rc != 0) break;
        /* a change of membership: the set differs from the last round's */
        int changed = res->n != c->n_prev;
        for (int i = 0; i < res->n && !changed; i++) changed = !in_list(c->prev, c->n_prev, res->members[i]);
        if (iter > 0 && changed) {
            c->changes++;
            size_t off = strlen(reason);
            for (int i = 0; i < res->n; i++)
                if (!in_list(c->prev, c->n_prev, res->members[i]) && off + 100 < sizeof reason)
                    off += (size_t)snprintf(reason + off, sizeof reason - off, "%shost %s joined", off ? "; " : "",
                                            name_of(c, res->members[i]));
        }
        res->magic = ELASTIC_RESULT_MAGIC;
        res->status = ELASTIC_RUN;
        res->round = r;
        res->changes = c->changes;
        res->restarts = c->restarts;
        res->failures = c->failures;
        snprintf(res->reason, sizeof res->reason, "%s", reason);
        size_t off = 0;
        for (int i = 0; i < res->n && off + 80 < sizeof res->names; i++)
            off += (size_t)snprintf(res->names + off, sizeof res->names - off, "%s%s", i ? "," : "",
                                    name_of(c, res->members[i]));
        char key[64];
        snprintf(key, sizeof key, "m/r%d/result", r);
        if (plait_store_set(c->st, key, res, sizeof *res) != PLAIT_OK) break;
        memcpy(c->prev, res->members, sizeof(uint64_t) * (size_t)res->n);
        c->n_prev = res->n;
        int failure = 0;
        rc = watch(c, r, res, reason, sizeof reason, &failure, over, sizeof over);
        if (rc == 1 && over[0]) finish(c, over);
        if (rc != 0) break;
        c->restarts++;
        c->failures += failure;
    }
    free(res);
    atomic_store(&c->finished, 1);
    return NULL;
}

plait_status elastic_coordinator_start(plait_store *store, const plait_membership_opts *o, uint64_t anchor,
                                       elastic_coordinator **out) {
    elastic_coordinator *c = calloc(1, sizeof *c);
    if (!c) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    c->st = store;
    c->o = *o;
    c->anchor = anchor;
    if (pthread_create(&c->thread, NULL, run, c) != 0) {
        free(c);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the elastic coordinator's thread");
    }
    *out = c;
    return PLAIT_OK;
}

int elastic_coordinator_finished(const elastic_coordinator *c) { return atomic_load(&c->finished); }

/* Gone: said goodbye, dropped, or silent for host_timeout (lost: a host
 * whose link is down keeps its connection to the store open, and no one
 * waits for it to close). */
static int gone(elastic_coordinator *c, known *k, double now) {
    if (fresh(c, k, now)) { /* refresh reads a goodbye only once the heartbeat is stale */
        char key[64];
        elastic_key_lid(key, sizeof key, "m/bye/", k->info.lid);
        k->bye = elastic_get_now(c->st, key, NULL, 0, NULL) == 1;
    }
    return !fresh(c, k, now);
}

int elastic_coordinator_farewell(elastic_coordinator *c, double until) {
    if (!atomic_load(&c->finished)) return 0; /* its thread still reads the launchers */
    for (;;) {
        if (refresh(c) != 0) return 0;
        double now = plait_clock_now();
        int left = 0;
        for (int i = 0; i < c->nk; i++) left += c->k[i].info.lid != c->anchor && !gone(c, &c->k[i], now);
        if (left == 0) return 1;
        if (now >= until) return 0;
        plait_clock_sleep(0.05);
    }
}

void elastic_coordinator_stop(elastic_coordinator *c) {
    if (!c) return;
    atomic_store(&c->stop, 1);
    pthread_join(c->thread, NULL);
    free(c->k);
    free(c);
}
