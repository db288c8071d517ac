/* Messages with an fd between a rank and its replica keeper (agent_wire.h). */
#include "elastic/agent_wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

ssize_t agent_send(int sock, const void *buf, size_t len, int fd) {
    struct iovec iov = {(void *)buf, len};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    char ctl[CMSG_SPACE(sizeof(int))];
    if (fd >= 0) {
        memset(ctl, 0, sizeof ctl);
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    ssize_t r;
    do r = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    return r;
}

ssize_t agent_recv(int sock, void *buf, size_t len, int *fd, int *cut) {
    struct iovec iov = {buf, len};
    struct msghdr mh = {0};
    char ctl[CMSG_SPACE(sizeof(int))];
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    ssize_t r;
    do r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    *fd = -1;
    *cut = r > 0 && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(fd, CMSG_DATA(c), sizeof *fd);
    return r;
}
