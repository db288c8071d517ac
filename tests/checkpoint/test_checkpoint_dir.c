/*
 * A run's checkpoint directories, unit by unit (checkpoint/checkpoint_name.h,
 * checkpoint_dir.h, checkpoint_fs.h and the listing, role and pruning of
 * checkpoint.h), in a scratch directory:
 *   - names: what is a checkpoint directory's name and what is not (other
 *     files, temporary names, too many digits), and the path of a step;
 *   - the scan: steps ascending whatever the names' padding, the marker
 *     read per directory, files and links by a checkpoint's name skipped;
 *   - what a directory is to plait (checkpoint, run, neither);
 *   - pruning: the newest `keep` complete ones kept, older partial saves
 *     removed, a newer partial save and the protected step left alone, a
 *     link by a checkpoint's name never followed, a directory holding
 *     something plait did not write refused whole;
 *   - the durable file operations: atomic replacement leaving no temporary
 *     name and replacing a link rather than writing through it, short
 *     reads, a size limit, CRC32C.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/checkpoint_name.h"
#include "runtime/error.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/plait-ckpt-dir-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(scratch) ? 0 : -1;
}

static void remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int teardown(void **state) {
    (void)state;
    remove_tree(scratch);
    return 0;
}

static void path_of(char *buf, const char *a, const char *b) { snprintf(buf, PATH_MAX, "%s/%s", a, b); }

static void make_dir(const char *dir, const char *name) {
    char p[PATH_MAX];
    path_of(p, dir, name);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void make_file(const char *dir, const char *name, const char *text) {
    char p[PATH_MAX];
    path_of(p, dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int exists(const char *dir, const char *name) {
    char p[PATH_MAX];
    path_of(p, dir, name);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void test_names(void **state) {
    (void)state;
    int64_t step = -1;
    assert_int_equal(plait_ckpt_parse_dir_name("ckpt-00000042", &step), 0);
    assert_int_equal(step, 42);
    assert_int_equal(plait_ckpt_parse_dir_name("ckpt-7", &step), 0);
    assert_int_equal(step, 7);
    assert_int_equal(plait_ckpt_parse_dir_name("ckpt-123456789012345678", &step), 0); /* 18 digits */
    assert_int_equal(step, 123456789012345678ll);
    const char *not_names[] = {"ckpt-",
                               "ckpt",
                               "ckpt-1234567890123456789", /* 19 digits */
                               "ckpt-12a",
                               "ckpt--1",
                               "ckpt-+1",
                               "ckpt- 1",
                               "xckpt-1",
                               "ckpt-00000001.tmp",
                               ".ckpt-00000001",
                               "CKPT-00000001",
                               "ckpt-00000001.123-0badf00d.tmp",
                               "metrics.csv",
                               ""};
    for (size_t i = 0; i < sizeof not_names / sizeof not_names[0]; i++)
        if (plait_ckpt_parse_dir_name(not_names[i], &step) == 0)
            fail_msg("'%s' taken for a checkpoint directory's name (step %lld)", not_names[i], (long long)step);

    char p[PATH_MAX];
    plait_ckpt_dir_path(p, sizeof p, "runs/x", 42);
    assert_string_equal(p, "runs/x/ckpt-00000042");
    plait_ckpt_dir_path(p, sizeof p, "runs/x", 1234567890);
    assert_string_equal(p, "runs/x/ckpt-1234567890");
    plait_ckpt_dir_path(p, sizeof p, "o", 0);
    assert_int_equal(plait_ckpt_parse_dir_name(strrchr(p, '/') + 1, &step), 0);
    assert_int_equal(step, 0);
}

static void test_scan(void **state) {
    (void)state;
    char out[PATH_MAX], missing[PATH_MAX];
    path_of(out, scratch, "scan");
    path_of(missing, scratch, "no-such-dir");
    plait_ckpt_entry *v = NULL;
    assert_int_equal(plait_ckpt_scan(missing, &v), 0);
    assert_null(v);
    assert_int_equal(mkdir(out, 0755), 0);
    assert_int_equal(plait_ckpt_scan(out, &v), 0);

    make_dir(out, "ckpt-10");
    make_dir(out, "ckpt-00000002");
    make_dir(out, "ckpt-00000003");
    make_file(out, "ckpt-00000003/COMPLETE", "");
    make_file(out, "ckpt-00000004", "a file by a checkpoint's name");
    make_dir(out, "elsewhere");
    char link[PATH_MAX], target[PATH_MAX];
    path_of(link, out, "ckpt-00000005");
    path_of(target, out, "elsewhere");
    assert_int_equal(symlink(target, link), 0);
    make_dir(out, "ckpt-x");
    make_dir(out, "ckpt-00000006.tmp");
    make_file(out, "metrics.csv", "step\n");

    int n = plait_ckpt_scan(out, &v);
    assert_int_equal(n, 3);
    assert_int_equal(v[0].step, 2);
    assert_int_equal(v[1].step, 3);
    assert_int_equal(v[2].step, 10);
    assert_false(v[0].has_marker);
    assert_true(v[1].has_marker);
    assert_false(v[2].has_marker);
    free(v);

    plait_ckpt_entry few[2];
    assert_int_equal(plait_ckpt_list(out, few, 2), 3); /* the count, 2 written */
    assert_int_equal(few[0].step, 2);
    assert_int_equal(few[1].step, 3);
}

static void test_role(void **state) {
    (void)state;
    char d[PATH_MAX];
    path_of(d, scratch, "role");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_null(plait_ckpt_dir_role(d));
    make_dir(d, "ckpt-00000001");
    assert_string_equal(plait_ckpt_dir_role(d), "run directory");
    char c[PATH_MAX];
    path_of(c, d, "ckpt-00000001");
    make_file(c, "COMPLETE", "");
    assert_string_equal(plait_ckpt_dir_role(c), "checkpoint directory");
    char r[PATH_MAX];
    path_of(r, scratch, "role-metrics");
    assert_int_equal(mkdir(r, 0755), 0);
    make_file(r, "metrics.csv", "");
    assert_string_equal(plait_ckpt_dir_role(r), "run directory");
}

/* A complete checkpoint of one tensor, as the writer makes it. */
static void save(const char *out, int64_t step) {
    plait_ckpt_writer *w;
    if (plait_ckpt_writer_begin(out, step, &w) != PLAIT_OK) fail_msg("%s", plait_last_error());
    int64_t shape[1] = {4};
    assert_int_equal(plait_ckpt_declare(w, PLAIT_CKPT_MODEL, "w", 1, shape), PLAIT_OK);
    float x[4] = {1, 2, 3, (float)step};
    assert_int_equal(plait_ckpt_write(w, "w", x, 4), PLAIT_OK);
    plait_ckpt_state s = {.step = step, .seed = 1, .data_step = step, .optim_step = step};
    if (plait_ckpt_commit(w, &s, 0, 0) != PLAIT_OK) fail_msg("%s", plait_last_error());
}

/* A run's checkpoint never makes its run directory again: removed, the
 * save is refused naming it, and nothing is created; present, it saves. */
static void test_begin_in_run(void **state) {
    (void)state;
    char out[PATH_MAX];
    path_of(out, scratch, "in-run-gone");
    plait_ckpt_writer *w = NULL;
    assert_int_equal(plait_ckpt_writer_begin_in_run(out, 3, &w), PLAIT_ERR_SYSTEM);
    assert_null(w);
    assert_non_null(strstr(plait_last_error(), out));
    assert_non_null(strstr(plait_last_error(), "gone"));
    struct stat sb;
    assert_int_not_equal(stat(out, &sb), 0);
    assert_int_equal(mkdir(out, 0755), 0);
    assert_int_equal(plait_ckpt_writer_begin_in_run(out, 3, &w), PLAIT_OK);
    plait_ckpt_writer_abort(w);
}

static void test_prune(void **state) {
    (void)state;
    char out[PATH_MAX];
    path_of(out, scratch, "prune");
    save(out, 1);
    save(out, 2);
    save(out, 3);
    save(out, 5);
    make_dir(out, "ckpt-00000004"); /* a partial save between complete ones: no marker */
    make_file(out, "ckpt-00000004/model.safetensors", "partial");
    make_dir(out, "ckpt-00000009"); /* a partial save newer than the step just saved */
    /* a link by a checkpoint's name, to a directory outside the run */
    char outside[PATH_MAX], link[PATH_MAX];
    path_of(outside, scratch, "outside");
    assert_int_equal(mkdir(outside, 0755), 0);
    make_file(outside, "COMPLETE", "");
    make_file(outside, "keep-me", "not plait's");
    path_of(link, out, "ckpt-00000000");
    assert_int_equal(symlink(outside, link), 0);

    /* keep 2 complete ones up to step 5, step 1 protected (a resume's) */
    assert_int_equal(plait_ckpt_prune(out, 2, 0, 5, 1), PLAIT_OK);
    assert_true(exists(out, "ckpt-00000001"));  /* protected */
    assert_false(exists(out, "ckpt-00000002")); /* older than the 2 newest */
    assert_true(exists(out, "ckpt-00000003"));
    assert_false(exists(out, "ckpt-00000004")); /* partial, older than the newest complete */
    assert_true(exists(out, "ckpt-00000005"));
    assert_true(exists(out, "ckpt-00000009")); /* newer than the step just saved */
    assert_true(exists(out, "ckpt-00000000")); /* the link, untouched */
    assert_true(exists(outside, "keep-me"));
    assert_true(exists(outside, "COMPLETE"));

    /* without the protection, step 1 goes too */
    assert_int_equal(plait_ckpt_prune(out, 2, 0, 5, -1), PLAIT_OK);
    assert_false(exists(out, "ckpt-00000001"));
    assert_true(exists(out, "ckpt-00000003"));

    /* keep <= 0: nothing */
    assert_int_equal(plait_ckpt_prune(out, 0, 0, -1, -1), PLAIT_OK);
    assert_true(exists(out, "ckpt-00000003"));
}

/* keep_every: the newest `keep` and the multiples of keep_every stay (a
 * multiple among the newest counts as one of them), the rest go. */
static void test_prune_keep_every(void **state) {
    (void)state;
    char out[PATH_MAX];
    path_of(out, scratch, "every");
    for (int64_t step = 1; step <= 7; step++) {
        save(out, step);
        assert_int_equal(plait_ckpt_prune(out, 2, 3, step, -1), PLAIT_OK);
    }
    static const int kept[] = {0, 0, 0, 1, 0, 0, 1, 1}; /* steps 3 and 6, then 6 and 7 the newest */
    for (int64_t step = 1; step <= 7; step++) {
        char name[32];
        snprintf(name, sizeof name, "ckpt-%08lld", (long long)step);
        if (exists(out, name) != kept[step]) fail_msg("%s %s", name, kept[step] ? "was pruned" : "was kept");
    }
}

/* A checkpoint directory holding a folder plait did not write: refused
 * whole, naming it, nothing of it deleted. */
static void test_prune_refuses_foreign_entries(void **state) {
    (void)state;
    char out[PATH_MAX];
    path_of(out, scratch, "foreign");
    save(out, 1);
    save(out, 2);
    make_dir(out, "ckpt-00000001/notes");
    assert_int_equal(plait_ckpt_prune(out, 1, 0, -1, -1), PLAIT_ERR_INVALID_ARG);
    if (!strstr(plait_last_error(), "ckpt-00000001/notes"))
        fail_msg("the refusal should name the entry: %s", plait_last_error());
    assert_true(exists(out, "ckpt-00000001/COMPLETE"));
    assert_true(exists(out, "ckpt-00000001/model.safetensors"));
    assert_true(exists(out, "ckpt-00000002/COMPLETE"));
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static void test_fs(void **state) {
    (void)state;
    char d[PATH_MAX], p[PATH_MAX];
    path_of(d, scratch, "fs");
    assert_int_equal(mkdir(d, 0755), 0);
    path_of(p, d, "state.json");
    assert_int_equal(plait_fs_write_file_atomic(p, "first", 5), PLAIT_OK);
    assert_int_equal(plait_fs_write_file_atomic(p, "second!", 7), PLAIT_OK);
    assert_int_equal(entries(d), 1); /* no temporary name left behind */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(plait_fs_read_small_file(p, 64, &text, &len), PLAIT_OK);
    assert_int_equal(len, 7);
    assert_string_equal(text, "second!");
    free(text);
    assert_int_equal(plait_fs_read_small_file(p, 6, &text, &len), PLAIT_ERR_PROTOCOL); /* over the limit */
    if (!strstr(plait_last_error(), p)) fail_msg("the refusal should name the file: %s", plait_last_error());

    /* a link at the path is replaced, never written through */
    char target[PATH_MAX], link[PATH_MAX];
    path_of(target, scratch, "fs-target");
    make_file(scratch, "fs-target", "untouched");
    path_of(link, d, "linked.json");
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(plait_fs_write_file_atomic(link, "new", 3), PLAIT_OK);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(plait_fs_read_small_file(target, 64, &text, &len), PLAIT_OK);
    assert_string_equal(text, "untouched");
    free(text);

    /* a read past the end names both sizes */
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    char buf[16];
    assert_int_equal(plait_fs_pread_all(fd, buf, 4, 3, p), PLAIT_OK);
    assert_memory_equal(buf, "ond!", 4);
    assert_int_not_equal(plait_fs_pread_all(fd, buf, 16, 0, p), PLAIT_OK);
    if (!strstr(plait_last_error(), p) || !strstr(plait_last_error(), "16"))
        fail_msg("a short read should name the file and the size wanted: %s", plait_last_error());
    close(fd);

    path_of(p, d, "crc");
    assert_int_equal(plait_fs_write_file_atomic(p, "123456789", 9), PLAIT_OK);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    assert_int_equal(plait_fs_file_crc32c(p, &bytes, &crc), PLAIT_OK);
    assert_int_equal(bytes, 9);
    assert_int_equal(crc, 0xE3069283u); /* CRC32C's check value */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_role),
        cmocka_unit_test(test_begin_in_run),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_prune_keep_every),
        cmocka_unit_test(test_prune_refuses_foreign_entries),
        cmocka_unit_test(test_fs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
