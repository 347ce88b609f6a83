#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "CMeshSystem.h"

int cmesh_syncfs(int fd) {
#if defined(__linux__)
    return syncfs(fd);
#else
    return fsync(fd);
#endif
}

int cmesh_punch_hole(int fd, long long offset, long long length) {
#if defined(__linux__) && defined(FALLOC_FL_PUNCH_HOLE)
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
#else
    (void)fd;
    (void)offset;
    (void)length;
    errno = EOPNOTSUPP;
    return -1;
#endif
}
