#ifndef GROUPMESH_CMESHSYSTEM_H
#define GROUPMESH_CMESHSYSTEM_H

/// syncfs(2): flushes every dirty page of one file system in one call (GNU, not in Swift's Glibc module).
int cmesh_syncfs(int fd);

#endif
