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

/// A host an outbound firewall rule refused (`EPERM`, which only a send shows) is tried again
/// from a scratch socket every few seconds: a rule that held for a moment costs seconds, not a
/// minute. One the scratch socket passes while the node's own sends still
/// fail is refused a minute at a time (each failed send closes the node's socket).
@Suite struct DestinationRetestTests {
    final class Rule: @unchecked Sendable {
        var refusing = true
        var scratchSends = 0
    }

    let address = PeerAddress(ipv4: [127, 0, 0, 1], port: 7946)
    let otherPort = PeerAddress(ipv4: [127, 0, 0, 1], port: 7947)
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    func at(_ seconds: Double) -> NIODeadline { start + .milliseconds(Int64(seconds * 1000)) }

    func check(_ rule: Rule) -> DestinationCheck {
        var check = DestinationCheck(local: address)
        check.scratchSend = { _, _ in
            rule.scratchSends += 1
            return rule.refusing ? "the kernel refuses to send there (Operation not permitted: a firewall rule?)" : nil
        }
        return check
    }

    func allowed(_ address: PeerAddress, _ check: inout DestinationCheck, at time: NIODeadline) throws -> Bool {
        check.allows(address, remote: try address.socketAddress(), now: time).allowed
    }

    @Test func aRuleThatHeldForAMomentCostsSeconds() throws {
        let rule = Rule()
        var check = check(rule)
        #expect(try allowed(address, &check, at: at(0)))
        let reason = check.written(address, remote: try address.socketAddress(), failed: true, now: at(0))
        #expect(reason?.contains("firewall") == true)
        #expect(try !allowed(address, &check, at: at(1)))
        #expect(try !allowed(otherPort, &check, at: at(1)), "another port of the refused host")
        // Still refused at the first retest; nothing is tried from the scratch socket until the
        // next.
        #expect(try !allowed(address, &check, at: at(5)))
        let sends = rule.scratchSends
        #expect(try !allowed(address, &check, at: at(9)))
        #expect(rule.scratchSends == sends)
        rule.refusing = false
        #expect(try allowed(address, &check, at: at(10)), "the rule is gone: sent to again")
        #expect(check.written(address, remote: try address.socketAddress(), failed: false, now: at(10)) == nil)
        #expect(check.isConfirmed(address, now: at(11)))
        #expect(try allowed(otherPort, &check, at: at(11)))
    }

    /// A host refused at 0 s, the rule gone, and sent to again at the first retest (5 s).
    func liftedAfterARefusal(_ rule: Rule) throws -> DestinationCheck {
        var check = check(rule)
        #expect(try allowed(address, &check, at: at(0)))
        _ = check.written(address, remote: try address.socketAddress(), failed: true, now: at(0))
        rule.refusing = false
        #expect(try allowed(address, &check, at: at(5)))
        return check
    }

    @Test func aRuleTheScratchSocketDoesNotMeetIsRetriedAMinuteAtATime() throws {
        let rule = Rule()
        var check = try liftedAfterARefusal(rule)
        // The node's own send fails again although the scratch socket passed.
        let reason = check.written(address, remote: try address.socketAddress(), failed: true, now: at(5))
        #expect(reason?.contains("though not from another") == true, "\(String(describing: reason))")
        #expect(try !allowed(address, &check, at: at(10)))
        #expect(try !allowed(address, &check, at: at(64)))
        #expect(try allowed(address, &check, at: at(65)))
    }

    @Test func aRuleBackRightAfterItWentIsRetriedInSecondsAgain() throws {
        let rule = Rule()
        var check = try liftedAfterARefusal(rule)
        // The rule is back before the first send after the lift: the scratch socket meets it too.
        rule.refusing = true
        let reason = check.written(address, remote: try address.socketAddress(), failed: true, now: at(5))
        #expect(reason?.contains("though not from another") == false, "\(String(describing: reason))")
        rule.refusing = false
        #expect(try allowed(address, &check, at: at(10)), "waited more than a retest")
    }

    @Test func aFailureTheScratchSocketPassesIsAnotherDatagrams() throws {
        let rule = Rule()
        rule.refusing = false
        var check = check(rule)
        #expect(try allowed(address, &check, at: at(0)))
        #expect(check.written(address, remote: try address.socketAddress(), failed: true, now: at(0)) == nil)
        #expect(try allowed(address, &check, at: at(1)))
    }
}
