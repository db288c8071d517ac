/* The host identity (host_identity.h). */
#include "runtime/host_identity.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/hash.h"

static void read_line(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f) {
        if (!fgets(out, (int)cap, f)) out[0] = '\0';
        fclose(f);
    }
    out[strcspn(out, "\n")] = '\0';
}

void plait_host_identity(char *buf, size_t cap) {
    char host[256] = "", boot[64] = "", net[64] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    ssize_t n = readlink("/proc/self/ns/net", net, sizeof net - 1);
    net[n > 0 ? n : 0] = '\0';
    snprintf(buf, cap, "%s/%s/%s", host, boot, net);
}

void plait_machine_identity(char *buf, size_t cap) {
    char host[256] = "", id[64] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    read_line("/etc/machine-id", id, sizeof id);
    snprintf(buf, cap, "%s/%s", host, id);
}

uint64_t plait_host_key(void) {
    char id[400];
    plait_host_identity(id, sizeof id);
    return plait_fnv1a_str(id);
}
