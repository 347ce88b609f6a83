import MeshCore
import NIOCore
import Testing

/// One reliable channel, driven by hand: a `ReliableSender` and a `ReliableReceiver` joined by
/// a wire with a fixed one-way delay, where the test decides which frames are lost. Each frame
/// travels alone; the receiver acknowledges every data or forward frame at once.
struct ChannelPair {
    struct InFlight {
        var arrival: MeshInstant
        var frame: Frame
        var toReceiver: Bool
    }

    var sender: ReliableSender
    var receiver: ReliableReceiver
    var now = MeshInstant(nanoseconds: 1_000_000_000)
    var oneWay: Duration = .milliseconds(1)
    var budget = 1142
    var wire: [InFlight] = []
    var delivered: [[UInt8]] = []
    var completed: [UInt64] = []
    /// Every data chunk put on the wire, in order (retransmissions included).
    var transmissions: [DataChunk] = []
    var forwards: [ForwardTSN] = []
    /// Decides whether a frame is lost: (frame, index of that frame among all frames sent
    /// in its direction).
    var drop: (Frame, Int) -> Bool = { _, _ in false }
    private var sentToReceiver = 0
    private var sentToSender = 0

    init(sender: ReliableSender.Settings = .init(), receiverCapacity: Int = 1 << 20) {
        self.sender = ReliableSender(settings: sender)
        self.receiver = ReliableReceiver(capacity: receiverCapacity)
    }

    struct Flight {
        var time: MeshInstant
        var bytesInFlight: Int
        var window: Int
        /// Whether the sender had processed an ack by then.
        var acked: Bool
    }

    /// The sender's state after every pump that sent data.
    var flights: [Flight] = []
    private var acksSeen = 0

    /// Whatever the sender may send now goes on the wire.
    mutating func pump() {
        var sentData = false
        defer {
            if sentData {
                flights.append(
                    Flight(time: now, bytesInFlight: sender.bytesInFlight, window: sender.window, acked: acksSeen > 0))
            }
        }
        while true {
            let frames = sender.nextFrames(budget: budget, now: now)
            if frames.isEmpty { return }
            sentData = sentData || frames.contains { if case .data = $0 { true } else { false } }
            for frame in frames {
                switch frame {
                case let .data(chunk): transmissions.append(chunk)
                case let .forwardTSN(forward): forwards.append(forward)
                default: break
                }
                put(frame, toReceiver: true)
            }
        }
    }

    private mutating func put(_ frame: Frame, toReceiver: Bool) {
        let index = toReceiver ? sentToReceiver : sentToSender
        if toReceiver { sentToReceiver += 1 } else { sentToSender += 1 }
        guard !drop(frame, index) else { return }
        wire.append(InFlight(arrival: now + oneWay, frame: frame, toReceiver: toReceiver))
    }

    /// Handles arrivals and timer expiries in time order until `deadline`, or until the sender
    /// is idle with nothing on the wire. Returns true if it became idle.
    @discardableResult
    mutating func run(until deadline: MeshInstant) -> Bool {
        pump()
        while true {
            if wire.isEmpty, sender.isIdle { return true }
            let arrival = wire.indices.min { (wire[$0].arrival, $0) < (wire[$1].arrival, $1) }
            let timer = sender.timerDeadline
            let next = [arrival.map { wire[$0].arrival }, timer].compactMap { $0 }.min()
            guard let next, next <= deadline else { break }
            now = max(now, next)
            if let timer, timer <= next, arrival.map({ wire[$0].arrival > timer }) ?? true {
                sender.onTimeout(now: now)
                pump()
                continue
            }
            let item = wire.remove(at: arrival!)
            if item.toReceiver {
                switch item.frame {
                case let .data(chunk): delivered += receiver.onData(chunk).map(\.payload)
                case let .forwardTSN(forward): delivered += receiver.onForward(forward).map(\.payload)
                default: break
                }
                put(.ack(receiver.ack), toReceiver: false)
            } else if case let .ack(ack) = item.frame {
                acksSeen += 1
                completed += sender.onAck(ack, now: now)
                pump()
            }
        }
        now = max(now, deadline)
        return false
    }
}

@Suite("Reliable channel (sender and receiver by hand)")
struct ReliableChannelTests {
    static func messages(_ count: Int, size: Int) -> [[UInt8]] {
        (0..<count).map { numberedPayload(from: 0, sequence: $0, size: size) }
    }

    /// 37: found by later acks (packet threshold); 1: the very first; 98–100: too few chunks
    /// follow it, so only the timer finds it, when it is the last one in flight.
    @Test("one lost packet among 100 costs exactly one retransmission", arguments: [UInt64(37), 1, 98, 99, 100])
    func oneLossOneRetransmission(dropped: UInt64) {
        var pair = ChannelPair()
        let sent = Self.messages(100, size: 1000)
        for (index, payload) in sent.enumerated() {
            pair.sender.enqueue(messageID: UInt64(index + 1), payload: payload, fragmentSize: 1082)
        }
        // Lose exactly the first transmission of one TSN.
        var lost = false
        pair.drop = { frame, _ in
            guard case let .data(chunk) = frame, chunk.tsn == dropped, !lost else { return false }
            lost = true
            return true
        }
        let idle = pair.run(until: pair.now + .seconds(10))
        #expect(idle)
        #expect(lost)
        #expect(pair.sender.retransmissions == 1)
        #expect(pair.transmissions.count == 101)
        #expect(pair.transmissions.filter { $0.tsn == dropped }.count == 2)
        expectMessages(pair.delivered, sent, "every message once, in order:")
        #expect(pair.completed.sorted() == (1...100).map(UInt64.init))
        #expect(pair.receiver.duplicates == 0)
    }

    @Test("no loss, no retransmission, and the window limits what is in flight")
    func cleanRunStaysInWindow() {
        var pair = ChannelPair()
        let sent = Self.messages(300, size: 1000)
        for (index, payload) in sent.enumerated() {
            pair.sender.enqueue(messageID: UInt64(index + 1), payload: payload, fragmentSize: 1082)
        }
        pair.pump()
        // The first flight is the initial window's worth, no more.
        #expect(pair.sender.bytesInFlight <= pair.sender.settings.initialWindow)
        #expect(pair.transmissions.count == pair.sender.settings.initialWindow / 1000)
        let idle = pair.run(until: pair.now + .seconds(10))
        #expect(idle)
        #expect(pair.sender.retransmissions == 0)
        expectMessages(pair.delivered, sent)
        #expect(pair.sender.congestionWindow > pair.sender.settings.initialWindow, "slow start grew the window")
    }

    @Test("the receiver's advertised window caps what is in flight")
    func receiverWindowCapsFlight() {
        var pair = ChannelPair(receiverCapacity: 8 * 1024)
        let sent = Self.messages(100, size: 1000)
        for (index, payload) in sent.enumerated() {
            pair.sender.enqueue(messageID: UInt64(index + 1), payload: payload, fragmentSize: 1082)
        }
        let idle = pair.run(until: pair.now + .seconds(10))
        #expect(idle)
        expectMessages(pair.delivered, sent)
        // Before any ack the sender may use its initial window; after the first one, the
        // receiver's 8 KiB (or the minimum window) bounds every flight.
        let afterFirstAck = pair.flights.drop { !$0.acked }
        #expect(afterFirstAck.count > 10)
        for flight in afterFirstAck {
            #expect(flight.bytesInFlight <= flight.window, "at \(flight.time)")
            #expect(flight.bytesInFlight <= max(8 * 1024, pair.sender.settings.minimumWindow), "at \(flight.time)")
        }
        #expect(pair.flights.map(\.bytesInFlight).max() ?? 0 > 8 * 1024, "the initial flight was larger")
    }

    @Test("RFC 6298 §5.4: when the timer expires the earliest unacknowledged chunk is sent again")
    func timeoutRetransmitsEarliest() throws {
        var pair = ChannelPair()
        for index in 0..<20 {
            pair.sender.enqueue(
                messageID: UInt64(index + 1), payload: patternBytes(1000, salt: UInt8(index)), fragmentSize: 1082)
        }
        pair.drop = { _, _ in true }  // a black hole
        pair.pump()
        #expect(pair.transmissions.count == 20)
        let deadline = try #require(pair.sender.timerDeadline)
        pair.now = deadline
        pair.sender.onTimeout(now: deadline)
        let frames = pair.sender.nextFrames(budget: 1142, now: deadline)
        let first = try #require(frames.first, "nothing was retransmitted when the timer expired")
        #expect(first == .data(DataChunk(tsn: 1, flags: 3, body: patternBytes(1000, salt: 0))))
        #expect(pair.sender.retransmissions >= 1)
    }

    @Test("after an outage the backlog is recovered within a few timeouts, not one chunk per timeout")
    func recoversAfterOutage() {
        var pair = ChannelPair()
        let sent = Self.messages(60, size: 1000)
        for (index, payload) in sent.enumerated() {
            pair.sender.enqueue(messageID: UInt64(index + 1), payload: payload, fragmentSize: 1082)
        }
        var outage = true
        pair.drop = { _, _ in outage }
        let start = pair.now
        pair.run(until: start + .seconds(2))
        #expect(pair.delivered.isEmpty)
        outage = false
        let restored = pair.now
        // The timeout has backed off to at most the maximum during the outage; one more expiry
        // and a few round trips must do.
        let idle = pair.run(until: restored + pair.sender.settings.timer.maximum + .seconds(1))
        #expect(idle, "still \(pair.sender.pendingMessages) messages pending \(pair.now - restored) after the outage")
        expectMessages(pair.delivered, sent)
    }

    @Test("a chunk acknowledged selectively behind an abandoned one is still delivered")
    func selectivelyAckedMessageSurvivesForward() {
        var pair = ChannelPair()
        // Message 1 (2 chunks: TSN 1–2) loses its first chunk for good; message 2 (TSN 3) arrives.
        pair.sender.enqueue(messageID: 1, payload: patternBytes(2000, salt: 1), fragmentSize: 1082)
        pair.sender.enqueue(messageID: 2, payload: patternBytes(500, salt: 2), fragmentSize: 1082)
        pair.drop = { frame, _ in
            if case let .data(chunk) = frame { return chunk.tsn == 1 }
            return false
        }
        pair.run(until: pair.now + .milliseconds(3))
        #expect(pair.completed == [2], "the sender counts message 2 as delivered")
        #expect(pair.delivered.isEmpty, "in order: message 2 waits behind message 1")
        // Message 1 is abandoned (its send timed out): the forward must release message 2.
        pair.sender.abandon(messageID: 1, now: pair.now)
        let idle = pair.run(until: pair.now + .seconds(1))
        #expect(idle)
        #expect(!pair.forwards.isEmpty)
        expectMessages(
            pair.delivered, [patternBytes(500, salt: 2)], "a message the sender reported delivered must be delivered:")
    }

    @Test("an abandoned message is skipped; the ones behind it are not stalled")
    func abandonedMessageIsSkipped() {
        var pair = ChannelPair()
        pair.sender.enqueue(messageID: 1, payload: patternBytes(100, salt: 1), fragmentSize: 1082)
        pair.sender.enqueue(messageID: 2, payload: patternBytes(5000, salt: 2), fragmentSize: 1082)
        pair.sender.enqueue(messageID: 3, payload: patternBytes(100, salt: 3), fragmentSize: 1082)
        pair.drop = { frame, _ in
            if case let .data(chunk) = frame { return (2...6).contains(chunk.tsn) }  // all of message 2
            return false
        }
        pair.run(until: pair.now + .milliseconds(50))
        expectMessages(pair.delivered, [patternBytes(100, salt: 1)])
        let abandoned = pair.sender.abandon(messageID: 2, now: pair.now)
        let again = pair.sender.abandon(messageID: 2, now: pair.now)
        #expect(abandoned)
        #expect(!again, "only once")
        pair.sender.enqueue(messageID: 4, payload: patternBytes(100, salt: 4), fragmentSize: 1082)
        let idle = pair.run(until: pair.now + .seconds(1))
        #expect(idle)
        expectMessages(pair.delivered, [1, 3, 4].map { patternBytes(100, salt: UInt8($0)) })
        #expect(pair.completed.sorted() == [1, 3, 4])
        #expect(pair.receiver.cumulative == 8)
    }

    @Test("a partly received message that is abandoned is never delivered in pieces")
    func partialMessageDiscarded() {
        var pair = ChannelPair()
        pair.sender.enqueue(messageID: 1, payload: patternBytes(4000, salt: 1), fragmentSize: 1082)  // TSN 1–4
        pair.sender.enqueue(messageID: 2, payload: patternBytes(10, salt: 2), fragmentSize: 1082)  // TSN 5
        pair.drop = { frame, _ in
            if case let .data(chunk) = frame { return chunk.tsn == 3 }
            return false
        }
        pair.run(until: pair.now + .milliseconds(3))
        pair.sender.abandon(messageID: 1, now: pair.now)
        let idle = pair.run(until: pair.now + .seconds(1))
        #expect(idle)
        expectMessages(pair.delivered, [patternBytes(10, salt: 2)])
    }

    @Test("duplicated and reordered frames deliver each message once, in order")
    func duplicatesAndReordering() {
        var receiver = ReliableReceiver()
        var sender = ReliableSender()
        let sent = Self.messages(30, size: 700)
        for (index, payload) in sent.enumerated() {
            sender.enqueue(messageID: UInt64(index + 1), payload: payload, fragmentSize: 300)
        }
        var chunks: [DataChunk] = []
        while case let frames = sender.nextFrames(budget: 400, now: .zero), !frames.isEmpty {
            for case let .data(chunk) in frames { chunks.append(chunk) }
        }
        #expect(chunks.count == 90)
        var random = SplitMix64(seed: testSeed(11))
        var arrivals = chunks + chunks.filter { _ in Bool.random(using: &random) }
        arrivals.shuffle(using: &random)
        var delivered: [[UInt8]] = []
        for chunk in arrivals { delivered += receiver.onData(chunk).map(\.payload) }
        expectMessages(delivered, sent)
        #expect(receiver.cumulative == 90)
        #expect(receiver.duplicates == UInt64(arrivals.count - 90))
        #expect(receiver.ack == DeliveryAck(cumulative: 90, window: UInt32(receiver.capacity)))
    }

    @Test("the ack reports what arrived above the cumulative point as ranges")
    func selectiveAck() {
        var receiver = ReliableReceiver(capacity: 10_000)
        for tsn: UInt64 in [1, 2, 4, 5, 7, 9, 10, 11] {
            _ = receiver.onData(DataChunk(tsn: tsn, flags: 3, body: [UInt8](repeating: 0, count: 100)))
        }
        let ack = receiver.ack
        #expect(ack.cumulative == 2)
        #expect(ack.ranges == [4...5, 7...7, 9...11])
        #expect(ack.window == UInt32(10_000 - 6 * 100))
    }

    // MARK: hostile input

    @Test("an ack far beyond anything sent neither crashes nor completes unsent messages")
    func hostileCumulativeAck() {
        var sender = ReliableSender()
        // 200 KB: far more than the first window, so most chunks are not sent yet.
        sender.enqueue(messageID: 1, payload: patternBytes(200_000), fragmentSize: 1082)
        sender.enqueue(messageID: 2, payload: [7], fragmentSize: 1082)
        var sentTSNs: [UInt64] = []
        while case let frames = sender.nextFrames(budget: 1142, now: .zero), !frames.isEmpty {
            for case let .data(chunk) in frames { sentTSNs.append(chunk.tsn) }
        }
        #expect(sentTSNs.count < 186)
        let completed = sender.onAck(
            DeliveryAck(cumulative: .max, window: .max, ranges: [(UInt64.max - 5)...UInt64.max]),
            now: MeshInstant(nanoseconds: 5_000_000))
        #expect(completed.isEmpty, "messages whose chunks were never sent cannot be acknowledged")
        #expect(sender.pendingMessages == 2)
        #expect(sender.peerCumulative <= sentTSNs.max() ?? 0)
        // The rest still goes out.
        var later: [UInt64] = []
        while case let frames = sender.nextFrames(budget: 1142, now: MeshInstant(nanoseconds: 5_000_000)),
            !frames.isEmpty
        {
            for case let .data(chunk) in frames { later.append(chunk.tsn) }
        }
        #expect(later.first == (sentTSNs.max() ?? 0) + 1)
    }

    @Test("acks with ranges over UInt64.max or past everything sent do not crash the sender")
    func hostileRanges() {
        var sender = ReliableSender()
        for id in 1...3 { sender.enqueue(messageID: UInt64(id), payload: [UInt8(id)], fragmentSize: 100) }
        _ = sender.nextFrames(budget: 1142, now: .zero)
        // Everything acknowledged: then stale or forged acks straddling the top.
        #expect(sender.onAck(DeliveryAck(cumulative: 3, window: 1000), now: .zero).sorted() == [1, 2, 3])
        #expect(sender.onAck(DeliveryAck(cumulative: 0, window: 1000, ranges: [2...UInt64.max]), now: .zero).isEmpty)
        #expect(
            sender.onAck(DeliveryAck(cumulative: 1, window: 0, ranges: [3...10, 12...UInt64.max]), now: .zero).isEmpty)
        #expect(sender.isIdle)
        // Nothing pending at all, and a range from 1 to the end.
        var fresh = ReliableSender()
        #expect(fresh.onAck(DeliveryAck(cumulative: .max, window: .max, ranges: [1...UInt64.max]), now: .zero).isEmpty)
        #expect(fresh.isIdle)
        // And a send still works after all that.
        sender.enqueue(messageID: 4, payload: [4], fragmentSize: 100)
        #expect(sender.nextFrames(budget: 1142, now: .zero) == [.data(DataChunk(tsn: 4, flags: 3, body: [4]))])
        #expect(sender.onAck(DeliveryAck(cumulative: 4, window: 1000), now: .zero) == [4])
    }

    @Test("a forward to UInt64.max or a chunk at UInt64.max does not crash the receiver")
    func hostileForward() {
        var receiver = ReliableReceiver()
        _ = receiver.onData(DataChunk(tsn: 1, flags: 1, body: [1]))
        _ = receiver.onData(DataChunk(tsn: 3, flags: DataChunk.begins, body: [3]))
        #expect(receiver.onForward(ForwardTSN(cumulative: .max - 1)).isEmpty, "no message is whole")
        #expect(receiver.onData(DataChunk(tsn: .max, flags: 3, body: [9])).map(\.payload) == [[9]])
        #expect(receiver.cumulative == .max)
        var other = ReliableReceiver()
        #expect(other.onForward(ForwardTSN(cumulative: .max)).isEmpty)
        #expect(other.cumulative == .max)
        #expect(other.onData(DataChunk(tsn: 5, flags: 3, body: [5])).isEmpty, "below the cumulative point: a duplicate")
        #expect(other.ack.cumulative == .max)
    }

    @Test("zero-length chunks cannot grow the receive buffer beyond its capacity")
    func zeroLengthChunksAreBounded() {
        let capacity = 64 * 100
        var receiver = ReliableReceiver(capacity: capacity)
        // 50,000 empty, out-of-order chunks (TSN 1 never comes).
        for tsn in UInt64(2)...50_001 {
            #expect(receiver.onData(DataChunk(tsn: tsn, flags: 0, body: [])).isEmpty)
        }
        let ack = receiver.ack
        #expect(ack.window == 0)
        // Each buffered chunk costs at least 64 bytes: at most capacity / 64 are held.
        let held = ack.ranges.reduce(0) { $0 + Int($1.upperBound - $1.lowerBound + 1) }
        #expect(held <= capacity / 64)
        #expect(held > 0)
        // In-order empty chunks that never end a message do not accumulate either.
        var inOrder = ReliableReceiver(capacity: capacity)
        _ = inOrder.onData(DataChunk(tsn: 1, flags: DataChunk.begins, body: []))
        for tsn in UInt64(2)...20_000 { _ = inOrder.onData(DataChunk(tsn: tsn, flags: 0, body: [])) }
        #expect(inOrder.ack.window == UInt32(capacity))
        #expect(inOrder.onData(DataChunk(tsn: 20_001, flags: DataChunk.ends, body: [1])).map(\.payload) == [[1]])
    }

    // MARK: the wire

    static func decode(_ type: FrameType, _ body: [UInt8]) -> Result<[Frame], WireError> {
        var buffer = ByteBuffer()
        buffer.writeInteger(type.rawValue)
        buffer.writeInteger(UInt16(body.count))
        buffer.writeBytes(body)
        return FrameCodec.decodeAll(&buffer)
    }

    static func be(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }
    static func be(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }
    static func be(_ value: UInt16) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }

    @Test("delivery frames round-trip through the codec")
    func deliveryFramesRoundTrip() {
        let frames: [Frame] = [
            .data(DataChunk(tsn: 1, flags: DataChunk.begins | DataChunk.ends, body: [1, 2, 3])),
            .data(DataChunk(tsn: .max, flags: 0, body: [])),
            .ack(DeliveryAck(cumulative: 7, window: .max, ranges: [9...9, 11...20, 22...UInt64.max])),
            .ack(DeliveryAck(cumulative: 0, window: 0)),
            .forwardTSN(ForwardTSN(cumulative: 42)),
            .fragment(UnreliableFragment(messageID: .max, index: 2, count: 3, body: patternBytes(100))),
        ]
        var buffer = ByteBuffer()
        for frame in frames { FrameCodec.encode(frame, into: &buffer) }
        #expect(FrameCodec.decodeAll(&buffer).success == frames)
        // More than 16 ranges are cut to 16 when built.
        let many: [ClosedRange<UInt64>] = (UInt64(0)..<20).map { index -> ClosedRange<UInt64> in
            (10 * index + 5)...(10 * index + 6)
        }
        #expect(DeliveryAck(cumulative: 0, window: 1, ranges: many).ranges.count == DeliveryAck.maxRanges)
    }

    /// An ack body written by hand: cumulative, window 1000, a range count, the ranges.
    static func ackBody(_ cumulative: UInt64, _ ranges: [(UInt64, UInt64)], count: Int? = nil) -> [UInt8] {
        var bytes: [UInt8] = be(cumulative)
        bytes += be(UInt32(1000))
        bytes.append(UInt8(count ?? ranges.count))
        for (start, end) in ranges {
            bytes += be(start)
            bytes += be(end)
        }
        return bytes
    }

    static func fragmentBody(index: UInt16, count: UInt16, body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = be(UInt64(1))
        bytes += be(index)
        bytes += be(count)
        return bytes + body
    }

    @Test("malformed delivery frames are refused by the decoder, never trusted")
    func malformedDeliveryFrames() {
        let seventeen: [(UInt64, UInt64)] = (UInt64(0)..<17).map { index -> (UInt64, UInt64) in
            (2 * index + 1, 2 * index + 1)
        }
        let bad: [(String, FrameType, [UInt8])] = [
            ("ranges out of order", .ack, Self.ackBody(0, [(5, 6), (3, 4)])),
            ("overlapping ranges", .ack, Self.ackBody(0, [(3, 6), (5, 8)])),
            ("range at the cumulative point", .ack, Self.ackBody(10, [(10, 12)])),
            ("reversed range", .ack, Self.ackBody(0, [(9, 8)])),
            ("17 ranges", .ack, Self.ackBody(0, seventeen)),
            ("ranges cut short", .ack, Self.ackBody(0, [(3, 4)], count: 2)),
            ("unknown data flags", .data, Self.be(UInt64(1)) + [4, 9]),
            ("data without its flags", .data, Self.be(UInt64(1))),
            ("fragment index past its count", .fragment, Self.fragmentBody(index: 3, count: 3, body: [1])),
            ("fragment count zero", .fragment, Self.fragmentBody(index: 0, count: 0, body: [])),
            ("forward with trailing bytes", .forwardTSN, Self.be(UInt64(1)) + [0]),
        ]
        for (name, type, body) in bad {
            #expect(Self.decode(type, body).failure != nil, "\(name) was accepted")
        }
        // The same shapes, well formed, are accepted (so the cases above fail for their flaw).
        let good = Self.decode(.ack, Self.ackBody(0, [(3, 4), (6, 8)])).success
        #expect(good == [.ack(DeliveryAck(cumulative: 0, window: 1000, ranges: [3...4, 6...8]))])
        #expect(Self.decode(.ack, Self.ackBody(0, Array(seventeen.prefix(16)))).success != nil)
        #expect(Self.decode(.fragment, Self.fragmentBody(index: 2, count: 3, body: [1])).success != nil)
        #expect(Self.decode(.data, Self.be(UInt64(1)) + [3, 9]).success != nil)
    }

    @Test("a message that outgrows the receive buffer is discarded, not buffered without end")
    func oversizedMessageDiscarded() {
        var receiver = ReliableReceiver(capacity: 1000)
        _ = receiver.onData(DataChunk(tsn: 1, flags: DataChunk.begins, body: [UInt8](repeating: 1, count: 600)))
        _ = receiver.onData(DataChunk(tsn: 2, flags: 0, body: [UInt8](repeating: 2, count: 600)))
        #expect(receiver.onData(DataChunk(tsn: 3, flags: DataChunk.ends, body: [3])).isEmpty)
        #expect(receiver.ack.window == 1000)
        #expect(
            receiver.onData(DataChunk(tsn: 4, flags: 3, body: [4])).map(\.payload) == [[4]], "the next message is fine")
    }
}
