import GroupMesh
import MeshCore
import MeshCrypto
import NIOCore
#if canImport(Glibc)
    import Glibc
#endif

/// libFuzzer entry point (`make fuzz`). The first byte picks what is fuzzed, so one corpus
/// covers every decoder that reads bytes from outside the process.
@_cdecl("LLVMFuzzerTestOneInput")
package func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let selector = data[0]
    let input = UnsafeBufferPointer(start: data + 1, count: size - 1)
    FuzzTargets.run(selector: selector, input: Array(input))
    return 0
}

package enum FuzzTargets {
    /// An allocation and a STUN client, both waiting for the server's first answer.
    nonisolated(unsafe) static var fuzzTurn = TraversalFuzzState()

    /// A codec with one known peer, so fuzzed datagrams reach every stage of `open`.
    nonisolated(unsafe) static var codec: DatagramCodec = {
        let session = try! SessionSecret(bytes: [UInt8](repeating: 7, count: 32))  // safe: 32 bytes
        let local = try! NodeIdentity(seed: [UInt8](repeating: 1, count: 32))  // safe: fixed 32-byte inputs
        let peer = try! NodeIdentity(seed: [UInt8](repeating: 2, count: 32))  // safe: right length
        let localKx = try! EphemeralKeyPair(seed: [UInt8](repeating: 3, count: 32))  // safe: right length
        let peerKx = try! EphemeralKeyPair(seed: [UInt8](repeating: 4, count: 32))  // safe: right length
        var codec = DatagramCodec(session: session, localID: local.nodeID, localBootID: 1)
        codec.installPeer(
            peer.nodeID, bootID: 9,
            keys: PairwiseKeys.derive(session: session, local: localKx, peerPublicKey: peerKx.publicKey)!)
        return codec
    }()

    static let lanSecret = try! SessionSecret(bytes: [UInt8](repeating: 7, count: 32))  // safe: 32 bytes
    static let lanKeys = LANAnnouncement.Keys(secret: lanSecret)

    package static func run(selector: UInt8, input: [UInt8]) {
        var buffer = ByteBuffer(bytes: input)
        switch selector % 12 {
        case 0:
            _ = DatagramHeader.decode(&buffer)
        case 1:
            _ = FrameCodec.decodeAll(&buffer)
        case 2:
            _ = codec.open(buffer)
        case 3:
            _ = try? InviteToken(parsing: String(decoding: input, as: UTF8.self))
        case 4:
            // What rides the messenger: the envelope, then the journal's messages in it.
            _ = MessageEnvelope(decoding: input)
            _ = try? JournalMessage(decoding: input)
        case 5:
            _ = try? Manifest(decoding: input)
        case 6:
            // Transfer frames all the way into an assembler that asked for the chunk they name.
            guard case let .success(frames) = FrameCodec.decodeAll(&buffer) else { return }
            for case let .chunkPiece(piece) in frames {
                var assembler = ChunkAssembler(settings: .init(pieceSize: piece.pieceSize))
                _ = assembler.begin(piece.digest, length: piece.chunkLength, from: NodeID(high: 1, low: 1), now: .zero)
                _ = assembler.onPiece(piece, from: NodeID(high: 1, low: 1), now: .zero)
            }
        case 7:
            _ = try? JournalOperation(decoding: &buffer)
        case 8:
            // Anything on the LAN discovery port.
            _ = LANAnnouncement(decoding: input, with: lanKeys)
        case 9:
            gatewayAnswer(input)
        case 10:
            // What a STUN or TURN server sends: STUN messages (their checks too), ChannelData,
            // and both through an allocation and a STUN client waiting for answers.
            if let received = try? StunMessage.decode(input) {
                _ = received.hasValidIntegrity(key: [1, 2, 3])
                _ = received.fingerprintIsValid
            }
            _ = try? ChannelData.decode(input)
            fuzzTurn.unwrap(input)
        default:
            // The control socket's requests: bytes cut into lines, each decoded (fed in two parts,
            // so a line split across reads is covered too).
            var reader = ControlRequestReader()
            let cut = input.isEmpty ? 0 : Int(input[0]) % (input.count + 1)
            _ = reader.feed(input[..<cut])
            _ = reader.feed(input[cut...])
        }
    }

    /// What a gateway may answer the port mapping (PCP, NAT-PMP, SSDP, the description's XML,
    /// SOAP), through each reader and through the state machine at each step that takes it.
    static func gatewayAnswer(_ input: [UInt8]) {
        let gateway: UInt32 = 0x0A00_0001, now = MeshInstant(nanoseconds: 1)
        let location = HTTPLocation(host: gateway, port: 5000, path: "/rootDesc.xml")
        _ = PCPMessage.decode(input)
        _ = NATPMPMessage.decode(input)
        _ = SSDPMessage.location(inAnswer: input)
        _ = UPnPService.find(inDescription: input, location: location)
        _ = UPnPSOAP.answer(status: input.first.map { $0 & 1 == 0 ? 200 : 500 } ?? 200, body: input)
        _ = HTTPLocation(String(decoding: input, as: UTF8.self))
        // The state machine: the input as the answer at each step, the steps before answered well.
        let pcp = PeerAddress(host: .ipv4(gateway), port: 5351), ssdp = PeerAddress(host: .ipv4(gateway), port: 1900)
        let good: [[UInt8]] = [
            [0, 0x81, 0, 1, 0, 0, 0, 0],  // PCP: NAT-PMP only
            [0, 128, 0, 2, 0, 0, 0, 0],  // NAT-PMP: refused
            Array(
                "HTTP/1.1 200 OK\r\nST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\nLOCATION: http://10.0.0.1:5000/d.xml\r\n\r\n"
                    .utf8),
            Array(
                ("<root><device><serviceList><service><serviceType>urn:schemas-upnp-org:service:WANIPConnection:1</serviceType>"
                    + "<controlURL>/ctl</controlURL></service></serviceList></device></root>").utf8),
            Array(
                "<Envelope><Body><r><NewExternalIPAddress>198.51.100.9</NewExternalIPAddress></r></Body></Envelope>"
                    .utf8),
        ]
        for step in 0...good.count {
            var mapper = PortMappingInstance(internalPort: 7946, nonce: [UInt8](repeating: 7, count: 12))
            var out = mapper.setNetwork(gateway: gateway, local: gateway + 1, now: now)
            for index in 0...min(step, good.count - 1) {
                let answer = index == step ? input : good[index]
                if case let .http(request)? = out.last(where: { if case .http = $0 { true } else { false } }) {
                    out = mapper.httpAnswered(request.id, status: 200, body: answer, now: now)
                } else {
                    out = mapper.receive(answer, from: index == 2 ? ssdp : pcp, now: now)
                }
                guard index < step else { break }
            }
            _ = mapper.tick(now: now + .seconds(10))
            _ = mapper.stop(now: now + .seconds(10))
        }
    }
}

#if FUZZING
    // SwiftPM links an executable target through a `MeshFuzz_main` symbol; hand control to
    // libFuzzer's driver from there (libFuzzer's own `main` is not used).
    @_silgen_name("LLVMFuzzerRunDriver")
    func LLVMFuzzerRunDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    @_cdecl("MeshFuzz_main")
    func meshFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        var argc = argc
        var argv = argv
        return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
    }
#else
    /// Without libFuzzer (a plain `swift build`), the harness replays the files it is given, so a
    /// saved crash input can be re-run under a debugger.
    @main
    enum ReplayCorpus {
        static func main() {
            for path in CommandLine.arguments.dropFirst() {
                guard let file = fopen(path, "rb") else { print("cannot open \(path)"); continue }
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = fread(&chunk, 1, chunk.count, file)
                    if n <= 0 { break }
                    bytes += chunk.prefix(n)
                }
                fclose(file)
                _ = bytes.withUnsafeBufferPointer { fuzzOneInput($0.baseAddress, $0.count) }
                print("replayed \(path) (\(bytes.count) bytes)")
            }
        }
    }
#endif

/// A TURN allocation and a STUN client in the state where a server's answers count.
struct TraversalFuzzState {
    static let server = PeerAddress(host: .ipv4(0xC633_640A), port: 3478)
    var allocation = TurnAllocation(
        server: server, credentials: .init(username: "u", password: "p"), seed: 1, now: .zero)
    var stun = StunClient(servers: [server], seed: 2, now: .zero)

    init() {
        _ = allocation.tick(now: .zero)
        _ = stun.tick(now: .zero)
    }

    mutating func unwrap(_ input: [UInt8]) {
        _ = allocation.unwrap(input, now: .zero)
        _ = stun.handle(input, from: Self.server, now: .zero)
    }
}
