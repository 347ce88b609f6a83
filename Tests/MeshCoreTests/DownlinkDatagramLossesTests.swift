import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.DatagramLosses`: loss from each holder's packet numbers.
@Suite struct DownlinkDatagramLossesTests {
    static let holder = NodeID(high: 1, low: 1)

    @Test("a gap before a piece counts as lost while an interval is under way; a late datagram takes it back")
    func gapsBeforePiecesAreLost() {
        var losses = DownlinkController.DatagramLosses()
        losses.record(from: Self.holder, packetNumber: 10, carriesPiece: true, counting: true)
        losses.record(from: Self.holder, packetNumber: 13, carriesPiece: true, counting: true)
        losses.record(from: Self.holder, packetNumber: 16, carriesPiece: false, counting: true)
        losses.record(from: Self.holder, packetNumber: 20, carriesPiece: true, counting: false)
        losses.record(from: Self.holder, packetNumber: 21, carriesPiece: true, counting: true)
        var totals = losses.closeInterval()
        // 11 and 12 lost; 14–15 before a datagram with no piece, 17–19 outside an interval.
        #expect(totals == (received: 3, lost: 2))
        // The counts start over; a late one gives a loss back.
        losses.record(from: Self.holder, packetNumber: 25, carriesPiece: true, counting: true)
        losses.record(from: Self.holder, packetNumber: 23, carriesPiece: true, counting: true)
        totals = losses.closeInterval()
        #expect(totals == (received: 2, lost: 2))
    }

    @Test("a holder is never believed to lose more than it delivered, and a jump of a thousand is no loss")
    func lossIsBoundedByDeliveries() {
        var losses = DownlinkController.DatagramLosses()
        let other = NodeID(high: 2, low: 2)
        losses.record(from: Self.holder, packetNumber: 1, carriesPiece: true, counting: true)
        losses.record(from: Self.holder, packetNumber: 500, carriesPiece: true, counting: true)
        losses.record(from: other, packetNumber: 1, carriesPiece: true, counting: true)
        losses.record(from: other, packetNumber: 1_002, carriesPiece: true, counting: true)
        #expect(losses.closeInterval() == (received: 4, lost: 2))
        losses.remove(other)
        #expect(losses.holders[other] == nil)
    }
}

extension DownlinkControllerTests {
    @Test func aMemberJumpingItsPacketNumbersDoesNotPassForCongestion() {
        var controller = Self.started()
        var packet: UInt64 = 0
        var now = Self.feed(&controller, from: .zero, seconds: 0.5, rate: 2e6, packet: &packet) { _ in 0 }
        // A second holder delivers pieces too, but numbers each datagram without a piece 999
        // ahead of the last: only gaps before datagrams with pieces are loss.
        let other = NodeID(high: 9, low: 9)
        var jumping: UInt64 = 1
        for _ in 0..<20 {
            jumping += 999
            controller.onDatagram(from: other, packetNumber: jumping, carriesPiece: false)
            jumping += 1
            controller.onDatagram(from: other, packetNumber: jumping, carriesPiece: true)
            controller.onPiece(
                bytes: 1400, sentAt: UInt32(truncatingIfNeeded: now.nanoseconds / 1000 &- 20_000),
                from: other, now: now)
            now = Self.feed(&controller, from: now, seconds: 0.01, rate: 2e6, packet: &packet) { _ in 0 }
        }
        #expect(controller.lossBackoffs == 0)
        #expect(controller.lastInterval.lost == 0)
    }
}
