import MeshCore

/// What a node may do during one callback: send datagrams and set or cancel its timers.
/// The requests are collected and applied by the simulator after the callback returns, so a
/// node can never observe a half-applied effect or re-enter the simulator.
package struct SimContext {
    /// This node's address.
    package let address: SimAddress
    /// This node's own clock reading (the simulator's clock plus the node's offset).
    package let now: MeshInstant
    /// This node's own random stream (forked from the simulation seed when the node booted;
    /// a restart gets a fresh one). Changes made here persist across callbacks.
    package var random: SeededGenerator

    enum Effect {
        case send([UInt8], to: SimAddress)
        case sendShortLived([UInt8], to: SimAddress)
        case multicast([UInt8])
        case schedule(timer: UInt64, at: MeshInstant)
        case cancel(timer: UInt64)
    }

    private(set) var effects: [Effect] = []

    init(address: SimAddress, now: MeshInstant, random: SeededGenerator) {
        self.address = address
        self.now = now
        self.random = random
    }

    /// Sends one datagram over the simulated network (subject to the link's conditions).
    package mutating func send(_ bytes: [UInt8], to destination: SimAddress) {
        effects.append(.send(bytes, to: destination))
    }

    /// Sends one datagram with a small TTL: it passes the sender's own NAT box (making its
    /// mapping) and reaches a node of the sender's own LAN, nothing beyond.
    package mutating func sendShortLived(_ bytes: [UInt8], to destination: SimAddress) {
        effects.append(.sendShortLived(bytes, to: destination))
    }

    /// Sends one datagram to every other node on this node's LAN (behind the same NAT box), as
    /// a multicast with a TTL of 1 would; they get it through `receiveMulticast`.
    package mutating func multicastOnLAN(_ bytes: [UInt8]) {
        effects.append(.multicast(bytes))
    }

    /// Arms timer `id` to fire when this node's clock reads `deadline` (immediately after the
    /// current event if that is not in the future). Arming an id that is already armed
    /// replaces it: a state machine names its timers and re-arms them freely.
    package mutating func schedule(timer id: UInt64, at deadline: MeshInstant) {
        effects.append(.schedule(timer: id, at: deadline))
    }

    package mutating func schedule(timer id: UInt64, after delay: Duration) {
        schedule(timer: id, at: now + delay)
    }

    /// Disarms timer `id`; nothing happens if it is not armed.
    package mutating func cancel(timer id: UInt64) {
        effects.append(.cancel(timer: id))
    }
}
