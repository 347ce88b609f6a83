import MeshCore
import MeshCrypto
import NIOCore
import Testing

/// What an ended data dir started again sends (`EndedSessionNotice`): the signed end to every
/// remembered address, four rounds in two seconds, and answers within the amplification rule.
@Suite("Ended session notice")
struct EndedSessionNoticeTests {
    static let secret = try! SessionSecret(bytes: [UInt8](repeating: 3, count: 32))  // safe: 32 bytes
    static let ender = try! NodeIdentity(seed: [UInt8](repeating: 1, count: 32))  // safe: 32 bytes
    static let member = try! NodeIdentity(seed: [UInt8](repeating: 2, count: 32))  // safe: 32 bytes
    static let memberAddress = PeerAddress(host: .ipv4(0x0a00_0002), port: 7946)
    static let elsewhere = PeerAddress(host: .ipv4(0x0a00_0009), port: 4000)
    static let lost = try! NodeIdentity(seed: [UInt8](repeating: 4, count: 32))  // safe: 32 bytes
    static let lostAddress = PeerAddress(host: .ipv4(0x0a00_0004), port: 7946)

    static func notice(now: MeshInstant = .zero) -> EndedSessionNotice? {
        let statement = SessionEnd(signingKey: ender.publicKey, session: secret.sessionID)
            .signed(by: Ed25519Authority(identity: ender))
        let remembered = RememberedMembers(
            members: [
                .init(id: member.nodeID.hex, name: "m", addresses: [memberAddress.description]),
                .init(id: ender.nodeID.hex, name: "me", addresses: ["10.0.0.1:7946"]),
            ],
            former: [
                .init(id: lost.nodeID.hex, name: "lost", addresses: [lostAddress.description]),
                .init(id: NodeID(high: 7, low: 7).hex, name: "left", addresses: []),
            ])
        return EndedSessionNotice(
            statement: statement, epochs: KeyEpochs(origin: secret), localID: ender.nodeID,
            bootID: 5, remembered: remembered, seed: 9, now: now)
    }

    /// A datagram of `session` from the member, `size` bytes long (its header, then zeros).
    static func datagram(
        session: SessionID = secret.sessionID, sender: NodeID = member.nodeID,
        size: Int
    ) -> ByteBuffer {
        var buffer = ByteBuffer()
        DatagramHeader(keyKind: .pairwise, sessionID: session, sender: sender, bootID: 1, packetNumber: 1)
            .encode(into: &buffer)
        buffer.writeRepeatingByte(0, count: max(0, size - buffer.readableBytes))
        return buffer
    }

    @Test(
        "four rounds to every remembered address but our own, and to where lost members were, in two seconds; each opens to the signed end"
    )
    func roundsToRememberedMembers() throws {
        var notice = try #require(Self.notice())
        var receiver = DatagramCodec(session: Self.secret, localID: Self.member.nodeID, localBootID: 1)
        var sent: [PeerAddress] = []
        var now = MeshInstant.zero
        while !notice.isDone(now: now) {
            for (datagram, address) in notice.tick(now: now) {
                sent.append(address)
                let opened = try receiver.open(datagram).get()
                #expect(opened.frames == [.sessionEnd(notice.statement)])
            }
            now = now + .milliseconds(100)
        }
        #expect(sent.count == 2 * EndedSessionNotice.rounds)
        #expect(Set(sent) == [Self.memberAddress, Self.lostAddress], "not to a member that left, nor to our own")
        #expect(now <= .zero + EndedSessionNotice.duration + .milliseconds(100))
        #expect(notice.tick(now: now).isEmpty)
    }

    @Test(
        "answers: a remembered or lost member of the ended epoch, once a second, within 3× unless from its remembered address"
    )
    func answersAreBounded() throws {
        var notice = try #require(Self.notice())
        let now = MeshInstant.zero + .milliseconds(10)
        // 40 bytes from elsewhere: the answer would be over three times that.
        #expect(notice.answer(Self.datagram(size: 40), from: Self.elsewhere, now: now) == nil)
        // Another session, and an id that is no remembered member's: nothing, whatever the size.
        #expect(
            notice.answer(
                Self.datagram(session: SessionID(value: 1), size: 400), from: Self.memberAddress,
                now: now) == nil)
        #expect(
            notice.answer(
                Self.datagram(sender: NodeID(high: 1, low: 2), size: 400), from: Self.memberAddress,
                now: now) == nil)
        // From the address members.json gives: answered, whatever the size; then not for a second.
        let first = notice.answer(Self.datagram(size: 40), from: Self.memberAddress, now: now)
        let answer = try #require(first)
        #expect(answer.readableBytes > 3 * 40)
        #expect(notice.answer(Self.datagram(size: 400), from: Self.elsewhere, now: now + .milliseconds(500)) == nil)
        // Large enough, from elsewhere, a second later: answered within three times its size.
        let second = notice.answer(Self.datagram(size: 100), from: Self.elsewhere, now: now + .seconds(1))
        let later = try #require(second)
        #expect(later.readableBytes <= 3 * 100)
        #expect(notice.answers == 2)
        // A lost member, from where it was: answered too (a member that left, not).
        #expect(
            notice.answer(Self.datagram(sender: Self.lost.nodeID, size: 40), from: Self.lostAddress, now: now) != nil)
        #expect(
            notice.answer(Self.datagram(sender: NodeID(high: 7, low: 7), size: 400), from: Self.elsewhere, now: now)
                == nil)
        // Nothing once its two seconds are over.
        #expect(notice.answer(Self.datagram(size: 400), from: Self.memberAddress, now: .zero + .seconds(3)) == nil)
    }
}
