#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Dispatch
import Foundation

/// One run of an event handler: `/bin/sh -c COMMAND` in a process group of its own, the event on
/// its standard input, and its end seen through `waitpid`. Foundation's `Process` on Linux learns
/// of an exit through a descriptor the child inherits: a handler that started a daemon looked
/// alive for as long as the daemon lived, and every later handler waited behind it.
struct HandlerProcess {
    let pid: pid_t

    /// Starts the handler, writes `input` to it and closes its standard input (a handler that
    /// does not read it does not hold us up: a closed pipe is fine, SIGPIPE is ignored).
    static func start(
        command: String, environment: [String: String], input: [UInt8]
    ) throws(GroupMeshError) -> HandlerProcess {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw .control("cannot start: \(String(cString: strerror(errno)))") }
        let (readEnd, writeEnd) = (pipeEnds[0], pipeEnds[1])
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, readEnd, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A group of its own: the time limit kills it with everything it started.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        let words: [String] = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, "/bin/sh", &actions, &attributes, argv, envp)
        close(readEnd)
        guard result == 0 else {
            close(writeEnd)
            throw .control("cannot start: \(String(cString: strerror(result)))")
        }
        input.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                // safe: count > 0 here
                let written = write(writeEnd, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { break }
                offset += written
            }
        }
        close(writeEnd)
        return HandlerProcess(pid: child)
    }

    /// Its exit status (128 + N when killed by signal N), once it has exited; waits on a thread
    /// of its own, not the cooperative pool.
    func exitStatus() async -> Int32 {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0, errno == EINTR {}
                let signalled = status & 0x7f
                continuation.resume(returning: signalled == 0 ? (status >> 8) & 0xff : 128 + signalled)
            }
        }
    }
}
