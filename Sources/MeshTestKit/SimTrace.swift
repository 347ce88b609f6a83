import MeshCore

/// One thing that happened in a simulation, stamped with the simulator's (global) clock.
/// Two runs from the same seed must produce equal traces: that is how determinism is tested,
/// and a trace is what a person reads to understand a failing seed.
package struct SimTraceEvent: Sendable, Equatable, CustomStringConvertible {
    package enum Kind: Sendable, Equatable {
        case started(SimAddress)
        case crashed(SimAddress)
        case sent(from: SimAddress, to: SimAddress, bytes: [UInt8])
        case dropped(from: SimAddress, to: SimAddress, size: Int, reason: SimDropReason)
        case duplicated(from: SimAddress, to: SimAddress)
        case corrupted(from: SimAddress, to: SimAddress, bit: Int)
        case delivered(from: SimAddress, to: SimAddress, bytes: [UInt8])
        case timerFired(SimAddress, id: UInt64)
        case clockJumped(SimAddress, by: Duration)
        case partitioned([[SimAddress]])
        case healed
        case linkChanged(from: SimAddress, to: SimAddress)
        case action(String)
    }

    package var time: MeshInstant
    package var kind: Kind

    package init(time: MeshInstant, kind: Kind) {
        self.time = time
        self.kind = kind
    }

    package var description: String {
        let what: String
        switch kind {
        case let .started(node): what = "\(node) started"
        case let .crashed(node): what = "\(node) crashed"
        case let .sent(from, to, bytes): what = "\(from)→\(to) sent \(bytes.count)B"
        case let .dropped(from, to, size, reason): what = "\(from)→\(to) dropped \(size)B (\(reason))"
        case let .duplicated(from, to): what = "\(from)→\(to) duplicated"
        case let .corrupted(from, to, bit): what = "\(from)→\(to) corrupted bit \(bit)"
        case let .delivered(from, to, bytes): what = "\(from)→\(to) delivered \(bytes.count)B"
        case let .timerFired(node, id): what = "\(node) timer \(id)"
        case let .clockJumped(node, by): what = "\(node) clock jumped \(by.milliseconds)ms"
        case let .partitioned(groups): what = "partition \(groups)"
        case .healed: what = "healed"
        case let .linkChanged(from, to): what = "link \(from)→\(to) changed"
        case let .action(label): what = "action \(label)"
        }
        return "[\(time)] \(what)"
    }
}

/// What the simulator does with trace events. Tracing costs time and memory, so it is off
/// unless asked for; `digest` keeps only a running hash, enough to compare huge runs.
package struct SimTraceOptions: OptionSet, Sendable {
    package let rawValue: Int
    package init(rawValue: Int) { self.rawValue = rawValue }

    /// Keep every event in `Simulator.trace`.
    package static let record = SimTraceOptions(rawValue: 1)
    /// Fold every event into `Simulator.traceDigest`.
    package static let digest = SimTraceOptions(rawValue: 2)
}

/// FNV-1a over a fixed encoding of trace events. Why not `Hasher`: it is randomly seeded per
/// process, and the digest must be equal across processes and machines.
struct TraceDigest {
    private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    mutating func add(_ event: SimTraceEvent) {
        add(event.time.nanoseconds)
        switch event.kind {
        case let .started(node): add(1); add(node)
        case let .crashed(node): add(2); add(node)
        case let .sent(from, to, bytes): add(3); add(from); add(to); add(bytes)
        case let .dropped(from, to, size, reason):
            add(4); add(from); add(to); add(UInt64(size))
            add(UInt64(SimDropReason.allCases.firstIndex(of: reason)!))
        case let .duplicated(from, to): add(5); add(from); add(to)
        case let .corrupted(from, to, bit): add(6); add(from); add(to); add(UInt64(bit))
        case let .delivered(from, to, bytes): add(7); add(from); add(to); add(bytes)
        case let .timerFired(node, id): add(8); add(node); add(id)
        case let .clockJumped(node, by): add(9); add(node); add(UInt64(bitPattern: by.nanosecondsClamped))
        case let .partitioned(groups):
            add(10); add(UInt64(groups.count))
            for group in groups { add(UInt64(group.count)); group.forEach { add($0) } }
        case .healed: add(11)
        case let .linkChanged(from, to): add(12); add(from); add(to)
        case let .action(label): add(13); add(Array(label.utf8))
        }
    }

    private mutating func add(_ node: SimAddress) {
        add(UInt64(node.index))
        // Only ports other than a node's own (NAT mappings): digests of runs without NATs stay.
        if node.port != SimAddress.simulatedPort { add(UInt64(node.port) << 32) }
    }

    private mutating func add(_ word: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { addByte(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
    }

    private mutating func add(_ bytes: [UInt8]) {
        add(UInt64(bytes.count))
        for byte in bytes { addByte(byte) }
    }

    private mutating func addByte(_ byte: UInt8) {
        value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
    }
}
