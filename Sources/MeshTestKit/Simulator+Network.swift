import MeshCore

/// A link in one direction, the key for per-link conditions.
struct DirectedLink: Hashable {
    let from: SimAddress
    let to: SimAddress
}

extension Simulator {
    // MARK: Link conditions

    /// The conditions datagrams from `source` to `destination` meet.
    package func link(from source: SimAddress, to destination: SimAddress) -> LinkConditions {
        links.isEmpty ? defaultLink : links[DirectedLink(from: source, to: destination)] ?? defaultLink
    }

    /// Gives one direction its own conditions (the other direction is unchanged).
    package func setLink(from source: SimAddress, to destination: SimAddress, _ conditions: LinkConditions) {
        links[DirectedLink(from: source, to: destination)] = conditions
        record(.linkChanged(from: source, to: destination))
    }

    /// Gives both directions between two nodes the same conditions.
    package func setLink(between first: SimAddress, and second: SimAddress, _ conditions: LinkConditions) {
        setLink(from: first, to: second, conditions)
        setLink(from: second, to: first, conditions)
    }

    /// Returns one direction to `defaultLink`.
    package func resetLink(from source: SimAddress, to destination: SimAddress) {
        links[DirectedLink(from: source, to: destination)] = nil
        record(.linkChanged(from: source, to: destination))
    }

    /// Returns every link to `defaultLink`.
    package func resetAllLinks() {
        links.removeAll()
    }

    // MARK: Access links

    /// Puts `members` behind one line to everyone else, as the machines of a home share their
    /// router's: what any of them sends out passes `uplink`, what comes in for any of them passes
    /// `downlink` (rate limits with bounded queues; nil: no limit that way); between themselves
    /// they talk directly. A node leaves any line it was behind. Returns the line's number.
    @discardableResult
    package func addAccessLink(for members: [SimAddress], uplink: Bottleneck?, downlink: Bottleneck?) -> Int {
        accessLinks.append(
            AccessLink(uplink: uplink.map(BottleneckQueue.init), downlink: downlink.map(BottleneckQueue.init)))
        let number = accessLinks.count - 1
        for member in members {
            nodes[checked(member)].accessLink = number
            record(.linkChanged(from: member, to: member))
        }
        return number
    }

    /// A line of its own for one node: `uplink` for all it sends, `downlink` for all it receives.
    package func setBottlenecks(of node: SimAddress, uplink: Bottleneck?, downlink: Bottleneck?) {
        addAccessLink(for: [node], uplink: uplink, downlink: downlink)
    }

    /// What the line a node is behind forwarded and dropped each way (nil: no limit that way).
    package func bottleneckStatistics(
        of node: SimAddress
    )
        -> (uplink: SimBottleneckStatistics?, downlink: SimBottleneckStatistics?)
    {
        guard let number = nodes[checked(node)].accessLink else { return (nil, nil) }
        return (accessLinks[number].uplink?.statistics, accessLinks[number].downlink?.statistics)
    }

    /// How long a datagram reaching `node`'s downlink queue now would wait there (nil: no
    /// bottleneck): what a ping's reply would, sampled at any moment.
    package func downlinkQueueDelay(of node: SimAddress) -> Duration? {
        guard let number = nodes[checked(node)].accessLink, let queue = accessLinks[number].downlink else { return nil }
        return queue.busyUntil > now ? queue.busyUntil - now : .zero
    }

    // MARK: Partitions

    /// Splits the network: nodes in different groups cannot reach each other, in either
    /// direction, until `heal()`. Nodes named in no group (including nodes added later) form
    /// one more group together, so `partition([[a]])` isolates `a` from everyone else.
    /// A datagram is dropped (`partition`) if its ends are split when it is sent or when it
    /// arrives. Replaces any earlier partition.
    package func partition(_ groups: [[SimAddress]]) {
        for index in nodes.indices { nodes[index].partitionGroup = 0 }
        for (number, group) in groups.enumerated() {
            for node in group {
                let index = checked(node)
                precondition(nodes[index].partitionGroup == 0, "\(node) is in two partition groups")
                nodes[index].partitionGroup = number + 1
            }
        }
        isPartitioned = true
        record(.partitioned(groups))
    }

    /// Cuts `node` off from every other node.
    package func isolate(_ node: SimAddress) {
        partition([[node]])
    }

    /// Ends the partition; links keep their own conditions.
    package func heal() {
        guard isPartitioned else { return }
        isPartitioned = false
        record(.healed)
    }

    /// True when the current partition separates the two nodes.
    package func isPartitioned(_ first: SimAddress, from second: SimAddress) -> Bool {
        blocked(first, second)
    }

    func blocked(_ source: SimAddress, _ destination: SimAddress) -> Bool {
        guard isPartitioned else { return false }
        return partitionGroup(of: source) != partitionGroup(of: destination)
    }

    private func partitionGroup(of node: SimAddress) -> Int {
        node.index < nodes.count ? nodes[node.index].partitionGroup : 0
    }

    // MARK: Datagrams

    /// Puts a datagram on the wire as if `source` had sent it (it need not be a node: tests
    /// use this to inject forged or malformed datagrams). Subject to the link's conditions.
    package func inject(_ bytes: [UInt8], from source: SimAddress, to destination: SimAddress) {
        transmit(bytes, from: source, to: destination)
    }

    /// Applies the NATs on the way (Simulator+NAT) and the link model to one datagram and schedules
    /// its arrival(s). The random draws happen in a fixed order, so one seed gives one outcome.
    func transmit(_ bytes: [UInt8], from source: SimAddress, to addressed: SimAddress, shortLived: Bool = false) {
        statistics.sent += 1
        statistics.bytesSent += bytes.count
        if source.index < statistics.nodes.count {
            statistics.nodes[source.index].sent += 1
            statistics.nodes[source.index].bytesSent += bytes.count
        }
        record(.sent(from: source, to: addressed, bytes: bytes))

        let hop: NATHop?
        let destination: SimAddress
        switch natRoute(from: source, to: addressed) {
        case let .dropped(reason):
            return drop(from: source, to: addressed, size: bytes.count, reason: reason)
        case let .node(node, natHop):
            destination = node
            hop = natHop
        }
        // A short-lived datagram expires past the first hop beyond its home: only a neighbour
        // on the same LAN (no NAT crossed, both behind the same box) gets it.
        if shortLived,
            hop != nil || source.isNATPublic || nodes[source.index].nat == nil
                || nodes[source.index].nat != nodes[destination.index].nat
        {
            return drop(from: source, to: destination, size: bytes.count, reason: .expired)
        }
        if blocked(source, destination) {
            return drop(from: source, to: destination, size: bytes.count, reason: .partition)
        }
        let conditions = link(from: source, to: destination)
        if let mtu = conditions.mtu, bytes.count > mtu {
            return drop(from: source, to: destination, size: bytes.count, reason: .mtu)
        }
        // Leaving one line and entering another: the sender's uplink first (the datagram is on
        // the wire once it has left that queue), the receiver's downlink on arrival.
        let sourceLine = source.index < nodes.count ? nodes[source.index].accessLink : nil
        let destinationLine = nodes[destination.index].accessLink
        var departure = now
        if sourceLine != destinationLine, let line = sourceLine, accessLinks[line].uplink != nil {
            guard let leaves = accessLinks[line].uplink?.admit(bytes.count, at: now) else {
                return drop(from: source, to: destination, size: bytes.count, reason: .queue)
            }
            departure = leaves
        }
        let throughDownlink =
            sourceLine != destinationLine && destinationLine.map { accessLinks[$0].downlink != nil } ?? false
        if networkRandom.chance(conditions.lossProbability) {
            return drop(from: source, to: destination, size: bytes.count, reason: .loss)
        }
        var copies = 1
        if networkRandom.chance(conditions.duplicationProbability) {
            copies = 2
            statistics.duplicated += 1
            record(.duplicated(from: source, to: destination))
        }
        for _ in 0..<copies {
            var payload = bytes
            if !payload.isEmpty, networkRandom.chance(conditions.corruptionProbability) {
                let bit = Int(networkRandom.next(below: UInt64(payload.count) * 8))
                payload[bit / 8] ^= UInt8(1) << UInt8(bit % 8)
                statistics.corrupted += 1
                record(.corrupted(from: source, to: destination, bit: bit))
            }
            var delay = conditions.delay + networkRandom.duration(upTo: conditions.jitter)
            if networkRandom.chance(conditions.reorderProbability) {
                delay += networkRandom.duration(upTo: conditions.reorderDelay)
            }
            let arrival = max(departure + delay, now)
            queue.push(
                throughDownlink
                    ? .reachDownlink(from: source, to: destination, bytes: payload, hop: hop)
                    : .deliver(from: source, to: destination, bytes: payload, hop: hop), at: arrival)
        }
    }

    /// Multicasts on `source`'s LAN as if it had (a test's forged or stray announcements).
    package func injectMulticast(_ bytes: [UInt8], from source: SimAddress) {
        multicast(bytes, from: source)
    }

    /// A multicast: one copy to every other node behind the sender's NAT box (its LAN), after
    /// the link's delay, each lost as the link loses. Nodes on no NAT box's LAN reach nobody.
    func multicast(_ bytes: [UInt8], from source: SimAddress) {
        guard source.index < nodes.count, let home = nodes[source.index].nat else { return }
        for index in nodes.indices where index != source.index && nodes[index].nat == home {
            let destination = SimAddress(index)
            let conditions = link(from: source, to: destination)
            if networkRandom.chance(conditions.lossProbability) {
                drop(from: source, to: destination, size: bytes.count, reason: .loss)
                continue
            }
            statistics.sent += 1
            queue.push(.deliverMulticast(from: source, to: destination, bytes: bytes), at: now + conditions.delay)
        }
    }

    func drop(from source: SimAddress, to destination: SimAddress, size: Int, reason: SimDropReason) {
        statistics.dropped[reason] += 1
        record(.dropped(from: source, to: destination, size: size, reason: reason))
    }
}
