import MeshCore
import MeshCrypto

/// What must hold at the end of every whole-node run. Each check returns its violations, one
/// readable line each (empty: it holds), so a test can assert them one by one and a failing
/// seed says what went wrong.
extension SimMesh {
    /// Every reliable application message was delivered to each of its targets exactly once, in
    /// the sender's order, or its sender was told it failed for that target; every send finished.
    /// (A message reported failed may still have arrived: its acknowledgement can be lost.)
    package func deliveryViolations() -> [String] {
        var violations: [String] = []
        for sender in all {
            for message in sender.sentMessages where sender.completions[message.request] == nil {
                violations.append("\(sender.address): send \(message.request) never finished")
            }
            for receiver in live where receiver.address != sender.address {
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
                        violations.append(
                            "\(sender.address)→\(receiver.address): message \(index) delivered "
                                + (delivered.contains(index) ? "twice" : "after message \(last)"))
                    }
                    last = max(last, index)
                    delivered.insert(index)
                }
                for (index, message) in sent.enumerated() where !delivered.contains(index) {
                    guard let failures = sender.completions[message.request] else { continue }
                    if failures[receiver.id] == nil {
                        violations.append(
                            "\(sender.address)→\(receiver.address): message \(index) (send \(message.request)) "
                                + "reported delivered but never delivered")
                    }
                }
            }
        }
        return violations
    }

    /// Every live member holds the same journal: the same operations, among them every one a
    /// live member made.
    package func journalViolations() -> [String] {
        let members = live
        let made = Set(members.flatMap(\.created))
        var violations: [String] = []
        guard let first = members.first else { return [] }
        let reference = Set(first.journal.state.operationIDs)
        for node in members {
            let held = Set(node.journal.state.operationIDs)
            if !made.isSubset(of: held) {
                violations.append(
                    "\(node.address): \(made.subtracting(held).count) of the \(made.count) operations "
                        + "live members made are missing")
            }
            if held != reference {
                violations.append("\(node.address): \(held.count) operations, \(first.address) \(reference.count)")
            }
        }
        let present = first.journal.state.attachments
        for node in members.dropFirst() where node.journal.state.attachments != present {
            violations.append("\(node.address): attachments differ from \(first.address)'s")
        }
        return violations
    }

    /// Every chunk any live member stores matches its SHA-256.
    package func chunkViolations() -> [String] {
        live.flatMap { node in
            node.store.corruptedChunks.map {
                "\(node.address): stored chunk \($0.hex.prefix(16)) does not match its hash"
            }
        }
    }

    /// Every chunk a live member stores belongs to a present attachment: what was removed was
    /// deleted, and a fetch of it did not bring it back.
    package func leakViolations() -> [String] {
        live.compactMap { node in
            let present = node.journal.state.presentContents.compactMap { node.store.manifest($0) }
            let used = Set(present.flatMap(\.chunks) + present.map(\.id))
            let extra = node.store.chunks.keys.filter { !used.contains($0) }.count
            return extra == 0 ? nil : "\(node.address): \(extra) stored chunks belong to no present attachment"
        }
    }

    /// Every live member holds every present attachment whole (the swarm finished).
    package func replicationViolations() -> [String] {
        var violations: [String] = []
        for node in live {
            for entry in node.journal.state.attachments {
                guard let manifest = node.store.manifest(entry.content) else {
                    violations.append("\(node.address): no manifest of \(entry.id.hex.prefix(16))")
                    continue
                }
                let missing = node.store.missing(manifest).count
                if missing > 0 || !node.complete.contains(entry.content) {
                    violations.append(
                        "\(node.address): \(missing) of \(manifest.chunks.count) chunks of "
                            + "\(entry.id.hex.prefix(16)) missing")
                }
            }
        }
        return violations
    }

    /// No live member is dead (or unknown, or gone) in any live member's view.
    package func viewViolations() -> [String] {
        var violations: [String] = []
        let members = live
        for observer in members {
            for member in members where member.address != observer.address {
                let status = observer.membership.member(member.id)?.status
                if status == nil || status?.isGone == true {
                    violations.append(
                        "\(observer.address) sees \(member.address) as \(status.map(\.rawValue) ?? "unknown")")
                }
            }
        }
        return violations
    }

    /// What nodes noticed themselves (a command completed twice, a timer that spins, a message
    /// of a type nobody sent), datagrams over the largest size accepted (pieces and probes grow
    /// to what a path proved), and malformed messages.
    package func nodeViolations() -> [String] {
        let limit = configuration.settings.wire.maxReceivedDatagramSize
        return all.flatMap { node in
            node.violations.map { "\(node.address): \($0)" }
                + (node.largestDatagram > limit
                    ? ["\(node.address): sent a \(node.largestDatagram)-byte datagram"] : [])
                + (node.core.counters.messagesMalformed > 0
                    ? ["\(node.address): \(node.core.counters.messagesMalformed) malformed messages"] : [])
        }
    }

    /// Every live member is in the same key epoch, and sees every removed member as gone.
    package func epochViolations() -> [String] {
        let members = live
        guard let first = members.first else { return [] }
        var violations: [String] = []
        for node in members where node.sessionID != first.sessionID {
            violations.append("\(node.address) is in epoch \(node.sessionID), \(first.address) in \(first.sessionID)")
        }
        for node in members {
            for id in removed.sorted() where node.membership.member(id).map({ !$0.status.isGone }) == true {
                violations.append(
                    "\(node.address) still sees removed \(id) as \(node.membership.member(id)?.status.rawValue ?? "?")")
            }
        }
        return violations
    }

    /// Every invariant holds.
    package var settled: Bool {
        viewViolations().isEmpty && journalViolations().isEmpty && replicationViolations().isEmpty
            && deliveryViolations().isEmpty && chunkViolations().isEmpty && epochViolations().isEmpty
    }
}
