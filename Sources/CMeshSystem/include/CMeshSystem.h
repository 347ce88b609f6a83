#ifndef GROUPMESH_CMESHSYSTEM_H
#define GROUPMESH_CMESHSYSTEM_H

/// syncfs(2): flushes every dirty page of one file system in one call (GNU, not in Swift's Glibc module).
int cmesh_syncfs(int fd);

/// Frees the disk blocks under `length` bytes at `offset` of `fd`, keeping the file's size (the
/// range reads as zeros): 0, or -1 with errno set (EOPNOTSUPP where the file system cannot).
int cmesh_punch_hole(int fd, long long offset, long long length);

#endif
