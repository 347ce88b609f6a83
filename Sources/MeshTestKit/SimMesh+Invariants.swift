import MeshCore
import MeshCrypto

/// What must hold at the end of every whole-node run. Each check returns its violations, one
/// readable line each (empty: it holds), so a test can assert them one by one and a failing
/// seed says what went wrong.
extension SimMesh {
    /// Every reliable application message was delivered to each of its targets exactly once, in
    /// the sender's order, or its sender was told it failed for that target; every send finished.
    /// (A message reported failed may still have arrived: its acknowledgement can be lost.)
    public func deliveryViolations() -> [String] {
        var violations: [String] = []
        for sender in all {
            for message in sender.sentMessages where sender.completions[message.sendID] == nil {
                violations.append("\(sender.address): send \(message.sendID) never finished")
            }
            for receiver in running where receiver.address != sender.address {
                let sent = sender.sentMessages.filter { $0.targets.contains(receiver.id) }
                var position: [[UInt8]: Int] = [:]
                for (index, message) in sent.enumerated() { position[message.body] = index }
                var last = -1
                var delivered: Set<Int> = []
                for body in receiver.reliableReceived[sender.id] ?? [] {
                    guard let index = position[body] else {
                        violations.append("\(sender.address)→\(receiver.address): delivered a message never sent to it")
                        continue
                    }
                    if index <= last {
                        violations.append("\(sender.address)→\(receiver.address): message \(index) delivered "
                                          + (delivered.contains(index) ? "twice" : "after message \(last)"))
                    }
                    last = max(last, index)
                    delivered.insert(index)
                }
                for (index, message) in sent.enumerated() where !delivered.contains(index) {
                    guard let failures = sender.completions[message.sendID] else { continue }
                    if failures[receiver.id] == nil {
                        violations.append("\(sender.address)→\(receiver.address): message \(index) (send \(message.sendID)) "
                                          + "reported delivered but never delivered")
                    }
                }
            }
        }
        return violations
    }

    /// Every live member holds the same journal: every operation any member made, no other.
    public func journalViolations() -> [String] {
        let made = Set(all.flatMap(\.created).map(\.id))
        var violations: [String] = []
        for node in running {
            let held = Set(node.journal.state.operationIDs)
            if held != made {
                violations.append("\(node.address): \(held.count) operations, \(made.subtracting(held).count) missing, "
                                  + "\(held.subtracting(made).count) never made (of \(made.count) made)")
            }
        }
        if let first = running.first {
            let present = first.journal.state.attachments
            for node in running.dropFirst() where node.journal.state.attachments != present {
                violations.append("\(node.address): attachments differ from \(first.address)'s")
            }
        }
        return violations
    }

    /// Every chunk any live member stores matches its SHA-256.
    public func chunkViolations() -> [String] {
        running.flatMap { node in
            node.store.corruptedChunks.map { "\(node.address): stored chunk \($0.hex.prefix(16)) does not match its hash" }
        }
    }

    /// Every chunk a live member stores belongs to a present attachment: what was removed was
    /// deleted, and a fetch of it did not bring it back.
    public func leakViolations() -> [String] {
        running.compactMap { node in
            let present = node.journal.state.attachments.compactMap { node.store.manifest($0.id) }
            let used = Set(present.flatMap(\.chunks) + present.map(\.id))
            let extra = node.store.chunks.keys.filter { !used.contains($0) }.count
            return extra == 0 ? nil : "\(node.address): \(extra) stored chunks belong to no present attachment"
        }
    }

    /// Every live member holds every present attachment whole (the swarm finished).
    public func replicationViolations() -> [String] {
        var violations: [String] = []
        for node in running {
            for entry in node.journal.state.attachments {
                guard let manifest = node.store.manifest(entry.id) else {
                    violations.append("\(node.address): no manifest of \(entry.id.hex.prefix(16))")
                    continue
                }
                let missing = node.store.missing(manifest).count
                if missing > 0 || !node.complete.contains(entry.id) {
                    violations.append("\(node.address): \(missing) of \(manifest.chunks.count) chunks of "
                                      + "\(entry.id.hex.prefix(16)) missing")
                }
            }
        }
        return violations
    }

    /// No live member is dead (or unknown, or gone) in any live member's view.
    public func viewViolations() -> [String] {
        var violations: [String] = []
        for observer in running {
            for member in running where member.address != observer.address {
                let status = observer.membership.member(member.id)?.status
                if status == nil || status?.isGone == true {
                    violations.append("\(observer.address) sees \(member.address) as \(status.map(\.rawValue) ?? "unknown")")
                }
            }
        }
        return violations
    }

    /// What nodes noticed themselves (a send completed twice, an undecodable message, a
    /// datagram over the configured size).
    public func nodeViolations() -> [String] {
        all.flatMap { node in
            node.violations.map { "\(node.address): \($0)" }
                + (node.largestDatagram > configuration.wire.maxDatagramSize
                    ? ["\(node.address): sent a \(node.largestDatagram)-byte datagram"] : [])
        }
    }

    /// Every invariant holds.
    public var settled: Bool {
        viewViolations().isEmpty && journalViolations().isEmpty && replicationViolations().isEmpty
            && deliveryViolations().isEmpty && chunkViolations().isEmpty
    }
}
