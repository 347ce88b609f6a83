/// Polls `condition` every `interval` until it holds, for at most `timeout` (every wait in the
/// tests and benchmarks is bounded). A condition that throws counts as "not yet".
package func waitUntil(
    _ what: String, timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while !((try? await condition()) ?? false) {
        guard ContinuousClock.now < deadline else { throw NodeProcessError.timeout("\(what) within \(timeout)") }
        try await Task.sleep(for: interval)
    }
}
