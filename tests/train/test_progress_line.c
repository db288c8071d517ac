/* The progress line on a terminal (a pseudo-terminal here): drawn in place,
 * cut to the terminal's width so it never wraps, and a log line written
 * while it shows (a checkpoint saved) starts on a line of its own with the
 * progress line drawn again below it, instead of being appended to it. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/log.h"
#include "train/progress.h"

typedef struct pty {
    int master, slave, saved_stderr;
    FILE *out; /* the slave as the progress line's stream */
} pty;

/* A raw pseudo-terminal of `cols` columns as both the progress stream and
 * stderr. */
static void pty_open(pty *t, int cols) {
    t->master = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(t->master >= 0);
    assert_int_equal(grantpt(t->master), 0);
    assert_int_equal(unlockpt(t->master), 0);
    t->slave = open(ptsname(t->master), O_RDWR | O_NOCTTY);
    assert_true(t->slave >= 0);
    struct termios tio;
    assert_int_equal(tcgetattr(t->slave, &tio), 0);
    cfmakeraw(&tio); /* bytes as written: no \n -> \r\n */
    assert_int_equal(tcsetattr(t->slave, TCSANOW, &tio), 0);
    struct winsize ws = {.ws_row = 24, .ws_col = (unsigned short)cols};
    assert_int_equal(ioctl(t->slave, TIOCSWINSZ, &ws), 0);
    t->out = fdopen(dup(t->slave), "w");
    assert_non_null(t->out);
    fflush(stderr);
    t->saved_stderr = dup(STDERR_FILENO);
    assert_true(dup2(t->slave, STDERR_FILENO) >= 0);
}

/* Restore stderr and return what the terminal received (caller frees). */
static char *pty_close(pty *t) {
    fflush(t->out);
    dup2(t->saved_stderr, STDERR_FILENO);
    close(t->saved_stderr);
    fclose(t->out);
    close(t->slave);
    size_t cap = 1 << 16, n = 0;
    char *text = calloc(1, cap);
    int fl = fcntl(t->master, F_GETFL);
    fcntl(t->master, F_SETFL, fl | O_NONBLOCK);
    for (ssize_t r; n + 1 < cap && (r = read(t->master, text + n, cap - 1 - n)) > 0;) n += (size_t)r;
    close(t->master);
    return text;
}

static void test_log_lines_go_above_the_line(void **state) {
    (void)state;
    pty t;
    pty_open(&t, 200);
    plait_progress p;
    plait_progress_init(&p, "auto", t.out, 4, 0, 0);
    assert_int_equal(p.mode, PLAIT_PROGRESS_TTY);
    plait_progress_step(&p, 1, 3.5, -1, 1e-3, 1000, 3);
    plait_log(PLAIT_LOG_INFO, "checkpoint", "saved step 1 to runs/x/ckpt-00000001 (1.0 MB)");
    plait_progress_step(&p, 2, 3.4, -1, 1e-3, 1000, 2);
    plait_progress_finish(&p);
    plait_log(PLAIT_LOG_INFO, "checkpoint", "saved step 2 after the end");
    char *text = pty_close(&t);
    /* the log line begins where the progress line was cleared: "\r\033[K"
     * right before it, no progress text on its line */
    const char *log = strstr(text, "checkpoint: saved step 1");
    assert_non_null(log);
    const char *line_start = log;
    while (line_start > text && line_start[-1] != '\n' && line_start[-1] != '\r') line_start--;
    /* what precedes it on its line is the clear and the log's time prefix */
    if (strncmp(line_start, "\033[K", 3) != 0 || line_start[-1] != '\r' ||
        memchr(line_start, '|', (size_t)(log - line_start)))
        fail_msg("the log line was not given a line of its own: %s", text);
    /* ...and the progress line is drawn again right after it */
    const char *nl = strchr(log, '\n');
    assert_non_null(nl);
    if (strncmp(nl + 1, "step     1/4", 12) != 0) fail_msg("the progress line was not drawn again: %s", text);
    /* after finish the line is closed: a later log line is not preceded by a redraw */
    const char *after = strstr(text, "saved step 2 after the end");
    assert_non_null(after);
    const char *tail = strchr(after, '\n');
    assert_non_null(tail);
    if (strstr(tail, "step ")) fail_msg("the progress line was drawn again after the run finished: %s", text);
    free(text);
}

static void test_line_cut_to_the_width(void **state) {
    (void)state;
    pty t;
    pty_open(&t, 40);
    plait_progress p;
    plait_progress_init(&p, "tty", t.out, 1000, 0, 0);
    plait_progress_step(&p, 999, 3.5, 3.6, 1e-3, 123456, 3600);
    plait_progress_finish(&p);
    char *text = pty_close(&t);
    /* every line drawn fits in 39 columns (the 40th would wrap) */
    for (char *s = text; *s;) {
        size_t n = strcspn(s, "\r\n");
        char *esc = strstr(s, "\033[K");
        size_t visible = esc && esc < s + n ? n - 3 : n;
        if (visible > 39) fail_msg("a %zu-column line on a 40-column terminal: %s", visible, text);
        s += n;
        s += strspn(s, "\r\n");
    }
    assert_non_null(strstr(text, "step   999/1000"));
    free(text);
}

static void test_plain_when_not_a_terminal(void **state) {
    (void)state;
    FILE *f = tmpfile();
    plait_progress p;
    plait_progress_init(&p, "auto", f, 2, 0, 0);
    assert_int_equal(p.mode, PLAIT_PROGRESS_PLAIN);
    plait_progress_step(&p, 2, 3.5, -1, 1e-3, 1000, 0);
    plait_progress_finish(&p);
    char buf[512] = "";
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_null(strchr(buf, '\r'));
    assert_null(strchr(buf, '\033'));
    assert_non_null(strstr(buf, "step     2/2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_lines_go_above_the_line),
        cmocka_unit_test(test_line_cut_to_the_width),
        cmocka_unit_test(test_plain_when_not_a_terminal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
