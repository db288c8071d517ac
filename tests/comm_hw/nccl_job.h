/*
 * The harness of the nccl plugin's tests (test_nccl_plugin.c,
 * test_nccl_wait_device.c): jobs of threads-as-ranks, each creating the
 * core's world communicator over the plugin the test loaded into g_desc
 * (mock_gpu.c standing in for libcudart and libnccl), running a body, and
 * the checks a body records (CHECK, CHECK_OK: the first failure kept, every
 * one counted). Not thread-safe across jobs: one job at a time.
 */
#ifndef PLAIT_TESTS_NCCL_JOB_H
#define PLAIT_TESTS_NCCL_JOB_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "plugin/loader.h"

#define MAXR 8

typedef struct job job;
typedef void (*body_fn)(int rank, plait_comm *world, job *j);

struct job {
    int n;
    plait_threads_world *w;
    const plait_comm_ops *ops;
    plait_config *cfg[MAXR];
    body_fn body;
    plait_comm_settings settings;
    plait_status init_st[MAXR];
    char init_err[MAXR][640];
    pthread_mutex_t mu;
    int failures;
    char failure[1024];
    pthread_barrier_t bar;
};

/* the nccl plugin, loaded by the test's main() */
extern const plait_plugin_desc *g_desc;
/* [comm] check_collectives of the next run_job */
extern int g_check_collectives;
/* the device the job's communicators are handed (NULL: the open one, none here) */
extern const plait_comm_device *g_device;
/* rank r's device where set, in place of g_device: a process drives one GPU,
 * so ranks that are threads each get their own, as processes would */
extern const plait_comm_device *g_device_of[MAXR];
/* collective options for device (PLAIT_MEM_CUDA) buffers */
extern const plait_coll_opts dev_opts;

void record_fail(job *j, int line, const char *fmt, ...) PLAIT_PRINTF(3, 4);

#define CHECK(j, cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) record_fail((j), __LINE__, __VA_ARGS__);                                                          \
    } while (0)
#define CHECK_OK(j, expr)                                                                                              \
    do {                                                                                                               \
        plait_status st_ = (expr);                                                                                     \
        if (st_ != PLAIT_OK) record_fail((j), __LINE__, "%s: %s", #expr, plait_last_error());                          \
    } while (0)

/* A config with the core's keys and [comm.nccl]'s, loaded from `text`. */
plait_config *make_config(const char *text);
/* Run `body` on n ranks; every rank uses config text `per_rank[r]` (or
 * `text` when per_rank is NULL). */
void run_job(job *j, int n, const char *text, const char *const *per_rank, body_fn body);
/* Fails the test on any recorded check, failed init, misuse the stand-in
 * saw, or a communicator or allocation left alive. */
void expect_clean(const job *j);
/* cmocka fixtures: a fresh stand-in with 4 GPUs */
int setup(void **state);
int teardown(void **state);
/* 0.1 ms */
void nap(void);
/* A device for the core's communicator (plait_comm_device) over the
 * stand-in's memory: cudaMalloc'd, copied with memcpy (the stand-in's
 * device memory is host memory). */
plait_status mock_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir);
void *mock_alloc(size_t bytes, const char *tag);
void mock_free(void *p);

/* main(): load the nccl plugin into g_desc (the core's host table
 * installed first), run `tests` as cmocka group `group`, unload. */
int nccl_job_main(const char *group, const struct CMUnitTest *tests, size_t n);

#endif
