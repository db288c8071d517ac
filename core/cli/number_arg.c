/* A command-line option's whole-number value, checked whole (plait_cli_parse_int in cli.h). */
#include <errno.h>
#include <stdlib.h>

#include "cli/cli.h"

int plait_cli_parse_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}
