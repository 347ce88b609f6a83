import Foundation
@testable import MeshTestKit
import Testing

/// A test process that is killed (a SIGKILL, a CI timeout) cannot tear its namespace lab down:
/// the next lab removes it, and whatever still runs in it.
@Suite("stale namespace labs", .serialized)
struct LabRegistryTests {
    @Test(
        "a lab whose process is gone is removed by the next one, with what runs in it; a live process's lab stays",
        .enabled(if: NamespaceLab.isAvailable, Comment(rawValue: NamespaceLab.unavailableReason ?? "")))
    func staleLabsAreSwept() async throws {
        let ip = NamespaceLab.ipCommand ?? "/usr/sbin/ip"
        func namespaces() -> [Substring] {
            LabRegistry.run(ip, ["netns", "list"]).split(separator: "\n").compactMap { $0.split(separator: " ").first }
        }
        // An owner that is gone: spawned and reaped.
        let gone = try ChildProcess(executable: "/bin/true", arguments: [])
        _ = gone.waitUntilExit()
        let staleTag = String(UInt32.random(in: 0x1000...0x7FFF), radix: 16)
        let liveTag = String(UInt32.random(in: 0x8000...0xFFFF), radix: 16)
        let stale = "gm\(staleTag)h0", live = "gm\(liveTag)h0"
        for space in [stale, live] { _ = LabRegistry.run(ip, ["netns", "add", space]) }
        defer {
            _ = LabRegistry.run(ip, ["netns", "del", live])
            _ = LabRegistry.run(ip, ["netns", "del", stale])
            LabRegistry.unregister(tag: liveTag)
            LabRegistry.unregister(tag: staleTag)
        }
        #expect(namespaces().contains(Substring(stale)) && namespaces().contains(Substring(live)))
        // Left running in the stale lab, as a node or the link emulator would be; in it before
        // the lab is registered, since a lab another test makes meanwhile sweeps it as ours does.
        let leftover = try ChildProcess(executable: ip, arguments: ["netns", "exec", stale, "sleep", "60"])
        defer { leftover.stop(with: SIGKILL) }
        let inside = {
            LabRegistry.run(ip, ["netns", "pids", stale]).split(separator: "\n").contains(Substring("\(leftover.pid)"))
        }
        for _ in 0..<500 where !inside() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(inside(), "the leftover never entered the namespace")
        LabRegistry.register(tag: staleTag, owner: gone.pid)
        LabRegistry.register(tag: liveTag)

        let lab = try NamespaceLab(hostCount: 1)
        defer { lab.tearDown() }
        #expect(!namespaces().contains(Substring(stale)), "the stale lab is still there")
        #expect(namespaces().contains(Substring(live)), "a live process's lab was removed")
        #expect(!FileManager.default.fileExists(atPath: "\(LabRegistry.directory)/\(staleTag)"))
        for _ in 0..<500 where leftover.isRunning { try await Task.sleep(for: .milliseconds(10)) }
        #expect(!leftover.isRunning, "what ran in the stale lab still runs")
        lab.tearDown()
        #expect(
            !FileManager.default.fileExists(atPath: "\(LabRegistry.directory)/\(lab.tag)"),
            "a lab torn down stays registered")
    }
}
