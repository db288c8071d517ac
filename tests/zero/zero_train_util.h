/*
 * Helpers for the ZeRO end-to-end tests: run `plait train` (as $PLAIT_BIN,
 * with `-n N` local ranks) on a small generated config, read metrics.csv and
 * compare checkpoints tensor by tensor. Header-only (static functions).
 */
#ifndef PLAIT_TESTS_ZERO_TRAIN_UTIL_H
#define PLAIT_TESTS_ZERO_TRAIN_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"

/* A fresh scratch directory (removed by the caller with `rm -rf` semantics). */
/* Whether the tests run in a sanitizer's build (PLAIT_SANITIZED, set by
 * tests/zero/CMakeLists.txt there): they look for memory errors, and the
 * tests make their models and matrices smaller for it. */
static inline int zt_sanitized(void) {
    const char *san = getenv("PLAIT_SANITIZED");
    return san && *san && strcmp(san, "0") != 0;
}

static inline void zt_scratch(char *buf, size_t cap, const char *tag) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/plait-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    assert_non_null(mkdtemp(buf));
}

static inline void zt_rm_rf(const char *path) {
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
}

static inline void zt_write(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static inline char *zt_slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

/* The last cap-1 bytes of a file (for failure messages, which do not return). */
static inline void zt_tail(const char *path, char *buf, size_t cap) {
    char *text = zt_slurp(path);
    size_t n = strlen(text);
    snprintf(buf, cap, "%s", n >= cap ? text + n - (cap - 1) : text);
    free(text);
}

/* The tiny GPT every test starts from; `ini` receives its path. Progress
 * lines go to the logs; a given mfu_peak spares each run the SGEMM
 * measurement. */
static inline void zt_config(const char *dir, char *ini, size_t cap, const char *extra) {
    const char *src = getenv("PLAIT_SOURCE_DIR");
    assert_non_null(src);
    snprintf(ini, cap, "%s/tiny.ini", dir);
    char text[4096];
    snprintf(text, sizeof text,
             "[run]\nsteps = 20\nseed = 1337\nprogress = plain\nmfu_peak = 100\neval_every = 0\neval_batches = 1\n"
             "[model]\narch = gpt\nn_layer = 2\nn_head = 2\nn_embd = 32\nblock_size = 32\nvocab_size = 256\n"
             "[data]\npath = %s/data/corpus.txt\nglobal_batch = 8\nmicro_batch = 2\n"
             "[comm]\nplugin = tcp\ntimeout = 60\n"
             "[parallel]\nplugin = dp\ndp = 1\n"
             "[optim]\nplugin = adam\nlr = 1e-3\nmin_lr = 1e-4\nwarmup_steps = 2\nweight_decay = 0.1\ngrad_clip = 1.0\n"
             "%s",
             src, extra ? extra : "");
    zt_write(ini, text);
}

/* Run `plait train INI [-n N] out_dir=... overrides...` (NULL-terminated),
 * output in <out>.log; fails the test on a non-zero exit or after
 * `timeout_s`, showing the log's tail. */
static inline void zt_train(const char *ini, int nranks, const char *out, double timeout_s, ...) {
    const char *bin = getenv("PLAIT_BIN");
    assert_non_null(bin);
    char *argv[64], nbuf[16], outarg[4200], log[4200];
    int k = 0;
    argv[k++] = (char *)bin;
    argv[k++] = (char *)"train";
    argv[k++] = (char *)ini;
    if (nranks > 1) {
        snprintf(nbuf, sizeof nbuf, "%d", nranks);
        argv[k++] = (char *)"-n";
        argv[k++] = nbuf;
    }
    snprintf(outarg, sizeof outarg, "run.out_dir=%s", out);
    argv[k++] = outarg;
    va_list ap;
    va_start(ap, timeout_s);
    const char *a;
    while ((a = va_arg(ap, const char *)) && k < 63) argv[k++] = (char *)a;
    va_end(ap);
    argv[k] = NULL;
    snprintf(log, sizeof log, "%s.log", out);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setpgid(0, 0);
        execv(bin, argv);
        _exit(127);
    }
    struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > timeout_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            static char tail[3001];
            zt_tail(log, tail, sizeof tail);
            fail_msg("plait train %s timed out after %.0f s; log tail:\n%s", out, timeout_s, tail);
        }
        nanosleep(&nap, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        static char tail[3001];
        zt_tail(log, tail, sizeof tail);
        fail_msg("plait train %s failed (status %d); log tail:\n%s", out, status, tail);
    }
}

/* Column `name` of metrics.csv in run directory `dir`: values per row into
 * vals (up to cap); returns the row count. */
static inline int zt_metrics(const char *dir, const char *name, double *vals, int cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *text = zt_slurp(path);
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    if (!line) fail_msg("%s is empty", path);
    int col = -1, c = 0;
    for (char *p = line, *q; p; p = q ? q + 1 : NULL, c++) {
        q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == strlen(name) && strncmp(p, name, len) == 0) col = c;
    }
    if (col < 0) fail_msg("%s has no column %s", path, name);
    int n = 0;
    while ((line = strtok_r(NULL, "\n", &save)) && n < cap) {
        const char *p = line;
        for (int i = 0; i < col && p; i++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        vals[n++] = p && *p && *p != ',' ? strtod(p, NULL) : NAN;
    }
    free(text);
    return n;
}

/* 1 if the two checkpoint files hold the same tensors with the same bits;
 * else 0 with the first difference in why. */
static inline int zt_same_tensors(const char *a_path, const char *b_path, char *why, size_t len) {
    plait_st_file *a = NULL, *b = NULL;
    if (plait_st_open(a_path, 0, &a) != PLAIT_OK || plait_st_open(b_path, 0, &b) != PLAIT_OK) {
        snprintf(why, len, "cannot open %s or %s", a_path, b_path);
        if (a) plait_st_close(a);
        return 0;
    }
    int same = plait_st_count(a) == plait_st_count(b);
    if (!same) snprintf(why, len, "%zu vs %zu tensors", plait_st_count(a), plait_st_count(b));
    for (size_t i = 0; same && i < plait_st_count(a); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(a, i), *u = plait_st_find(b, t->name);
        if (!u || u->numel != t->numel) {
            snprintf(why, len, "%s missing or resized", t->name);
            same = 0;
        } else if (memcmp(t->data, u->data, t->bytes) != 0) {
            size_t k = 0;
            while (k < t->numel && memcmp(&t->data[k], &u->data[k], 4) == 0) k++;
            snprintf(why, len, "%s[%zu]: %.9g vs %.9g", t->name, k, (double)t->data[k], (double)u->data[k]);
            same = 0;
        }
    }
    plait_st_close(a);
    plait_st_close(b);
    return same;
}

/* Both checkpoint files (model, optimizer) of step `step` in two run dirs. */
static inline void zt_assert_same_ckpt(const char *run_a, const char *run_b, int64_t step) {
    static const char *const files[] = {"model.safetensors", "optim.safetensors"};
    for (int f = 0; f < 2; f++) {
        char pa[4200], pb[4200], why[512];
        snprintf(pa, sizeof pa, "%s/ckpt-%08lld/%s", run_a, (long long)step, files[f]);
        snprintf(pb, sizeof pb, "%s/ckpt-%08lld/%s", run_b, (long long)step, files[f]);
        if (!zt_same_tensors(pa, pb, why, sizeof why)) fail_msg("%s and %s differ: %s", pa, pb, why);
    }
}

#endif
