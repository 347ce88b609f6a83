import MeshCore
import MeshCrypto

/// A simulated cluster of membership processes, and the questions tests and benchmarks ask of
/// it: does everyone agree, who sees whom as what, how much did each node send.
package final class MembershipCluster {
    package let simulator: Simulator
    package let settings: MembershipSettings
    package private(set) var nodes: [SimAddress] = []

    package init(seed: UInt64, settings: MembershipSettings = .lan, link: LinkConditions = .default) {
        simulator = Simulator(seed: seed, defaultLink: link)
        self.settings = settings
    }

    /// `count` nodes that start out knowing each other (no join exchange), as after convergence.
    package static func converged(
        count: Int, seed: UInt64, settings: MembershipSettings = .lan,
        link: LinkConditions = .default
    ) -> MembershipCluster {
        let settings = settings.holding(count)
        let cluster = MembershipCluster(seed: seed, settings: settings, link: link)
        let processes = (0..<count).map { index in
            MembershipProcess.make(at: SimAddress(index), settings: settings, seed: seed &* 1_000_003 &+ UInt64(index))
        }
        // One table for all: each node holds only what it changes (10,000 nodes fit).
        let view = MemberTable(assuming: processes.map { $0.instance.me }, now: cluster.simulator.now)
        for process in processes {
            process.assume(view)
            cluster.nodes.append(cluster.simulator.addNode(process))
        }
        return cluster
    }

    /// `count` nodes that join one by one, `spacing` apart, each through a random earlier node.
    package static func joining(
        count: Int, seed: UInt64, spacing: Duration = .milliseconds(20),
        settings: MembershipSettings = .lan, link: LinkConditions = .default
    ) -> MembershipCluster {
        let settings = settings.holding(count)
        let cluster = MembershipCluster(seed: seed, settings: settings, link: link)
        var random = SplitMix64(seed: seed)
        for index in 0..<count {
            let seeds = index == 0 ? [] : [SimAddress(Int(random.next() % UInt64(index)))]
            let start = MeshInstant.zero + spacing * Double(index)
            let process = MembershipProcess.make(
                at: SimAddress(index), settings: settings,
                seed: seed &* 1_000_003 &+ UInt64(index), seeds: seeds, now: start)
            cluster.nodes.append(cluster.simulator.addNode(process, startingAt: start))
        }
        return cluster
    }

    package func process(_ node: SimAddress) -> MembershipProcess {
        // safe: every node of a cluster is a MembershipProcess
        simulator.process(at: node, as: MembershipProcess.self)!
    }

    package func id(of node: SimAddress) -> NodeID { process(node).id }

    package var running: [SimAddress] { simulator.runningAddresses }

    /// How `observer` sees `member` (nil: not known).
    package func status(of member: SimAddress, seenBy observer: SimAddress) -> MemberStatus? {
        process(observer).instance.member(id(of: member))?.status
    }

    /// Every running node sees every node of `alive` as alive and `gone` as dead or left (or forgotten).
    package func agrees(alive: [SimAddress], gone: [SimAddress] = []) -> Bool {
        let aliveIDs = alive.map(id(of:))
        let goneIDs = gone.map(id(of:))
        for observer in running {
            let instance = process(observer).instance
            for id in aliveIDs where instance.member(id)?.status != .alive { return false }
            for id in goneIDs {
                if let status = instance.member(id)?.status, !status.isGone { return false }
            }
        }
        return true
    }

    /// Every moment any running node declared a member of `nodes` dead.
    package func deathsDeclared(
        of nodes: [SimAddress]
    ) -> [(observer: SimAddress, member: SimAddress, time: MeshInstant)] {
        let watched = Dictionary(uniqueKeysWithValues: nodes.map { (id(of: $0), $0) })
        var deaths: [(SimAddress, SimAddress, MeshInstant)] = []
        for observer in self.nodes {
            for change in process(observer).changes where change.status == .dead {
                if let member = watched[change.member] { deaths.append((observer, member, change.time)) }
            }
        }
        return deaths
    }
}

extension MembershipSettings {
    /// Room for `count` live members: the protocol's scaling is simulated beyond the cap a
    /// session has.
    func holding(_ count: Int) -> MembershipSettings {
        var settings = self
        settings.maxLiveMembers = max(settings.maxLiveMembers, count)
        return settings
    }
}
