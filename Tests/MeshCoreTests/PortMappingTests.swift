import MeshCrypto
import Testing
@testable import MeshCore

/// The port mapping's codecs and its state machine, against a scripted gateway.
@Suite struct PortMappingTests {
    static let gateway: UInt32 = 0x0A00_0101  // 10.0.1.1
    static let local: UInt32 = 0x0A00_0102  // 10.0.1.2
    static let external: UInt32 = 0xC633_6465  // 198.51.100.101
    static let nonce: [UInt8] = Array(1...12)
    static let pcpServer = PeerAddress(host: .ipv4(gateway), port: 5351)
    static let start = MeshInstant(nanoseconds: 1_000_000_000)

    // MARK: codecs

    @Test func pcpMapRequestLayout() {
        let request = PCPMessage.mapRequest(
            nonce: Self.nonce, client: Self.local, internalPort: 7946, suggestedPort: 7946,
            lifetime: 7200)
        #expect(request.count == 60)
        #expect(Array(request[0..<4]) == [2, 1, 0, 0])  // version 2, MAP request
        #expect(request.readUInt32(4) == 7200)
        #expect(Array(request[8..<24]) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 1, 2])  // ::ffff:10.0.1.2
        #expect(Array(request[24..<36]) == Self.nonce)
        #expect(Array(request[36..<40]) == [17, 0, 0, 0])  // UDP
        #expect(request.readUInt16(40) == 7946 && request.readUInt16(42) == 7946)
        #expect(Array(request[44..<60]) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0])
    }

    @Test func pcpAnswerDecodes() {
        let answer = Self.pcpAnswer(
            result: 0, lifetime: 3600, port: 7946, externalPort: 40_000, external: Self.external)
        #expect(
            PCPMessage.decode(answer)
                == .map(
                    result: 0, lifetime: 3600, epoch: 99, nonce: Self.nonce, internalPort: 7946,
                    externalPort: 40_000, external: .ipv4(Self.external)))
        // A NAT-PMP server's answer to a PCP request (version 0, result 1): fall back.
        #expect(PCPMessage.decode([0, 0x81, 0, 1, 0, 0, 0, 9]) == .unsupportedVersion(0))
        #expect(PCPMessage.decode([2, 0x81, 0, 1] + [UInt8](repeating: 0, count: 20)) == .unsupportedVersion(2))
        #expect(PCPMessage.decode(Array(answer.prefix(59))) == nil)
        #expect(PCPMessage.decode([2, 1, 0, 0] + [UInt8](repeating: 0, count: 56)) == nil)  // a request
        var announce = answer
        announce[1] = 0x80  // ANNOUNCE
        #expect(PCPMessage.decode(announce) == .other(opcode: 0))
    }

    @Test func natpmpCodecs() {
        #expect(NATPMPMessage.addressRequest == [0, 0])
        #expect(
            NATPMPMessage.mapRequest(internalPort: 7946, suggestedPort: 7946, lifetime: 7200)
                == [0, 1, 0, 0, 0x1F, 0x0A, 0x1F, 0x0A, 0, 0, 0x1C, 0x20])
        // RFC 6886 §3.2 and §3.3 answers.
        #expect(
            NATPMPMessage.decode([0, 128, 0, 0, 0, 0, 0, 5, 198, 51, 100, 101])
                == .address(result: 0, epoch: 5, external: Self.external))
        #expect(
            NATPMPMessage.decode([0, 129, 0, 0, 0, 0, 0, 5, 0x1F, 0x0A, 0x9C, 0x40, 0, 0, 0x0E, 0x10])
                == .map(result: 0, epoch: 5, internalPort: 7946, externalPort: 40_000, lifetime: 3600))
        #expect(NATPMPMessage.decode([0, 129, 0, 2, 0, 0, 0, 5]) == .other(opcode: 1, result: 2))
        #expect(NATPMPMessage.decode([0, 1, 0, 0]) == nil)  // a request
        #expect(NATPMPMessage.decode([2, 129, 0, 0]) == nil)
    }

    @Test func ssdpAnswerAndLocations() {
        let answer = Self.ssdpAnswer(location: "http://10.0.1.1:5000/rootDesc.xml")
        #expect(
            SSDPMessage.location(inAnswer: answer)
                == HTTPLocation(host: Self.gateway, port: 5000, path: "/rootDesc.xml"))
        #expect(
            SSDPMessage.location(inAnswer: Array("NOTIFY * HTTP/1.1\r\nLOCATION: http://10.0.1.1:1/\r\n\r\n".utf8))
                == nil)
        #expect(
            SSDPMessage.location(
                inAnswer: Self.ssdpAnswer(
                    location: "http://10.0.1.1:5000/x",
                    target: "urn:schemas-upnp-org:device:MediaServer:1")) == nil)
        #expect(HTTPLocation("http://router.lan:80/x") == nil)  // names are not resolved
        #expect(HTTPLocation("https://10.0.1.1:443/x") == nil)
        #expect(HTTPLocation("http://10.0.1.1:0/x") == nil)
        let base = HTTPLocation(host: Self.gateway, port: 5000, path: "/dev/root.xml")
        #expect(base.resolving("/ctl/IPConn") == HTTPLocation(host: Self.gateway, port: 5000, path: "/ctl/IPConn"))
        #expect(base.resolving("ctl") == HTTPLocation(host: Self.gateway, port: 5000, path: "/dev/ctl"))
        #expect(base.resolving("http://10.0.1.9:80/c") == HTTPLocation(host: 0x0A00_0109, port: 80, path: "/c"))
    }

    @Test func descriptionFindsTheWANService() {
        let location = HTTPLocation(host: Self.gateway, port: 5000, path: "/rootDesc.xml")
        let igd2 = UPnPService.find(inDescription: Self.description(service: "WANIPConnection:2"), location: location)
        #expect(
            igd2
                == UPnPService(
                    serviceType: "urn:schemas-upnp-org:service:WANIPConnection:2",
                    control: HTTPLocation(host: Self.gateway, port: 5000, path: "/ctl/IPConn")))
        #expect(igd2?.hasAddAny == true)
        let ppp = UPnPService.find(inDescription: Self.description(service: "WANPPPConnection:1"), location: location)
        #expect(ppp?.serviceType == "urn:schemas-upnp-org:service:WANPPPConnection:1" && ppp?.hasAddAny == false)
        #expect(
            UPnPService.find(inDescription: Self.description(service: "Layer3Forwarding:1"), location: location) == nil)
    }

    @Test func soapAnswersAndFaults() {
        let ok = Array(
            """
            <?xml version="1.0"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>\
            <u:GetExternalIPAddressResponse xmlns:u="urn:schemas-upnp-org:service:WANIPConnection:1">\
            <NewExternalIPAddress>198.51.100.101</NewExternalIPAddress></u:GetExternalIPAddressResponse></s:Body></s:Envelope>
            """.utf8)
        #expect(UPnPSOAP.answer(status: 200, body: ok).value("NewExternalIPAddress") == "198.51.100.101")
        #expect(
            UPnPSOAP.answer(status: 500, body: Self.fault(725, "OnlyPermanentLeasesSupported"))
                == .fault(code: 725, description: "OnlyPermanentLeasesSupported"))
        #expect(UPnPSOAP.answer(status: 404, body: []) == .fault(code: -404, description: "HTTP status 404"))
        let body = String(
            decoding: UPnPSOAP.body(
                "AddPortMapping", service: "urn:x", arguments: [("NewPortMappingDescription", "a<b&c")]),
            as: UTF8.self)
        #expect(body.contains("<NewPortMappingDescription>a&lt;b&amp;c</NewPortMappingDescription>"))
    }

    // MARK: the state machine

    @Test func pcpMapsAndRenewsAtHalfLife() throws {
        var mapper = Self.mapper()
        var out = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        let request = try #require(out.sends(to: Self.pcpServer).first)
        #expect(request.count == 60 && Array(request[24..<36]) == Self.nonce)
        out = mapper.receive(
            Self.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: Self.external),
            from: Self.pcpServer, now: Self.start + .milliseconds(3))
        let mapped = PeerAddress(host: .ipv4(Self.external), port: 7946)
        #expect(out.changes == [mapped])
        #expect(mapper.phase == .mapped && mapper.settled && mapper.mapping?.mappingProtocol == .pcp)
        let renewal = try #require(mapper.mapping?.renewal)
        #expect(renewal == Self.start + .milliseconds(3) + .seconds(3600))
        #expect(
            mapper.tick(now: MeshInstant(nanoseconds: renewal.nanoseconds - 1_000_000)).sends(to: Self.pcpServer)
                .isEmpty)
        let renew = mapper.tick(now: renewal).sends(to: Self.pcpServer)
        #expect(renew.count == 1 && Array(renew[0][24..<36]) == Self.nonce, "the renewal keeps the nonce")
        out = mapper.receive(
            Self.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: Self.external),
            from: Self.pcpServer, now: renewal)
        #expect(out.changes.isEmpty, "a renewal to the same address changes nothing")
        #expect(mapper.mapping?.renewal == renewal + .seconds(3600))
        #expect(mapper.counters.mappingsMade == 1)
    }

    @Test func aMappingDeletedOnTheRouterIsMadeAgainAtRenewal() throws {
        var mapper = Self.mapped()
        let renewal = try #require(mapper.mapping?.renewal)
        #expect(mapper.tick(now: renewal).sends(to: Self.pcpServer).count == 1)
        // The router lost it and maps the request afresh, at another port: that one is advertised.
        let out = mapper.receive(
            Self.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 50_000, external: Self.external),
            from: Self.pcpServer, now: renewal)
        #expect(out.changes == [PeerAddress(host: .ipv4(Self.external), port: 50_000)])
    }

    @Test func aLeaseThatRunsOutIsLostAndAskedForAgain() throws {
        var mapper = Self.mapped()
        var now = try #require(mapper.mapping?.renewal)
        var changes: [PeerAddress?] = []
        var sent = 0
        // The gateway goes silent: renewals, their retries, then the expiry.
        while now < Self.start + .seconds(7300) {
            let out = mapper.tick(now: now)
            if !out.changes.isEmpty { #expect(mapper.phase == .discovering, "no longer mapped once it ran out") }
            changes += out.changes
            sent += out.sends(to: Self.pcpServer).count
            now = mapper.nextDeadline ?? now + .seconds(1)
        }
        #expect(changes == [nil], "the mapping is withdrawn once it ran out")
        #expect(mapper.mapping == nil && mapper.phase != .mapped)
        #expect(
            sent <= 40, "bounded (rounds back off from 30 s): \(sent) PCP requests in the last hour of a silent gateway"
        )
    }

    @Test func fallsBackToNATPMPWhenPCPIsNotSpoken() throws {
        var mapper = Self.mapper()
        _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        var out = mapper.receive([0, 0x81, 0, 1, 0, 0, 0, 9], from: Self.pcpServer, now: Self.start)
        #expect(out.sends(to: Self.pcpServer) == [NATPMPMessage.addressRequest])
        out = mapper.receive([0, 128, 0, 0, 0, 0, 0, 5, 198, 51, 100, 101], from: Self.pcpServer, now: Self.start)
        #expect(
            out.sends(to: Self.pcpServer) == [
                NATPMPMessage.mapRequest(internalPort: 7946, suggestedPort: 7946, lifetime: 7200)
            ])
        out = mapper.receive(
            [0, 129, 0, 0, 0, 0, 0, 5, 0x1F, 0x0A, 0x1F, 0x0A, 0, 0, 0x0E, 0x10], from: Self.pcpServer, now: Self.start)
        #expect(out.changes == [PeerAddress(host: .ipv4(Self.external), port: 7946)])
        #expect(mapper.mapping?.mappingProtocol == .natpmp && mapper.mapping?.lifetime == 3600)
        // Deleted at stop: lifetime 0.
        #expect(
            mapper.stop(now: Self.start).sends(to: Self.pcpServer)
                == [NATPMPMessage.mapRequest(internalPort: 7946, suggestedPort: 0, lifetime: 0)])
    }

    @Test func aSilentGatewayIsAskedBoundedlyThenUPnPIsSearched() throws {
        var mapper = Self.mapper()
        var out = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        var pcp = out.sends(to: Self.pcpServer).count
        var now = Self.start
        var searched = false
        while !searched, now < Self.start + .seconds(60) {
            now = try #require(mapper.nextDeadline)
            out = mapper.tick(now: now)
            pcp += out.sends(to: Self.pcpServer).count
            searched = !out.sends(to: SSDPMessage.multicastGroup).isEmpty
        }
        #expect(pcp == 4, "PCP: 4 tries, then no NAT-PMP (nothing answers on its port)")
        #expect(now == Self.start + .milliseconds(3750), "250 ms doubling: \(now - Self.start)")
        #expect(searched)
        #expect(
            out.sends(to: PeerAddress(host: .ipv4(Self.gateway), port: 1900)).count == 2, "IGD:1 and IGD:2, unicast too"
        )
        // Nobody answers the search either: failed, and the next round waits 30 s, then 60 s.
        while mapper.phase != .failed { out = mapper.tick(now: try #require(mapper.nextDeadline)) }
        let reason = try #require(mapper.reason)
        #expect(reason.contains("pcp: no answer") && reason.contains("upnp: no answer to the SSDP search"), "\(reason)")
        #expect(mapper.settled)
        var rounds: [MeshInstant] = []
        let requestsBefore = mapper.counters.requests
        for _ in 0..<200 {
            let next = try #require(mapper.nextDeadline)
            let wasIdle = mapper.trying == nil
            _ = mapper.tick(now: next)
            if wasIdle, mapper.trying == .pcp { rounds.append(next) }
        }
        #expect(rounds.count >= 3)
        if rounds.count >= 3 { #expect(rounds[2] - rounds[1] > rounds[1] - rounds[0], "back-off grows") }
        let perRound = Double(mapper.counters.requests - requestsBefore) / Double(max(rounds.count, 1))
        #expect(perRound <= 16, "bounded: \(perRound) requests a round")
    }

    @Test func aClosedPortGoesStraightToUPnP() {
        var mapper = Self.mapper()
        _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        let out = mapper.portUnreachable(now: Self.start + .milliseconds(2))
        #expect(out.sends(to: SSDPMessage.multicastGroup).count == 2, "no retransmissions, no NAT-PMP: the search")
        #expect(mapper.failures[.pcp] == "no answer (port 5351 closed)" && mapper.failures[.natpmp] != nil)
        #expect(mapper.portUnreachable(now: Self.start).isEmpty, "a late ICMP error during UPnP changes nothing")
    }

    @Test func upnpMapsWithAddAnyAndDeletesAtStop() throws {
        var mapper = Self.searching()
        var out = mapper.receive(
            Self.ssdpAnswer(location: "http://10.0.1.1:5000/rootDesc.xml"),
            from: PeerAddress(host: .ipv4(Self.gateway), port: 1900), now: Self.start)
        let get = try #require(out.requests.first)
        #expect(
            get.method == "GET" && get.path == "/rootDesc.xml"
                && get.to == PeerAddress(host: .ipv4(Self.gateway), port: 5000))
        #expect(get.maxBody == 64 * 1024)
        out = mapper.httpAnswered(
            get.id, status: 200, body: Self.description(service: "WANIPConnection:2"), now: Self.start)
        let ask = try #require(out.requests.first)
        #expect(
            ask.soapAction == "\"urn:schemas-upnp-org:service:WANIPConnection:2#GetExternalIPAddress\""
                && ask.path == "/ctl/IPConn")
        out = mapper.httpAnswered(
            ask.id, status: 200,
            body: Self.soap(
                "GetExternalIPAddressResponse",
                ["NewExternalIPAddress": "198.51.100.101"]), now: Self.start)
        let add = try #require(out.requests.first)
        let addBody = String(decoding: add.body, as: UTF8.self)
        #expect(add.soapAction?.hasSuffix("#AddAnyPortMapping\"") == true)
        #expect(
            addBody.contains("<NewInternalClient>10.0.1.2</NewInternalClient>")
                && addBody.contains("<NewLeaseDuration>7200<"))
        out = mapper.httpAnswered(
            add.id, status: 200, body: Self.soap("AddAnyPortMappingResponse", ["NewReservedPort": "41000"]),
            now: Self.start)
        #expect(out.changes == [PeerAddress(host: .ipv4(Self.external), port: 41_000)])
        #expect(mapper.mapping?.mappingProtocol == .upnp)
        let delete = try #require(mapper.stop(now: Self.start).requests.first)
        let deleteBody = String(decoding: delete.body, as: UTF8.self)
        #expect(
            delete.soapAction?.hasSuffix("#DeletePortMapping\"") == true
                && deleteBody.contains("<NewExternalPort>41000<"))
        #expect(mapper.phase == .stopped)
    }

    @Test func upnpTakesAPermanentLeaseWhenOnlyThatIsGranted() throws {
        var mapper = Self.searching()
        var out = mapper.receive(
            Self.ssdpAnswer(location: "http://10.0.1.1:5000/rootDesc.xml"),
            from: PeerAddress(host: .ipv4(Self.gateway), port: 1900), now: Self.start)
        out = mapper.httpAnswered(
            try #require(out.requests.first).id, status: 200,
            body: Self.description(service: "WANIPConnection:1"), now: Self.start)
        out = mapper.httpAnswered(
            try #require(out.requests.first).id, status: 200,
            body: Self.soap("GetExternalIPAddressResponse", ["NewExternalIPAddress": "198.51.100.101"]), now: Self.start
        )
        let first = try #require(out.requests.first)
        #expect(first.soapAction?.hasSuffix("#AddPortMapping\"") == true)
        out = mapper.httpAnswered(
            first.id, status: 500, body: Self.fault(725, "OnlyPermanentLeasesSupported"), now: Self.start)
        let second = try #require(out.requests.first)
        #expect(String(decoding: second.body, as: UTF8.self).contains("<NewLeaseDuration>0<"))
        out = mapper.httpAnswered(
            second.id, status: 200, body: Self.soap("AddPortMappingResponse", [:]), now: Self.start)
        #expect(out.changes == [PeerAddress(host: .ipv4(Self.external), port: 7946)])
        #expect(mapper.mapping?.lifetime == 0 && mapper.mapping?.expires == nil)
        #expect(
            mapper.mapping?.renewal == Self.start + .seconds(3600),
            "a permanent lease is still renewed (a reboot loses it)")
    }

    // MARK: lies

    @Test func answersFromElsewhereGarbageAndOtherNoncesAreIgnored() {
        var mapper = Self.mapper()
        _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        let good = Self.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: Self.external)
        var out = mapper.receive(good, from: PeerAddress(host: .ipv4(0x0A00_0109), port: 5351), now: Self.start)
        out += mapper.receive([0xFF, 0x00, 0x13], from: Self.pcpServer, now: Self.start)
        var otherNonce = good
        otherNonce[24] ^= 0xFF
        out += mapper.receive(otherNonce, from: Self.pcpServer, now: Self.start)
        var otherOpcode = good
        otherOpcode[1] = 0x82
        out += mapper.receive(otherOpcode, from: Self.pcpServer, now: Self.start)
        out += mapper.receive(otherOpcode, from: Self.pcpServer, now: Self.start)
        #expect(out.changes.isEmpty && mapper.mapping == nil)
        #expect(mapper.counters.answersIgnored == 5)
        #expect(out.logs.count == 4, "one line per kind of lie: \(out.logs)")
        #expect(mapper.trying == .pcp, "still waiting for the real answer")
        out = mapper.receive(good, from: Self.pcpServer, now: Self.start)
        #expect(out.changes.count == 1)
    }

    @Test func successesThatCannotBeOneFailTheProtocol() throws {
        for (lifetime, port, address) in [
            (UInt32(0), UInt16(7946), Self.external), (7200, 0, Self.external),
            (7200, 7946, 0), (7200, 7946, 0xE000_0001), (7200, 7946, 0x7F00_0001),
        ] {
            var mapper = Self.mapper()
            _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
            let out = mapper.receive(
                Self.pcpAnswer(result: 0, lifetime: lifetime, port: 7946, externalPort: port, external: address),
                from: Self.pcpServer, now: Self.start)
            #expect(
                out.changes.isEmpty && mapper.mapping == nil, "lifetime \(lifetime) port \(port) address \(address)")
            #expect(mapper.counters.answersRefused == 1)
            #expect(mapper.failures[.pcp] != nil && mapper.trying == .natpmp, "on to NAT-PMP")
        }
    }

    @Test func aPrivateExternalAddressIsNotAdvertised() {
        var mapper = Self.mapper()
        _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        let out = mapper.receive(
            Self.pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: 0x6440_0007),
            from: Self.pcpServer, now: Self.start)  // 100.64.0.7: CGNAT
        #expect(out.changes.isEmpty, "nothing to advertise")
        #expect(mapper.phase == .mapped && mapper.mapping?.advertised == false)
        #expect(mapper.reason?.contains("double NAT") == true)
        #expect(
            PortMappingInstance.isPrivate(0xC0A8_0001) && PortMappingInstance.isPrivate(0xAC1F_0001)
                && PortMappingInstance.isPrivate(0xA9FE_0101) && !PortMappingInstance.isPrivate(Self.external)
                && !PortMappingInstance.isPrivate(0xAC20_0001))
    }

    @Test func refusalsAndForeignLocationsAreNotFollowed() throws {
        var mapper = Self.mapper()
        _ = mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start)
        var out = mapper.receive(
            Self.pcpAnswer(result: 2, lifetime: 30, port: 7946, externalPort: 0, external: 0),
            from: Self.pcpServer, now: Self.start)
        #expect(mapper.failures[.pcp] == "refused: not authorized")
        out = mapper.receive([0, 128, 0, 2, 0, 0, 0, 5], from: Self.pcpServer, now: Self.start)
        #expect(mapper.failures[.natpmp] == "refused: not authorized or refused")
        #expect(mapper.trying == .upnp)
        // An SSDP answer pointing elsewhere is not followed.
        out = mapper.receive(
            Self.ssdpAnswer(location: "http://203.0.113.9:80/evil.xml"),
            from: PeerAddress(host: .ipv4(Self.gateway), port: 1900), now: Self.start)
        #expect(out.requests.isEmpty && mapper.counters.answersIgnored == 1)
    }

    @Test func disabledAndWithoutGatewayNothingIsAsked() {
        var off = PortMappingInstance(
            internalPort: 7946, nonce: Self.nonce, disabledBecause: "turned off (--no-port-mapping)")
        #expect(off.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start).isEmpty)
        #expect(off.phase == .disabled && off.settled && off.reason == "turned off (--no-port-mapping)")
        var alone = Self.mapper()
        #expect(alone.setNetwork(gateway: nil, local: nil, now: Self.start).sends(to: Self.pcpServer).isEmpty)
        #expect(alone.phase == .noGateway && alone.settled && alone.nextDeadline == nil)
    }

    @Test func aPublicAddressNeedsNoMapping() {
        var mapper = Self.mapper()
        let out = mapper.setNetwork(gateway: 0xC633_6401, local: 0xC633_640A, now: Self.start)  // 198.51.100.10
        #expect(out.sends(to: PeerAddress(host: .ipv4(0xC633_6401), port: 5351)).isEmpty)
        #expect(mapper.phase == .notNeeded && mapper.settled && mapper.nextDeadline == nil)
        #expect(mapper.reason?.contains("198.51.100.10, is public") == true)
        // Moved behind a NAT: asked at once.
        #expect(
            mapper.setNetwork(gateway: Self.gateway, local: Self.local, now: Self.start).sends(to: Self.pcpServer).count
                == 1)
    }

    @Test func aNewNetworkDropsTheMappingAndAsksAgain() throws {
        var mapper = Self.mapped()
        let out = mapper.setNetwork(gateway: 0xC0A8_0101, local: 0xC0A8_0164, now: Self.start + .seconds(5))
        #expect(out.changes == [nil])
        #expect(out.sends(to: PeerAddress(host: .ipv4(0xC0A8_0101), port: 5351)).count == 1)
        #expect(mapper.phase == .discovering)
    }

    @Test func stopDeletesAPCPMapping() throws {
        var mapper = Self.mapped()
        let delete = try #require(mapper.stop(now: Self.start).sends(to: Self.pcpServer).first)
        #expect(delete.readUInt32(4) == 0 && Array(delete[24..<36]) == Self.nonce)
        #expect(mapper.stop(now: Self.start).isEmpty)
    }

    // MARK: helpers

    static func mapper() -> PortMappingInstance { PortMappingInstance(internalPort: 7946, nonce: nonce) }

    static func mapped() -> PortMappingInstance {
        var mapper = mapper()
        _ = mapper.setNetwork(gateway: gateway, local: local, now: start)
        _ = mapper.receive(
            pcpAnswer(result: 0, lifetime: 7200, port: 7946, externalPort: 7946, external: external),
            from: pcpServer, now: start)
        return mapper
    }

    /// PCP and NAT-PMP said no: UPnP's search is under way.
    static func searching() -> PortMappingInstance {
        var mapper = mapper()
        _ = mapper.setNetwork(gateway: gateway, local: local, now: start)
        _ = mapper.receive(
            pcpAnswer(result: 2, lifetime: 30, port: 7946, externalPort: 0, external: 0), from: pcpServer, now: start)
        _ = mapper.receive([0, 128, 0, 2, 0, 0, 0, 5], from: pcpServer, now: start)
        return mapper
    }

    static func pcpAnswer(
        result: UInt8, lifetime: UInt32, port: UInt16, externalPort: UInt16, external: UInt32
    ) -> [UInt8] {
        var bytes: [UInt8] = [2, 0x81, 0, result]
        bytes.appendBigEndian(lifetime)
        bytes.appendBigEndian(UInt32(99))
        bytes += [UInt8](repeating: 0, count: 12) + nonce + [17, 0, 0, 0]
        bytes.appendBigEndian(port)
        bytes.appendBigEndian(externalPort)
        bytes += PCPMessage.ipv4Mapped(external)
        return bytes
    }

    static func ssdpAnswer(
        location: String, target: String = "urn:schemas-upnp-org:device:InternetGatewayDevice:1"
    ) -> [UInt8] {
        Array(
            "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: \(target)\r\nUSN: uuid:1::\(target)\r\nEXT:\r\nSERVER: Linux UPnP/1.1\r\nLOCATION: \(location)\r\n\r\n"
                .utf8)
    }

    static func description(service: String) -> [UInt8] {
        Array(
            """
            <?xml version="1.0"?>
            <root xmlns="urn:schemas-upnp-org:device-1-0"><specVersion><major>1</major><minor>1</minor></specVersion>
            <device><deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:2</deviceType>
            <serviceList><service><serviceType>urn:schemas-upnp-org:service:Layer3Forwarding:1</serviceType>
            <controlURL>/ctl/L3F</controlURL></service></serviceList>
            <deviceList><device><deviceType>urn:schemas-upnp-org:device:WANConnectionDevice:2</deviceType>
            <serviceList><service><serviceType>urn:schemas-upnp-org:service:\(service)</serviceType>
            <serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId><SCPDURL>/WANIPCn.xml</SCPDURL>
            <controlURL>/ctl/IPConn</controlURL><eventSubURL>/evt/IPConn</eventSubURL></service></serviceList>
            </device></deviceList></device></root>
            """.utf8)
    }

    static func soap(_ response: String, _ values: [String: String]) -> [UInt8] {
        let inner = values.map { "<\($0.key)>\($0.value)</\($0.key)>" }.joined()
        return Array(
            ("<?xml version=\"1.0\"?><s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>"
                + "<u:\(response) xmlns:u=\"urn:x\">\(inner)</u:\(response)></s:Body></s:Envelope>").utf8)
    }

    static func fault(_ code: Int, _ description: String) -> [UInt8] {
        Array(
            ("<?xml version=\"1.0\"?><s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body><s:Fault>"
                + "<faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail>"
                + "<UPnPError xmlns=\"urn:schemas-upnp-org:control-1-0\"><errorCode>\(code)</errorCode>"
                + "<errorDescription>\(description)</errorDescription></UPnPError></detail></s:Fault></s:Body></s:Envelope>")
                .utf8)
    }
}

extension [PortMappingDirective] {
    func sends(to address: PeerAddress) -> [[UInt8]] {
        compactMap { if case let .send(bytes, to) = $0, to == address { bytes } else { nil } }
    }

    var requests: [PortMappingHTTPRequest] { compactMap { if case let .http(request) = $0 { request } else { nil } } }
    var changes: [PeerAddress?] {
        compactMap { if case let .mappingChanged(address) = $0 { .some(address) } else { nil } }
    }
    var logs: [String] { compactMap { if case let .log(_, message, _) = $0 { message } else { nil } } }
}

extension UPnPSOAP.Answer {
    func value(_ name: String) -> String? { if case let .success(values) = self { values[name] } else { nil } }
}
