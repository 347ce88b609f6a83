@testable import GroupMesh
import MeshCrypto
import NIOCore
import Testing

/// Destinations the kernel would refuse are never handed to the channel (NIO closes a datagram
/// channel on such a send error): `DestinationCheck`.
@Suite struct DestinationCheckTests {
    static let ipv4 = PeerAddress(ipv4: [127, 0, 0, 1], port: 7946)

    func verdict(_ address: PeerAddress, _ check: inout DestinationCheck) throws -> (Bool, String?) {
        let verdict = check.allows(address, remote: try address.socketAddress(), now: .now())
        return (verdict.allowed, verdict.newReason)
    }

    @Test func broadcastAndTheOtherFamilyAreRefusedLoopbackIsNot() throws {
        var check = DestinationCheck(local: Self.ipv4)
        #expect(try verdict(Self.ipv4, &check) == (true, nil))
        let broadcast = PeerAddress(ipv4: [255, 255, 255, 255], port: 7946)
        #expect(try verdict(broadcast, &check) == (false, "a broadcast address"))
        let v6 = try PeerAddress(parsing: "[2001:db8::1]:7946")
        #expect(try verdict(v6, &check).0 == false)
        // Said once; counted every time.
        #expect(try verdict(broadcast, &check) == (false, nil))
        #expect(check.refusedSends == 3)
    }
}
