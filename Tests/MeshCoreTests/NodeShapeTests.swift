@testable import MeshCore
import Testing

/// The core stays small as it grows: `NodeInstance` holds its state in parts of one concern each
/// (NodeParts) and its timers in one table (`NodeTimer`).
@Suite("Node core shape")
struct NodeShapeTests {
    /// A new concern gets a part of its own, not a field of the instance.
    @Test func nodeInstanceHoldsAtMost25StoredProperties() {
        let driver = NodeInstanceTests.Driver()
        let stored = Mirror(reflecting: driver.core).children.compactMap(\.label)
        #expect(stored.count <= 25, "NodeInstance stores \(stored.count) properties: \(stored.joined(separator: ", "))")
    }

    /// After a tick no timer is due any more: the earliest deadline is the table's earliest, and
    /// it lies ahead.
    @Test func afterATickEveryDeadlineLiesAhead() {
        var driver = NodeInstanceTests.Driver()
        for step in 1...50 {
            driver.now = driver.now + .milliseconds(97 * step)
            driver.core.tick(now: driver.now)
            _ = driver.drain()
            let deadlines = NodeTimer.order.compactMap { driver.core.deadline(of: $0) }
            #expect(driver.core.nextDeadline == deadlines.min())
            for timer in NodeTimer.order {
                if let deadline = driver.core.deadline(of: timer) {
                    #expect(deadline > driver.now, "\(timer) is due at \(deadline) after a tick at \(driver.now)")
                }
            }
        }
    }
}
