import MeshCore

/// A link in one direction, the key for per-link conditions.
struct DirectedLink: Hashable {
    let from: SimAddress
    let to: SimAddress
}

extension Simulator {
    // MARK: Link conditions

    /// The conditions datagrams from `source` to `destination` meet.
    public func link(from source: SimAddress, to destination: SimAddress) -> LinkConditions {
        links.isEmpty ? defaultLink : links[DirectedLink(from: source, to: destination)] ?? defaultLink
    }

    /// Gives one direction its own conditions (the other direction is unchanged).
    public func setLink(from source: SimAddress, to destination: SimAddress, _ conditions: LinkConditions) {
        links[DirectedLink(from: source, to: destination)] = conditions
        record(.linkChanged(from: source, to: destination))
    }

    /// Gives both directions between two nodes the same conditions.
    public func setLink(between first: SimAddress, and second: SimAddress, _ conditions: LinkConditions) {
        setLink(from: first, to: second, conditions)
        setLink(from: second, to: first, conditions)
    }

    /// Returns one direction to `defaultLink`.
    public func resetLink(from source: SimAddress, to destination: SimAddress) {
        links[DirectedLink(from: source, to: destination)] = nil
        record(.linkChanged(from: source, to: destination))
    }

    /// Returns every link to `defaultLink`.
    public func resetAllLinks() {
        links.removeAll()
    }

    // MARK: Bottlenecks

    /// Puts rate limits with bounded queues on a node's access link (nil: none): `uplink` for
    /// what it sends, whoever to, and `downlink` for what it receives, whoever from. Datagrams
    /// already queued keep their place.
    public func setBottlenecks(of node: SimAddress, uplink: Bottleneck?, downlink: Bottleneck?) {
        let index = checked(node)
        nodes[index].uplink = uplink.map { limit in
            var queue = nodes[index].uplink ?? BottleneckQueue(limit)
            queue.limit = limit
            return queue
        }
        nodes[index].downlink = downlink.map { limit in
            var queue = nodes[index].downlink ?? BottleneckQueue(limit)
            queue.limit = limit
            return queue
        }
        record(.linkChanged(from: node, to: node))
    }

    /// What the node's bottlenecks forwarded and dropped (nil where it has none).
    public func bottleneckStatistics(of node: SimAddress)
        -> (uplink: SimBottleneckStatistics?, downlink: SimBottleneckStatistics?)
    {
        let index = checked(node)
        return (nodes[index].uplink?.statistics, nodes[index].downlink?.statistics)
    }

    // MARK: Partitions

    /// Splits the network: nodes in different groups cannot reach each other, in either
    /// direction, until `heal()`. Nodes named in no group (including nodes added later) form
    /// one more group together, so `partition([[a]])` isolates `a` from everyone else.
    /// A datagram is dropped (`partition`) if its ends are split when it is sent or when it
    /// arrives. Replaces any earlier partition.
    public func partition(_ groups: [[SimAddress]]) {
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
    public func isolate(_ node: SimAddress) {
        partition([[node]])
    }

    /// Ends the partition; links keep their own conditions.
    public func heal() {
        guard isPartitioned else { return }
        isPartitioned = false
        record(.healed)
    }

    /// True when the current partition separates the two nodes.
    public func isPartitioned(_ first: SimAddress, from second: SimAddress) -> Bool {
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
    public func inject(_ bytes: [UInt8], from source: SimAddress, to destination: SimAddress) {
        transmit(bytes, from: source, to: destination)
    }

    /// Applies the link model to one datagram and schedules its arrival(s). The random draws
    /// happen in a fixed order, so one seed gives one outcome.
    func transmit(_ bytes: [UInt8], from source: SimAddress, to destination: SimAddress) {
        statistics.sent += 1
        statistics.bytesSent += bytes.count
        if source.index < statistics.nodes.count {
            statistics.nodes[source.index].sent += 1
            statistics.nodes[source.index].bytesSent += bytes.count
        }
        record(.sent(from: source, to: destination, bytes: bytes))

        guard destination.index < nodes.count else {
            return drop(from: source, to: destination, size: bytes.count, reason: .unknownDestination)
        }
        if blocked(source, destination) {
            return drop(from: source, to: destination, size: bytes.count, reason: .partition)
        }
        let conditions = link(from: source, to: destination)
        if let mtu = conditions.mtu, bytes.count > mtu {
            return drop(from: source, to: destination, size: bytes.count, reason: .mtu)
        }
        // The sender's uplink first: the datagram is on the wire once it has left the queue.
        var departure = now
        if source.index < nodes.count, nodes[source.index].uplink != nil {
            guard let leaves = nodes[source.index].uplink?.admit(bytes.count, at: now) else {
                return drop(from: source, to: destination, size: bytes.count, reason: .queue)
            }
            departure = leaves
        }
        let throughDownlink = nodes[destination.index].downlink != nil
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
            queue.push(throughDownlink ? .reachDownlink(from: source, to: destination, bytes: payload)
                           : .deliver(from: source, to: destination, bytes: payload), at: arrival)
        }
    }

    func drop(from source: SimAddress, to destination: SimAddress, size: Int, reason: SimDropReason) {
        statistics.dropped[reason] += 1
        record(.dropped(from: source, to: destination, size: size, reason: reason))
    }
}
