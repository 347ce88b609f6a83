import Foundation
import MeshCore
import MeshCrypto

/// Once a second the node's counts go to swift-metrics (`NodeMetrics`).
extension MeshNode {
    func publishMetrics() {
        metrics.publish(metricsReading(), now: now)
    }

    func metricsReading() -> NodeMetrics.Reading {
        var reading = NodeMetrics.Reading()
        reading.counters = core.counters
        reading.membership = core.membership.counters
        reading.retransmissions = core.delivery.retransmissions
        reading.requestTimeouts = core.transfer.timeouts
        reading.sendErrors = sendErrors
        reading.kernelReceiveDrops = KernelSocketDrops.read(localAddress: localAddress)
        for member in core.members { reading.members[member.status, default: 0] += 1 }
        var counted: Set<SHA256Digest> = []
        for entry in core.attachments {
            reading.attachments[core.availability(of: entry).state, default: 0] += 1
            // Content stored once for every attachment of it.
            guard counted.insert(entry.content).inserted else { continue }
            let have = core.chunksHeld(of: entry)
            if have >= entry.chunkCount {
                reading.storeBytes += entry.size
            } else if entry.chunkCount > 0 {
                reading.storeBytes += entry.size / UInt64(entry.chunkCount) * UInt64(have)
            }
        }
        reading.storeFreeBytes = Self.freeBytes(at: configuration.dataDirectory.path)
        reading.localHealth = core.membership.localHealth.score
        reading.keyEpoch = core.epochs.transitions.count
        reading.eventHandlers = eventHandlers?.counters ?? .init()
        return reading
    }

    /// What an unprivileged writer can still use on the file system holding `path`.
    static func freeBytes(at path: String) -> UInt64? {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return nil }
        return UInt64(stats.f_bavail) * UInt64(stats.f_frsize)
    }
}
