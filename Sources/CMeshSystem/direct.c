#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "CMeshSystem.h"

int cmesh_set_direct(int fd, int on) {
#if defined(__linux__) && defined(O_DIRECT)
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    int wanted = on ? (flags | O_DIRECT) : (flags & ~O_DIRECT);
    return wanted == flags ? 0 : fcntl(fd, F_SETFL, wanted);
#else
    (void)fd;
    (void)on;
    errno = EINVAL;
    return -1;
#endif
}

#if defined(__linux__)
#include <sys/vfs.h>
#endif

long cmesh_file_system_magic(const char *path) {
#if defined(__linux__)
    struct statfs info;
    return statfs(path, &info) == 0 ? (long)info.f_type : -1;
#else
    (void)path;
    return -1;
#endif
}
