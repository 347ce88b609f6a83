import MeshCore

/// What the NATs on a datagram's way made of it: the source its receiver sees, and the public
/// port it was sent to, whose filter is asked again when it arrives (a mapping may expire, or be
/// opened by the inside host, while the datagram is on the wire: simultaneous opens depend on it).
struct NATHop {
    struct Inbound {
        var nat: Int
        var port: UInt16
    }

    var source: SimAddress
    var inbound: Inbound?
}

/// Where a datagram goes once the NATs on its way had their say.
enum NATRoute {
    case node(SimAddress, NATHop?)
    case dropped(SimDropReason)
}

extension Simulator {
    // MARK: NAT boxes

    /// Puts `members` behind one NAT box (a home's router, `SimNAT`): from then on what they send to
    /// anyone outside leaves from the box's public host, outsiders reach them only through its
    /// mappings, and their own addresses are reachable from inside the home only. Between
    /// themselves they talk directly. No hairpinning: a node does not reach its neighbour
    /// through their router's public side. Returns the box's number.
    @discardableResult
    package func addNAT(_ configuration: SimNAT.Configuration = .masquerade, for members: [SimAddress]) -> Int {
        let number = nats.count
        // Its own random stream, from the seed: adding a NAT draws nothing from the others.
        let seed = (self.seed ^ 0x4E41_545F_424F_5845) &+ UInt64(number + 1) &* 0x9E37_79B9_7F4A_7C15
        nats.append(SimNAT(number: number, configuration: configuration, seed: seed))
        for member in members {
            nodes[checked(member)].nat = number
            record(.linkChanged(from: member, to: member))
        }
        return number
    }

    /// NAT box `number` as it is now (its mappings).
    package func nat(_ number: Int) -> SimNAT {
        nats[number]
    }

    /// The NAT box a node sits behind, if any.
    package func natNumber(of node: SimAddress) -> Int? {
        nodes[checked(node)].nat
    }

    /// Drops every mapping of NAT box `number`, as `conntrack -F` would.
    package func flushNAT(_ number: Int) {
        nats[number].flush()
        record(.action("flush NAT \(number)"))
    }

    /// The node a datagram from `source` to `destination` reaches and how it looks there, or why
    /// it is dropped. A datagram that leaves the sender's home passes its NAT first (making or
    /// refreshing a mapping, even if the far side then drops it: hole punching relies on that).
    func natRoute(from source: SimAddress, to destination: SimAddress) -> NATRoute {
        let home = source.index < nodes.count && !source.isNATPublic ? nodes[source.index].nat : nil
        guard destination.isNATPublic else {
            guard destination.index < nodes.count, destination.port == SimAddress.simulatedPort else {
                return .dropped(.unknownDestination)
            }
            // A private address means nothing outside its home.
            if let destinationHome = nodes[destination.index].nat, destinationHome != home { return .dropped(.nat) }
            guard let home, nodes[destination.index].nat != home else { return .node(destination, nil) }
            let seen = nats[home].outbound(from: source, to: destination, now: now)
            return .node(destination, NATHop(source: seen))
        }
        let number = destination.index - SimAddress.natHostBase
        guard number < nats.count else { return .dropped(.unknownDestination) }
        guard home != number else { return .dropped(.nat) }
        let seen = home.map { nats[$0].outbound(from: source, to: destination, now: now) } ?? source
        guard let inside = nats[number].insideAddress(ofPort: destination.port) else { return .dropped(.nat) }
        return .node(inside, NATHop(source: seen, inbound: NATHop.Inbound(nat: number, port: destination.port)))
    }

    /// Whether the NAT a datagram was sent through still lets it in to `node` as it arrives.
    func admittedByNAT(_ hop: NATHop, to node: SimAddress) -> Bool {
        guard let inbound = hop.inbound else { return true }
        return nats[inbound.nat].inbound(from: hop.source, toPort: inbound.port, now: now) == node
    }
}
