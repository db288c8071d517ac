/*
 * Helpers shared by the train_io tests: scratch directories, small files,
 * configurations built from INI text. Header-only (static functions).
 */
#ifndef PLAIT_TESTS_TRAIN_IO_TEST_H
#define PLAIT_TESTS_TRAIN_IO_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "runtime/error.h"

/* A fresh directory under $TMPDIR (or /tmp); caller removes it with rm_tree. */
static inline void make_scratch(char *buf, size_t cap, const char *tag) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/plait-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    assert_non_null(mkdtemp(buf));
}

/* rm -r for the small trees the tests make. */
static inline void rm_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char child[PATH_MAX];
                snprintf(child, sizeof child, "%s/%s", path, e->d_name);
                rm_tree(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static inline size_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (size_t)st.st_size;
}

/* Flip bit `bit` of byte `offset` of a file. */
static inline void flip_bit(const char *path, size_t offset, int bit) {
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char c;
    assert_int_equal(pread(fd, &c, 1, (off_t)offset), 1);
    c ^= (unsigned char)(1u << bit);
    assert_int_equal(pwrite(fd, &c, 1, (off_t)offset), 1);
    close(fd);
}

/* A finalized configuration from INI text (core sections only), ignoring the
 * process environment. */
static inline plait_config *config_from(const char *ini) {
    plait_config *cfg = plait_config_new();
    assert_non_null(cfg);
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "test.ini", ini), PLAIT_OK);
    char *empty_env[] = {NULL};
    plait_status st = plait_config_finalize(cfg, empty_env);
    if (st != PLAIT_OK) fail_msg("config: %s", plait_last_error());
    return cfg;
}

/* assert that the last error message contains `needle`. */
#define assert_error_contains(needle)                                                              \
    do {                                                                                           \
        const char *msg_ = plait_last_error();                                                     \
        if (!strstr(msg_, (needle))) fail_msg("error \"%s\" lacks \"%s\"", msg_, (needle));         \
    } while (0)

#endif
