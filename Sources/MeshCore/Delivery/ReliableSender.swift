/// The sending half of one reliable channel (this node → one peer). Fragments get consecutive
/// TSNs; at most `window` bytes are unacknowledged at once; losses are found by later acks
/// (a chunk is lost once `packetThreshold` TSNs above it are acknowledged, RFC 9002's packet
/// threshold, applied to first transmissions) or by the retransmission timer (RFC 6298); an
/// abandoned message is skipped with a forward TSN so it never holds up the ones behind it.
/// A zero window from the peer still lets `minimumWindow` bytes go: they are its probe, sent
/// again at each (backed-off) timeout, so the sender learns when the window opens even if the
/// peer's window update is lost.
///
/// Every operation costs in proportion to the chunks it touches, not to the window.
package struct ReliableSender: Sendable {
    package struct Settings: Sendable, Equatable {
        package var initialWindow = 64 * 1024
        package var minimumWindow = 4 * 1200
        package var maximumWindow = 4 * 1024 * 1024
        package var packetThreshold: UInt64 = 3
        package var timer = RetransmissionTimer()
        package init() {}
    }

    struct Pending: Sendable {
        var chunk: DataChunk
        var messageID: UInt64
        var sentAt: MeshInstant?
        var retransmitted = false
        var lost = false
        var inFlight: Bool { sentAt != nil && !lost }
    }

    package let settings: Settings
    private var nextTSN: UInt64 = 1
    /// The smallest TSN not yet acknowledged or abandoned (== nextTSN when nothing is pending).
    private var lowest: UInt64 = 1
    /// The first TSN never sent.
    private var nextToSend: UInt64 = 1
    private var pending: [UInt64: Pending] = [:]
    private var messages: [UInt64: (tsns: ClosedRange<UInt64>, remaining: Int)] = [:]
    /// Lost chunks waiting to be sent again, ascending.
    private var lostQueue: [UInt64] = []
    /// First transmissions below this were already examined by the packet-threshold rule.
    private var lossScanFrom: UInt64 = 1
    package private(set) var bytesInFlight = 0
    package private(set) var congestionWindow: Int
    private var slowStartThreshold: Int = .max
    private var peerWindow: Int = .max
    package private(set) var timer: RetransmissionTimer
    package private(set) var timerDeadline: MeshInstant?
    /// Everything up to here the peer acknowledged or was told to skip.
    package private(set) var peerCumulative: UInt64 = 0
    private var largestAcked: UInt64 = 0
    private var recoveryUntil: UInt64 = 0
    private var forwardDue = false
    package private(set) var retransmissions: UInt64 = 0

    package init(settings: Settings = .init()) {
        self.settings = settings
        self.congestionWindow = settings.initialWindow
        self.timer = settings.timer
    }

    /// The most bytes that may be in flight now: the congestion window, capped by what the
    /// receiver said it can buffer, never below the minimum.
    package var window: Int { max(settings.minimumWindow, min(congestionWindow, peerWindow)) }

    /// Everything acknowledged or abandoned, and the peer knows.
    package var isIdle: Bool { pending.isEmpty && !forwardDue && lowest - 1 <= peerCumulative }
    package var pendingMessages: Int { messages.count }
    package var pendingChunks: Int { pending.count }

    /// Whether `nextFrames` would return something now (cheap: no state changes).
    package func hasSendable(now: MeshInstant) -> Bool {
        if forwardDue { return true }
        if let lost = lostQueue.first, pending[lost]?.lost == true {
            return bytesInFlight + (pending[lost]?.chunk.body.count ?? 0) <= window || bytesInFlight == 0
        }
        var tsn = nextToSend
        while tsn < nextTSN, pending[tsn] == nil { tsn += 1 }
        guard tsn < nextTSN, let entry = pending[tsn] else { return false }
        return bytesInFlight + entry.chunk.body.count <= window || bytesInFlight == 0
    }

    /// Splits a message into chunks of at most `fragmentSize` bytes and queues them.
    package mutating func enqueue(
        messageID: UInt64, payload: [UInt8], fragmentSize: Int,
        stream: DeliveryStream = .application
    ) {
        let size = max(1, fragmentSize)
        let first = nextTSN
        var offset = 0
        repeat {
            let end = min(payload.count, offset + size)
            var flags: UInt8 = 0
            if offset == 0 { flags |= DataChunk.begins }
            if end == payload.count { flags |= DataChunk.ends }
            pending[nextTSN] = Pending(
                chunk: DataChunk(
                    tsn: nextTSN, flags: flags, body: Array(payload[offset..<end]),
                    stream: stream),
                messageID: messageID)
            nextTSN += 1
            offset = end
        } while offset < payload.count
        messages[messageID] = (first...(nextTSN - 1), Int(nextTSN - first))
    }

    /// Frames to send now, within `budget` bytes: a due forward first, then lost chunks, then
    /// new ones, as far as the window allows (one chunk may always go when nothing is in flight).
    package mutating func nextFrames(budget: Int, now: MeshInstant) -> [Frame] {
        var frames: [Frame] = []
        var room = budget
        let forwardSize = FrameCodec.headerLength + 8
        if forwardDue, room >= forwardSize {
            forwardDue = false
            frames.append(.forwardTSN(ForwardTSN(cumulative: lowest - 1)))
            room -= forwardSize
            armTimer(now: now)
        }
        while let tsn = lostQueue.first {
            guard let entry = pending[tsn], entry.lost else { lostQueue.removeFirst(); continue }
            guard send(tsn, room: &room, frames: &frames, now: now) else { return frames }
            lostQueue.removeFirst()
        }
        while nextToSend < nextTSN {
            guard pending[nextToSend] != nil else { nextToSend += 1; continue }
            guard send(nextToSend, room: &room, frames: &frames, now: now) else { break }
            nextToSend += 1
        }
        return frames
    }

    private mutating func send(_ tsn: UInt64, room: inout Int, frames: inout [Frame], now: MeshInstant) -> Bool {
        guard var entry = pending[tsn] else { return true }
        let size = entry.chunk.body.count
        let encoded = FrameCodec.headerLength + DataChunk.overhead + size
        guard encoded <= room, bytesInFlight + size <= window || bytesInFlight == 0 else { return false }
        if entry.lost {
            entry.lost = false
            entry.retransmitted = true
            retransmissions += 1
        }
        entry.sentAt = now
        pending[tsn] = entry
        bytesInFlight += size
        frames.append(.data(entry.chunk))
        room -= encoded
        if timerDeadline == nil { armTimer(now: now) }
        return true
    }

    /// Processes an ack; returns the messages it completed.
    package mutating func onAck(_ ack: DeliveryAck, now: MeshInstant) -> [UInt64] {
        var completed: [UInt64] = []
        var newlyAcked = 0
        var sample: Duration?
        // A window that opens after being zero: what went out meanwhile (the minimum window's
        // worth, a probe) was refused, so it goes again now rather than at the next timeout.
        let reopened = peerWindow == 0 && ack.window > 0
        peerWindow = Int(ack.window)
        // A peer cannot acknowledge what was never sent: queued chunks not sent yet do not count
        // (everything below `lowest` is settled, so acknowledging it is harmless).
        let top = max(nextToSend, lowest) - 1
        let cumulative = min(ack.cumulative, top)
        func acknowledge(_ tsn: UInt64) {
            guard let entry = pending.removeValue(forKey: tsn) else { return }
            if entry.inFlight { bytesInFlight -= entry.chunk.body.count }
            newlyAcked += entry.chunk.body.count
            if tsn > largestAcked {
                largestAcked = tsn
                // Karn: only a chunk sent once gives a clean sample.
                if !entry.retransmitted, let sentAt = entry.sentAt { sample = now - sentAt }
            }
            if let message = messages[entry.messageID] {
                if message.remaining <= 1 {
                    messages[entry.messageID] = nil
                    completed.append(entry.messageID)
                } else {
                    messages[entry.messageID] = (message.tsns, message.remaining - 1)
                }
            }
        }
        if cumulative >= lowest {
            for tsn in lowest...cumulative { acknowledge(tsn) }
        }
        peerCumulative = max(peerCumulative, cumulative)
        for range in ack.ranges {
            // Only the part between the oldest pending chunk and the last one sent (maybe none).
            let from = max(range.lowerBound, lowest), to = min(range.upperBound, top)
            guard from <= to else { continue }
            for tsn in from...to { acknowledge(tsn) }
        }
        while lowest < nextTSN, pending[lowest] == nil { lowest += 1 }
        if let sample { timer.sample(sample) }
        if newlyAcked > 0 {
            grow(by: newlyAcked)
            if bytesInFlight > 0 { armTimer(now: now) } else { timerDeadline = nil }
        }
        detectLosses()
        if reopened { resendRefused() }
        // Chunks below `lowest` are settled; if the peer has not heard of all of them, some
        // were abandoned and it must be told to skip them.
        if lowest - 1 > peerCumulative { forwardDue = true }
        if forwardDue || bytesInFlight > 0 { if timerDeadline == nil { armTimer(now: now) } }
        return completed
    }

    /// The retransmission timer fired: every chunk in flight is lost (as TCP does after an RTO:
    /// they go again from the oldest, RFC 6298 §5.4, within the collapsed window), the window
    /// collapses, the timeout doubles; a forward not yet acknowledged is sent again.
    package mutating func onTimeout(now: MeshInstant) {
        guard let deadline = timerDeadline, now >= deadline else { return }
        timerDeadline = nil
        timer.backOff()
        var lostAny = false
        var tsn = lowest
        while tsn < nextToSend {
            if pending[tsn]?.inFlight == true {
                markLost(tsn)
                lostAny = true
            }
            tsn += 1
        }
        if lostAny {
            slowStartThreshold = max(settings.minimumWindow, congestionWindow / 2)
            congestionWindow = settings.minimumWindow
            recoveryUntil = nextTSN - 1
        }
        if lowest - 1 > peerCumulative { forwardDue = true }
        if bytesInFlight > 0 || forwardDue || !lostQueue.isEmpty { armTimer(now: now) }
    }

    /// Gives up on a message: its chunks are dropped, and the peer is told to skip them once
    /// everything before them is acknowledged. Returns false if it was no longer pending.
    @discardableResult
    package mutating func abandon(messageID: UInt64, now: MeshInstant) -> Bool {
        guard let message = messages.removeValue(forKey: messageID) else { return false }
        for tsn in message.tsns {
            guard let entry = pending.removeValue(forKey: tsn) else { continue }
            if entry.inFlight { bytesInFlight -= entry.chunk.body.count }
        }
        while lowest < nextTSN, pending[lowest] == nil { lowest += 1 }
        if lowest - 1 > peerCumulative {
            forwardDue = true
            if timerDeadline == nil { armTimer(now: now) }
        }
        return true
    }

    /// Abandons every message (the peer is gone); returns their ids, ascending.
    package mutating func abandonAll(now: MeshInstant) -> [UInt64] {
        let ids = messages.keys.sorted()
        for id in ids { abandon(messageID: id, now: now) }
        return ids
    }

    /// Everything still in flight is sent again (not a congestion signal: the window stays).
    private mutating func resendRefused() {
        var tsn = lowest
        while tsn < nextToSend {
            markLost(tsn)
            tsn += 1
        }
    }

    private mutating func armTimer(now: MeshInstant) {
        timerDeadline = now + timer.timeout
    }

    private mutating func detectLosses() {
        guard largestAcked > settings.packetThreshold else { return }
        let threshold = largestAcked - settings.packetThreshold
        var lostAny = false
        var tsn = max(lossScanFrom, lowest)
        while tsn <= threshold, tsn < nextToSend {
            if let entry = pending[tsn], entry.inFlight, !entry.retransmitted {
                markLost(tsn)
                if tsn > recoveryUntil { lostAny = true }
            }
            tsn += 1
        }
        lossScanFrom = max(lossScanFrom, tsn)
        if lostAny {
            // One reduction per round of losses (RFC 9002 §7.3.2).
            congestionWindow = max(settings.minimumWindow, congestionWindow / 2)
            slowStartThreshold = congestionWindow
            recoveryUntil = nextTSN - 1
        }
    }

    private mutating func markLost(_ tsn: UInt64) {
        guard var entry = pending[tsn], entry.inFlight else { return }
        entry.lost = true
        pending[tsn] = entry
        bytesInFlight -= entry.chunk.body.count
        if lostQueue.last.map({ $0 < tsn }) ?? true {
            lostQueue.append(tsn)  // the usual case, and all of a timeout's: ascending
        } else {
            let index = lostQueue.firstIndex { $0 > tsn } ?? lostQueue.count
            lostQueue.insert(tsn, at: index)
        }
    }

    private mutating func grow(by bytes: Int) {
        if congestionWindow < slowStartThreshold {
            congestionWindow += bytes
        } else {
            congestionWindow += max(1, 1200 * bytes / max(congestionWindow, 1))
        }
        congestionWindow = min(congestionWindow, settings.maximumWindow)
    }
}
