/* Config error paths: each kind of mistake gives its message with the right
 * file, line, key and allowed values; values keep their origin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "host/host_table.h"
#include <plait/plugin.h>
#include "config/config_value.h"
#include "runtime/error.h"

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle)))                                                 \
            fail_msg("expected \"%s\" in: %s", (needle), (haystack));                      \
    } while (0)

static const char *const colors[] = {"red", "green", "blue", NULL};
static const plait_key_decl test_keys[] = {
    {sizeof(plait_key_decl), PLAIT_KEY_REQUIRED, "must", PLAIT_KEY_STRING, NULL, 1, 0, NULL, "a required key"},
    {sizeof(plait_key_decl), 0, "size", PLAIT_KEY_BYTES, "25M", 0, 1099511627776.0, NULL, "a byte size"},
    {sizeof(plait_key_decl), 0, "colors", PLAIT_KEY_LIST, "red,blue", 1, 0, colors, "a list"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "flag", PLAIT_KEY_BOOL, "false", 1, 0, NULL, "a bool"},
};

static plait_config *fresh(void) {
    plait_config *cfg = plait_config_new();
    assert_non_null(cfg);
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, "comm.test", test_keys, 4, sizeof(test_keys[0]), "test"), PLAIT_OK);
    return cfg;
}

/* Load `text` as file "t.ini" (+ the required key), finalize with `env`;
 * returns the status, leaving the message in plait_last_error(). */
static plait_status check(const char *text, char *const *env, plait_config **keep) {
    static char *const no_env[] = {NULL};
    plait_config *cfg = fresh();
    size_t cap = strlen(text) + 64;
    char *buf = malloc(cap);
    assert_non_null(buf);
    snprintf(buf, cap, "%s\n[comm.test]\nmust = x\n", text);
    plait_status st = plait_config_load_string(cfg, "t.ini", buf);
    free(buf);
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, env ? env : no_env);
    if (keep && st == PLAIT_OK)
        *keep = cfg;
    else
        plait_config_free(cfg);
    return st;
}

static void test_valid_file_and_origins(void **state) {
    (void)state;
    plait_config *cfg = NULL;
    assert_int_equal(check("[optim]\nlr = 3e-4\n[model]\nn_layer = 6 ; inline comment\n", NULL, &cfg), PLAIT_OK);
    assert_true(plait_config_float(cfg, "optim", "lr") == 3e-4);
    assert_int_equal(plait_config_int(cfg, "model", "n_layer"), 6);
    const char *where = NULL;
    assert_int_equal(plait_config_origin(cfg, "model", "n_layer", &where), PLAIT_ORIGIN_FILE);
    assert_string_equal(where, "t.ini:4");
    assert_int_equal(plait_config_origin(cfg, "model", "n_head", &where), PLAIT_ORIGIN_DEFAULT);
    plait_value v;
    assert_int_equal(plait_config_get(cfg, "comm.test", "size", &v), PLAIT_OK);
    assert_int_equal(v.i, 25 << 20);
    assert_int_equal(plait_config_get(cfg, "comm.test", "colors", &v), PLAIT_OK);
    assert_int_equal(v.list_len, 2);
    assert_string_equal(v.list[1], "blue");
    plait_config_free(cfg);
}

static void test_misspelt_key_suggests(void **state) {
    (void)state;
    assert_int_equal(check("[run]\nseed = 1\n[optim]\nlerning_rate = 1e-3\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    const char *msg = plait_last_error();
    assert_contains(msg, "t.ini:4:");
    assert_contains(msg, "'lerning_rate'");
    assert_contains(msg, "did you mean 'lr'");
    assert_int_equal(check("[model]\nn_layers = 2\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2:");
    assert_contains(plait_last_error(), "did you mean 'n_layer'");
}

static void test_key_in_wrong_section(void **state) {
    (void)state;
    assert_int_equal(check("[model]\nlr = 0.1\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2:");
    assert_contains(plait_last_error(), "belongs in [optim]");
}

static void test_unknown_section(void **state) {
    (void)state;
    assert_int_equal(check("[optimm]\nlr = 0.1\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2:");
    assert_contains(plait_last_error(), "section [optimm] is not known; did you mean [optim]?");
    assert_int_equal(check("[comm.nosuch]\nx = 1\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "no plugin of kind 'comm' named 'nosuch'");
}

static void test_wrong_type_and_range(void **state) {
    (void)state;
    assert_int_equal(check("[model]\n\nn_layer = four\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:3: key 'n_layer' in [model]: value 'four' is not an integer");
    assert_contains(plait_last_error(), "int in [1, 4096]");
    assert_int_equal(check("[model]\nn_layer = 5000\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "out of range [1, 4096]");
    assert_int_equal(check("[optim]\nlr = fast\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "not a finite number");
    assert_int_equal(check("[comm.test]\nsize = 12Q\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "not a byte size");
    assert_int_equal(check("[run]\ndeterministic = maybe\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "not a bool");
}

/* Every kind of bad value is reported at its file and line, with the key,
 * its section and what is wrong, as the only problem. */
static void test_every_value_error_names_file_and_line(void **state) {
    (void)state;
    static char *const no_env[] = {NULL};
    static const struct {
        const char *section, *key, *value, *says;
    } cases[] = {
        {"model", "n_layer", "5000", "value '5000' is out of range [1, 4096]"},
        {"model", "n_layer", "four", "value 'four' is not an integer"},
        {"model", "n_layer", "99999999999999999999", "does not fit a 64-bit integer"},
        {"optim", "lr", "11", "value '11' is out of range [0, 10]"},
        {"optim", "lr", "fast", "value 'fast' is not a finite number"},
        /* a bound is printed as it is, never rounded onto the refused value */
        {"optim", "beta2", "1", "value '1' is out of range [0, 0.999999999]"},
        {"optim", "eps", "0", "value '0' is out of range [1e-30, 1]"},
        {"optim", "lr", "1e999", "value '1e999' is not a finite number"},
        {"run", "deterministic", "maybe", "value 'maybe' is not a bool (use true or false)"},
        {"comm.test", "size", "12Q", "value '12Q' is not a byte size"},
        {"comm.test", "size", "2T", "value '2T' is out of range [0, "},
        {"comm.test", "colors", "red, purple", "value 'purple' is not allowed (comma-separated list of: red, green, blue)"},
        {"comm", "algorithm", "rign", "value 'rign' is not allowed; did you mean 'ring'?"},
        {"run", "progress", "sometimes", "value 'sometimes' is not allowed"},
        {"comm.test", "must", "", "value must not be empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        int w = snprintf(text, sizeof text, "[%s]\n", cases[i].section);
        for (size_t k = 0; k < i; k++) w += snprintf(text + w, sizeof text - (size_t)w, "; filler %zu\n", k);
        w += snprintf(text + w, sizeof text - (size_t)w, "%s = %s\n", cases[i].key, cases[i].value);
        if (strcmp(cases[i].key, "must") != 0) snprintf(text + w, sizeof text - (size_t)w, "[comm.test]\nmust = x\n");
        plait_config *cfg = fresh();
        assert_int_equal(plait_config_load_string(cfg, "t.ini", text), PLAIT_OK);
        assert_int_equal(plait_config_finalize(cfg, no_env), PLAIT_ERR_INVALID_CONFIG);
        const char *msg = plait_last_error();
        char where[128];
        snprintf(where, sizeof where, "t.ini:%zu: key '%s' in [%s]: ", i + 2, cases[i].key, cases[i].section);
        if (strncmp(msg, where, strlen(where)) != 0) fail_msg("case %zu: expected \"%s...\", got: %s", i, where, msg);
        assert_contains(msg, cases[i].says);
        if (strchr(msg, '\n')) fail_msg("case %zu: more than one problem: %s", i, msg);
        plait_config_free(cfg);
    }
}

static void test_enum_and_list_choices(void **state) {
    (void)state;
    assert_int_equal(check("[comm]\nalgorithm = rign\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2:");
    assert_contains(plait_last_error(), "did you mean 'ring'");
    assert_contains(plait_last_error(), "one of: auto, ring, rhd, tree, direct, ordered");
    assert_int_equal(check("[comm.test]\ncolors = red, purple\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "'purple'");
}

static void test_required_missing(void **state) {
    (void)state;
    plait_config *cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "r.ini", "[run]\nseed = 2\n"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, (char *const[]){NULL}), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "r.ini: key 'must' in [comm.test] is required but not given (string: a required key)");
    plait_config_free(cfg);
    /* the file given first is named even when a second one is loaded */
    cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "first.ini", "[run]\nseed = 2\n"), PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "second.ini", "[run]\nsteps = 2\n"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, (char *const[]){NULL}), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "first.ini: key 'must' in [comm.test] is required but not given");
    plait_config_free(cfg);
}

static void test_syntax_errors(void **state) {
    (void)state;
    plait_config *cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "s.ini", "[run]\nseed = 1\nthis line is wrong\n"),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "s.ini:3: syntax error");
    plait_config_free(cfg);
    cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "s.ini", "seed = 1\n"), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "s.ini:1: key 'seed' appears before any [section]");
    plait_config_free(cfg);
    cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "s.ini", "[run]\nseed = 1\nsteps = 2\nseed = 3\n"),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "s.ini:4: [run] key 'seed' is given twice (first on line 2)");
    plait_config_free(cfg);
}

/* What inih would misread silently is refused or read as meant: text after a
 * section header (dropped by inih), old Mac line endings (the whole file one
 * line after its first header), and an indented key (inih's continuation of
 * the previous key's value) is the key it looks like. */
static void test_lines_inih_would_misread(void **state) {
    (void)state;
    plait_config *cfg = NULL;
    assert_int_equal(check("[run] steps = 5\n[optim] lr = 0.5\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:1: text after the section header's ']'");
    assert_contains(plait_last_error(), "t.ini:2: text after the section header's ']'");
    assert_int_equal(check("[run]\rsteps = 5\rseed = 3\r", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:1: a carriage return inside the line");
    /* a comment after a header, CRLF lines and indented keys read as meant */
    if (check("[run]   ; the run\r\nsteps = 5\r\n[optim] # the optimizer\n    lr = 3e-3\n\t weight_decay = 0.5\n\n  "
              "beta2 = 0.9\n",
              NULL, &cfg) != PLAIT_OK)
        fail_msg("%s", plait_last_error());
    assert_int_equal(plait_config_int(cfg, "run", "steps"), 5);
    assert_true(plait_config_float(cfg, "optim", "lr") == 3e-3);
    assert_true(plait_config_float(cfg, "optim", "weight_decay") == 0.5);
    assert_true(plait_config_float(cfg, "optim", "beta2") == 0.9);
    plait_config_free(cfg);
    /* an indented line that is no key is a syntax error, not a continuation */
    assert_int_equal(check("[optim]\nlr = 3e-3\n    4e-3\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:3: syntax error");
}

/* A line of any length is read as the same value would be on the command
 * line (inih's own buffer holds 200 bytes), inline comment and spaces
 * trimmed; a section header that long is still refused. */
static void test_long_lines(void **state) {
    (void)state;
    static char text[12000], want[10000];
    memset(want, 'a', sizeof want - 1);
    want[sizeof want - 1] = '\0';
    memcpy(want, "runs/", 5);
    snprintf(text, sizeof text, "[run]\nout_dir  =   %s   ; a comment\nseed = 5\n", want);
    plait_config *cfg = NULL;
    if (check(text, NULL, &cfg) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_string_equal(plait_config_str(cfg, "run", "out_dir"), want);
    assert_int_equal(plait_config_int(cfg, "run", "seed"), 5);
    plait_config_free(cfg);
    /* the same on the command line */
    cfg = fresh();
    static char arg[10100];
    snprintf(arg, sizeof arg, "run.out_dir=%s", want);
    assert_int_equal(plait_config_add_override(cfg, arg), PLAIT_OK);
    plait_config_free(cfg);
    /* exactly at, and just past, inih's limit; a long unknown key still names its line */
    for (size_t n = 190; n < 215; n++) {
        char line[512];
        snprintf(line, sizeof line, "[run]\nout_dir = %.*s\n", (int)n, want);
        if (check(line, NULL, &cfg) != PLAIT_OK) fail_msg("%zu: %s", n, plait_last_error());
        assert_int_equal(strlen(plait_config_str(cfg, "run", "out_dir")), n);
        plait_config_free(cfg);
    }
    snprintf(text, sizeof text, "[run]\nout_dirx = %s\n", want);
    assert_int_equal(check(text, NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2:");
    assert_contains(plait_last_error(), "out_dirx");
    snprintf(text, sizeof text, "[%s]\n", want);
    assert_int_equal(check(text, NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:1: line is longer than");
    snprintf(text, sizeof text, "[run]\n%s\n", want);
    assert_int_equal(check(text, NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "t.ini:2: syntax error");
}

/* Binary garbage and escape sequences in a config never reach the terminal raw. */
static void test_garbage_is_escaped(void **state) {
    (void)state;
    assert_int_equal(check("[run]\n\x1b[2J\x1b]0;owned\x07\xff\xfe = \x9b" "1m\n", NULL, NULL),
                     PLAIT_ERR_INVALID_CONFIG);
    const char *msg = plait_last_error();
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        if ((*c < 0x20 && *c != '\n' && *c != '\t') || *c == 0x7f || *c >= 0x80)
            fail_msg("raw byte 0x%02x in: %s", *c, msg);
    assert_contains(msg, "\\x1b[2J");
    assert_contains(msg, "\\xff\\xfe");
    assert_contains(msg, "t.ini:2:");
    /* valid UTF-8 is kept as it is */
    assert_int_equal(check("[run]\nout_dïr = 1\n", NULL, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "out_dïr");
}

/* A FIFO or a device given as the config file is refused at once. */
static void test_config_special_files(void **state) {
    (void)state;
    char dir[] = "/tmp/plait-cfg-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo.ini", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(30); /* a hang fails the test instead of stalling the suite */
    plait_config *cfg = fresh();
    assert_int_equal(plait_config_load_file(cfg, path), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "is a FIFO, not a regular file");
    assert_int_equal(plait_config_load_file(cfg, "/dev/zero"), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "is a character device");
    alarm(0);
    plait_config_free(cfg);
    unlink(path);
    rmdir(dir);
}

static void test_env_and_cli_overrides(void **state) {
    (void)state;
    char *env[] = {"PLAIT_OPTIM_LR=0.5", "PLAIT_COMM_TEST_FLAG=yes", "PLAIT_UNRELATED=1", NULL};
    plait_config *cfg = fresh();
    assert_int_equal(plait_config_load_string(cfg, "e.ini", "[optim]\nlr = 0.1\nbeta1 = 0.8\n[comm.test]\nmust=1\n"), PLAIT_OK);
    assert_int_equal(plait_config_add_override(cfg, "optim.beta1=0.7"), PLAIT_OK);
    assert_int_equal(plait_config_add_override(cfg, "comm.test.size=4K"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, env), PLAIT_OK);
    const char *where;
    assert_true(plait_config_float(cfg, "optim", "lr") == 0.5);
    assert_int_equal(plait_config_origin(cfg, "optim", "lr", &where), PLAIT_ORIGIN_ENV);
    assert_string_equal(where, "environment PLAIT_OPTIM_LR");
    assert_true(plait_config_float(cfg, "optim", "beta1") == 0.7);
    assert_int_equal(plait_config_origin(cfg, "optim", "beta1", &where), PLAIT_ORIGIN_CLI);
    assert_int_equal(plait_config_bool(cfg, "comm.test", "flag"), 1);
    plait_value v;
    assert_int_equal(plait_config_get(cfg, "comm.test", "size", &v), PLAIT_OK);
    assert_int_equal(v.i, 4096);
    char *fp = plait_config_fingerprint(cfg);
    assert_contains(fp, "optim.lr=0.5\n");
    assert_contains(fp, "comm.test.flag=yes\n");
    free(fp);
    plait_config_free(cfg);

    char *bad_env[] = {"PLAIT_MODEL_N_HEAD=zero", NULL};
    assert_int_equal(check("[run]\nseed = 1\n", bad_env, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "environment PLAIT_MODEL_N_HEAD: key 'n_head' in [model]");

    cfg = fresh();
    assert_int_equal(plait_config_add_override(cfg, "comm.test.must=1"), PLAIT_OK);
    assert_int_equal(plait_config_add_override(cfg, "optim.lr=-1"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, (char *const[]){NULL}), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "command line 'optim.lr=-1': key 'lr' in [optim]");
    plait_config_free(cfg);
    cfg = fresh();
    assert_int_equal(plait_config_add_override(cfg, "nodot"), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "expected section.key=value");
    plait_config_free(cfg);
}

/* Precedence is file < environment < command line, for the text read
 * before finalize to pick plugins and for the value finalize keeps; checked
 * on a plugin key and an ordinary one, every combination of sources. */
static void test_env_vs_command_line_precedence(void **state) {
    (void)state;
    static const struct {
        const char *section, *key, *file, *env, *cli;
    } keys[] = {{"comm", "plugin", "fromfile", "fromenv", "fromcli"}, {"optim", "lr", "0.25", "0.5", "0.125"}};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        for (int given = 0; given < 8; given++) { /* bit 0 file, bit 1 environment, bit 2 command line */
            plait_config *cfg = fresh();
            char text[256], assignment[128], env_var[128];
            snprintf(text, sizeof text, "[comm.test]\nmust = x\n[%s]\n%s = %s\n", keys[k].section, keys[k].key,
                     keys[k].file);
            assert_int_equal(plait_config_load_string(cfg, "p.ini", given & 1 ? text : "[comm.test]\nmust = x\n"),
                             PLAIT_OK);
            snprintf(assignment, sizeof assignment, "%s.%s=%s", keys[k].section, keys[k].key, keys[k].cli);
            if (given & 4) assert_int_equal(plait_config_add_override(cfg, assignment), PLAIT_OK);
            snprintf(env_var, sizeof env_var, "PLAIT_%s_%s=%s", k ? "OPTIM" : "COMM", k ? "LR" : "PLUGIN",
                     keys[k].env);
            char *env[] = {given & 2 ? env_var : NULL, NULL};
            const char *want = given & 4   ? keys[k].cli
                               : given & 2 ? keys[k].env
                               : given & 1 ? keys[k].file
                                           : plait_config_default_text(cfg, keys[k].section, keys[k].key);
            const char *pending = plait_config_pending_text(cfg, keys[k].section, keys[k].key, env);
            if (!pending || strcmp(pending, want) != 0)
                fail_msg("[%s] %s, sources %d: read before finalize '%s', expected '%s'", keys[k].section,
                         keys[k].key, given, pending ? pending : "(null)", want);
            assert_int_equal(plait_config_finalize(cfg, env), PLAIT_OK);
            plait_value v;
            assert_int_equal(plait_config_get(cfg, keys[k].section, keys[k].key, &v), PLAIT_OK);
            if (k == 0 && strcmp(v.s, want) != 0)
                fail_msg("[comm] plugin, sources %d: finalized '%s', expected '%s'", given, v.s, want);
            if (k == 1 && v.f != strtod(want, NULL))
                fail_msg("[optim] lr, sources %d: finalized %g, expected %s", given, v.f, want);
            plait_value_origin origin = plait_config_origin(cfg, keys[k].section, keys[k].key, NULL);
            assert_int_equal(origin, given & 4   ? PLAIT_ORIGIN_CLI
                                     : given & 2 ? PLAIT_ORIGIN_ENV
                                     : given & 1 ? PLAIT_ORIGIN_FILE
                                                 : PLAIT_ORIGIN_DEFAULT);
            plait_config_free(cfg);
        }
    }
}

/* A PLAIT_<SECTION>_<KEY> variable whose section is declared but whose key
 * is not is an error like a file's misspelt key, with the variable to use;
 * the runtime's own PLAIT_ variables and ones outside every section pass. */
static void test_misspelt_env_var(void **state) {
    (void)state;
    char *typo[] = {"PLAIT_OPTIM_LERNING_RATE=1", NULL};
    assert_int_equal(check("[run]\nseed = 1\n", typo, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "environment PLAIT_OPTIM_LERNING_RATE: key 'lerning_rate' is not known in "
                                        "[optim]; did you mean PLAIT_OPTIM_LR?");
    char *plugin_typo[] = {"PLAIT_COMM_TEST_FLGA=yes", NULL}; /* [comm.test], the longest matching section */
    assert_int_equal(check("[run]\nseed = 1\n", plugin_typo, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "environment PLAIT_COMM_TEST_FLGA: key 'flga' is not known in [comm.test]; "
                                        "did you mean PLAIT_COMM_TEST_FLAG?");
    char *elsewhere[] = {"PLAIT_MODEL_LR=1", "PLAIT_RUN_SEEED=2", NULL};
    assert_int_equal(check("[run]\nseed = 1\n", elsewhere, NULL), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "2 problems");
    assert_contains(plait_last_error(), "environment PLAIT_MODEL_LR: key 'lr' is not known in [model]; it belongs "
                                        "in [optim]: PLAIT_OPTIM_LR");
    assert_contains(plait_last_error(), "did you mean PLAIT_RUN_SEED?");
    char *not_config[] = {"PLAIT_RANK=3",          "PLAIT_WORLD_SIZE=4",   "PLAIT_LOCAL_RANK=3",
                          "PLAIT_LOCAL_SIZE=4",    "PLAIT_STORE_ADDR=x:1", "PLAIT_STORE_FD=5",
                          "PLAIT_JOB_TOKEN=t",     "PLAIT_REPORT_FD=6",    "PLAIT_LOG_LEVEL=debug",
                          "PLAIT_PLUGIN_PATH=/x",  "PLAIT_MATH_THREADS=1", "PLAIT_LAUNCH_GRACE=2",
                          "PLAIT_UNRELATED=1",     "PLAIT_=1",             "PLAIT_OPTIM_LR=0.5",
                          "NOT_PLAIT_OPTIM_X=1",   "PLAIT_OPTIM",          NULL};
    if (check("[run]\nseed = 1\n", not_config, NULL) != PLAIT_OK) fail_msg("%s", plait_last_error());
}

/* Variables pointing into an undeclared plugin section name it, once, for
 * the CLI to declare; keys of declared sections and top-level typos do not. */
static void test_env_plugin_sections(void **state) {
    (void)state;
    plait_config *cfg = fresh();
    char *env[] = {"PLAIT_COMM_NCCL_NTHREADS=1", "PLAIT_OPTIM_ZERO1_BUCKET_SIZE=1M", "PLAIT_OPTIM_ZERO1_MAX_INFLIGHT=2",
                   "PLAIT_OPTIM_LR_SCHEDULE=constant", "PLAIT_COMM_TEST_FLGA=1", "PLAIT_RUN_SEEED=1",
                   "PLAIT_RANK_X=1", NULL};
    char sections[8][128];
    size_t n = plait_config_env_plugin_sections(cfg, env, sections, 8);
    assert_int_equal(n, 2);
    assert_string_equal(sections[0], "comm.nccl");
    assert_string_equal(sections[1], "optim.zero1");
    assert_int_equal(plait_config_env_plugin_sections(cfg, env, sections, 1), 1);
    plait_config_free(cfg);
}

static void test_all_problems_listed(void **state) {
    (void)state;
    assert_int_equal(check("[model]\nn_layer = x\nn_head = y\n[optim]\nlerning_rate = 1\n", NULL, NULL),
                     PLAIT_ERR_INVALID_CONFIG);
    const char *msg = plait_last_error();
    assert_contains(msg, "3 problems");
    assert_contains(msg, "t.ini:2:");
    assert_contains(msg, "t.ini:3:");
    assert_contains(msg, "t.ini:5:");
}

static void test_derived_value(void **state) {
    (void)state;
    plait_config *cfg = NULL;
    assert_int_equal(check("[data]\nglobal_batch = 32\n", NULL, &cfg), PLAIT_OK);
    assert_int_equal(plait_config_set_derived(cfg, "data", "accumulation_steps", "4", "global_batch / micro_batch"), PLAIT_OK);
    const char *where;
    assert_int_equal(plait_config_origin(cfg, "data", "accumulation_steps", &where), PLAIT_ORIGIN_DERIVED);
    assert_contains(where, "global_batch / micro_batch");
    assert_int_equal(plait_config_int(cfg, "data", "accumulation_steps"), 4);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    plait_config_show(cfg, out);
    fclose(out);
    assert_contains(text, "[model]");
    assert_contains(text, "global_batch = 32");
    assert_contains(text, "t.ini:2");
    assert_contains(text, "accumulation_steps = 4");
    free(text);
    plait_config_free(cfg);
}

static void test_value_helpers(void **state) {
    (void)state;
    uint64_t b;
    assert_int_equal(plait_parse_bytes("64K", &b), 0);
    assert_int_equal(b, 65536);
    assert_int_equal(plait_parse_bytes("1.5G", &b), 0);
    assert_int_equal(b, 1610612736ull);
    assert_int_equal(plait_parse_bytes("2MiB", &b), 0);
    assert_int_equal(b, 2u << 20);
    assert_int_equal(plait_parse_bytes("-1", &b), -1);
    assert_int_equal(plait_parse_bytes("0.5", &b), -1);
    char out[32];
    plait_format_bytes(25u << 20, out, sizeof out);
    assert_string_equal(out, "25M");
    assert_int_equal(plait_edit_distance("ring", "rign"), 1);
    const char *cands[] = {"lr", "beta1", "weight_decay"};
    assert_string_equal(plait_suggest("lerning_rate", cands, 3), "lr");
    assert_string_equal(plait_suggest("wd", cands, 3), "weight_decay");
    assert_null(plait_suggest("zzzzzzzz", cands, 3));
}

/* A plugin's key table is checked as it loads, naming its file: a key no
 * configuration could set, a key twice, a default its own key refuses. */
static void test_declared_tables(void **state) {
    (void)state;
    static const char *const colours[] = {"red", "blue", NULL};
    const plait_key_decl good[] = {
        {sizeof(plait_key_decl), 0, "size_2", PLAIT_KEY_INT, "3", 0, 10, NULL, "d"},
        {sizeof(plait_key_decl), 0, "colour", PLAIT_KEY_ENUM, "red", 1, 0, colours, "d"},
    };
    assert_int_equal(plait_config_check_declared("comm.x", good, 2, sizeof good[0], "x.so"), PLAIT_OK);
    static const struct {
        plait_key_decl d[2];
        size_t n;
        const char *want;
    } bad[] = {
        {{{sizeof(plait_key_decl), 0, "bad key=x", PLAIT_KEY_INT, "1", 0, 10, NULL, "d"}}, 1,
         "x.so: [comm.x] key 'bad key=x' is not a valid name"},
        {{{sizeof(plait_key_decl), 0, "", PLAIT_KEY_INT, "1", 0, 10, NULL, "d"}}, 1, "key '' is not a valid name"},
        {{{sizeof(plait_key_decl), 0, "Upper", PLAIT_KEY_INT, "1", 0, 10, NULL, "d"}}, 1, "'Upper' is not a valid name"},
        {{{sizeof(plait_key_decl), 0, "a", PLAIT_KEY_INT, "99", 0, 10, NULL, "d"}}, 1,
         "x.so: a default of its key table is not a value of its key"},
        {{{sizeof(plait_key_decl), 0, "a", PLAIT_KEY_INT, "1", 0, 10, NULL, "d"},
          {sizeof(plait_key_decl), 0, "a", PLAIT_KEY_INT, "2", 0, 10, NULL, "d"}}, 2, "x.so declares [comm.x] a twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(plait_config_check_declared("comm.x", bad[i].d, bad[i].n, sizeof bad[i].d[0], "x.so"),
                         PLAIT_ERR_ABI);
        if (!strstr(plait_last_error(), bad[i].want))
            fail_msg("table %zu: '%s' not in '%s'", i, bad[i].want, plait_last_error());
    }
}

/* A plugin's NULL arguments to the host's config_get and plugin_ops are
 * said as its error, never dereferenced. */
static void test_host_refuses_null_arguments(void **state) {
    (void)state;
    const plait_host *h = plait_host_table();
    plait_value v;
    assert_int_equal(h->config_get(NULL, "comm", "plugin", &v), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "host->config_get with a NULL configuration"));
    plait_config *cfg = plait_config_new();
    assert_int_equal(h->config_get(cfg, NULL, "plugin", &v), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(h->config_get(cfg, "comm", NULL, &v), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(h->config_get(cfg, "comm", "plugin", NULL), PLAIT_ERR_INVALID_ARG);
    plait_config_free(cfg);
    assert_null(h->plugin_ops(PLAIT_KIND_COMM, NULL));
    assert_non_null(strstr(plait_last_error(), "without a name"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file_and_origins), cmocka_unit_test(test_misspelt_key_suggests),
        cmocka_unit_test(test_key_in_wrong_section),   cmocka_unit_test(test_unknown_section),
        cmocka_unit_test(test_wrong_type_and_range),   cmocka_unit_test(test_enum_and_list_choices),
        cmocka_unit_test(test_required_missing),       cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_env_and_cli_overrides),  cmocka_unit_test(test_all_problems_listed),
        cmocka_unit_test(test_derived_value),          cmocka_unit_test(test_value_helpers),
        cmocka_unit_test(test_env_vs_command_line_precedence), cmocka_unit_test(test_misspelt_env_var),
        cmocka_unit_test(test_env_plugin_sections),    cmocka_unit_test(test_long_lines),
        cmocka_unit_test(test_lines_inih_would_misread),  cmocka_unit_test(test_declared_tables),
        cmocka_unit_test(test_host_refuses_null_arguments),
        cmocka_unit_test(test_garbage_is_escaped),     cmocka_unit_test(test_config_special_files),    cmocka_unit_test(test_every_value_error_names_file_and_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
