#include "runtime/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"

plait_status plait_mapped_file_open(const char *path, plait_mapped_file *out) {
    out->data = NULL;
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        close(fd);
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", path, S_ISREG(st.st_mode) ? strerror(err) : "not a regular file");
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return plait_set_error(PLAIT_ERR_SYSTEM, "cannot map %s: %s", path, strerror(err));
        }
        out->data = p;
        out->len = (size_t)st.st_size;
    }
    close(fd);
    return PLAIT_OK;
}

void plait_mapped_file_close(plait_mapped_file *m) {
    if (m->data) munmap((void *)m->data, m->len);
    m->data = NULL;
    m->len = 0;
}
