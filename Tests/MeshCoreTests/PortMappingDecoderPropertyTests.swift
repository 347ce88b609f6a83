import MeshCrypto
import Testing
@testable import MeshCore

/// Random and mutated gateway answers (PCP, NAT-PMP, SSDP, description XML, SOAP) through every
/// reader and through the port mapping's state machine at each step: none may trap, nothing
/// unbounded comes out, and what is believed is checked. Replay a failure with
/// GROUPMESH_TEST_SEED=<seed printed in the failure>.
@Suite struct PortMappingDecoderPropertyTests {
    static let gateway: UInt32 = 0x0A00_0001
    static let now = MeshInstant(nanoseconds: 1_000_000)
    static let pcp = PeerAddress(host: .ipv4(gateway), port: 5351)
    static let ssdp = PeerAddress(host: .ipv4(gateway), port: 1900)

    /// A well-formed answer for each step, to mutate and to reach the next step with.
    static let answers: [[UInt8]] = [
        PortMappingTests.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: 0xC633_6465),
        [0, 128, 0, 0, 0, 0, 0, 5, 198, 51, 100, 101],
        PortMappingTests.ssdpAnswer(location: "http://10.0.0.1:5000/rootDesc.xml"),
        PortMappingTests.description(service: "WANIPConnection:2"),
        PortMappingTests.soap("GetExternalIPAddressResponse", ["NewExternalIPAddress": "198.51.100.101"]),
        PortMappingTests.soap("AddAnyPortMappingResponse", ["NewReservedPort": "41000"]),
        PortMappingTests.fault(725, "OnlyPermanentLeasesSupported"),
    ]

    @Test func readersNeverTrap() {
        let seed = testSeed(0x9a7e_0001)
        var rng = SplitMix64(seed: seed)
        let location = HTTPLocation(host: Self.gateway, port: 5000, path: "/rootDesc.xml")
        for iteration in 0..<testIterations(4_000) {
            let input =
                Bool.random(using: &rng)
                ? DecoderPropertyTests.randomInput(using: &rng)
                : DecoderPropertyTests.mutate(
                    Self.answers[Int.random(in: 0..<Self.answers.count, using: &rng)], using: &rng)
            if case let .map(_, _, _, nonce, _, _, _)? = PCPMessage.decode(input) {
                #expect(nonce.count == 12, "seed \(seed) iteration \(iteration)")
            }
            _ = NATPMPMessage.decode(input)
            if let found = SSDPMessage.location(inAnswer: input) {
                #expect(found.path.utf8.count <= 1024 && found.port != 0, "seed \(seed) iteration \(iteration)")
            }
            _ = UPnPService.find(inDescription: input, location: location)
            if case let .fault(_, description) = UPnPSOAP.answer(status: 500, body: input) {
                #expect(description.utf8.count <= 16 * 1024, "seed \(seed) iteration \(iteration)")
            }
            _ = HTTPLocation(String(decoding: input, as: UTF8.self))
            #expect(XMLLeaves(input).items.count <= 4096)
        }
    }

    /// The input as the gateway's answer at each step (the steps before answered well): the
    /// machine never traps, asks boundedly, and advertises only a usable, public address.
    @Test func theStateMachineTakesAnyAnswer() throws {
        let seed = testSeed(0x9a7e_0002)
        var rng = SplitMix64(seed: seed)
        // PCP refused → NAT-PMP refused → SSDP → description → external address → AddAny.
        let path: [[UInt8]] = [
            PortMappingTests.pcpAnswer(result: 2, lifetime: 30, port: 7946, externalPort: 0, external: 0),
            [0, 128, 0, 2, 0, 0, 0, 5],
            Self.answers[2], Self.answers[3], Self.answers[4], Self.answers[5],
        ]
        for iteration in 0..<testIterations(3_000) {
            let step = Int.random(in: 0..<path.count, using: &rng)
            let input =
                Bool.random(using: &rng)
                ? DecoderPropertyTests.randomInput(using: &rng)
                : DecoderPropertyTests.mutate(
                    Self.answers[Int.random(in: 0..<Self.answers.count, using: &rng)], using: &rng)
            var mapper = PortMappingInstance(internalPort: 7946, nonce: PortMappingTests.nonce)
            var out = mapper.setNetwork(gateway: Self.gateway, local: Self.gateway + 1, now: Self.now)
            var all = out
            for index in 0...step {
                let answer = index == step ? input : path[index]
                if let request = out.requests.last {
                    out = mapper.httpAnswered(
                        request.id, status: index == step && input.first == 1 ? 500 : 200, body: answer, now: Self.now)
                } else {
                    out = mapper.receive(answer, from: index == 2 ? Self.ssdp : Self.pcp, now: Self.now)
                }
                all += out
            }
            var now = Self.now
            for _ in 0..<50 {
                guard let next = mapper.nextDeadline else { break }
                now = max(now, next)
                all += mapper.tick(now: now)
            }
            all += mapper.stop(now: now)
            for case let .mappingChanged(address?) in all {
                guard case let .ipv4(host) = address.host else { Issue.record("IPv6 advertised"); continue }
                #expect(
                    !PortMappingInstance.isPrivate(host) && !PortMappingInstance.isUnusable(host) && address.port != 0,
                    "seed \(seed) iteration \(iteration): advertised \(address)")
            }
            #expect(all.count < 400, "seed \(seed) iteration \(iteration): \(all.count) directives")
            for case let .http(request) in all {
                #expect(request.to.host == .ipv4(Self.gateway), "only the gateway is asked")
            }
        }
    }
}
