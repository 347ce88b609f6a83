/// The receiving half of one reliable channel (one peer → this node): puts chunks back in TSN
/// order, delivers each message once and in order, drops duplicates, honours forwards, and
/// buffers at most `capacity` bytes out of order (the window it advertises). While it
/// `holdsApplication` (the node's consumers are behind), it takes no new application chunk.
package struct ReliableReceiver: Sendable {
    /// A whole message, in the stream its first chunk named.
    package struct Message: Sendable, Equatable {
        package var stream: DeliveryStream
        package var payload: [UInt8]
    }

    package let capacity: Int
    package private(set) var cumulative: UInt64 = 0
    private var buffered: [UInt64: DataChunk] = [:]
    private var bufferedBytes = 0
    /// Chunks of the message being put together, all at or below `cumulative`.
    private var assembling: [UInt8] = []
    private var assemblingActive = false
    private var assemblingStream = DeliveryStream.application
    package private(set) var duplicates: UInt64 = 0
    /// While set, a new application chunk is neither buffered nor acknowledged (the sender keeps
    /// it and sends it again) and the advertised window is zero. Journal chunks are taken as
    /// usual, but in-order delivery keeps those behind a refused chunk waiting. Everything
    /// already acknowledged is still delivered: an acknowledgement is a promise.
    package var holdsApplication = false {
        didSet { if holdsApplication != oldValue { refusedWhileHeld = false } }
    }
    /// A chunk was refused during the current hold: its sender needs a window update at the end.
    package private(set) var refusedWhileHeld = false
    package private(set) var refused: UInt64 = 0

    package init(capacity: Int = 1 << 20) {
        self.capacity = capacity
    }

    /// Handles one chunk; returns the messages it completed, in order.
    package mutating func onData(_ chunk: DataChunk) -> [Message] {
        guard chunk.tsn > cumulative, buffered[chunk.tsn] == nil else {
            duplicates += 1
            return []
        }
        if holdsApplication, chunk.stream == .application {
            refused += 1
            refusedWhileHeld = true
            return []
        }
        // Out-of-order chunks wait within the advertised capacity; beyond it they are dropped
        // (the sender will send them again).
        if chunk.tsn != cumulative + 1 {
            guard bufferedBytes + assembling.count + Self.cost(chunk) <= capacity else { return [] }
            buffered[chunk.tsn] = chunk
            bufferedBytes += Self.cost(chunk)
            return []
        }
        var delivered: [Message] = []
        accept(chunk, into: &delivered)
        drainInOrder(into: &delivered)
        return delivered
    }

    /// The sender settled everything up to `forward.cumulative`: what is missing there it gave
    /// up on, so skip it and discard any message it cuts into. Chunks that did arrive there were
    /// acknowledged (the sender may have reported their messages delivered), so whole messages
    /// among them are still delivered, in order.
    package mutating func onForward(_ forward: ForwardTSN) -> [Message] {
        guard forward.cumulative > cumulative else { return [] }
        var delivered: [Message] = []
        for tsn in buffered.keys.filter({ $0 <= forward.cumulative }).sorted() {
            // safe: the key was just read
            let chunk = buffered.removeValue(forKey: tsn)!
            bufferedBytes -= Self.cost(chunk)
            if tsn != cumulative + 1 { discardPartial() }  // a gap: that message was abandoned
            accept(chunk, into: &delivered)
        }
        if cumulative < forward.cumulative {
            discardPartial()
            cumulative = forward.cumulative
        }
        drainInOrder(into: &delivered)
        return delivered
    }

    private mutating func drainInOrder(into delivered: inout [Message]) {
        while cumulative < .max, let next = buffered.removeValue(forKey: cumulative + 1) {
            bufferedBytes -= Self.cost(next)
            accept(next, into: &delivered)
        }
    }

    private mutating func discardPartial() {
        assembling = []
        assemblingActive = false
    }

    /// The acknowledgement to send now: cumulative point, free space, received ranges above it.
    package var ack: DeliveryAck {
        var ranges: [ClosedRange<UInt64>] = []
        for tsn in buffered.keys.sorted() {
            if let last = ranges.last, last.upperBound + 1 == tsn {
                ranges[ranges.count - 1] = last.lowerBound...tsn
            } else {
                guard ranges.count < DeliveryAck.maxRanges else { break }
                ranges.append(tsn...tsn)
            }
        }
        let free = holdsApplication ? 0 : max(0, capacity - bufferedBytes - assembling.count)
        return DeliveryAck(cumulative: cumulative, window: UInt32(clamping: free), ranges: ranges)
    }

    /// What a buffered chunk counts against the capacity: empty chunks are not free, or a
    /// peer could fill memory with them.
    static func cost(_ chunk: DataChunk) -> Int { max(chunk.body.count, 64) }

    private mutating func accept(_ chunk: DataChunk, into delivered: inout [Message]) {
        cumulative = chunk.tsn
        if chunk.isFirst {
            assembling = chunk.body
            assemblingActive = true
            assemblingStream = chunk.stream
        } else if assemblingActive {
            assembling += chunk.body
        } else {
            return  // the rest of a message whose start was skipped by a forward
        }
        guard chunk.isLast else {
            // A message can never outgrow the buffer: one that does is from a broken sender.
            if assembling.count > capacity { assembling = []; assemblingActive = false }
            return
        }
        delivered.append(Message(stream: assemblingStream, payload: assembling))
        assembling = []
        assemblingActive = false
    }
}
