import Logging
import MeshCore
import MeshCrypto
import NIOCore

/// How a datagram for the core came: through our TURN allocation from `peer`, or directly.
enum TraversalRoute {
    case allocation(PeerAddress)
    case direct(PeerAddress)
}

/// The node's STUN and TURN clients (`run --stun`, `run --turn`; PROTOCOL.md §1e): the pure
/// `StunClient`, `TurnAllocation` and `TurnRoutes` driven from the node's own UDP socket.
/// Datagrams from the servers' addresses are taken out before the core sees them; a member's
/// datagram relayed by the TURN server reaches the core as if it came from the member's
/// address; the core's datagrams to addresses `TurnRoutes` names go through the allocation.
struct ServerTraversal {
    var stun: StunClient?
    var turn: TurnAllocation?
    var routes: TurnRoutes?
    var ticker: RepeatedTask?
    var ticks = 0
    /// STUN responses from addresses that are no server of ours: dropped.
    var strayStunMessages: UInt64 = 0
    /// Whether the allocation's relayed address is among our candidates now.
    var advertisingRelayed = false
    /// The host's interface addresses when last looked at: a change (another network, a new
    /// DHCP lease) has the STUN server asked again at once.
    var interfaces: Set<PeerAddress.Host>?

    static let tickInterval = TimeAmount.milliseconds(100)
    /// Ticks between two updates of the TURN permissions' targets (a second).
    static let permissionTargetTicks = 10
    /// Ticks between two looks at the interface addresses (5 s).
    static let interfaceTicks = 50
    /// How long a stopping node waits for the server to confirm the release.
    static let releaseWait: Duration = .seconds(1)
}

extension MeshNode {
    func startTraversal() {
        let stunServers = configuration.stunServers.map(\.address)
        guard !stunServers.isEmpty || configuration.turnServer != nil else { return }
        var state = ServerTraversal()
        if !stunServers.isEmpty {
            state.stun = StunClient(servers: stunServers, seed: SecureRandom.uint64(), now: now)
        }
        if let turn = configuration.turnServer {
            state.turn = TurnAllocation(
                server: turn.server.address, credentials: turn.credentials,
                seed: SecureRandom.uint64(), now: now)
            state.routes = TurnRoutes(server: turn.server.address, alsoDirect: stunServers)
        }
        state.ticker = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: ServerTraversal.tickInterval) {
            [self] _ in
            assumeIsolated { $0.traversalTick() }
        }
        traversal = state
    }

    private func traversalTick() {
        guard traversal != nil, !isClosed else { return }
        let now = now
        traversal?.ticks += 1
        if let ticks = traversal?.ticks, ticks % ServerTraversal.permissionTargetTicks == 1, traversal?.turn != nil {
            traversal?.turn?.setPermissionTargets(core.memberAddresses())
        }
        if let ticks = traversal?.ticks, ticks % ServerTraversal.interfaceTicks == 1, traversal?.stun != nil {
            let current = Set(
                ((try? System.enumerateDevices()) ?? []).compactMap { $0.address.flatMap(PeerAddress.init)?.host })
            if let known = traversal?.interfaces, known != current { traversal?.stun?.localAddressChanged(now: now) }
            traversal?.interfaces = current
        }
        let stunDirectives = traversal?.stun?.tick(now: now) ?? []
        carryOut(stunDirectives)
        let turnDirectives = traversal?.turn?.tick(now: now) ?? []
        carryOut(turnDirectives)
        if !stunDirectives.isEmpty || !turnDirectives.isEmpty { channelFlush() }
    }

    /// A datagram from the network, before the core: nil when it was the servers' (taken here),
    /// else the datagram for the core, where it came from (a relayed one's peer), and how it came:
    /// `traversalHeard` takes that once the core authenticated the datagram.
    func traversalReceive(
        _ datagram: ByteBuffer, from address: PeerAddress
    ) -> (ByteBuffer, PeerAddress, TraversalRoute?)? {
        if let turn = traversal?.turn, address == turn.server {
            let bytes = Array(datagram.readableBytesView)
            if isBindingResponse(bytes), traversal?.stun?.isServer(address) == true {
                carryOut(traversal?.stun?.handle(bytes, from: address, now: now) ?? [])
                return nil
            }
            switch traversal?.turn?.unwrap(bytes, now: now) {
            case let .datagram(payload, peer)?:
                return (ByteBuffer(bytes: payload), peer, .allocation(peer))
            case let .handled(directives)?:
                carryOut(directives)
                channelFlush()
                return nil
            case nil:
                return nil
            }
        }
        let view = datagram.readableBytesView
        if StunMessage.looksLikeStun(view) {
            if traversal?.stun?.isServer(address) == true {
                carryOut(traversal?.stun?.handle(Array(view), from: address, now: now) ?? [])
            } else {
                traversal?.strayStunMessages += 1
            }
            return nil
        }
        return (datagram, address, traversal?.routes == nil ? nil : .direct(address))
    }

    /// An authenticated datagram came this way: the route table follows it.
    func traversalHeard(_ route: TraversalRoute) {
        switch route {
        case let .allocation(peer): traversal?.routes?.heardThroughAllocation(peer, now: now)
        case let .direct(address): traversal?.routes?.heardDirectly(address)
        }
    }

    /// A Binding success or error: the STUN client's, even when the TURN server is also our
    /// STUN server.
    private func isBindingResponse(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 2, StunMessage.looksLikeStun(bytes) else { return false }
        let type = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        return type == 0x0101 || type == 0x0111
    }

    /// Whether the core's datagram to `address` goes through the allocation.
    func routesThroughAllocation(_ address: PeerAddress) -> Bool {
        guard let routes = traversal?.routes, let turn = traversal?.turn else { return false }
        return routes.route(to: address, allocated: turn.phase == .allocated, now: now) == .allocation
    }

    /// Sends `datagram` to `address` through the allocation when `TurnRoutes` says so; false
    /// when it goes directly.
    func sendThroughAllocation(_ datagram: ByteBuffer, to address: PeerAddress) -> Bool {
        guard routesThroughAllocation(address), let server = traversal?.turn?.server,
            let (bytes, directives) = traversal?.turn?.wrap(Array(datagram.readableBytesView), to: address, now: now)
        else {
            return false
        }
        write(ByteBuffer(bytes: bytes), to: server)
        carryOut(directives)
        return true
    }

    private func carryOut(_ directives: [StunClient.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(bytes, server):
                write(ByteBuffer(bytes: bytes), to: server)
            case let .learnt(address):
                logger.notice("STUN: public address \(address)")
                core.setExternalAddress(address, from: .stun, now: now)
                runEffects()
                rearm()
            }
        }
    }

    private func carryOut(_ directives: [TurnAllocation.Directive]) {
        guard let server = traversal?.turn?.server else { return }
        for directive in directives {
            switch directive {
            case let .send(bytes):
                write(ByteBuffer(bytes: bytes), to: server)
            case let .allocated(relayed, mapped):
                logger.notice("TURN: allocated on \(server), relayed address \(relayed)")
                traversal?.advertisingRelayed = true
                core.setExternalAddress(relayed, from: .turn, now: now)
                // Without --stun, the server's view of us is our STUN address.
                if traversal?.stun == nil, let mapped { core.setExternalAddress(mapped, from: .stun, now: now) }
                traversal?.turn?.setPermissionTargets(core.memberAddresses())
                runEffects()
                rearm()
            case let .failed(reason):
                // The server's words, from outside: escaped.
                let text = TerminalText.escaped(reason)
                if traversal?.advertisingRelayed == true {
                    logger.warning("TURN: allocation on \(server) lost: \(text)")
                    traversal?.advertisingRelayed = false
                    traversal?.routes?.reset()
                    core.setExternalAddress(nil, from: .turn, now: now)
                    // The server's view of us, taken as our STUN address without --stun, goes too.
                    if traversal?.stun == nil { core.setExternalAddress(nil, from: .stun, now: now) }
                    runEffects()
                    rearm()
                } else {
                    logger.warning("TURN: allocation on \(server) failed: \(text)")
                }
            case .released:
                logger.info("TURN: allocation on \(server) released")
            }
        }
    }

    /// Releases the allocation (Refresh with lifetime 0), waiting for the server's answer at
    /// most `releaseWait`, and stops the clients. Called by `stop` while the socket is open.
    func stopTraversal() async {
        guard traversal != nil else { return }
        if traversal?.turn?.phase == .allocated {
            carryOut(traversal?.turn?.release(now: now) ?? [])
            channelFlush()
            let deadline = now + ServerTraversal.releaseWait
            while now < deadline, let phase = traversal?.turn?.phase, phase == .releasing {
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        traversal?.ticker?.cancel()
        traversal?.ticker = nil
    }

    func traversalInfo() -> StatusReport.TraversalInfo? {
        guard let traversal else { return nil }
        let stun = traversal.stun.map { client in
            let state =
                switch client.outcome {
                case .notAskedYet: "asking"
                case .answered: "answered"
                case .noAnswer: "no answer"
                // The server's words as it sent them: whoever prints them escapes them (StatusTable does).
                case let .error(code, reason): "error \(code) \(reason)"
                }
            return StatusReport.StunInfo(
                servers: configuration.stunServers.map(\.description), address: client.mapped?.description,
                answeredBy: client.answeredBy?.description, state: state,
                requestsSent: client.counters.requestsSent, answers: client.counters.answers,
                dropped: client.counters.dropped)
        }
        let turn = traversal.turn.map { allocation in
            let state =
                switch allocation.phase {
                case .waiting: allocation.failure == nil ? "allocating" : "failed"
                case .allocating: "allocating"
                case .allocated: "allocated"
                case .releasing, .released: "released"
                }
            let left =
                allocation.phase == .allocated
                ? allocation.expiresAt.map { (($0 - now).milliseconds / 100).rounded() / 10 } : nil
            return StatusReport.TurnInfo(
                server: configuration.turnServer?.server.description ?? allocation.server.description,
                state: state, reason: allocation.failure,
                relayedAddress: allocation.phase == .allocated ? allocation.relayed?.description : nil,
                mappedAddress: allocation.mapped?.description, lifetimeLeft: left,
                permissions: allocation.permissionCount, channels: allocation.channelCount,
                peersThroughAllocation: traversal.routes?.peersThroughAllocation ?? 0,
                datagramsSent: allocation.counters.datagramsSent, bytesSent: allocation.counters.bytesSent,
                datagramsReceived: allocation.counters.datagramsReceived,
                bytesReceived: allocation.counters.bytesReceived, dropped: allocation.counters.dropped,
                integrityFailures: allocation.counters.integrityFailures,
                permissionsRefused: allocation.counters.permissionsRefused)
        }
        return StatusReport.TraversalInfo(stun: stun, turn: turn, strayStunMessages: traversal.strayStunMessages)
    }
}
