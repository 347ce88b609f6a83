import MeshCrypto

/// Asks the default gateway to map our UDP port (PCP, then NAT-PMP, then UPnP IGD), keeps the
/// mapping alive, and says when it changes. Pure: the driver hands it the gateway's answers,
/// timer ticks and the time, and carries out the directives it returns (PROTOCOL.md §1f).
///
/// Everything the gateway says is untrusted: an answer from another address, with another nonce
/// or opcode, or that does not parse is ignored (counted, logged once a round); a "success" that
/// cannot be one (lifetime 0, no port, an address nobody can send to) fails that protocol. A
/// mapping to a private address (another NAT in front of the gateway) is kept but not advertised.
/// Every exchange has a deadline, retransmissions and rounds are bounded, and after a round where
/// every protocol failed the next waits longer (up to `maxRetryAfter`).
package struct PortMappingInstance: Sendable {
    package struct Settings: Sendable, Equatable {
        /// The lifetime asked for (PCP, NAT-PMP) and the UPnP lease, in seconds.
        package var lifetime: UInt32 = 7200
        /// PCP and NAT-PMP: first retransmission, doubled after each try (RFC 6886 §3.1).
        package var firstRetransmit: Duration = .milliseconds(250)
        package var triesPerProtocol = 4
        /// How long answers to an SSDP search are awaited.
        package var searchWait: Duration = .seconds(2)
        /// Each HTTP exchange with the gateway (description, SOAP).
        package var httpTimeout: Duration = .seconds(3)
        /// After a round where every protocol failed; doubled each time, up to `maxRetryAfter`.
        package var retryAfter: Duration = .seconds(30)
        package var maxRetryAfter: Duration = .seconds(1800)

        package init() {}

        /// The shortest wait between two renewals, whatever lifetime the gateway grants: a
        /// gateway granting one second does not make us ask twice a second.
        var minimumRenewal: Duration { min(.seconds(30), .seconds(Int64(lifetime) / 2)) }
    }

    package enum MappingProtocol: String, Sendable, CaseIterable, Codable {
        case pcp
        case natpmp = "nat-pmp"
        case upnp
    }

    package enum Phase: String, Sendable, Equatable {
        /// Turned off (`run --no-port-mapping`).
        case disabled
        /// No default route (IPv4): nobody to ask.
        case noGateway = "no-gateway"
        /// Our address towards the gateway is public: no NAT in front of us to ask.
        case notNeeded = "not-needed"
        /// The first round, or one after a mapping was lost.
        case discovering
        /// A mapping is held (and renewed before it runs out).
        case mapped
        /// Every protocol failed; another round follows later.
        case failed
        case stopped
    }

    /// A mapping the gateway granted.
    package struct Mapping: Sendable, Equatable {
        package var mappingProtocol: MappingProtocol
        package var external: PeerAddress
        /// Seconds granted; 0 for a permanent UPnP lease.
        package var lifetime: UInt32
        /// Nil for a permanent lease.
        package var expires: MeshInstant?
        package var renewal: MeshInstant
        /// False when the external address is private (double NAT): nobody outside reaches it.
        package var advertised: Bool
    }

    package struct Counters: Sendable, Equatable {
        /// Datagrams and HTTP requests sent to the gateway.
        package var requests: UInt64 = 0
        /// Answers ignored: from another address, not parsing, another nonce, opcode or port.
        package var answersIgnored: UInt64 = 0
        /// Answers of success that could not be one (lifetime 0, no port, an unusable or private
        /// external address).
        package var answersRefused: UInt64 = 0
        /// Mappings made (the first and each after one was lost; renewals are not counted).
        package var mappingsMade: UInt64 = 0
    }

    package let settings: Settings
    /// Our UDP port: the one to map.
    package let internalPort: UInt16
    private let nonce: [UInt8]
    package private(set) var phase: Phase
    package private(set) var mapping: Mapping?
    package private(set) var gateway: UInt32?
    /// Our address towards the gateway (PCP's client address, UPnP's internal client).
    package private(set) var local: UInt32?
    /// Why the last round mapped nothing, protocol by protocol.
    package private(set) var failures: [MappingProtocol: String] = [:]
    /// Why a mapping held is not advertised, or why none is held (when not for `failures`).
    package private(set) var note: String?
    package private(set) var counters = Counters()

    private var round: [MappingProtocol] = []
    private var step = Step.idle
    private var pcpHeardFrom = false
    private var networkKnown = false
    private var nextRound: MeshInstant?
    private var failedRounds = 0
    private var nextRequest: UInt64 = 0
    private var loggedIgnored: Set<String> = []
    private var directives: [PortMappingDirective] = []
    /// UPnP: the service and external port of the mapping held, to renew and delete it.
    private var upnpMapping: (service: UPnPService, port: UInt16)?
    /// True once the first round ended (mapped or failed): `run --print-invite` waits for it.
    package private(set) var settled = false

    fileprivate enum Step: Sendable {
        case idle
        case pcp(tries: Int, due: MeshInstant)
        case natpmpAddress(tries: Int, due: MeshInstant)
        case natpmpMap(external: UInt32, tries: Int, due: MeshInstant)
        case search(tries: Int, due: MeshInstant, until: MeshInstant)
        case description(HTTPLocation, request: UInt64, deadline: MeshInstant)
        case externalAddress(UPnPService, request: UInt64, deadline: MeshInstant)
        case addMapping(UPnPService, external: UInt32, lease: UInt32, request: UInt64, deadline: MeshInstant)
    }

    /// `nonce`: 12 random bytes (PCP's mapping nonce, kept for renewals and the delete).
    /// `disabledBecause`: why the node asks for no mapping (nil: it does).
    package init(
        settings: Settings = .init(), internalPort: UInt16, nonce: [UInt8], disabledBecause disabled: String? = nil
    ) {
        self.settings = settings
        self.internalPort = internalPort
        self.nonce = Array(nonce.prefix(12)) + [UInt8](repeating: 0, count: max(0, 12 - nonce.count))
        phase = disabled == nil ? .noGateway : .disabled
        note = disabled
        settled = disabled != nil
    }

    // MARK: inputs

    /// The default gateway and our address towards it (nil: no IPv4 default route). A change
    /// drops the mapping held (it belongs to the old network) and starts a round at once.
    package mutating func setNetwork(gateway: UInt32?, local: UInt32?, now: MeshInstant) -> [PortMappingDirective] {
        guard phase != .disabled, phase != .stopped, !networkKnown || gateway != self.gateway || local != self.local
        else { return [] }
        networkKnown = true
        (self.gateway, self.local) = (gateway, local)
        step = .idle
        failedRounds = 0
        loseMapping()
        if let local, !Self.isPrivate(local) {
            phase = .notNeeded
            note =
                "our address towards the gateway, \(PeerAddress(host: .ipv4(local), port: 0).hostString), is public: no NAT to ask"
            nextRound = nil
            settled = true
        } else if let gateway, local != nil {
            log(
                .info, "port mapping: asking the gateway",
                ["gateway": "\(PeerAddress(host: .ipv4(gateway), port: 0).hostString)"])
            startRound(MappingProtocol.allCases, now: now)
        } else {
            phase = .noGateway
            note = "no IPv4 default route"
            nextRound = nil
            settled = true
        }
        return drain()
    }

    /// A datagram arrived on the port-mapping socket (PCP, NAT-PMP and SSDP answers).
    package mutating func receive(
        _ bytes: [UInt8], from source: PeerAddress, now: MeshInstant
    ) -> [PortMappingDirective] {
        guard let gateway, case let .ipv4(host) = source.host, host == gateway else {
            ignore("an answer from another address than the gateway", detail: source.description)
            return drain()
        }
        switch step {
        case .pcp where source.port == PCPMessage.serverPort:
            receivePCP(bytes, now: now)
        case .natpmpAddress where source.port == NATPMPMessage.serverPort,
            .natpmpMap where source.port == NATPMPMessage.serverPort:
            receiveNATPMP(bytes, now: now)
        case .search:
            guard let location = SSDPMessage.location(inAnswer: bytes) else {
                ignore("an SSDP answer naming no gateway device")
                break
            }
            // The description is fetched from the gateway only: a LOCATION elsewhere would make
            // us send requests wherever an answer says.
            guard location.host == gateway else {
                ignore("an SSDP answer whose LOCATION is not the gateway", detail: location.description)
                break
            }
            startExchange(.description(location, request: 0, deadline: now), now: now)
        case .description, .externalAddress, .addMapping:
            // The other answers to the search (one per target, multicast and unicast): taken already.
            break
        default:
            ignore("an answer nothing was asked for", detail: "port \(source.port)")
        }
        return drain()
    }

    /// The gateway refused a datagram to its port 5351 (ICMP port unreachable): nothing serves
    /// PCP or NAT-PMP there, no need to wait out the retransmissions.
    package mutating func portUnreachable(now: MeshInstant) -> [PortMappingDirective] {
        switch step {
        case .pcp: fail(.pcp, "no answer (port 5351 closed)", now: now)
        case .natpmpAddress, .natpmpMap: fail(.natpmp, "no answer (port 5351 closed)", now: now)
        default: break
        }
        return drain()
    }

    /// The answer to the HTTP request `id` (the body as far as read, at most what was allowed).
    package mutating func httpAnswered(
        _ id: UInt64, status: Int, body: [UInt8], now: MeshInstant
    ) -> [PortMappingDirective] {
        switch step {
        case let .description(location, request, _) where request == id:
            guard status == 200, let service = UPnPService.find(inDescription: body, location: location) else {
                fail(
                    .upnp,
                    status == 200
                        ? "the description names no WAN connection service" : "description: HTTP status \(status)",
                    now: now)
                break
            }
            guard service.control.host == gateway else {
                fail(.upnp, "the control URL is not at the gateway", now: now)
                break
            }
            startExchange(.externalAddress(service, request: 0, deadline: now), now: now)
        case let .externalAddress(service, request, _) where request == id:
            switch UPnPSOAP.answer(status: status, body: body) {
            case let .success(values):
                guard let text = values["NewExternalIPAddress"], case let .ipv4(external)? = PeerAddress.parseHost(text)
                else {
                    refuse("GetExternalIPAddress gave no IPv4 address")
                    fail(.upnp, "the gateway gave no external address", now: now)
                    break
                }
                startExchange(
                    .addMapping(service, external: external, lease: settings.lifetime, request: 0, deadline: now),
                    now: now)
            case let .fault(code, description):
                fail(.upnp, "GetExternalIPAddress refused: \(code) \(Self.printable(description))", now: now)
            }
        case let .addMapping(service, external, lease, request, _) where request == id:
            switch UPnPSOAP.answer(status: status, body: body) {
            case let .success(values):
                var port = internalPort
                if service.hasAddAny {
                    guard let text = values["NewReservedPort"], let reserved = UInt16(text), reserved != 0 else {
                        refuse("AddAnyPortMapping gave no port")
                        fail(.upnp, "the gateway gave no external port", now: now)
                        break
                    }
                    port = reserved
                }
                upnpMapping = (service, port)
                mapped(.upnp, external: external, port: port, lifetime: lease, now: now)
            case let .fault(code, _) where code == 725 && lease != 0:
                // OnlyPermanentLeasesSupported: asked again for a permanent one (deleted at stop).
                startExchange(.addMapping(service, external: external, lease: 0, request: 0, deadline: now), now: now)
            case let .fault(code, description):
                fail(
                    .upnp,
                    "\(service.hasAddAny ? "AddAnyPortMapping" : "AddPortMapping") refused: \(code) \(Self.printable(description))",
                    now: now)
            }
        default:
            ignore("an HTTP answer nothing waits for")
        }
        return drain()
    }

    /// The HTTP request `id` failed (refused, reset, too large, timed out).
    package mutating func httpFailed(_ id: UInt64, reason: String, now: MeshInstant) -> [PortMappingDirective] {
        switch step {
        case let .description(_, request, _) where request == id,
            let .externalAddress(_, request, _) where request == id,
            let .addMapping(_, _, _, request, _) where request == id:
            fail(.upnp, Self.printable(reason), now: now)
        default:
            break
        }
        return drain()
    }

    /// Retransmissions, deadlines, renewals, expiries and the next round, as they fall due.
    package mutating func tick(now: MeshInstant) -> [PortMappingDirective] {
        if let mapping, let expires = mapping.expires, now >= expires {
            log(
                .warning, "port mapping: the mapping ran out before it was renewed",
                ["external": mapping.external.description])
            loseMapping()
            phase = .discovering
            if step.isIdle { startRound(MappingProtocol.allCases, now: now) }
        }
        switch step {
        case let .pcp(tries, due) where now >= due:
            if tries >= settings.triesPerProtocol {
                fail(.pcp, pcpHeardFrom ? "no usable answer" : "no answer", now: now)
            } else {
                sendPCP(tries: tries + 1, now: now)
            }
        case let .natpmpAddress(tries, due) where now >= due:
            if tries >= settings.triesPerProtocol {
                fail(.natpmp, "no answer", now: now)
            } else {
                sendNATPMPAddress(tries: tries + 1, now: now)
            }
        case let .natpmpMap(external, tries, due) where now >= due:
            if tries >= settings.triesPerProtocol {
                fail(.natpmp, "no answer to the mapping request", now: now)
            } else {
                sendNATPMPMap(external: external, tries: tries + 1, now: now)
            }
        case let .search(tries, due, until) where now >= due:
            if now >= until {
                fail(.upnp, "no answer to the SSDP search", now: now)
            } else if tries < 3 {
                sendSearch(tries: tries + 1, until: until, now: now)
            } else {
                step = .search(tries: tries, due: until, until: until)
            }
        case let .description(_, _, deadline) where now >= deadline,
            let .externalAddress(_, _, deadline) where now >= deadline,
            let .addMapping(_, _, _, _, deadline) where now >= deadline:
            fail(.upnp, "the gateway did not answer over HTTP in time", now: now)
        default:
            break
        }
        if step.isIdle, let next = nextRound, now >= next, gateway != nil {
            nextRound = nil
            // A renewal asks the protocol that mapped first; the others follow if it fails.
            let order =
                mapping.map { held in
                    [held.mappingProtocol] + MappingProtocol.allCases.filter { $0 != held.mappingProtocol }
                }
                ?? MappingProtocol.allCases
            startRound(order, now: now)
        }
        return drain()
    }

    /// The node stops or leaves: the mapping held is deleted (PCP and NAT-PMP with lifetime 0,
    /// UPnP with DeletePortMapping). The driver waits for none of it beyond a short bound.
    package mutating func stop(now: MeshInstant) -> [PortMappingDirective] {
        guard phase != .stopped else { return [] }
        if let mapping, let gateway, let local {
            let to = PeerAddress(host: .ipv4(gateway), port: PCPMessage.serverPort)
            switch mapping.mappingProtocol {
            case .pcp:
                emitSend(
                    PCPMessage.mapRequest(
                        nonce: nonce, client: local, internalPort: internalPort,
                        suggestedPort: mapping.external.port, lifetime: 0), to: to)
            case .natpmp:
                emitSend(NATPMPMessage.mapRequest(internalPort: internalPort, suggestedPort: 0, lifetime: 0), to: to)
            case .upnp:
                if let (service, port) = upnpMapping {
                    emitSOAP(
                        "DeletePortMapping", service: service,
                        arguments: [("NewRemoteHost", ""), ("NewExternalPort", "\(port)"), ("NewProtocol", "UDP")])
                }
            }
        }
        loseMapping()
        step = .idle
        nextRound = nil
        phase = .stopped
        settled = true
        return drain()
    }

    /// When `tick` is next due (nil: nothing is).
    package var nextDeadline: MeshInstant? {
        var deadlines: [MeshInstant] = []
        switch step {
        case .idle: break
        case let .pcp(_, due), let .natpmpAddress(_, due), let .natpmpMap(_, _, due), let .search(_, due, _):
            deadlines.append(due)
        case let .description(_, _, deadline), let .externalAddress(_, _, deadline),
            let .addMapping(_, _, _, _, deadline):
            deadlines.append(deadline)
        }
        if step.isIdle, let nextRound { deadlines.append(nextRound) }
        if let expires = mapping?.expires { deadlines.append(expires) }
        return deadlines.min()
    }

    /// Why no mapping is advertised, in a line (nil while one is, or while the first round runs).
    package var reason: String? {
        switch phase {
        case .disabled: return note ?? "turned off"
        case .noGateway: return note ?? "no IPv4 default route"
        case .notNeeded: return note
        case .failed:
            return MappingProtocol.allCases.map { "\($0.rawValue): \(failures[$0] ?? "not tried")" }.joined(
                separator: "; ")
        case .mapped: return note
        case .discovering, .stopped: return nil
        }
    }

    /// The protocol being tried now, if any.
    package var trying: MappingProtocol? {
        switch step {
        case .idle: nil
        case .pcp: .pcp
        case .natpmpAddress, .natpmpMap: .natpmp
        default: .upnp
        }
    }

    // MARK: rounds

    private mutating func startRound(_ order: [MappingProtocol], now: MeshInstant) {
        round = order
        nextRound = nil
        failures = [:]
        loggedIgnored = []
        pcpHeardFrom = false
        if mapping == nil { phase = .discovering }
        next(now: now)
    }

    /// Tries the next protocol of the round, or ends the round.
    private mutating func next(now: MeshInstant) {
        guard !round.isEmpty else { return roundFailed(now: now) }
        let attempt = round.removeFirst()
        switch attempt {
        case .pcp:
            sendPCP(tries: 1, now: now)
        case .natpmp:
            // A NAT-PMP server answers a PCP request (with version 0, RFC 6887 §9): a gateway
            // silent to PCP has no server on the port.
            if !pcpHeardFrom, failures[.pcp] != nil {
                failures[.natpmp] = "no answer on port 5351 (to PCP)"
                next(now: now)
            } else {
                sendNATPMPAddress(tries: 1, now: now)
            }
        case .upnp:
            sendSearch(tries: 1, until: now + settings.searchWait, now: now)
        }
    }

    private mutating func fail(_ failed: MappingProtocol, _ reason: String, now: MeshInstant) {
        failures[failed] = reason
        log(.info, "port mapping: \(failed.rawValue) failed", ["reason": reason])
        step = .idle
        next(now: now)
    }

    private mutating func roundFailed(now: MeshInstant) {
        step = .idle
        failedRounds += 1
        let wait = min(settings.retryAfter * Double(1 << min(failedRounds - 1, 16)), settings.maxRetryAfter)
        nextRound = now + wait
        if let mapping {
            // Kept while it lasts; the next round may renew it yet.
            if let expires = mapping.expires, expires < now + wait { nextRound = max(now, expires) }
            return
        }
        let wasFailed = phase == .failed
        phase = .failed
        if !wasFailed {
            log(.notice, "port mapping: the gateway mapped nothing", ["reasons": reason ?? "", "retryIn": "\(wait)"])
        }
        settled = true
    }

    private mutating func mapped(
        _ winner: MappingProtocol, external: UInt32, port: UInt16, lifetime: UInt32, now: MeshInstant
    ) {
        let address = PeerAddress(host: .ipv4(external), port: port)
        if Self.isUnusable(external) {
            refuse("a mapping to an address nobody can send to", detail: address.description)
            return fail(winner, "the gateway mapped to \(address.hostString), an address nobody can send to", now: now)
        }
        step = .idle
        round = []
        failedRounds = 0
        let advertised = !Self.isPrivate(external)
        let granted = Duration.seconds(Int64(lifetime))
        let renewIn =
            lifetime == 0
            ? Duration.seconds(Int64(settings.lifetime) / 2)
            : max(min(granted, .seconds(Int64(settings.lifetime))) / 2, settings.minimumRenewal)
        let fresh = Mapping(
            mappingProtocol: winner, external: address, lifetime: lifetime,
            expires: lifetime == 0 ? nil : now + granted, renewal: now + renewIn, advertised: advertised)
        let changed =
            mapping?.external != address || mapping?.advertised != advertised || mapping?.mappingProtocol != winner
        let wasAdvertised = mapping?.advertised ?? false
        if mapping == nil { counters.mappingsMade += 1 }
        mapping = fresh
        phase = .mapped
        settled = true
        failures = [:]
        nextRound = fresh.renewal
        note =
            advertised
            ? nil
            : "the gateway's external address \(address.hostString) is private: another NAT is in front of it (double NAT); not advertised"
        guard changed else { return }
        if !advertised { counters.answersRefused += 1 }
        log(
            advertised ? .notice : .warning, "port mapping: mapped",
            [
                "protocol": winner.rawValue, "external": address.description,
                "lifetime": lifetime == 0 ? "permanent" : "\(lifetime) s",
                "advertised": advertised ? "yes" : "no (private: double NAT)",
            ])
        if advertised || wasAdvertised { directives.append(.mappingChanged(advertised ? address : nil)) }
    }

    private mutating func loseMapping() {
        guard let held = mapping else { return }
        mapping = nil
        upnpMapping = nil
        note = nil
        if held.advertised { directives.append(.mappingChanged(nil)) }
    }

    // MARK: PCP

    private mutating func sendPCP(tries: Int, now: MeshInstant) {
        guard let gateway, let local else { return }
        emitSend(
            PCPMessage.mapRequest(
                nonce: nonce, client: local, internalPort: internalPort,
                suggestedPort: mapping?.external.port ?? internalPort, lifetime: settings.lifetime),
            to: PeerAddress(host: .ipv4(gateway), port: PCPMessage.serverPort))
        step = .pcp(tries: tries, due: now + retransmitWait(tries))
    }

    private mutating func receivePCP(_ bytes: [UInt8], now: MeshInstant) {
        pcpHeardFrom = true
        guard let answer = PCPMessage.decode(bytes) else { return ignore("a PCP answer that does not parse") }
        switch answer {
        case .unsupportedVersion:
            fail(.pcp, "the gateway speaks NAT-PMP only (unsupported version)", now: now)
        case .other:
            ignore("a PCP answer to another opcode")
        case let .map(result, lifetime, _, answerNonce, port, externalPort, external):
            guard answerNonce == nonce, port == internalPort else {
                return ignore("a PCP answer with another nonce or port")
            }
            guard result == 0 else {
                let reason = PCPMessage.ResultCode(rawValue: result)?.reason ?? "result \(result)"
                return fail(.pcp, "refused: \(reason)", now: now)
            }
            guard lifetime > 0, externalPort != 0, case let .ipv4(address) = external else {
                refuse("a PCP success with lifetime 0, no port or no IPv4 address")
                return fail(
                    .pcp, "the gateway's success was none (lifetime \(lifetime), port \(externalPort))", now: now)
            }
            mapped(.pcp, external: address, port: externalPort, lifetime: lifetime, now: now)
        }
    }

    // MARK: NAT-PMP

    private mutating func sendNATPMPAddress(tries: Int, now: MeshInstant) {
        guard let gateway else { return }
        emitSend(NATPMPMessage.addressRequest, to: PeerAddress(host: .ipv4(gateway), port: NATPMPMessage.serverPort))
        step = .natpmpAddress(tries: tries, due: now + retransmitWait(tries))
    }

    private mutating func sendNATPMPMap(external: UInt32, tries: Int, now: MeshInstant) {
        guard let gateway else { return }
        emitSend(
            NATPMPMessage.mapRequest(
                internalPort: internalPort, suggestedPort: mapping?.external.port ?? internalPort,
                lifetime: settings.lifetime),
            to: PeerAddress(host: .ipv4(gateway), port: NATPMPMessage.serverPort))
        step = .natpmpMap(external: external, tries: tries, due: now + retransmitWait(tries))
    }

    private mutating func receiveNATPMP(_ bytes: [UInt8], now: MeshInstant) {
        guard let answer = NATPMPMessage.decode(bytes) else { return ignore("a NAT-PMP answer that does not parse") }
        switch (step, answer) {
        case let (.natpmpAddress, .address(result, _, external)):
            guard result == 0 else { return fail(.natpmp, "refused: \(NATPMPMessage.reason(result))", now: now) }
            sendNATPMPMap(external: external, tries: 1, now: now)
        case let (.natpmpMap(external, _, _), .map(result, _, port, externalPort, lifetime)):
            guard port == internalPort else { return ignore("a NAT-PMP answer for another port") }
            guard result == 0 else { return fail(.natpmp, "refused: \(NATPMPMessage.reason(result))", now: now) }
            guard lifetime > 0, externalPort != 0 else {
                refuse("a NAT-PMP success with lifetime 0 or no port")
                return fail(
                    .natpmp, "the gateway's success was none (lifetime \(lifetime), port \(externalPort))", now: now)
            }
            mapped(.natpmp, external: external, port: externalPort, lifetime: lifetime, now: now)
        case let (_, .other(_, result)) where result != 0:
            fail(.natpmp, "refused: \(NATPMPMessage.reason(result))", now: now)
        default:
            ignore("a NAT-PMP answer to another request")
        }
    }

    private func retransmitWait(_ tries: Int) -> Duration {
        settings.firstRetransmit * Double(1 << min(max(tries - 1, 0), 16))
    }

    // MARK: UPnP

    private mutating func sendSearch(tries: Int, until: MeshInstant, now: MeshInstant) {
        guard let gateway else { return }
        for target in SSDPMessage.gatewayDevices {
            emitSend(SSDPMessage.search(target), to: SSDPMessage.multicastGroup)
            emitSend(
                SSDPMessage.search(target), to: PeerAddress(host: .ipv4(gateway), port: SSDPMessage.multicastGroup.port)
            )
        }
        step = .search(tries: tries, due: min(now + retransmitWait(tries), until), until: until)
    }

    /// Starts the HTTP exchange of `next` (its request id and deadline are filled in here).
    private mutating func startExchange(_ next: Step, now: MeshInstant) {
        nextRequest += 1
        let id = nextRequest, deadline = now + settings.httpTimeout
        switch next {
        case let .description(location, _, _):
            emitHTTP(
                PortMappingHTTPRequest(
                    id: id, to: PeerAddress(host: .ipv4(location.host), port: location.port),
                    method: "GET", path: location.path, soapAction: nil, body: [],
                    maxBody: 64 * 1024, timeout: settings.httpTimeout))
            step = .description(location, request: id, deadline: deadline)
        case let .externalAddress(service, _, _):
            emitSOAP("GetExternalIPAddress", service: service, arguments: [], id: id)
            step = .externalAddress(service, request: id, deadline: deadline)
        case let .addMapping(service, external, lease, _, _):
            guard let local else { return }
            let action = service.hasAddAny ? "AddAnyPortMapping" : "AddPortMapping"
            let wanted = upnpMapping?.port ?? internalPort
            emitSOAP(
                action, service: service,
                arguments: [
                    ("NewRemoteHost", ""), ("NewExternalPort", "\(wanted)"), ("NewProtocol", "UDP"),
                    ("NewInternalPort", "\(internalPort)"),
                    ("NewInternalClient", PeerAddress(host: .ipv4(local), port: 0).hostString),
                    ("NewEnabled", "1"), ("NewPortMappingDescription", "groupmesh"), ("NewLeaseDuration", "\(lease)"),
                ], id: id)
            step = .addMapping(service, external: external, lease: lease, request: id, deadline: deadline)
        default:
            break
        }
    }

    private mutating func emitSOAP(
        _ action: String, service: UPnPService, arguments: [(String, String)], id: UInt64? = nil
    ) {
        let id =
            id
            ?? {
                nextRequest += 1; return nextRequest
            }()
        emitHTTP(
            PortMappingHTTPRequest(
                id: id, to: PeerAddress(host: .ipv4(service.control.host), port: service.control.port),
                method: "POST", path: service.control.path,
                soapAction: UPnPSOAP.soapAction(action, service: service.serviceType),
                body: UPnPSOAP.body(action, service: service.serviceType, arguments: arguments),
                maxBody: UPnPSOAP.maxAnswer, timeout: settings.httpTimeout))
    }

    // MARK: output

    private mutating func emitSend(_ bytes: [UInt8], to address: PeerAddress) {
        counters.requests += 1
        directives.append(.send(bytes, to: address))
    }

    private mutating func emitHTTP(_ request: PortMappingHTTPRequest) {
        counters.requests += 1
        directives.append(.http(request))
    }

    /// An answer not taken: counted always, logged once per kind a round.
    private mutating func ignore(_ what: String, detail: String? = nil) {
        counters.answersIgnored += 1
        guard loggedIgnored.count < 16, loggedIgnored.insert(what).inserted else { return }
        log(.info, "port mapping: ignored \(what)", detail.map { ["from": $0] } ?? [:])
    }

    /// A success that could not be one.
    private mutating func refuse(_ what: String, detail: String? = nil) {
        counters.answersRefused += 1
        log(.warning, "port mapping: refused \(what)", detail.map { ["answer": $0] } ?? [:])
    }

    private mutating func log(_ level: NodeLogLevel, _ message: String, _ metadata: [String: String] = [:]) {
        directives.append(.log(level, message, metadata))
    }

    private mutating func drain() -> [PortMappingDirective] {
        defer { directives = [] }
        return directives
    }

    // MARK: addresses

    /// Addresses nobody outside can send to: this network (0/8), loopback, multicast, reserved (240/4).
    static func isUnusable(_ address: UInt32) -> Bool {
        let first = address >> 24
        return first == 0 || first == 127 || first >= 224
    }

    /// Private addresses (RFC 1918), shared address space (CGNAT, 100.64/10) and link-local: a
    /// mapping there is made by a gateway that is itself behind another NAT.
    package static func isPrivate(_ address: UInt32) -> Bool {
        address >> 24 == 10 || address >> 20 == 0xAC1 || address >> 16 == 0xC0A8
            || address >> 22 == (100 << 2 | 1) || address >> 16 == 0xA9FE
    }

    /// At most 120 printable ASCII characters of what a gateway said (errors it describes).
    static func printable(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.prefix(120).map { $0.value >= 0x20 && $0.value < 0x7F ? $0 : "?" }))
    }
}

extension PortMappingInstance.Step {
    var isIdle: Bool { if case .idle = self { true } else { false } }
}

/// What the driver does for the port mapping.
package enum PortMappingDirective: Sendable, Equatable {
    /// A datagram from the port-mapping socket (to the gateway, or the SSDP group).
    case send([UInt8], to: PeerAddress)
    case http(PortMappingHTTPRequest)
    /// The address to advertise changed (nil: none any more).
    case mappingChanged(PeerAddress?)
    case log(NodeLogLevel, String, [String: String])
}

/// An HTTP/1.1 request to the gateway; the answer's body is read up to `maxBody` bytes (a longer
/// one fails the request), and the whole exchange is given up after `timeout`.
package struct PortMappingHTTPRequest: Sendable, Equatable {
    package var id: UInt64
    package var to: PeerAddress
    package var method: String
    package var path: String
    package var soapAction: String?
    package var body: [UInt8]
    package var maxBody: Int
    package var timeout: Duration
}
