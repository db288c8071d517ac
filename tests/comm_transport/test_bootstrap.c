/* Joining a job: launcher detection from the environment (pure), and whole
 * joins of several "ranks" played by threads of this process (torchrun-style
 * environment, and mpirun's through the private rendezvous file), with the
 * world and subset bootstraps, communicator ids and timeouts naming who is
 * missing. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "launch/bootstrap.h"
#include "launch/rendezvous_file.h"
#include "launch/net.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "host/host_table.h"

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle)))                                                 \
            fail_msg("expected \"%s\" in message: %s", (needle), (haystack));              \
    } while (0)

/* ---- detection ---------------------------------------------------------- */

static plait_status detect(char *const *env, const char *rdv, plait_job_env *e) {
    plait_clear_error();
    return plait_job_env_detect(env, rdv, e);
}

static void test_detect_single_process(void **state) {
    (void)state;
    plait_job_env e;
    char *env[] = {"HOME=/root", NULL};
    assert_int_equal(detect(env, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_NONE);
    assert_int_equal(e.size, 1);
    assert_string_equal(e.store_source, "in-process");
}

static void test_detect_plait(void **state) {
    (void)state;
    plait_job_env e;
    char *env[] = {"PLAIT_RANK=2", "PLAIT_WORLD_SIZE=4", "PLAIT_LOCAL_RANK=2", "PLAIT_LOCAL_SIZE=4",
                   "PLAIT_STORE_ADDR=127.0.0.1:4000", "PLAIT_JOB_TOKEN=t0k", "PLAIT_STORE_FD=9",
                   /* an outer mpirun does not confuse it */
                   "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1", NULL};
    assert_int_equal(detect(env, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_PLAIT);
    assert_int_equal(e.rank, 2);
    assert_int_equal(e.size, 4);
    assert_string_equal(e.store_host, "127.0.0.1");
    assert_int_equal(e.store_port, 4000);
    assert_string_equal(e.token, "t0k");
    assert_int_equal(e.store_fd, -1); /* only rank 0 takes the socket */
    char launcher[96];
    assert_string_equal(plait_job_env_launcher(&e, launcher, sizeof launcher), "plait -n");
    /* a rank of plait --nnodes: named as that, with its hosts, not as -n's */
    char *nodes[] = {"PLAIT_RANK=2", "PLAIT_WORLD_SIZE=4", "PLAIT_STORE_ADDR=10.0.0.1:4000", "PLAIT_JOB_TOKEN=t0k",
                     "PLAIT_NNODES=2", NULL};
    assert_int_equal(detect(nodes, NULL, &e), PLAIT_OK);
    assert_int_equal(e.all_local, 0);
    assert_string_equal(plait_job_env_launcher(&e, launcher, sizeof launcher), "plait --nnodes (2 hosts)");
    char *env0[] = {"PLAIT_RANK=0", "PLAIT_WORLD_SIZE=4", "PLAIT_STORE_ADDR=127.0.0.1:4000", "PLAIT_JOB_TOKEN=t",
                    "PLAIT_STORE_FD=9", NULL};
    assert_int_equal(detect(env0, NULL, &e), PLAIT_OK);
    assert_int_equal(e.store_fd, 9);
    char *notoken[] = {"PLAIT_RANK=0", "PLAIT_WORLD_SIZE=4", "PLAIT_STORE_ADDR=127.0.0.1:4000", NULL};
    assert_int_equal(detect(notoken, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "PLAIT_JOB_TOKEN");
}

static void test_detect_mpirun(void **state) {
    (void)state;
    plait_job_env e;
    char *local[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                     "OMPI_COMM_WORLD_LOCAL_SIZE=4", "OMPI_MCA_ess_base_jobid=12345", NULL};
    assert_int_equal(detect(local, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_MPI);
    assert_int_equal(e.rank, 1);
    assert_int_equal(e.local_size, 4);
    assert_true(e.all_local);
    assert_string_equal(e.store_source, "private rendezvous file");
    assert_string_equal(e.job_id, "mpi-12345");
    /* two hosts: needs an address and a token */
    char *multi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                     "OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid=12345", NULL};
    assert_int_equal(detect(multi, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "[comm] rendezvous");
    assert_contains(plait_last_error(), "PLAIT_JOB_TOKEN");
    assert_int_equal(detect(multi, "node1:29500", &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "PLAIT_JOB_TOKEN is not set");
    char *multi_tok[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                         "PLAIT_JOB_TOKEN=s3cret", NULL};
    assert_int_equal(detect(multi_tok, "node1:29500", &e), PLAIT_OK);
    assert_string_equal(e.store_host, "node1");
    assert_int_equal(e.store_port, 29500);
    assert_string_equal(e.store_source, "[comm] rendezvous");
    assert_int_equal(detect(multi_tok, "node1", &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "[comm] rendezvous");
}

static void test_detect_slurm(void **state) {
    (void)state;
    plait_job_env e;
    char *step[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=3", "SLURM_STEP_ID=0", "SLURM_JOB_ID=77",
                    "SLURM_STEP_NUM_NODES=1", NULL};
    assert_int_equal(detect(step, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_SLURM);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.size, 4);
    assert_string_equal(e.job_id, "slurm-77.0");
    /* a batch script is not a rank */
    char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=77", NULL};
    assert_int_equal(detect(batch, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_NONE);
}

static void test_detect_torchrun(void **state) {
    (void)state;
    plait_job_env e;
    char *env[] = {"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=10.1.2.3",
                   "MASTER_PORT=29500", "PLAIT_JOB_TOKEN=x", NULL};
    assert_int_equal(detect(env, NULL, &e), PLAIT_OK);
    assert_int_equal(e.launcher, PLAIT_LAUNCHER_TORCHRUN);
    assert_string_equal(e.store_host, "10.1.2.3");
    assert_int_equal(e.store_port, 29500);
    assert_string_equal(e.store_source, "MASTER_ADDR/MASTER_PORT");
    char *v6[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=::1", "MASTER_PORT=29500", "PLAIT_JOB_TOKEN=x", NULL};
    assert_int_equal(detect(v6, NULL, &e), PLAIT_OK);
    assert_string_equal(e.store_host, "::1");
    /* malformed values are named */
    char *bad[] = {"RANK=9", "WORLD_SIZE=8", NULL};
    assert_int_equal(detect(bad, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "RANK=9 is not below WORLD_SIZE=8");
    char *junk[] = {"RANK=x1", "WORLD_SIZE=8", NULL};
    assert_int_equal(detect(junk, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "RANK='x1'");
    char *noport[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "PLAIT_JOB_TOKEN=x", NULL};
    assert_int_equal(detect(noport, NULL, &e), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "MASTER_PORT");
}

/* The job's name in a run directory's lock: alike on every rank of one job
 * (whatever its rank, local rank or store address), unlike another job's,
 * never the token itself; none for a single process. */
static void test_job_identity(void **state) {
    (void)state;
    plait_job_env e;
    char a[PLAIT_JOB_IDENTITY_CHARS + 1], b[PLAIT_JOB_IDENTITY_CHARS + 1];
    char *r0[] = {"PLAIT_RANK=0", "PLAIT_WORLD_SIZE=4", "PLAIT_STORE_ADDR=node0:4000", "PLAIT_JOB_TOKEN=t0k", NULL};
    char *r3[] = {"PLAIT_RANK=3", "PLAIT_WORLD_SIZE=4", "PLAIT_LOCAL_RANK=1", "PLAIT_STORE_ADDR=10.0.0.1:4000",
                  "PLAIT_JOB_TOKEN=t0k", "PLAIT_NNODES=2", NULL};
    assert_int_equal(detect(r0, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, a);
    assert_int_equal(strlen(a), PLAIT_JOB_IDENTITY_CHARS);
    assert_null(strstr(a, "t0k"));
    assert_int_equal(detect(r3, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, b);
    assert_string_equal(a, b);
    char *other[] = {"PLAIT_RANK=3", "PLAIT_WORLD_SIZE=4", "PLAIT_STORE_ADDR=node0:4000", "PLAIT_JOB_TOKEN=t0K", NULL};
    assert_int_equal(detect(other, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, b);
    assert_string_not_equal(a, b);
    /* launchers without a token: their job ids */
    char *s1[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_ID=0", "SLURM_JOB_ID=77", "SLURM_NNODES=1", NULL};
    char *s2[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_ID=1", "SLURM_JOB_ID=77", "SLURM_NNODES=1", NULL};
    assert_int_equal(detect(s1, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, a);
    assert_int_equal(detect(s2, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, b);
    assert_string_not_equal(a, b);
    char *single[] = {"HOME=/root", NULL};
    assert_int_equal(detect(single, NULL, &e), PLAIT_OK);
    plait_job_env_identity(&e, a);
    assert_string_equal(a, "");
}

/* ---- whole joins, one thread per rank ----------------------------------------- */

enum { MAXR = 4 };

struct rank_arg {
    int rank, size;
    char *env[16];
    char store[16][96];
    double timeout;
    int skip;            /* never join */
    plait_status join_status;
    char join_error[2048];
    plait_job *job;
};

static void make_env(struct rank_arg *a, const char *kind, int port, const char *jobid) {
    int k = 0;
#define E(...) (snprintf(a->store[k], sizeof a->store[k], __VA_ARGS__), a->env[k] = a->store[k], k++)
    if (strcmp(kind, "torch") == 0) {
        E("RANK=%d", a->rank);
        E("WORLD_SIZE=%d", a->size);
        E("LOCAL_RANK=%d", a->rank);
        E("LOCAL_WORLD_SIZE=%d", a->size);
        E("MASTER_ADDR=127.0.0.1");
        E("MASTER_PORT=%d", port);
        E("PLAIT_JOB_TOKEN=thread-test-token");
    } else {
        E("OMPI_COMM_WORLD_RANK=%d", a->rank);
        E("OMPI_COMM_WORLD_SIZE=%d", a->size);
        E("OMPI_COMM_WORLD_LOCAL_RANK=%d", a->rank);
        E("OMPI_COMM_WORLD_LOCAL_SIZE=%d", a->size);
        E("OMPI_MCA_ess_base_jobid=%s", jobid);
    }
#undef E
    a->env[k] = NULL;
}

static void *join_thread(void *p) {
    struct rank_arg *a = p;
    if (a->skip) return NULL;
    plait_job_options o = {a->timeout, NULL, 1, a->env};
    a->join_status = plait_job_join_with(&o, &a->job);
    snprintf(a->join_error, sizeof a->join_error, "%s", plait_last_error());
    return NULL;
}

static int free_port(void) {
    struct sockaddr_storage ss;
    socklen_t sl;
    plait_net_resolve("127.0.0.1", 0, &ss, &sl);
    int fd = plait_net_listen((struct sockaddr *)&ss, sl, 1);
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    close(fd);
    return port;
}

static void join_all(struct rank_arg *a, int n) {
    pthread_t t[MAXR];
    for (int r = 0; r < n; r++) pthread_create(&t[r], NULL, join_thread, &a[r]);
    for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
}

static void leave_all(struct rank_arg *a, int n) {
    /* rank 0 waits for the others to leave its store: leave in reverse */
    for (int r = n - 1; r >= 0; r--)
        if (a[r].job) plait_job_leave(a[r].job, 0);
}

struct bs_call {
    const plait_bootstrap *bs;
    int value;
    int all[MAXR];
    plait_status st;
    char err[1024];
    int barrier_only;
};

static void *bs_thread(void *p) {
    struct bs_call *c = p;
    if (c->barrier_only) c->st = c->bs->barrier(c->bs->ctx);
    else c->st = c->bs->allgather(c->bs->ctx, &c->value, c->all, sizeof c->value);
    snprintf(c->err, sizeof c->err, "%s", plait_last_error());
    return NULL;
}

static void test_join_torchrun_threads(void **state) {
    (void)state;
    enum { N = 3 };
    struct rank_arg a[N];
    memset(a, 0, sizeof a);
    int port = free_port();
    for (int r = 0; r < N; r++) {
        a[r].rank = r;
        a[r].size = N;
        a[r].timeout = 10;
        make_env(&a[r], "torch", port, NULL);
    }
    join_all(a, N);
    for (int r = 0; r < N; r++) {
        if (a[r].join_status != PLAIT_OK) fail_msg("rank %d: %s", r, a[r].join_error);
        assert_int_equal(plait_job_rank(a[r].job), r);
        assert_int_equal(plait_job_size(a[r].job), N);
        assert_int_equal(plait_job_local_rank(a[r].job), r); /* all threads share one host */
        assert_int_equal(plait_job_local_size(a[r].job), N);
        assert_int_equal(plait_job_launcher_kind(a[r].job), PLAIT_LAUNCHER_TORCHRUN);
        assert_string_equal(plait_job_store_source(a[r].job), "MASTER_ADDR/MASTER_PORT");
        const plait_bootstrap *w = plait_job_world(a[r].job);
        assert_int_equal(w->rank, r);
        assert_int_equal(w->size, N);
        assert_int_equal(w->comm_id, 0);
        /* ABI v1.1's host map: every member on this one host */
        assert_true(PLAIT_BOOTSTRAP_HAS_HOSTS(w));
        for (int j = 0; j < N; j++) assert_int_equal(w->host_of[j], w->host_of[0]);
    }
    /* world allgather in rank order */
    pthread_t t[N];
    struct bs_call c[N];
    for (int r = 0; r < N; r++) {
        c[r] = (struct bs_call){.bs = plait_job_world(a[r].job), .value = 10 * r + 1};
        pthread_create(&t[r], NULL, bs_thread, &c[r]);
    }
    for (int r = 0; r < N; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < N; r++) {
        assert_int_equal(c[r].st, PLAIT_OK);
        for (int j = 0; j < N; j++) assert_int_equal(c[r].all[j], 10 * j + 1);
    }
    /* a subset {2, 0} with a fresh id: member order is the given order */
    uint32_t id2 = 0, id0 = 0;
    assert_int_equal(plait_job_new_comm_id(a[2].job, "test/group", 1, &id2), PLAIT_OK);
    assert_int_equal(plait_job_new_comm_id(a[0].job, "test/group", 0, &id0), PLAIT_OK);
    assert_true(id2 != 0);
    assert_int_equal(id0, id2);
    uint32_t other = 0;
    assert_int_equal(plait_job_new_comm_id(a[1].job, "test/other", 1, &other), PLAIT_OK);
    assert_true(other != id2);
    int members[2] = {2, 0};
    plait_bootstrap *b2, *b0, *b1;
    assert_int_equal(plait_job_bootstrap_for(a[2].job, id2, 2, members, &b2), PLAIT_OK);
    assert_int_equal(plait_job_bootstrap_for(a[0].job, id2, 2, members, &b0), PLAIT_OK);
    assert_int_equal(b2->rank, 0);
    assert_int_equal(b0->rank, 1);
    assert_int_equal(b0->local_size, 2);
    assert_int_equal(b0->local_rank, 1);
    assert_true(PLAIT_BOOTSTRAP_HAS_HOSTS(b0));
    assert_int_equal(b0->host_of[0], plait_job_world(a[0].job)->host_of[2]); /* member 0 is world rank 2 */
    assert_int_equal(b0->host_of[1], b0->host_of[0]);
    assert_int_equal(plait_job_bootstrap_for(a[1].job, id2, 2, members, &b1), PLAIT_ERR_INVALID_ARG);
    assert_contains(plait_last_error(), "not a member");
    int dup[2] = {1, 1};
    assert_int_equal(plait_job_bootstrap_for(a[1].job, 9, 2, dup, &b1), PLAIT_ERR_INVALID_ARG);
    /* keys are namespaced: the subset's "k" is not the world's "k" */
    const plait_bootstrap *w0 = plait_job_world(a[0].job);
    assert_int_equal(w0->set(w0->ctx, "k", "world", 5), PLAIT_OK);
    assert_int_equal(b2->set(b2->ctx, "k", "sub", 3), PLAIT_OK);
    char buf[8] = {0};
    size_t len = 0;
    assert_int_equal(b0->get(b0->ctx, "k", buf, sizeof buf, &len), PLAIT_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "sub", 3);
    assert_int_equal(w0->get(w0->ctx, "k", buf, sizeof buf, &len), PLAIT_OK);
    assert_memory_equal(buf, "world", 5);
    struct bs_call s2 = {.bs = b2, .value = 7}, s0 = {.bs = b0, .value = 8};
    pthread_create(&t[0], NULL, bs_thread, &s2);
    pthread_create(&t[1], NULL, bs_thread, &s0);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    assert_int_equal(s2.st, PLAIT_OK);
    assert_int_equal(s0.all[0], 7);
    assert_int_equal(s0.all[1], 8);
    plait_bootstrap_free(b2);
    plait_bootstrap_free(b0);
    leave_all(a, N);
}

/* A member that never reaches the barrier is named, with its world rank. */
static void test_bootstrap_timeout_names_member(void **state) {
    (void)state;
    enum { N = 3 };
    struct rank_arg a[N];
    memset(a, 0, sizeof a);
    int port = free_port();
    for (int r = 0; r < N; r++) {
        a[r].rank = r;
        a[r].size = N;
        a[r].timeout = 0.5;
        make_env(&a[r], "torch", port, NULL);
    }
    join_all(a, N);
    for (int r = 0; r < N; r++)
        if (a[r].join_status != PLAIT_OK) fail_msg("rank %d: %s", r, a[r].join_error);
    int members[3] = {1, 2, 0};
    plait_bootstrap *b1, *b2;
    assert_int_equal(plait_job_bootstrap_for(a[1].job, 42, 3, members, &b1), PLAIT_OK);
    assert_int_equal(plait_job_bootstrap_for(a[2].job, 42, 3, members, &b2), PLAIT_OK);
    struct bs_call c1 = {.bs = b1, .barrier_only = 1}, c2 = {.bs = b2, .barrier_only = 1};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, bs_thread, &c1);
    pthread_create(&t2, NULL, bs_thread, &c2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(c1.st, PLAIT_ERR_TIMEOUT);
    assert_contains(c1.err, "member 2 (world rank 0) did not arrive");
    plait_bootstrap_free(b1);
    plait_bootstrap_free(b2);
    leave_all(a, N);
}

static void test_join_missing_rank_is_named(void **state) {
    (void)state;
    enum { N = 4 };
    struct rank_arg a[N];
    memset(a, 0, sizeof a);
    int port = free_port();
    for (int r = 0; r < N; r++) {
        a[r].rank = r;
        a[r].size = N;
        a[r].timeout = 0.5;
        a[r].skip = r == 3;
        make_env(&a[r], "torch", port, NULL);
    }
    join_all(a, N);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(a[r].join_status, PLAIT_ERR_TIMEOUT);
        assert_contains(a[r].join_error, "rank 3 never joined the job within 0.5 s (3 of 4 ranks joined");
    }
}

/* mpirun on one host: the private rendezvous file carries port and token. */
static void test_join_private_rendezvous_file(void **state) {
    (void)state;
    enum { N = 3 };
    struct rank_arg a[N];
    memset(a, 0, sizeof a);
    char jobid[64];
    snprintf(jobid, sizeof jobid, "test%d", (int)getpid());
    for (int r = 0; r < N; r++) {
        a[r].rank = r;
        a[r].size = N;
        a[r].timeout = 10;
        make_env(&a[r], "mpi", 0, jobid);
    }
    join_all(a, N);
    for (int r = 0; r < N; r++) {
        if (a[r].join_status != PLAIT_OK) fail_msg("rank %d: %s", r, a[r].join_error);
        assert_string_equal(plait_job_store_source(a[r].job), "private rendezvous file");
        assert_int_equal(plait_job_launcher_kind(a[r].job), PLAIT_LAUNCHER_MPI);
    }
    assert_string_equal(plait_job_store_address(a[1].job), plait_job_store_address(a[0].job));
    /* the file is gone once everyone joined */
    char path[600];
    char fid[80];
    snprintf(fid, sizeof fid, "mpi-%s", jobid);
    assert_int_equal(plait_rdv_file_path(fid, path, sizeof path), PLAIT_OK);
    assert_int_not_equal(access(path, F_OK), 0);
    leave_all(a, N);
}

/* A FIFO where the rendezvous file should be is looked at and refused,
 * never waited on: the wait ends at its deadline (alarm: a blocked open
 * fails the test instead of hanging it). */
static void test_rendezvous_fifo_not_waited_on(void **state) {
    (void)state;
    char fid[64], path[600], token[256];
    snprintf(fid, sizeof fid, "fifo-test-%ld", (long)getpid());
    assert_int_equal(plait_rdv_file_path(fid, path, sizeof path), PLAIT_OK);
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20);
    int port = 0;
    double t0 = plait_clock_now();
    assert_int_equal(plait_rdv_file_wait(path, t0 + 0.3, &port, token, sizeof token), PLAIT_ERR_TIMEOUT);
    alarm(0);
    unlink(path);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_single_process),
        cmocka_unit_test(test_detect_plait),
        cmocka_unit_test(test_detect_mpirun),
        cmocka_unit_test(test_detect_slurm),
        cmocka_unit_test(test_detect_torchrun),
        cmocka_unit_test(test_job_identity),
        cmocka_unit_test(test_join_torchrun_threads),
        cmocka_unit_test(test_bootstrap_timeout_names_member),
        cmocka_unit_test(test_join_missing_rank_is_named),
        cmocka_unit_test(test_join_private_rendezvous_file),
        cmocka_unit_test(test_rendezvous_fifo_not_waited_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
