/*
 * Opening the files plait writes (runtime/out_file.h): an appending stream
 * starts at the file's end, so a CSV's header is written once however many
 * times the file is appended to; "w" truncates; a symbolic link, a FIFO
 * and a file with a second name are refused, the file elsewhere untouched;
 * a file plait did not write is refused with the start it lacks on one
 * line, a binary magic's bytes and a header's line break written as \xNN.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/error.h"
#include "runtime/out_file.h"

static char dir[64];

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static char *slurp(const char *path) {
    static char buf[256];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* append like bench train's --csv: the header only when the file is empty */
static void append_row(const char *path, const char *row) {
    FILE *f = NULL;
    assert_int_equal(plait_out_fopen(path, "a", &f), PLAIT_OK);
    if (ftell(f) == 0) fputs("h\n", f);
    fputs(row, f);
    assert_int_equal(fclose(f), 0);
}

static void test_append_starts_at_the_end(void **state) {
    (void)state;
    char p[128];
    path_in(p, sizeof p, "a.csv");
    append_row(p, "1\n");
    append_row(p, "2\n");
    append_row(p, "3\n");
    assert_string_equal(slurp(p), "h\n1\n2\n3\n");
    FILE *f = NULL;
    assert_int_equal(plait_out_fopen(p, "a+", &f), PLAIT_OK);
    assert_int_equal(ftell(f), 8);
    fclose(f);
    assert_int_equal(plait_out_fopen(p, "w", &f), PLAIT_OK);
    assert_int_equal(ftell(f), 0);
    fclose(f);
    assert_string_equal(slurp(p), "");
}

static void test_refused_targets_untouched(void **state) {
    (void)state;
    char target[128], soft[128], fifo[128], hard[128];
    path_in(target, sizeof target, "target");
    path_in(soft, sizeof soft, "link.csv");
    path_in(fifo, sizeof fifo, "fifo.csv");
    path_in(hard, sizeof hard, "hard.csv");
    FILE *t = fopen(target, "w");
    assert_non_null(t);
    fputs("keep\n", t);
    fclose(t);
    assert_int_equal(symlink(target, soft), 0);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_int_equal(link(target, hard), 0);
    const char *paths[] = {soft, fifo, hard};
    const char *says[] = {"symbolic link", "FIFO", "2 names"};
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 2; m++) {
            FILE *f = NULL;
            assert_int_not_equal(plait_out_fopen(paths[i], m ? "a" : "w", &f), PLAIT_OK);
            assert_null(f);
            assert_non_null(strstr(plait_last_error(), says[i]));
        }
    assert_string_equal(slurp(target), "keep\n");
}

static void test_foreign_file_named_on_one_line(void **state) {
    (void)state;
    char p[128];
    path_in(p, sizeof p, "notes.png");
    FILE *t = fopen(p, "w");
    assert_non_null(t);
    fputs("my notes\n", t);
    fclose(t);
    assert_int_not_equal(plait_out_check_own(p, "\x89PNG\r\n\x1a\n", "--out"), PLAIT_OK);
    const char *e = plait_last_error();
    assert_null(strchr(e, '\n'));
    assert_non_null(strstr(e, "which plait did not write (it does not start with \"\\x89PNG\\x0d\\x0a\\x1a\\x0a\")"));
    assert_int_not_equal(plait_out_check_own(p, "# plait bench sweep\n", "--report"), PLAIT_OK);
    e = plait_last_error();
    assert_null(strchr(e, '\n'));
    assert_non_null(strstr(e, "\"# plait bench sweep\\x0a\""));
    assert_int_equal(plait_out_check_own(p, "my notes", "--out"), PLAIT_OK);
    assert_string_equal(slurp(p), "my notes\n");
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "%s/out-file.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    const char *names[] = {"a.csv", "target", "link.csv", "fifo.csv", "hard.csv", "notes.png"};
    char p[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_in(p, sizeof p, names[i]);
        unlink(p);
    }
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_starts_at_the_end),
        cmocka_unit_test(test_refused_targets_untouched),
        cmocka_unit_test(test_foreign_file_named_on_one_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
