import MeshCore
import MeshCrypto
import NIOCore

/// A node whose disk holds its session's end, started again: what `groupmesh run` does on such a
/// data dir before it refuses to start (`EndedSessionNotice`). It tells the members it remembers,
/// answers datagrams of the ended epoch, and is done after about two seconds.
package final class SimEndedNode: SimulatedProcess {
    static let timer: UInt64 = 1

    package let address: SimAddress
    private let previous: SimNode
    private let seed: UInt64
    package private(set) var notice: EndedSessionNotice?
    package private(set) var isDone = false

    /// `node`'s disk, started again with a boot from `seed`.
    package init(restarting node: SimNode, seed: UInt64) {
        address = node.address
        previous = node
        self.seed = seed
    }

    package func start(now: MeshInstant, context: inout SimContext) {
        var bytes = ByteBuffer(bytes: previous.storage.ended ?? [])
        guard let statement = try? SessionEnd(decoding: &bytes) else {
            isDone = true
            return
        }
        let restored = previous.storage.restored(origin: previous.session, identity: previous.identity)
        notice = EndedSessionNotice(
            statement: statement, epochs: restored.epochs, localID: previous.id,
            bootID: seed, remembered: restored.remembered, seed: seed, now: now)
        step(now: now, context: &context)
    }

    package func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard !isDone,
            let answer = notice?.answer(ByteBuffer(bytes: datagram), from: sender.peerAddress, now: now)
        else { return }
        context.send(Array(answer.readableBytesView), to: sender)
    }

    package func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        step(now: now, context: &context)
    }

    private func step(now: MeshInstant, context: inout SimContext) {
        guard var notice else { return }
        for (datagram, address) in notice.tick(now: now) {
            guard let destination = SimAddress(peerAddress: address) else { continue }
            context.send(Array(datagram.readableBytesView), to: destination)
        }
        isDone = notice.isDone(now: now)
        self.notice = notice
        if !isDone { context.schedule(timer: Self.timer, at: notice.deadline) }
    }
}
