#ifndef GROUPMESH_CMESHSYSTEM_H
#define GROUPMESH_CMESHSYSTEM_H

/// syncfs(2): flushes every dirty page of one file system in one call (GNU, not in Swift's Glibc module).
int cmesh_syncfs(int fd);

/// Turns O_DIRECT (writes that bypass the page cache) on or off for `fd`: 0, or -1 with errno set
/// (EINVAL where the file system or the system has no direct I/O).
int cmesh_set_direct(int fd, int on);

/// statfs(2)'s f_type for `path` (the file system's magic number), or -1.
long cmesh_file_system_magic(const char *path);

/// Frees the disk blocks under `length` bytes at `offset` of `fd`, keeping the file's size (the
/// range reads as zeros): 0, or -1 with errno set (EOPNOTSUPP where the file system cannot).
int cmesh_punch_hole(int fd, long long offset, long long length);

#endif
