import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// A real coturn (`turnserver`), the STUN and TURN server people run, on a public host of a
/// `NATLab`: UDP only, long-term credentials, a small relay port range, and relaying allowed to
/// the lab's internet (198.51.100.0/24, a documentation range: allowed explicitly, so no
/// default denial of special ranges can get in the way).
package final class LabCoturn: @unchecked Sendable {
    package static let command: String? = ["/usr/bin/turnserver", "/usr/sbin/turnserver", "/usr/local/bin/turnserver"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }
    static let probeCommand: String? = ["/usr/bin/turnutils_stunclient", "/usr/local/bin/turnutils_stunclient"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Why coturn cannot run here (a test's skip reason), or nil.
    package static var unavailableReason: String? {
        if let reason = NATLab.unavailableReason { return reason }
        guard command != nil, probeCommand != nil else {
            return "STUN/TURN laboratory tests need coturn (apt-get install coturn, or make deps as root); skipped"
        }
        return nil
    }

    package static var isAvailable: Bool { unavailableReason == nil }

    package let address: String
    package let port: UInt16
    package let username: String
    package let password: String
    package let realm: String
    private let process: ChildProcess
    private let directory: String

    /// `HOST:PORT`, for `--stun`.
    package var endpoint: String { "\(address):\(port)" }
    /// `turn:USER:PASS@HOST:PORT`, for `--turn`.
    package var turnURL: String { "turn:\(username):\(password)@\(address):\(port)" }
    /// What coturn printed (its log goes to stdout).
    package var log: String { process.standardOutput + process.standardError }

    /// Starts coturn on `lab`'s public host `index` and waits (bounded) until it answers a STUN
    /// Binding request.
    package init(
        lab: NATLab, publicHost index: Int, port: UInt16 = 3478, username: String = "mesh",
        password: String = "lab-secret", realm: String = "lab.example"
    ) async throws {
        guard let command = Self.command, let probe = Self.probeCommand else {
            throw NodeProcessError.exited(status: -1, stderr: Self.unavailableReason ?? "no coturn")
        }
        address = lab.publicAddresses[index]
        self.port = port
        self.username = username
        self.password = password
        self.realm = realm
        directory = NodeProcess.makeTemporaryDirectory("coturn")
        let arguments = [
            "-n", "--listening-ip", address, "--relay-ip", address, "--external-ip", address,
            "--listening-port", "\(port)", "--min-port", "49152", "--max-port", "49251",
            "--user", "\(username):\(password)", "--realm", realm, "--lt-cred-mech", "--fingerprint",
            "--no-tls", "--no-dtls", "--no-tcp-relay", "--no-cli", "--no-rfc5780",
            "--allowed-peer-ip", "\(NATLab.internetPrefix).0-\(NATLab.internetPrefix).255",
            "--log-file", "stdout", "--simple-log", "--pidfile", directory + "/turnserver.pid",
            "--db", directory + "/turndb",
        ]
        process = try ChildProcess(
            executable: NamespaceLab.ipCommand ?? "/usr/sbin/ip",
            arguments: ["netns", "exec", lab.namespace(.publicHost(index)), command] + arguments)
        do {
            try await waitUntil(
                "coturn answers STUN on \(address):\(port)", timeout: .seconds(15), every: .milliseconds(100)
            ) {
                guard self.process.isRunning else {
                    throw NodeProcessError.exited(status: self.process.terminationStatus ?? -1, stderr: self.log)
                }
                let answer = try lab.run(
                    on: .publicHost(index), probe, ["-p", "\(port)", self.address], timeout: .seconds(5))
                return answer.status == 0 && answer.stdout.contains("UDP reflexive addr")
            }
        } catch {
            stop()
            throw NodeProcessError.exited(status: -1, stderr: "coturn did not start: \(error); its log: \(log)")
        }
    }

    /// Stops coturn (SIGTERM, then SIGKILL) and removes its files.
    package func stop() {
        if process.isRunning { process.stop() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }
}
