@testable import GroupMesh
import MeshCrypto
import Testing

@Suite("the kernel's receive-buffer drops, read from /proc/net/udp")
struct KernelSocketDropsTests {
    static let table = """
           sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
          100: 0100007F:1F0A 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41234 2 0000000000000000 522013
          101: 00000000:1F0A 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41235 2 0000000000000000 7
          102: 0100007F:1F0B 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41236 2 0000000000000000 0
        """

    @Test("the line of our address and port, not another socket's on the same port")
    func readsOurLine() throws {
        #expect(KernelSocketDrops.procAddress(try PeerAddress(parsing: "127.0.0.1:7946")) == "0100007F:1F0A")
        #expect(
            KernelSocketDrops.drops(in: Self.table, localAddress: try PeerAddress(parsing: "127.0.0.1:7946")) == 522_013
        )
        #expect(KernelSocketDrops.drops(in: Self.table, localAddress: try PeerAddress(parsing: "0.0.0.0:7946")) == 7)
        #expect(KernelSocketDrops.drops(in: Self.table, localAddress: try PeerAddress(parsing: "127.0.0.1:7947")) == 0)
        #expect(KernelSocketDrops.drops(in: Self.table, localAddress: try PeerAddress(parsing: "10.0.0.1:7946")) == nil)
        #expect(
            KernelSocketDrops.drops(
                in: "garbage\nnot a table at all", localAddress: try PeerAddress(parsing: "127.0.0.1:1")) == nil)
        #expect(
            KernelSocketDrops.procAddress(try PeerAddress(parsing: "[::1]:7946"))
                == "00000000000000000000000001000000:1F0A")
    }
}
