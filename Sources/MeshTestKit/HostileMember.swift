import Foundation
import MeshCore
import MeshCrypto
import NIOCore

/// A member that holds the session secret and misbehaves, for end-to-end tests against real
/// `groupmesh` processes (Tests/GroupMeshCLITests/HostileMemberTests.swift).
///
/// It joins from an invite as a node does: its own Ed25519 identity, a signed alive record with
/// an ephemeral X25519 key, pairwise keys with every member it meets. Membership runs honestly
/// (a real `MembershipInstance`, so it stays alive in everyone's view) and so does the reliable
/// messenger (`DeliveryInstance`, for journal messages). Everything else is a lie on request:
/// chunks of wrong content, holdings it does not have, floods, malformed frames in valid seals,
/// false accusations, and datagrams or records in another member's name.
///
/// One plain UDP socket on loopback, one thread; every piece of state is behind one lock.
package final class HostileMember: @unchecked Sendable {
    /// How it answers a `chunkWant` (and a manifest request).
    package enum ChunkAnswer: Sendable {
        /// Pieces of the right length and the wrong content (and a wrong manifest).
        case garbage
        /// Nothing at all.
        case silent
        /// `chunkAbsent` not held (and `noChunk`).
        case absent
    }

    package struct Stats: Sendable {
        package var datagramsReceived = 0
        package var datagramsSent = 0
        package var wantsReceived = 0
        package var garbagePiecesSent = 0
        package var manifestRequests = 0
    }

    package let identity = NodeIdentity.generate()
    package var nodeID: NodeID { identity.nodeID }
    package let address: PeerAddress
    package let bootID = UInt64.random(in: 1...UInt64.max)

    private let session: SessionSecret
    private let ephemeral = EphemeralKeyPair.generate()
    private let helloSealer: PacketSealer
    private let fd: Int32
    private let lock = NSLock()
    private var codec: DatagramCodec
    private var membership: MembershipInstance
    private var delivery: DeliveryInstance
    /// Our own pairwise sealing (not the codec's), so raw plaintexts can be sealed too.
    private var sending: [NodeID: (sealer: PacketSealer, next: UInt64)] = [:]
    private var claimed: [SHA256Digest] = []
    private var chunkLengths: [SHA256Digest: Int] = [:]
    private var answer: ChunkAnswer = .garbage
    private var counters = Stats()
    private var running = true
    private var finished = false
    private var random = SystemRandomNumberGenerator()
    /// Identities nobody runs, whose records we sign (`inventMembers`).
    private var invented: [NodeIdentity] = []

    /// Binds a UDP socket on 127.0.0.1 and joins through the invite's addresses.
    package init(invite: InviteToken, name: String = "hostile") throws {
        session = invite.secret
        helloSealer = try PacketSealer(key: invite.secret.key(for: .hello))
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        self.fd = fd
        guard fd >= 0 else { throw NodeProcessError.timeout("hostile member: no socket (errno \(errno))") }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw NodeProcessError.timeout("hostile member: cannot bind (errno \(errno))")
        }
        var buffer: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, socklen_t(MemoryLayout<Int32>.size))
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        address = PeerAddress(
            host: .ipv4(UInt32(bigEndian: local.sin_addr.s_addr)), port: UInt16(bigEndian: local.sin_port))

        codec = DatagramCodec(session: invite.secret, localID: identity.nodeID, localBootID: bootID)
        var settings = DeliveryInstance.Settings()
        settings.datagramBudget = codec.maxPairwisePayload
        delivery = DeliveryInstance(settings: settings)
        let record = MemberRecord(
            signingKey: identity.publicKey, name: name, addresses: [address], incarnation: 1,
            bootID: bootID, ephemeralKey: ephemeral.publicKey)
        let now = Self.now
        membership = MembershipInstance(
            record: record, authority: Ed25519Authority(identity: identity),
            settings: .profile(.lan), datagramBudget: codec.maxHelloPayload,
            seed: UInt64.random(in: 0...UInt64.max), now: now)
        let directives = membership.join(invite.addresses, now: now)
        perform(directives)
        let thread = Thread { [self] in loop() }
        thread.name = "hostile-member"
        thread.start()
    }

    deinit { if !finished { close(fd) } }

    /// Stops the thread (bounded) and closes the socket; nobody is told.
    package func stop() {
        lock.withLock { running = false }
        for _ in 0..<200 {
            if lock.withLock({ finished }) { return }
            usleep(5000)
        }
    }

    package var stats: Stats { lock.withLock { counters } }

    package func member(_ id: NodeID) -> Member? { lock.withLock { membership.member(id) } }

    /// Members it holds pairwise keys with (everyone it can talk to directly).
    package var peers: [NodeID] { lock.withLock { sending.keys.sorted() } }

    package var chunkAnswer: ChunkAnswer {
        get { lock.withLock { answer } }
        set { lock.withLock { answer = newValue } }
    }

    // MARK: lies

    /// Claims to hold these attachments whole (`holding`, and a full `chunks` bitmap) to every
    /// member now and to every member met later. `chunkLengths` (digest → bytes) lets garbage
    /// pieces claim the right chunk length, as the asker checks it.
    package func claimHolding(_ manifests: [SHA256Digest: Manifest]) {
        lock.withLock {
            claimed = manifests.keys.sorted()
            for manifest in manifests.values {
                for (index, digest) in manifest.chunks.enumerated() {
                    chunkLengths[digest] = manifest.length(ofChunk: index)
                }
            }
            for peer in sending.keys.sorted() { announceClaims(to: peer) }
        }
    }

    /// Sends `count` chunk wants round-robin over `digests`, one per sealed datagram.
    package func floodWants(to peer: NodeID, digests: [SHA256Digest], pieceSize: Int, count: Int) {
        guard !digests.isEmpty else { return }
        for index in 0..<count {
            let want = ChunkWant(digest: digests[index % digests.count], pieceSize: pieceSize)
            lock.withLock { sendFrames([.chunkWant(want)], to: peer) }
            pace(index)
        }
    }

    /// Sends `count` join requests (each answered with the whole member list) to `address`.
    package func floodJoins(to address: PeerAddress, count: Int) {
        for index in 0..<count {
            lock.withLock {
                let frames: [Frame] = [.syncRequest(SyncRequest(isJoin: true)), .alive(membership.me)]
                sendHello(frames, to: address)
            }
            pace(index)
        }
    }

    /// Seals arbitrary bytes (malformed frames, oversized ones) under our pairwise key to `peer`:
    /// the datagram authenticates, its contents do not decode.
    package func sendSealedPlaintext(_ plaintext: [UInt8], to peer: NodeID) {
        lock.withLock { sealPairwise(plaintext, to: peer) }
    }

    /// Accuses `member` (suspect, or dead) at `incarnation`, in hello datagrams to `addresses`.
    package func accuse(_ member: NodeID, incarnation: UInt64, dead: Bool, to addresses: [PeerAddress]) {
        let accusation = Accusation(member: member, incarnation: incarnation, accuser: nodeID)
        lock.withLock {
            for address in addresses { sendHello([dead ? .dead(accusation) : .suspect(accusation)], to: address) }
        }
    }

    /// A record in `victim`'s name (its signing key and id) with our address and a higher
    /// incarnation, signed by us: the signature cannot match.
    package func forgeRecord(of victim: MemberRecord, to addresses: [PeerAddress]) {
        var forged = victim
        forged.addresses = [address]
        forged.incarnation = victim.incarnation + 10
        forged.ephemeralKey = ephemeral.publicKey
        forged.signature = identity.sign(Array("groupmesh member record v1".utf8) + [1, 2, 3])
        lock.withLock { for address in addresses { sendHello([.alive(forged)], to: address) } }
    }

    /// Alive records at `incarnation` for the first `count` identities we made up (made on first
    /// use, the same ones each time), all at our address and signed with their own keys, as a
    /// member holding the secret can make them; sent to `addresses`, six to a hello datagram.
    @discardableResult
    package func inventMembers(_ count: Int, incarnation: UInt64, to addresses: [PeerAddress]) -> [NodeID] {
        lock.withLock {
            while invented.count < count { invented.append(.generate()) }
            let records = invented.prefix(count).enumerated().map { index, identity in
                MemberRecord(
                    signingKey: identity.publicKey, name: "made-up-\(index)", addresses: [address],
                    incarnation: incarnation, bootID: UInt64(index + 1),
                    ephemeralKey: EphemeralKeyPair.generate().publicKey
                ).signed(by: Ed25519Authority(identity: identity))
            }
            for start in stride(from: 0, to: records.count, by: 6) {
                let frames = records[start..<min(records.count, start + 6)].map { Frame.alive($0) }
                for address in addresses { sendHello(frames, to: address) }
            }
            return invented.prefix(count).map(\.nodeID)
        }
    }

    /// Hello datagrams whose header names `sender` (another member, with its boot), sealed with
    /// the session's hello key that every member holds.
    package func sendHello(
        _ frames: [Frame], claimingSender sender: NodeID, bootID: UInt64, packetNumber: UInt64,
        to address: PeerAddress
    ) {
        let header = DatagramHeader(
            keyKind: .hello, sessionID: session.sessionID, sender: sender, bootID: bootID,
            packetNumber: packetNumber, helloNonce: .random())
        lock.withLock { transmit(Self.seal(frames, header: header, sealer: helloSealer), to: address) }
    }

    /// A pairwise datagram whose header names `sender` (another member) but sealed with our key
    /// for `peer`: the receiver opens it with the key it shares with `sender`, which fails.
    package func sendPairwise(_ frames: [Frame], claimingSender sender: NodeID, bootID: UInt64, to peer: NodeID) {
        lock.withLock {
            guard let keys = sending[peer], let address = membership.member(peer)?.address else { return }
            let header = DatagramHeader(
                keyKind: .pairwise, sessionID: session.sessionID, sender: sender, bootID: bootID,
                packetNumber: 1 << 40 + UInt64(counters.datagramsSent))
            transmit(Self.seal(frames, header: header, sealer: keys.sealer), to: address)
        }
    }

    // MARK: the loop

    private static var now: MeshInstant { MeshInstant(nanoseconds: DispatchTime.now().uptimeNanoseconds) }

    private func loop() {
        var storage = [UInt8](repeating: 0, count: 65_536)
        while lock.withLock({ running }) {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, 5)
            var received: [([UInt8], PeerAddress)] = []
            for _ in 0..<256 {
                var source = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let count = storage.withUnsafeMutableBytes { bytes in
                    withUnsafeMutablePointer(to: &source) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            recvfrom(fd, bytes.baseAddress, bytes.count, 0, $0, &length)
                        }
                    }
                }
                guard count > 0 else { break }
                let from = PeerAddress(
                    host: .ipv4(UInt32(bigEndian: source.sin_addr.s_addr)),
                    port: UInt16(bigEndian: source.sin_port))
                received.append((Array(storage.prefix(count)), from))
            }
            lock.withLock {
                for (bytes, from) in received { handle(bytes, from: from) }
                let time = Self.now
                if time >= membership.nextDeadline { perform(membership.onTick(now: time)) }
                if let deadline = delivery.nextDeadline, time >= deadline { perform(delivery.onTick(now: time)) }
            }
        }
        lock.withLock {
            finished = true
            close(fd)
        }
    }

    private func handle(_ bytes: [UInt8], from: PeerAddress) {
        counters.datagramsReceived += 1
        guard case let .success(opened) = codec.open(ByteBuffer(bytes: bytes)) else { return }
        let sender = opened.header.sender
        perform(
            membership.onFrames(
                opened.frames, from: sender, address: from, now: Self.now,
                pairwise: opened.header.keyKind == .pairwise))
        guard opened.header.keyKind == .pairwise else { return }
        perform(delivery.onFrames(opened.frames, from: sender, now: Self.now))
        for case let .chunkWant(want) in opened.frames { answerWant(want, from: sender) }
    }

    private func answerWant(_ want: ChunkWant, from peer: NodeID) {
        counters.wantsReceived += 1
        switch answer {
        case .silent:
            return
        case .absent:
            sendFrames([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld))], to: peer)
        case .garbage:
            guard let length = chunkLengths[want.digest] else {
                return sendFrames([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld))], to: peer)
            }
            let count = ChunkPiece.pieceCount(chunkLength: length, pieceSize: want.pieceSize)
            for index in 0..<count where want.missing?.contains(index) ?? true {
                let size = ChunkPiece.range(of: index, chunkLength: length, pieceSize: want.pieceSize).count
                let payload = (0..<size).map { _ in UInt8.random(in: 0...255, using: &random) }
                let piece = ChunkPiece(
                    digest: want.digest, chunkLength: length, pieceSize: want.pieceSize, index: index,
                    payload: ByteBuffer(bytes: payload))
                sendFrames([.chunkPiece(piece)], to: peer)
                counters.garbagePiecesSent += 1
            }
        }
    }

    private func perform(_ directives: [MembershipDirective]) {
        for directive in directives {
            switch directive {
            case let .send(frames, _, address):
                sendHello(frames, to: address)
            case let .sendPairwise(frames, recipient, _):
                sendFrames(frames, to: recipient)
            case let .memberChanged(member):
                guard !member.status.isGone, codec.installedBoot(of: member.id) != member.record.bootID,
                    let keys = PairwiseKeys.derive(
                        session: session, local: ephemeral,
                        peerPublicKey: member.record.ephemeralKey)
                else { continue }
                codec.installPeer(member.id, bootID: member.record.bootID, keys: keys)
                sending[member.id] = (keys.sending, 1)
                delivery.addPeer(member.id)
                announceClaims(to: member.id)
            case .identityConflict, .sessionFull:
                continue
            case let .memberForgotten(id):
                codec.removePeer(id)
                sending[id] = nil
            }
        }
    }

    private func perform(_ directives: [DeliveryInstance.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(peer, frames):
                sendFrames(frames, to: peer)
            case let .deliver(received):
                guard received.stream == .journal,
                    case let .chunkRequest(digest)? = try? JournalMessage(decoding: received.payload)
                else { continue }
                counters.manifestRequests += 1
                switch answer {
                case .silent: break
                case .absent: sendJournal(.noChunk(digest), to: received.from)
                case .garbage:
                    sendJournal(
                        .chunk(digest, (0..<512).map { _ in UInt8.random(in: 0...255, using: &random) }),
                        to: received.from)
                }
            case .completed, .consumerStalled:
                break
            }
        }
    }

    private func announceClaims(to peer: NodeID) {
        guard !claimed.isEmpty else { return }
        sendJournal(.holding(claimed), to: peer)
    }

    private func sendJournal(_ message: JournalMessage, to peer: NodeID) {
        guard
            let (_, directives) = try? delivery.send(
                message.encoded, to: [peer], mode: .reliable, stream: .journal,
                now: Self.now, timeout: .seconds(30))
        else { return }
        perform(directives)
    }

    // MARK: sealing and sending (called with the lock held)

    private func sendFrames(_ frames: [Frame], to peer: NodeID) {
        var plaintext = ByteBuffer()
        for frame in frames { FrameCodec.encode(frame, into: &plaintext) }
        sealPairwise(Array(plaintext.readableBytesView), to: peer)
    }

    private func sealPairwise(_ plaintext: [UInt8], to peer: NodeID) {
        guard let keys = sending[peer], let address = membership.member(peer)?.address else { return }
        sending[peer]?.next = keys.next + 1
        let header = DatagramHeader(
            keyKind: .pairwise, sessionID: session.sessionID, sender: nodeID, bootID: bootID,
            packetNumber: keys.next)
        transmit(Self.seal(raw: plaintext, header: header, sealer: keys.sealer), to: address)
    }

    private func sendHello(_ frames: [Frame], to address: PeerAddress) {
        let header = DatagramHeader(
            keyKind: .hello, sessionID: session.sessionID, sender: nodeID, bootID: bootID,
            packetNumber: UInt64(counters.datagramsSent + 1), helloNonce: .random())
        transmit(Self.seal(frames, header: header, sealer: helloSealer), to: address)
    }

    private static func seal(_ frames: [Frame], header: DatagramHeader, sealer: PacketSealer) -> [UInt8] {
        var plaintext = ByteBuffer()
        for frame in frames { FrameCodec.encode(frame, into: &plaintext) }
        return seal(raw: Array(plaintext.readableBytesView), header: header, sealer: sealer)
    }

    private static func seal(raw plaintext: [UInt8], header: DatagramHeader, sealer: PacketSealer) -> [UInt8] {
        var buffer = ByteBuffer()
        header.encode(into: &buffer)
        let associated = Array(buffer.readableBytesView)
        return associated + sealer.seal(plaintext, associatedData: associated, nonce: header.nonce)
    }

    private func transmit(_ datagram: [UInt8], to address: PeerAddress) {
        guard case let .ipv4(host) = address.host else { return }
        var destination = sockaddr_in()
        destination.sin_family = sa_family_t(AF_INET)
        destination.sin_port = address.port.bigEndian
        destination.sin_addr.s_addr = host.bigEndian
        _ = datagram.withUnsafeBytes { bytes in
            withUnsafePointer(to: &destination) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        counters.datagramsSent += 1
    }

    /// A short pause every 100 datagrams of a flood, so the flood reaches the node rather than
    /// overflowing the kernel's receive buffer (which would test the kernel, not the node).
    private func pace(_ index: Int) {
        if index % 100 == 99 { usleep(1000) }
    }
}
