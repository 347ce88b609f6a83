import MeshCore

/// The behaviour of one simulated node. The simulator knows nothing of what a node does:
/// membership, delivery, journal or transfer state machines plug in through a small adapter
/// that forwards these three events and turns the machine's directives into `context` calls.
///
/// A class, so the test can keep a reference and inspect the node's state between steps.
/// Callbacks never re-enter the simulator: everything a node wants done goes through
/// `context` and takes effect, in call order, when the callback returns.
///
/// `now` is the node's *own* clock, which differs from `Simulator.now` after a clock jump.
package protocol SimulatedProcess: AnyObject {
    /// Called once when the node (or a restarted node) boots.
    func start(now: MeshInstant, context: inout SimContext)
    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext)
    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext)
    /// A datagram another node multicast on this node's LAN (`SimContext.multicastOnLAN`).
    func receiveMulticast(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext)
}

extension SimulatedProcess {
    package func start(now: MeshInstant, context: inout SimContext) {}
    package func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {}
    package func receiveMulticast(
        datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext
    ) {}
}
