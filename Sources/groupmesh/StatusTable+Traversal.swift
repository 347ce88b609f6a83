import GroupMesh

extension StatusTable {
    /// `stun …` and `turn …` lines, with `run --stun` / `--turn` (escaped: a server's words are
    /// from outside).
    static func traversalLines(_ traversal: StatusReport.TraversalInfo?) -> [String] {
        guard let traversal else { return [] }
        var lines: [String] = []
        if let stun = traversal.stun {
            let address = stun.address.map { "public address \($0)" + (stun.answeredBy.map { " (from \($0))" } ?? "") }
            lines.append(
                "stun \(stun.servers.joined(separator: ", ")): "
                    + (address.map { "\($0), \(stun.state)" } ?? stun.state))
        }
        if let turn = traversal.turn {
            var line = "turn \(turn.server): \(turn.state)"
            if let reason = turn.reason, turn.state == "failed" { line += " (\(reason))" }
            if let relayed = turn.relayedAddress { line += ", relayed address \(relayed)" }
            if let left = turn.lifetimeLeft { line += ", \(Int(left)) s left" }
            line +=
                "; \(turn.permissions) permissions, \(turn.channels) channels; "
                + "through it \(turn.datagramsSent) sent (\(ByteCount.text(turn.bytesSent))), \(turn.datagramsReceived) received "
                + "(\(ByteCount.text(turn.bytesReceived)))"
            lines.append(line)
        }
        return lines.map(TerminalText.escaped)
    }
}
