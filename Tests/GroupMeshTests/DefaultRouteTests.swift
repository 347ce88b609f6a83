import Testing
@testable import GroupMesh

/// The port mapping's gateway: the IPv4 default route of `/proc/net/route`.
@Suite struct DefaultRouteTests {
    static let header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

    @Test func theDefaultRouteWithTheLowestMetric() {
        let routes =
            Self.header
            + "eth0\t00000000\t0101000A\t0003\t0\t0\t600\t00000000\t0\t0\t0\n"  // via 10.0.1.1, metric 600
            + "wlan0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"  // via 192.168.1.1, metric 100
            + "eth0\t0001000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"  // 10.0.1.0/24, no gateway
        #expect(DefaultRoute.gateway(routes: routes) == 0xC0A8_0101)
    }

    @Test func noDefaultRouteNoGateway() {
        #expect(
            DefaultRoute.gateway(routes: Self.header + "eth0\t0001000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
                == nil)
        // A default route without a gateway (a point-to-point link) and a line that does not parse.
        #expect(
            DefaultRoute.gateway(
                routes: Self.header + "tun0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\nbad\n") == nil)
        #expect(DefaultRoute.gateway(routes: nil) == nil && DefaultRoute.gateway(routes: "") == nil)
    }
}
