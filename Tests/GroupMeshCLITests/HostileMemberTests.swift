import Foundation
import MeshCore
import MeshCrypto
import MeshStore
import MeshTestKit
import Testing

/// A member that holds the session secret and misbehaves (`MeshTestKit.HostileMember`), against
/// real `groupmesh` processes: the mesh keeps working for everyone else (Docs/SECURITY.md).
@Suite("a hostile member against real processes", .serialized)
struct HostileMemberTests {
    /// Node `name` of `mesh`, with its id and its UDP address (what the hostile member aims at).
    static func member(
        _ name: String, of mesh: ProcessMesh
    ) async throws
        -> (node: NodeProcess, id: NodeID, address: PeerAddress)
    {
        let node = try mesh[name]
        let address = try PeerAddress(parsing: try await node.waitForLine(prefix: "listening:"))
        let text = try await node.status().`self`.id
        guard let id = NodeID(hex: text) else { throw NodeProcessError.timeout("a node id, not '\(text)'") }
        return (node, id, address)
    }

    /// A random file of `size` bytes and the manifest its attachment will have.
    static func attachment(_ size: Int, seed: UInt64) throws -> (path: String, bytes: Data, manifest: Manifest) {
        let path = NodeProcess.makeTemporaryDirectory("hostile-file") + "/file.bin"
        var generator = SplitMix64(seed: seed)
        try writeRandomFile(path, size: size, using: &generator)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let chunkSize = Manifest.defaultChunkSize
        let chunks = stride(from: 0, to: bytes.count, by: chunkSize).map {
            SHA256Digest.hashing(Array(bytes[$0..<min(bytes.count, $0 + chunkSize)]))
        }
        return (path, bytes, Manifest(size: UInt64(bytes.count), chunkSize: chunkSize, chunks: chunks))
    }

    static func counter(_ status: NodeStatus, _ name: String) -> Double { status.counters[name]?.number ?? 0 }
    static func dropped(_ status: NodeStatus, _ reason: String) -> Double {
        status.counters["dropped"]?[reason]?.number ?? 0
    }

    /// Every chunk of the node's chunk store holds the bytes its name promises: how many, or -1.
    static func storeIsClean(_ node: NodeProcess) throws -> Int {
        var checked = 0
        for (digest, chunk) in ChunkStore.survey(node.dataDirectory + "/chunks") {
            // Removed while we looked: gone, not wrong.
            guard let bytes = chunk.bytes() else { continue }
            guard SHA256Digest.hashing(bytes) == digest else { return -1 }
            checked += 1
        }
        return checked
    }

    /// Waits for the mesh and for `holders` members holding the attachment in `node`'s view (so
    /// the scheduler asks every one of them), then `get`s it; checks the bytes; returns the seconds.
    static func lateFetch(
        _ node: NodeProcess, mesh: [NodeProcess], holders: Int, id: String, expected: Data
    )
        async throws -> Double
    {
        try await mesh.waitForMesh(alive: mesh.count + 1, timeout: .seconds(20))
        try await waitUntil("\(holders) holders", timeout: .seconds(15)) {
            try await JournalCommandTests.listed(node).first?.holders == holders
        }
        let started = ContinuousClock.now
        let output = node.dataDirectory + "/out.bin"
        let get = try await NodeProcess.runCommand(
            ["get", "--data-dir", node.dataDirectory, id, "--output", output],
            timeout: .seconds(30))
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == expected)
        return seconds
    }

    @Test(
        "garbage chunks are rejected and never stored; a liar that claims chunks is avoided; late joiners get every byte"
    )
    func garbageAndLies() async throws {
        try await withProcessMesh(names: ["up"], lazy: ["late", "second"]) { mesh in
            let uploader = try await Self.member("up", of: mesh)
            let file = try Self.attachment(4 << 20, seed: 0xbad)
            defer { try? FileManager.default.removeItem(atPath: (file.path as NSString).deletingLastPathComponent) }
            let attach = try await NodeProcess.runCommand([
                "attach", "--data-dir", uploader.node.dataDirectory,
                file.path,
            ])
            #expect(attach.status == 0, "\(attach.stderr)")
            let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try await JournalCommandTests.listed(uploader.node).map(\.content) == [file.manifest.id.hex])

            // The hostile member claims the attachment whole and answers every want with garbage.
            let hostile = try HostileMember(invite: try InviteToken(parsing: mesh.invite))
            defer { hostile.stop() }
            hostile.claimHolding([file.manifest.id: file.manifest])
            let late = try mesh.join("late")
            let garbageSeconds = try await Self.lateFetch(
                late, mesh: mesh.nodes, holders: 2, id: id,
                expected: file.bytes)
            #expect(hostile.stats.garbagePiecesSent > 0, "the hostile member was never asked")
            let lateStatus = try await late.status()
            #expect(Self.counter(lateStatus, "chunksRejected") >= 1)
            // Only the 16 chunks and the manifest are on disk, each hashing to its name.
            #expect(try Self.storeIsClean(late) == file.manifest.chunks.count + 1)

            // Now it lies and stays silent: a second late joiner still completes, in bounded time.
            hostile.chunkAnswer = .silent
            let wantsBefore = hostile.stats.wantsReceived
            let second = try mesh.join("second")
            let silentSeconds = try await Self.lateFetch(
                second, mesh: mesh.nodes, holders: 3, id: id,
                expected: file.bytes)
            // Bounded by the `get`'s own limit (`lateFetch`, 30 s); how long it took is a figure,
            // printed below, not an assertion: beside four busy loops it once took 20 s.
            #expect(try Self.storeIsClean(second) == file.manifest.chunks.count + 1)
            // Nothing bad was forwarded: the honest holders served only verified chunks.
            for node in [uploader.node, second] {
                #expect(Self.counter(try await node.status(), "chunksRejected") == 0)
            }
            print(
                "hostile garbage fetch \(garbageSeconds) s, silent-liar fetch \(silentSeconds) s, "
                    + "wants to the liar while silent: \(hostile.stats.wantsReceived - wantsBefore)")
        }
    }

    @Test(
        "floods of wants and joins cost bounded CPU and memory; malformed frames in valid seals are dropped and counted"
    )
    func floodsAndMalformedFrames() async throws {
        try await withProcessMesh(names: ["victim", "other"], waitForMembership: false) { mesh in
            let victim = try await Self.member("victim", of: mesh), other = try mesh["other"]
            let file = try Self.attachment(1 << 20, seed: 0xf100d)
            defer { try? FileManager.default.removeItem(atPath: (file.path as NSString).deletingLastPathComponent) }
            let attach = try await NodeProcess.runCommand([
                "attach", "--data-dir", victim.node.dataDirectory,
                file.path,
            ])
            #expect(attach.status == 0, "\(attach.stderr)")

            let hostile = try HostileMember(invite: try InviteToken(parsing: mesh.invite))
            defer { hostile.stop() }
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(20))
            try await waitUntil("keys with the victim", timeout: .seconds(10)) { hostile.peers.contains(victim.id) }

            ProcessStats.resetPeak(victim.node.pid)
            let memoryBefore = ProcessStats.memory(victim.node.pid).resident
            let cpuBefore = ProcessStats.cpuSeconds(victim.node.pid)
            let real = file.manifest.chunks + [file.manifest.id]
            let unknown = (0..<64).map { SHA256Digest.hashing([UInt8]($0.description.utf8)) }
            // Real chunks at the normal piece size (bounded by the per-member limit), pieces of one
            // byte (a datagram per byte, if served), chunks it does not hold, and joins.
            hostile.floodWants(to: victim.id, digests: real, pieceSize: 1000, count: 2000)
            hostile.floodWants(to: victim.id, digests: real, pieceSize: 1, count: 500)
            hostile.floodWants(to: victim.id, digests: unknown, pieceSize: 1000, count: 1000)
            hostile.floodJoins(to: victim.address, count: 500)
            // The mesh keeps answering during the flood's aftermath.
            let send = try await NodeProcess.runCommand([
                "send", "--data-dir", other.dataDirectory, "--to", "victim",
                "ok",
            ])
            #expect(send.status == 0, "\(send.stderr)")
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(10))
            let cpu = ProcessStats.cpuSeconds(victim.node.pid) - cpuBefore
            let memory = ProcessStats.memory(victim.node.pid)
            #expect(cpu < 4, "the flood cost the victim \(cpu) s of CPU")
            #expect(memory.peak - memoryBefore < 64, "the flood grew the victim by \(memory.peak - memoryBefore) MiB")
            let afterFlood = try await victim.node.status()
            // Kept chunks go to one member at most twice a second; past that each want waits for a
            // read, one at a time per chunk, at most 8 for the member: far fewer than 2,000 chunks.
            #expect(
                Self.counter(afterFlood, "chunkPayloadBytesSent") < Double(2000 * 256 * 1024) / 8,
                "the victim sent \(Self.counter(afterFlood, "chunkPayloadBytesSent")) bytes of pieces")
            print(
                "flood: victim CPU \(cpu) s, peak +\(memory.peak - memoryBefore) MiB, "
                    + "\(Self.counter(afterFlood, "chunkPayloadBytesSent")) piece bytes, "
                    + "\(Self.counter(afterFlood, "wantsRefused")) refused")

            // Malformed frames inside datagrams that authenticate: each is dropped and counted.
            let malformed: [[UInt8]] = [
                [],  // no frame at all
                [0x7f, 0x00, 0x01, 0x00],  // unknown frame type
                [0x01, 0x00, 0x40, 1, 2, 3],  // length past the end
                [0x01, 0x00, 0x09] + [UInt8](repeating: 0, count: 9),  // ping body too long
                [0x31, 0x00, 0x2a] + [UInt8](repeating: 0xff, count: 42),  // piece of a 4 GiB chunk
                [0x21, 0x00, 0x0e] + [UInt8](repeating: 0, count: 12) + [200, 0],  // ack with 200 ranges
                [0x14, 0xff, 0xff] + [UInt8](repeating: 0x41, count: 1000),  // oversized record, cut short
            ]
            let before = Self.dropped(afterFlood, "malformed")
            let rounds = 50
            for _ in 0..<rounds { for plaintext in malformed { hostile.sendSealedPlaintext(plaintext, to: victim.id) } }
            let counted = try await victim.node.waitForStatus(timeout: .seconds(10), "malformed counted") {
                Self.dropped($0, "malformed") - before >= Double(rounds * malformed.count)
            }
            #expect(Self.dropped(counted, "malformed") - before == Double(rounds * malformed.count))
            // An oversized datagram (9.9 KB of valid frames, over a jumbo frame's 8,972): dropped on
            // its size, before decryption.
            let pings = (0..<900).flatMap { _ in [0x01, 0x00, 0x08] + [UInt8](repeating: 7, count: 8) }
            hostile.sendSealedPlaintext(
                [UInt8](repeating: 0, count: 0) + pings,
                to: victim.id)
            _ = try await victim.node.waitForStatus(timeout: .seconds(10), "oversized counted") {
                Self.dropped($0, "oversized") >= 1
            }
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(10))
            let again = try await NodeProcess.runCommand([
                "send", "--data-dir", other.dataDirectory, "--to", "victim",
                "ok",
            ])
            #expect(again.status == 0, "\(again.stderr)")
        }
    }

    @Test("false accusations are refuted; records and datagrams in another member's name fail")
    func accusationsAndImpersonation() async throws {
        try await withProcessMesh(names: ["first", "second"], waitForMembership: false) { mesh in
            let first = try await Self.member("first", of: mesh), second = try await Self.member("second", of: mesh)
            let hostile = try HostileMember(invite: try InviteToken(parsing: mesh.invite))
            defer { hostile.stop() }
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(20))
            try await waitUntil("the hostile member knows both", timeout: .seconds(10)) {
                hostile.member(first.id)?.status == .alive && hostile.member(second.id)?.status == .alive
                    && hostile.peers.count == 2
            }
            let addresses = [first.address, second.address]
            guard let victim = hostile.member(first.id)?.record else { throw NodeProcessError.timeout("no record") }
            let authBefore = Self.dropped(try await second.node.status(), "auth")

            // Suspicion at the current incarnation, again and again, to both: refuted, never dead.
            for _ in 0..<20 {
                let incarnation = hostile.member(first.id)?.incarnation ?? victim.incarnation
                hostile.accuse(first.id, incarnation: incarnation, dead: false, to: addresses)
                // Lies no incarnation can outbid, about both, to both.
                hostile.accuse(first.id, incarnation: .max, dead: true, to: addresses)
                hostile.accuse(second.id, incarnation: .max, dead: false, to: addresses)
                // Our record with another member's key and our address; datagrams in its name.
                hostile.forgeRecord(of: victim, to: [second.address])
                hostile.sendPairwise(
                    [.ping(Ping(token: 1))], claimingSender: first.id, bootID: victim.bootID,
                    to: second.id)
                // Its hello packet numbers, far ahead: must not silence its real hellos.
                hostile.sendHello(
                    [.ping(Ping(token: 2))], claimingSender: first.id, bootID: victim.bootID,
                    packetNumber: 1 << 50, to: second.address)
                for node in [first.node, second.node] {
                    let view = try await node.status()
                    #expect(
                        view.state(of: first.id.hex) != "dead" && view.state(of: second.id.hex) != "dead",
                        "\(view.members.map { "\($0.name)=\($0.state)" })")
                }
            }
            for node in [first.node, second.node] { #expect(node.process.isRunning) }
            // The last suspicion is refuted, and then the view stays whole for longer than a suspicion lasts.
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(10))
            let settle = ContinuousClock.now + .seconds(3)
            while ContinuousClock.now < settle {
                for node in [first.node, second.node] {
                    let view = try await node.status()
                    #expect(
                        view.members.filter { $0.state == "alive" }.count == 3,
                        "\(view.members.map { "\($0.name)=\($0.state)" })")
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            let view = try await second.node.status()
            let seen = view.members.first { $0.id == first.id.hex }
            #expect(
                seen?.address == first.address.description,
                "the forged record moved the member to \(seen?.address ?? "?")")
            #expect((seen?.incarnation ?? 0) > victim.incarnation, "the suspicion was not refuted")
            #expect((seen?.incarnation ?? .max) < victim.incarnation + 100)
            #expect(Self.dropped(view, "auth") - authBefore >= 20, "pairwise datagrams in another's name opened")
            let send = try await NodeProcess.runCommand([
                "send", "--data-dir", first.node.dataDirectory,
                "--to", "second", "ok",
            ])
            #expect(send.status == 0, "\(send.stderr)")
        }
    }

    @Test("members a member invents are bounded; the inventor can still be removed")
    func inventedMembersAreBounded() async throws {
        try await withProcessMesh(names: ["first", "second"], waitForMembership: false) { mesh in
            let first = try await Self.member("first", of: mesh), second = try await Self.member("second", of: mesh)
            let hostile = try HostileMember(invite: try InviteToken(parsing: mesh.invite))
            defer { hostile.stop() }
            try await mesh.waitUntilAllSee(alive: 3, timeout: .seconds(20))
            // Twice the members a session holds, announced again at a higher incarnation (as
            // an inventor keeps them from dying).
            let cap = MembershipSettings.lan.maxLiveMembers
            var refused = [0.0, 0.0]
            for incarnation in 1...3 {
                hostile.inventMembers(2 * cap, incarnation: UInt64(incarnation), to: [first.address, second.address])
                // Each round's records past the cap are refused again, at both.
                for (index, node) in [first.node, second.node].enumerated() {
                    try await waitUntil("round \(incarnation) refused past the cap", timeout: .seconds(10)) {
                        Self.counter(try await node.status(), "membersRefusedFull") > refused[index]
                    }
                    let view = try await node.status()
                    refused[index] = Self.counter(view, "membersRefusedFull")
                    let live = view.members.filter { $0.state == "alive" || $0.state == "suspect" }.count
                    #expect(live <= cap, "\(live) live members")
                }
            }
            // The inventor is removed, whatever it made up (before, more than the roster holds failed it).
            let before = try await first.node.status().`self`.session
            let removal = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", first.node.dataDirectory, "--keep-introduced", hostile.nodeID.hex,
            ])
            #expect(removal.status == 0, "\(removal.stderr)")
            let after = try await first.node.status().`self`.session
            #expect(after != before)
            try await waitUntil("second is in the new epoch", timeout: .seconds(15)) {
                try await second.node.status().`self`.session == after
            }
        }
    }
}
