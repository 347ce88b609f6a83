import MeshCrypto
import NIOCore

/// "Your datagram came from this address": what a member saw as the source of an authenticated
/// datagram of ours, echoed back pairwise (frame 0x52). Behind a NAT it is the NAT's public
/// side (a reflexive address, STUN's XOR-MAPPED-ADDRESS without the XOR: the seal already
/// keeps middleboxes from rewriting it). Only a claim of the member that sends it: see
/// `AddressDiscovery` for what one claim can change.
package struct ObservedAddress: WireBody {
    package var address: PeerAddress

    package init(address: PeerAddress) {
        self.address = address
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        address = try PeerAddress(decoding: &buffer)
    }

    package func encode(into buffer: inout ByteBuffer) {
        address.encode(into: &buffer)
    }
}
