/*
 * The launcher's units, each alone: the environment a rank is started with
 * (launch/rank_env.h), the restart facts through the environment and the
 * exit status of a failure no restart mends (launch/restart.h), the
 * math-thread rule (launch/math_threads.h), the rendezvous store's table
 * and gathers (launch/store_table.h, launch/store_gather.h), and the
 * private rendezvous file of a one-host job (launch/rendezvous_file.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "launch/math_threads.h"
#include "launch/rank_env.h"
#include "launch/restart.h"
#include "launch/store_gather.h"
#include "launch/rendezvous_file.h"
#include "launch/store_table.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* How many entries of env are NAME=..., and the value of the last one. */
static int count_var(char **env, const char *name, const char **value) {
    size_t n = strlen(name);
    int c = 0;
    for (char **p = env; *p; p++)
        if (strncmp(*p, name, n) == 0 && (*p)[n] == '=') {
            c++;
            if (value) *value = *p + n + 1;
        }
    return c;
}

static void expect_var(char **env, const char *name, const char *want) {
    const char *v = NULL;
    int c = count_var(env, name, &v);
    if (c != 1) fail_msg("%s appears %d times in the rank's environment, expected once", name, c);
    if (strcmp(v, want) != 0) fail_msg("%s=%s, expected %s", name, v, want);
}

/* Rank 2 of host 1 of 2 (4 ranks a host): the job's variables replace an
 * outer job's, the rest of the launcher's environment passes through, the
 * store's socket goes to rank 0 only. */
static void test_rank_env(void **state) {
    (void)state;
    setenv("PLAIT_RANK", "7", 1); /* an outer job's: must not leak */
    setenv("PLAIT_RESTART_COUNT", "3", 1);
    setenv("OMP_NUM_THREADS", "99", 1);
    setenv("LAUNCH_UNITS_KEPT", "yes", 1);
    char *extra[] = {"PLAIT_EXTRA_SETTING=1", NULL};
    char *argv[] = {"plait", NULL};
    plait_launch_opts o = {.nranks = 4, .argv = argv, .extra_env = extra, .nnodes = 2, .node_rank = 1};
    char **env = plait_launch_rank_env(&o, 2, "10.0.0.1:29500", "abcd", 5, 6, 3, 9);
    assert_non_null(env);
    expect_var(env, "PLAIT_RANK", "6");
    expect_var(env, "PLAIT_WORLD_SIZE", "8");
    expect_var(env, "PLAIT_LOCAL_RANK", "2");
    expect_var(env, "PLAIT_LOCAL_SIZE", "4");
    expect_var(env, "PLAIT_NNODES", "2");
    expect_var(env, "PLAIT_STORE_ADDR", "10.0.0.1:29500");
    expect_var(env, "PLAIT_JOB_TOKEN", "abcd");
    expect_var(env, "PLAIT_REPORT_FD", "6");
    expect_var(env, "PLAIT_MATH_THREADS", "3");
    expect_var(env, "OMP_NUM_THREADS", "3");
    expect_var(env, "OPENBLAS_NUM_THREADS", "3");
    expect_var(env, "PLAIT_AGENT_FD", "9");
    expect_var(env, "LAUNCH_UNITS_KEPT", "yes");
    expect_var(env, "PLAIT_EXTRA_SETTING", "1");
    assert_int_equal(count_var(env, "PLAIT_STORE_FD", NULL), 0); /* not rank 0 */
    assert_int_equal(count_var(env, "PLAIT_RESTART_COUNT", NULL), 0);
    plait_launch_rank_env_free(env);

    /* rank 0 of a one-host job: the store's socket, no agent */
    plait_launch_opts one = {.nranks = 2, .argv = argv};
    env = plait_launch_rank_env(&one, 0, "127.0.0.1:1", "t", 4, 7, 1, -1);
    assert_non_null(env);
    expect_var(env, "PLAIT_STORE_FD", "4");
    expect_var(env, "PLAIT_RANK", "0");
    expect_var(env, "PLAIT_WORLD_SIZE", "2");
    expect_var(env, "PLAIT_NNODES", "1");
    assert_int_equal(count_var(env, "PLAIT_AGENT_FD", NULL), 0);
    plait_launch_rank_env_free(env);
    unsetenv("PLAIT_RANK");
    unsetenv("PLAIT_RESTART_COUNT");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("LAUNCH_UNITS_KEPT");
}

static void put_all(char **env) {
    for (int i = 0; env[i]; i++) {
        char *eq = strchr(env[i], '=');
        assert_non_null(eq);
        *eq = '\0';
        setenv(env[i], eq + 1, 1);
        *eq = '=';
    }
}

static void clear_restart_env(void) {
    const char *names[] = {"PLAIT_RESTART_COUNT",   "PLAIT_MAX_RESTARTS",  "PLAIT_RESTART_REASON",
                           "PLAIT_RESTART_NEW_DIR", "PLAIT_ELASTIC_HOSTS", "PLAIT_ELASTIC_CHANGES"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
}

/* What the launcher writes the rank reads back; the first attempt says
 * nothing; malformed values read as the first attempt's. */
static void test_restart_facts(void **state) {
    (void)state;
    clear_restart_env();
    assert_int_equal(plait_restart_count(), 0);
    assert_string_equal(plait_restart_reason(), "");
    assert_int_equal(plait_restart_new_dir(), 0);
    assert_int_equal(plait_restart_hosts(), 0);

    plait_restart_facts f = {.attempt = 2,
                             .max_restarts = 5,
                             .reason = "rank 2 was killed by SIGKILL",
                             .new_dir = 1,
                             .hosts = 3,
                             .changes = 4};
    char *env[PLAIT_RESTART_ENV_MAX] = {0};
    plait_restart_env(&f, env);
    assert_null(env[PLAIT_RESTART_ENV_MAX - 1]);
    put_all(env);
    plait_restart_env_free(env);
    assert_int_equal(plait_restart_count(), 2);
    assert_int_equal(plait_restart_max(), 5);
    assert_string_equal(plait_restart_reason(), "rank 2 was killed by SIGKILL");
    assert_int_equal(plait_restart_new_dir(), 1);
    assert_int_equal(plait_restart_hosts(), 3);
    assert_int_equal(plait_restart_changes(), 4);

    clear_restart_env();
    plait_restart_facts first = {.attempt = 0, .max_restarts = 1, .reason = NULL};
    char *env0[PLAIT_RESTART_ENV_MAX] = {0};
    plait_restart_env(&first, env0);
    assert_int_equal(count_var(env0, "PLAIT_RESTART_REASON", NULL), 0);
    assert_int_equal(count_var(env0, "PLAIT_ELASTIC_HOSTS", NULL), 0);
    plait_restart_env_free(env0);

    const char *bad[] = {"", "-1", "2x", "1e3", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PLAIT_RESTART_COUNT", bad[i], 1);
        if (plait_restart_count() != 0)
            fail_msg("PLAIT_RESTART_COUNT='%s' read as %d, expected 0", bad[i], plait_restart_count());
    }
    setenv("PLAIT_RESTART_NEW_DIR", "2", 1);
    assert_int_equal(plait_restart_new_dir(), 0);
    clear_restart_env();
}

/* A refused configuration is final only under plait's launcher (which
 * reads the status); any other failure may be mended by a restart. */
static void test_failure_exit(void **state) {
    (void)state;
    unsetenv("PLAIT_REPORT_FD");
    assert_int_equal(plait_restart_failure_exit(PLAIT_ERR_INVALID_CONFIG), 1);
    setenv("PLAIT_REPORT_FD", "5", 1);
    assert_int_equal(plait_restart_failure_exit(PLAIT_ERR_INVALID_CONFIG), PLAIT_RESTART_FINAL_EXIT);
    assert_int_equal(plait_restart_failure_exit(PLAIT_ERR_SYSTEM), 1);
    assert_int_equal(plait_restart_failure_exit(PLAIT_ERR_PEER_LOST), 1);
    unsetenv("PLAIT_REPORT_FD");
}

static void test_math_threads(void **state) {
    (void)state;
    int cores = plait_cores_available();
    assert_true(cores >= 1);
    assert_int_equal(plait_math_threads_rule(5, 1), 5); /* given wins */
    assert_int_equal(plait_math_threads_rule(5, 64), 5);
    assert_int_equal(plait_math_threads_rule(0, 1), cores);     /* one rank: every core */
    assert_int_equal(plait_math_threads_rule(0, cores * 4), 1); /* more ranks than cores: at least 1 */
    if (cores >= 2) assert_int_equal(plait_math_threads_rule(0, 2), cores / 2);
}

/* Keys are bytes of a length (no NUL needed); a set replaces; the table
 * grows past its first buckets without losing a key. */
static void test_store_table(void **state) {
    (void)state;
    store_table t;
    assert_int_equal(store_table_init(&t), 0);
    assert_null(store_table_find(&t, "a", 1));
    assert_int_equal(store_table_set(&t, "key/1-and-more", 5, "v1", 2), 0);
    store_kv *kv = store_table_find(&t, "key/1", 5);
    assert_non_null(kv);
    assert_string_equal(kv->key, "key/1");
    assert_int_equal(kv->vlen, 2);
    assert_memory_equal(kv->val, "v1", 2);
    assert_null(store_table_find(&t, "key/", 4));
    assert_int_equal(store_table_set(&t, "key/1", 5, "value2", 6), 0); /* replaced */
    kv = store_table_find(&t, "key/1", 5);
    assert_int_equal(kv->vlen, 6);
    assert_memory_equal(kv->val, "value2", 6);
    assert_int_equal(store_table_set(&t, "empty", 5, NULL, 0), 0);
    kv = store_table_find(&t, "empty", 5);
    assert_non_null(kv);
    assert_non_null(kv->val);
    assert_int_equal(kv->vlen, 0);
    for (int i = 0; i < 5000; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "rank/%d", i);
        assert_int_equal(store_table_set(&t, k, (size_t)n, &i, sizeof i), 0);
    }
    assert_int_equal(t.n_keys, 5002);
    for (int i = 0; i < 5000; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "rank/%d", i);
        kv = store_table_find(&t, k, (size_t)n);
        if (!kv || kv->vlen != sizeof i || memcmp(kv->val, &i, sizeof i) != 0) fail_msg("key %s lost or changed", k);
    }
    store_table_free(&t);
}

/* One contribution as the server makes it: checked, then stored. */
static const char *contribute(store_gathers *g, store_table *table, const char *prefix, uint32_t n, uint32_t index,
                              int32_t rank, const char *peer, const char *val) {
    const char *why = store_gathers_check(g, table, prefix, strlen(prefix), n, index, rank, peer, val, strlen(val));
    if (!why) {
        char key[128];
        int kl = snprintf(key, sizeof key, "%s%u", prefix, index);
        assert_int_equal(store_table_set(table, key, (size_t)kl, val, strlen(val)), 0);
    }
    return why;
}

static void test_store_gathers(void **state) {
    (void)state;
    store_gathers g;
    store_table table;
    assert_int_equal(store_gathers_init(&g), 0);
    assert_int_equal(store_table_init(&table), 0);

    /* members agreeing; the same bytes again (a retry) are no conflict */
    assert_null(contribute(&g, &table, "g/a/", 2, 0, 0, "10.0.0.1:1", "x"));
    assert_null(contribute(&g, &table, "g/a/", 2, 1, 1, "10.0.0.2:1", "y"));
    assert_null(contribute(&g, &table, "g/a/", 2, 1, 1, "10.0.0.2:1", "y"));
    assert_null(store_gathers_failed(&g, "g/a/", 4));

    /* two members count differently: failed for good, both named */
    assert_null(contribute(&g, &table, "g/b/", 2, 0, 0, "10.0.0.1:1", "x"));
    const char *why = contribute(&g, &table, "g/b/", 4, 1, 3, "10.0.0.9:1", "y");
    assert_non_null(why);
    if (!strstr(why, "counts 4") || !strstr(why, "counts 2") || !strstr(why, "10.0.0.9:1"))
        fail_msg("the reason should name both counts and the newcomer: %s", why);
    assert_non_null(store_gathers_failed(&g, "g/b/", 4));
    assert_non_null(contribute(&g, &table, "g/b/", 2, 1, 1, "10.0.0.2:1", "y")); /* later ones told at once */

    /* one index claimed with different bytes: both claimants named */
    assert_null(contribute(&g, &table, "g/c/", 3, 2, 2, "10.0.0.3:1", "first"));
    why = contribute(&g, &table, "g/c/", 3, 2, 5, "10.0.0.4:1", "other"); /* same length, other bytes */
    assert_non_null(why);
    if (!strstr(why, "claimed twice") || !strstr(why, "10.0.0.3:1") || !strstr(why, "10.0.0.4:1"))
        fail_msg("the reason should name both claimants: %s", why);
    assert_null(store_gathers_failed(&g, "g/a/", 4)); /* the others untouched */

    store_table_free(&table);
    store_gathers_free(&g);
}

/* A file the waiting ranks must not take: waited for until a short
 * deadline, then PLAIT_ERR_TIMEOUT naming the file. */
static void expect_refused(const char *path, const char *what) {
    int port = 0;
    char token[64];
    if (plait_rdv_file_wait(path, plait_clock_now() + 0.1, &port, token, sizeof token) != PLAIT_ERR_TIMEOUT)
        fail_msg("a rendezvous file %s was taken (port %d)", what, port);
    assert_non_null(strstr(plait_last_error(), path));
}

static void write_text(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

/* Published by rank 0, read by the others; in a private directory of
 * this user; a file others may read, a dead writer's, a malformed one or
 * a link in its place is never taken. */
static void test_rendezvous_file(void **state) {
    (void)state;
    char xdg[] = "/tmp/plait-rdv-test-XXXXXX";
    assert_non_null(mkdtemp(xdg));
    const char *old = getenv("XDG_RUNTIME_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    char path[600];
    assert_int_equal(plait_rdv_file_path("unit-1", path, sizeof path), PLAIT_OK);
    char want[600];
    snprintf(want, sizeof want, "%s/plait/job-unit-1.rdv", xdg);
    assert_string_equal(path, want);
    struct stat sb;
    snprintf(want, sizeof want, "%s/plait", xdg);
    assert_int_equal(lstat(want, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);

    assert_int_equal(plait_rdv_file_publish(path, 4242, "0123abcd"), PLAIT_OK);
    assert_int_equal(lstat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    int port = 0;
    char token[64] = "";
    assert_int_equal(plait_rdv_file_wait(path, plait_clock_now() + 5, &port, token, sizeof token), PLAIT_OK);
    assert_int_equal(port, 4242);
    assert_string_equal(token, "0123abcd");
    chmod(path, 0644);
    expect_refused(path, "others may read");
    plait_rdv_file_remove(path);

    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    char text[128];
    snprintf(text, sizeof text, "plait-rendezvous 1\npid %d\nport 4242\ntoken abc\n", (int)gone);
    write_text(path, text, 0600);
    expect_refused(path, "of a writer that is gone");
    snprintf(text, sizeof text, "plait-rendezvous 1\npid %d\nport 70000\ntoken abc\n", (int)getpid());
    write_text(path, text, 0600);
    expect_refused(path, "with port 70000");
    plait_rdv_file_remove(path);

    char real[600];
    snprintf(real, sizeof real, "%s/elsewhere.rdv", xdg);
    snprintf(text, sizeof text, "plait-rendezvous 1\npid %d\nport 4242\ntoken abc\n", (int)getpid());
    write_text(real, text, 0600);
    assert_int_equal(symlink(real, path), 0);
    expect_refused(path, "that is a link");
    plait_rdv_file_remove(path);
    unlink(real);

    /* a directory of this user that others may write is refused */
    assert_int_equal(chmod(want, 0777), 0);
    assert_int_equal(plait_rdv_file_path("unit-2", path, sizeof path), PLAIT_ERR_SYSTEM);
    assert_non_null(strstr(plait_last_error(), "not a private directory"));
    rmdir(want);
    rmdir(xdg);
    if (saved) setenv("XDG_RUNTIME_DIR", saved, 1);
    else unsetenv("XDG_RUNTIME_DIR");
    free(saved);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_env),        cmocka_unit_test(test_restart_facts),
        cmocka_unit_test(test_failure_exit),    cmocka_unit_test(test_math_threads),
        cmocka_unit_test(test_store_table),     cmocka_unit_test(test_store_gathers),
        cmocka_unit_test(test_rendezvous_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
