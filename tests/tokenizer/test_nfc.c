/*
 * Unicode Normalization Form C (core/tokenizer/nfc.h): cases worked out by
 * hand from UAX #15 (composition, canonical reordering, blocking, Hangul,
 * composition exclusions, singletons, invalid bytes, runs of marks), and
 * every case of tests/tokenizer/nfc_cases.py against Python's
 * unicodedata.normalize: each code point alone and with marks after it,
 * every primary composite's pair with a mark of each class between, Hangul
 * jamo, random strings. The second part runs where a python3 of the
 * tables' Unicode version is on PATH (else skipped, saying why).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/nfc.h"
#include "tokenizer/nfc_tables.h"

static void expect(const char *in, const char *want) {
    const size_t len = strlen(in);
    unsigned char *out = malloc(plait_nfc_bound(len));
    assert_non_null(out);
    const size_t n = plait_nfc((const unsigned char *)in, len, out);
    if (n != strlen(want) || memcmp(out, want, n) != 0) {
        char got[256];
        snprintf(got, sizeof got, "%.*s", (int)n, (const char *)out);
        fail_msg("NFC of \"%s\": got \"%s\", want \"%s\"", in, got, want);
    }
    free(out);
}

static void test_by_hand(void **state) {
    (void)state;
    expect("", "");
    expect("plain ASCII text.\n", "plain ASCII text.\n");
    expect("e\xcc\x81", "\xc3\xa9");                     /* e + acute: é */
    expect("caf\xc3\xa9", "caf\xc3\xa9");                /* already composed */
    expect("A\xcc\x8a", "\xc3\x85");                     /* A + ring: Å */
    expect("\xe2\x84\xab", "\xc3\x85");                  /* ANGSTROM SIGN, a singleton: Å */
    expect("\xe2\x84\xa6", "\xce\xa9");                  /* OHM SIGN: Greek capital omega */
    expect("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc");  /* U+0958, excluded: stays decomposed */
    expect("a\xcc\x81\xcc\x96", "\xc3\xa1\xcc\x96");     /* a acute(230) grave-below(220): reordered, á + 316 */
    expect("a\xcc\x96\xcc\x81", "\xc3\xa1\xcc\x96");     /* the other order, the same form */
    expect("d\xcc\x87\xcc\xa3", "\xe1\xb8\x8d\xcc\x87"); /* d dot-above dot-below: ḍ + dot above */
    expect("a\xcc\x81\xcc\x81", "\xc3\xa1\xcc\x81");     /* the second acute is blocked */
    expect("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"); /* Hangul L V T: 각 */
    expect("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81");             /* LV + T */
    expect("\xea\xb0\x81\xe1\x86\xa8", "\xea\xb0\x81\xe1\x86\xa8"); /* LVT + T: no more */
    expect("\xcc\x81"
           "a",
           "\xcc\x81"
           "a");                                           /* a mark first composes with nothing */
    expect("e\xff\xcc\x81", "e\xff\xcc\x81");              /* an invalid byte passes and blocks */
    expect("x\xc3", "x\xc3");                              /* a cut sequence passes too */
    char run[3000] = "o";                                  /* a long run of marks: reordered in pieces */
    for (int i = 0; i < 600; i++) strcat(run, "\xcc\x88"); /* diaeresis (230), the first composes: ö */
    char want[3000] = "\xc3\xb6";
    for (int i = 1; i < 600; i++) strcat(want, "\xcc\x88");
    expect(run, want);
}

/* Every case nfc_cases.py writes against Python's NFC of it. */
static void test_against_python(void **state) {
    (void)state;
    const char *src = getenv("PLAIT_SOURCE_DIR");
    char dir[] = "/tmp/plait-nfc-XXXXXX", cmd[2048], version[64] = "";
    if (!src || !mkdtemp(dir)) skip();
    snprintf(cmd, sizeof cmd, "python3 %s/tests/tokenizer/nfc_cases.py %s/in %s/want 2>&1", src, dir, dir);
    FILE *p = popen(cmd, "r");
    if (p && !fgets(version, sizeof version, p)) version[0] = 0;
    const int rc = p ? pclose(p) : -1;
    version[strcspn(version, "\n")] = 0;
    if (rc != 0 || strcmp(version, plait_nfc_unicode_version) != 0) {
        printf("SKIP: python3's unicodedata (%s) is not the tables' Unicode %s: not compared\n",
               rc == 0 ? version : "not run", plait_nfc_unicode_version);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) {}
        skip();
    }
    char in_path[128], want_path[128];
    snprintf(in_path, sizeof in_path, "%s/in", dir);
    snprintf(want_path, sizeof want_path, "%s/want", dir);
    FILE *in = fopen(in_path, "rb"), *want = fopen(want_path, "rb");
    assert_non_null(in);
    assert_non_null(want);
    char *line = NULL, *wline = NULL;
    size_t cap = 0, wcap = 0, cases = 0, wrong = 0;
    unsigned char out[1024];
    ssize_t n, wn;
    while ((n = getline(&line, &cap, in)) > 0 && (wn = getline(&wline, &wcap, want)) > 0) {
        const size_t got = plait_nfc((const unsigned char *)line, (size_t)n - 1, out);
        cases++;
        if (got == (size_t)wn - 1 && memcmp(out, wline, got) == 0) continue;
        if (wrong++ < 10)
            printf("differs: \"%.*s\" gave \"%.*s\", Python \"%.*s\"\n", (int)n - 1, line, (int)got, (const char *)out,
                   (int)wn - 1, wline);
    }
    free(line);
    free(wline);
    fclose(in);
    fclose(want);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    printf("%zu cases against Python's NFC (Unicode %s): %zu differ\n", cases, version, wrong);
    assert_true(cases > 3000000);
    assert_int_equal(wrong, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_by_hand), cmocka_unit_test(test_against_python)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
