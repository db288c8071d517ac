/* Text from data (a model's output, decoded ids) onto a terminal. */
#include <stdio.h>

#include "cli/cli.h"

void plait_cli_put_bytes(const void *bytes, size_t len, FILE *out, int tty) {
    const unsigned char *b = bytes;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = b[i];
        if (tty && ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
}
