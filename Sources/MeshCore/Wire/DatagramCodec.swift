import MeshCrypto
import NIOCore

/// Why an incoming datagram was dropped; each reason has its own counter (`status --json`).
package enum DropReason: String, Error, CaseIterable, Sendable, Codable {
    /// Not a well-formed GroupMesh datagram, or its frames do not decode.
    case malformed
    /// A datagram format version this node does not speak.
    case version
    /// Another session's datagram (its session id is not ours).
    case foreign
    /// Sealed with pairwise keys we do not hold: an unknown sender or a boot we have not met.
    case unknownSender
    /// The seal does not open: tampered, truncated, or not made with the key it claims.
    case auth
    /// A packet number already accepted, or too old for the replay window.
    case replay
    /// A datagram of an earlier key epoch from a member not owed the current one: removed,
    /// or never known to us (an invite from before a removal).
    case staleEpoch
    /// Larger than any node sends (`Configuration.maxReceivedDatagramSize`): dropped before
    /// anything is decrypted, so that 64 KiB datagrams cost no more than small ones.
    case oversized
}

package struct OpenedDatagram: Equatable, Sendable {
    package var header: DatagramHeader
    package var frames: [Frame]
}

/// Turns frames into sealed datagrams and sealed datagrams back into frames, keeping the
/// per-peer traffic keys, packet counters and replay windows. Pure: the nonce for hello
/// datagrams comes from the caller, and the caller decides what to do with each result.
package struct DatagramCodec: Sendable {
    package struct Configuration: Sendable {
        /// Largest UDP payload we send unasked. 1200 bytes passes any path that carries IPv6.
        package var maxDatagramSize: Int = 1200
        /// Largest UDP payload accepted: a jumbo frame's. Only chunk pieces and path probes
        /// are ever larger than `maxDatagramSize`, and only once a probe proved the path
        /// carries them (`PathMTUDiscovery`).
        package var maxReceivedDatagramSize: Int = 8972
        package var replayWindowSize: Int = 4096
        package init() {}
    }

    /// Reached only through `mutating` methods called on the table entry (`peers[id]?.…`): the
    /// dictionary then lends the entry in place, where reading a field would copy the entry
    /// (retaining its keys and window) once per datagram.
    private struct PeerKeys: Sendable {
        var bootID: UInt64
        var keys: PairwiseKeys
        var nextPacketNumber: UInt64 = 1
        var pairwiseWindow: ReplayWindow

        /// The key to open a datagram of `boot` numbered `number` with, or why not.
        mutating func receiving(boot: UInt64, number: UInt64) -> Result<PacketSealer, DropReason> {
            guard bootID == boot else { return .failure(.unknownSender) }
            guard pairwiseWindow.check(number) == .fresh else { return .failure(.replay) }
            return .success(keys.receiving)
        }

        /// The next packet number and the key to seal it with.
        mutating func nextSending() -> (number: UInt64, sealer: PacketSealer) {
            defer { nextPacketNumber += 1 }
            return (nextPacketNumber, keys.sending)
        }
    }

    package let configuration: Configuration
    package let sessionID: SessionID
    package let localID: NodeID
    package let localBootID: UInt64
    private let helloSealer: PacketSealer
    private var nextHelloNumber: UInt64 = 1
    private var peers: [NodeID: PeerKeys] = [:]
    /// Keys of removed peers, kept with their counters and windows: if the same boot comes back
    /// (a member declared dead that refutes), its key must go on from where it stopped, or
    /// nonces would repeat under it and old datagrams would replay.
    private var retired: [NodeID: PeerKeys] = [:]
    /// Hello datagrams seen lately, by their random nonce: a replayed hello is dropped whatever
    /// sender it names. Not a window per sender: every member holds the hello key, so a member
    /// could seal hellos in another's name with packet numbers far ahead and push that member's
    /// real hellos out of the window (it did, in HostileMemberTests).
    private var recentHellos = RecentNonces(capacity: 16_384)

    package init(session: SessionSecret, localID: NodeID, localBootID: UInt64, configuration: Configuration = .init()) {
        self.configuration = configuration
        self.sessionID = session.sessionID
        self.localID = localID
        self.localBootID = localBootID
        // safe: purpose keys are 32 bytes
        self.helloSealer = try! PacketSealer(key: session.key(for: .hello))  // safe: purpose keys are 32 bytes
    }

    /// Room for frames in one pairwise datagram.
    package var maxPairwisePayload: Int {
        Self.pairwisePayload(inDatagramOf: configuration.maxDatagramSize)
    }

    /// Room for frames in a pairwise datagram of `size` bytes.
    package static func pairwisePayload(inDatagramOf size: Int) -> Int {
        size - DatagramHeader.fixedLength - PacketSealer.tagByteCount
    }

    /// The size of a pairwise datagram that carries `payload` bytes of frames.
    package static func pairwiseDatagramSize(payload: Int) -> Int {
        payload + DatagramHeader.fixedLength + PacketSealer.tagByteCount
    }

    /// Room for frames in one hello datagram (which also carries a 24-byte nonce).
    package var maxHelloPayload: Int {
        maxPairwisePayload - PacketSealer.nonceByteCount
    }

    // MARK: peers

    /// Installs the keys for a peer's boot. A new boot replaces the old keys, counters and windows;
    /// re-installing the same boot keeps them, so a repeated membership record is harmless.
    package mutating func installPeer(_ id: NodeID, bootID: UInt64, keys: PairwiseKeys) {
        if let existing = peers[id], existing.bootID == bootID { return }
        if let previous = retired.removeValue(forKey: id), previous.bootID == bootID {
            peers[id] = previous
            return
        }
        peers[id] = PeerKeys(
            bootID: bootID, keys: keys,
            pairwiseWindow: ReplayWindow(size: configuration.replayWindowSize))
    }

    package mutating func removePeer(_ id: NodeID) {
        if let state = peers.removeValue(forKey: id) { retired[id] = state }
    }

    package func installedBoot(of id: NodeID) -> UInt64? {
        peers[id]?.bootID
    }

    // MARK: sealing

    /// Seals frames for every member of the session under the hello key.
    package mutating func sealHello(
        _ frames: [Frame], nonce: PacketNonce,
        allocator: ByteBufferAllocator = .init()
    ) -> ByteBuffer {
        let header = DatagramHeader(
            keyKind: .hello, sessionID: sessionID, sender: localID, bootID: localBootID,
            packetNumber: nextHelloNumber, helloNonce: nonce)
        nextHelloNumber += 1
        var buffer = allocator.buffer(capacity: configuration.maxDatagramSize)
        Self.seal(frames, header: header, sealer: helloSealer, appendingTo: &buffer)
        return buffer
    }

    /// Seals frames for one peer under our pairwise key; nil when we hold no keys for it.
    package mutating func seal(
        _ frames: [Frame], to peer: NodeID,
        allocator: ByteBufferAllocator = .init()
    ) -> ByteBuffer? {
        guard let (number, sending) = peers[peer]?.nextSending() else { return nil }
        let header = DatagramHeader(
            keyKind: .pairwise, sessionID: sessionID, sender: localID,
            bootID: localBootID, packetNumber: number)
        var buffer = allocator.buffer(capacity: configuration.maxDatagramSize)
        Self.seal(frames, header: header, sealer: sending, appendingTo: &buffer)
        return buffer
    }

    /// Seals frames for one peer at the end of `buffer` (several datagrams back to back, for
    /// one segmented write). False when we hold no keys for it.
    package mutating func seal(_ frames: [Frame], to peer: NodeID, appendingTo buffer: inout ByteBuffer) -> Bool {
        guard let (number, sending) = peers[peer]?.nextSending() else { return false }
        let header = DatagramHeader(
            keyKind: .pairwise, sessionID: sessionID, sender: localID,
            bootID: localBootID, packetNumber: number)
        Self.seal(frames, header: header, sealer: sending, appendingTo: &buffer)
        return true
    }

    private static func seal(
        _ frames: [Frame], header: DatagramHeader, sealer: PacketSealer,
        appendingTo buffer: inout ByteBuffer
    ) {
        let start = buffer.writerIndex - buffer.readerIndex
        header.encode(into: &buffer)
        let headerEnd = buffer.writerIndex - buffer.readerIndex
        for frame in frames { FrameCodec.encode(frame, into: &buffer) }
        buffer.writeRepeatingByte(0, count: PacketSealer.tagByteCount)
        buffer.withUnsafeMutableReadableBytes { bytes in
            let ad = UnsafeRawBufferPointer(rebasing: bytes[start..<headerEnd])
            let body = UnsafeMutableRawBufferPointer(rebasing: bytes[headerEnd...])
            let plaintext = UnsafeRawBufferPointer(rebasing: body[..<(body.count - PacketSealer.tagByteCount)])
            sealer.seal(plaintext, associatedData: ad, nonce: header.nonce, into: body)
        }
    }

    // MARK: opening

    /// Authenticates, replay-checks and decodes one datagram. Cheap checks come first, so
    /// foreign or replayed traffic costs no cryptography; the replay window moves only for
    /// datagrams that authenticated.
    package mutating func open(_ datagram: ByteBuffer) -> Result<OpenedDatagram, DropReason> {
        guard datagram.readableBytes <= configuration.maxReceivedDatagramSize else { return .failure(.oversized) }
        var buffer = datagram
        let header: DatagramHeader
        switch DatagramHeader.decode(&buffer) {
        case let .success(decoded): header = decoded
        case .failure(.unsupportedVersion): return .failure(.version)
        case .failure: return .failure(.malformed)
        }
        guard header.sessionID == sessionID else { return .failure(.foreign) }
        // Only pairwise pieces and probes grow past the size sent unasked: a larger hello is
        // dropped before it costs an AEAD over 9 KB.
        guard header.keyKind == .pairwise || datagram.readableBytes <= configuration.maxDatagramSize else {
            return .failure(.oversized)
        }
        guard buffer.readableBytes >= PacketSealer.tagByteCount else { return .failure(.malformed) }

        // No copy of the peer's state is held: recording in its replay window below must not
        // copy the window on write.
        let sealer: PacketSealer
        switch header.keyKind {
        case .pairwise:
            guard header.sender != localID else { return .failure(.unknownSender) }
            switch peers[header.sender]?.receiving(boot: header.bootID, number: header.packetNumber) {
            case let .success(receiving)?: sealer = receiving
            case let .failure(reason)?: return .failure(reason)
            case nil: return .failure(.unknownSender)
            }
        case .hello:
            // Our own hello coming back is a reflection, never a message to us.
            guard header.sender != localID else { return .failure(.unknownSender) }
            if recentHellos.contains(header.nonce) { return .failure(.replay) }
            sealer = helloSealer
        }

        // Opened into a buffer of its own, not in place: the received buffer is shared with the
        // caller (and, unsliced, spans the whole 64 KiB read buffer), so writing to it would copy
        // all of that first, for every datagram received.
        let headerLength = datagram.readableBytes - buffer.readableBytes
        let sealedLength = buffer.readableBytes
        var plaintext = ByteBufferAllocator().buffer(capacity: sealedLength - PacketSealer.tagByteCount)
        var opened = false
        plaintext.writeWithUnsafeMutableBytes(minimumWritableBytes: sealedLength - PacketSealer.tagByteCount) {
            output in
            datagram.withUnsafeReadableBytes { whole in
                let length = sealer.open(
                    UnsafeRawBufferPointer(rebasing: whole[headerLength...]),
                    associatedData: UnsafeRawBufferPointer(rebasing: whole[..<headerLength]),
                    nonce: header.nonce, into: output)
                opened = length != nil
                return length ?? 0
            }
        }
        guard opened else { return .failure(.auth) }
        switch header.keyKind {
        case .pairwise: peers[header.sender]?.pairwiseWindow.record(header.packetNumber)
        case .hello: recentHellos.insert(header.nonce)
        }
        switch FrameCodec.decodeAll(&plaintext) {
        case let .success(frames): return .success(OpenedDatagram(header: header, frames: frames))
        case .failure: return .failure(.malformed)
        }
    }
}

/// The last `capacity` hello nonces that authenticated (random 24-byte nonces; the first 16
/// bytes name one well enough), oldest forgotten first.
struct RecentNonces: Sendable {
    private struct Key: Hashable, Sendable { var high: UInt64; var low: UInt64 }
    private var seen: RecentSet<Key>

    init(capacity: Int) { seen = RecentSet(capacity: capacity) }

    private static func key(_ nonce: PacketNonce) -> Key {
        let raw = nonce.raw
        var high: UInt64 = 0, low: UInt64 = 0
        for byte in raw.prefix(8) { high = high << 8 | UInt64(byte) }
        for byte in raw.dropFirst(8).prefix(8) { low = low << 8 | UInt64(byte) }
        return Key(high: high, low: low)
    }

    func contains(_ nonce: PacketNonce) -> Bool { seen.contains(Self.key(nonce)) }

    mutating func insert(_ nonce: PacketNonce) { seen.insert(Self.key(nonce)) }
}
