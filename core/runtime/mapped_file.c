#include "runtime/mapped_file.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/regular_file.h"

plait_status plait_mapped_file_open(const char *path, plait_mapped_file *out) {
    out->data = NULL;
    out->len = 0;
    int fd;
    uint64_t size;
    plait_status ost = plait_open_regular(path, "input file", PLAIT_ERR_INVALID_ARG, &fd, &size);
    if (ost != PLAIT_OK) return ost;
    if (size > SIZE_MAX) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "input file %s is too large to map on this machine", path);
    }
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return plait_set_error(PLAIT_ERR_SYSTEM, "cannot map %s: %s", path, strerror(err));
        }
        out->data = p;
        out->len = (size_t)size;
    }
    close(fd);
    return PLAIT_OK;
}

void plait_mapped_file_close(plait_mapped_file *m) {
    if (m->data) munmap((void *)m->data, m->len);
    m->data = NULL;
    m->len = 0;
}
