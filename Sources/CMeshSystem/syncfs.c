#define _GNU_SOURCE
#include <unistd.h>
#include "CMeshSystem.h"

int cmesh_syncfs(int fd) {
#if defined(__linux__)
    return syncfs(fd);
#else
    return fsync(fd);
#endif
}
