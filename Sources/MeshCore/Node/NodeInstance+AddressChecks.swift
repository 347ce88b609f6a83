import MeshCrypto

/// Address checks (QUIC's path validation): a hello's source is anyone's claim (every member
/// holds the hello key, a removed one too), so nothing larger than the hello goes there on its
/// word. But a member whose NAT gave it a new mapping, while it heard nothing, can only be
/// reached there. So a hello of a member from an address nothing vouches for draws one pairwise
/// ping there, no larger than the hello; only the member can open it, and its pong, pairwise too,
/// proves the address: a handover goes there (a member of an earlier epoch), or the answers to
/// its offers do (a member we hold dead, through the path its pong teaches).
struct AddressCheck: Sendable {
    var address: PeerAddress
    /// The earlier epoch the check was sealed in; nil for the current one.
    var session: SessionID?
    var sentAt: MeshInstant
    var answered = false
}

extension NodeInstance {
    /// At most this many addresses of one member are checked within `KeyEpochs.handoverInterval`
    /// (each at most once): a forger's hellos in a member's name from one address do not keep
    /// the member's own new address from being checked.
    static let addressChecksPerMember = 4
    /// A check not answered within this is forgotten.
    static let addressCheckLifetime: Duration = .seconds(2)

    /// A hello of `member` (this boot, which we hold dead) from `source`, which none of its
    /// pairwise datagrams came from: check it. A live member's hellos are left alone: its
    /// pairwise datagrams keep its path.
    mutating func checkHelloSource(of member: NodeID, boot: UInt64, at source: PeerAddress, now: MeshInstant) {
        // A member we reach has a directory address (the gone have none): one lookup per hello
        // before the member itself is copied out of the membership.
        guard directory.addresses[member] == nil, let known = membership.member(member), known.status == .dead,
            known.record.bootID == boot,
            keying.codec.installedBoot(of: member) == boot, !isProvenSource(source, of: member)
        else { return }
        checkAddress(of: member, at: source, inEarlier: nil, now: now)
    }

    /// A pairwise ping to `address`, sealed in the current epoch or the earlier one the member
    /// spoke: each address at most once per handover interval, a few addresses per member.
    mutating func checkAddress(
        of member: NodeID, at address: PeerAddress, inEarlier session: SessionID?, now: MeshInstant
    ) {
        var checks = directory.addressChecks[member, default: []].filter { now < $0.sentAt + Self.addressCheckLifetime }
        let recent = checks.filter { now < $0.sentAt + KeyEpochs.handoverInterval }
        guard !recent.contains(where: { $0.address == address }), recent.count < Self.addressChecksPerMember else {
            directory.addressChecks[member] = checks
            return
        }
        checks.removeAll { $0.address == address }
        checks.append(AddressCheck(address: address, session: session, sentAt: now))
        directory.addressChecks[member] = Array(checks.suffix(2 * Self.addressChecksPerMember))
        let check = Frame.ping(Ping(token: Ping.pathCheckToken))
        if let session {
            sendKeys([check], in: session, to: member, route: .direct(address), pairwise: true)
        } else {
            sendPairwise([check], to: member, address: address)
        }
    }

    /// Whether `frames`, pairwise from `member` at `address` in the earlier epoch `session`,
    /// answer our check of that address; each check is answered once.
    mutating func answersAddressCheck(
        _ frames: [Frame], of member: NodeID, at address: PeerAddress, in session: SessionID
    ) -> Bool {
        let isAnswer: (Frame) -> Bool = {
            if case let .pong(pong) = $0 { pong.token == Ping.pathCheckToken } else { false }
        }
        guard frames.contains(where: isAnswer),
            let index = directory.addressChecks[member]?.firstIndex(where: {
                $0.address == address && $0.session == session && !$0.answered
            })
        else { return false }
        directory.addressChecks[member]?[index].answered = true
        return true
    }
}
