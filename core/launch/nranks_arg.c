/* "-n N" and its spellings taken out of a command's argv
 * (plait_launch_take_nranks, launch.h). */
#include "launch/launch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int parse_n(const char *s, int *n) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 4096) return -1;
    *n = (int)v;
    return 0;
}

int plait_launch_take_nranks(int *argc, char **argv, int *nranks, const char **err) {
    *nranks = 0;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int used = 1;
        if (strcmp(a, "--") == 0) break;
        if (strcmp(a, "-n") == 0 || strcmp(a, "--nranks") == 0) {
            if (i + 1 >= *argc) {
                *err = "-n needs a number of ranks (1..4096)";
                return -1;
            }
            val = argv[i + 1];
            used = 2;
        } else if (strncmp(a, "--nranks=", 9) == 0) {
            val = a + 9;
        } else if (strncmp(a, "-n", 2) == 0 && a[2] >= '0' && a[2] <= '9') {
            val = a + 2;
        } else {
            continue;
        }
        if (parse_n(val, nranks) != 0) {
            *err = "-n needs a number of ranks in 1..4096";
            return -1;
        }
        for (int j = i; j + used <= *argc; j++) argv[j] = argv[j + used];
        *argc -= used;
        i--;
    }
    return 0;
}
