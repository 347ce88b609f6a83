import MeshCrypto

/// Asks STUN servers where our datagrams come from (RFC 8489 Binding), from the node's own
/// socket, so the answer is the mapping members would see. Pure: the driver hands it the
/// server's datagrams, ticks and `now`, and carries out the directives it returns.
///
/// One question at a time, to one server: sent again after 500 ms, 1 s, 2 s (4 tries), then
/// that server is given up until the next round, which asks the next server after a back-off
/// (10 s doubling to 5 min). An answered question is asked again every `requery` (60 s), and
/// soon after our local address changes.
package struct StunClient: Sendable {
    package struct Settings: Sendable, Equatable {
        package var initialRTO: Duration = .milliseconds(500)
        package var maxTries = 4
        package var requery: Duration = .seconds(60)
        package var firstRetry: Duration = .seconds(10)
        package var maxRetry: Duration = .seconds(300)
        /// How soon after a local address change the question is asked again.
        package var afterChange: Duration = .seconds(1)
        package init() {}
    }

    struct Question: Sendable, Equatable {
        var id: StunMessage.TransactionID
        var server: Int
        var tries: Int
        var nextTry: MeshInstant
        var rto: Duration
        var request: [UInt8]
    }

    package enum Phase: Sendable, Equatable {
        /// Nothing outstanding; the next question goes out at `until`.
        case waiting(until: MeshInstant)
        case asking(server: PeerAddress, tries: Int)
    }

    /// What the latest round ended with.
    package enum Outcome: Sendable, Equatable {
        case notAskedYet
        case answered
        case noAnswer
        case error(code: Int, reason: String)
    }

    package enum Directive: Sendable, Equatable {
        case send([UInt8], to: PeerAddress)
        /// The server saw us at this address (a change from before).
        case learnt(PeerAddress)
    }

    package struct Counters: Sendable, Equatable {
        package var requestsSent: UInt64 = 0
        package var answers: UInt64 = 0
        /// Datagrams from a server that were no answer to the question outstanding (garbage, an
        /// old or made-up transaction id, a bad fingerprint).
        package var dropped: UInt64 = 0
    }

    package let servers: [PeerAddress]
    package let settings: Settings
    package private(set) var mapped: PeerAddress?
    /// The server that answered last.
    package private(set) var answeredBy: PeerAddress?
    package private(set) var outcome = Outcome.notAskedYet
    package private(set) var counters = Counters()
    private var question: Question?
    private var waitingUntil: MeshInstant
    private var nextServer = 0
    private var failures = 0
    private var random: SplitMix64

    package init(servers: [PeerAddress], settings: Settings = .init(), seed: UInt64, now: MeshInstant) {
        self.servers = Array(servers.prefix(8))
        self.settings = settings
        random = SplitMix64(seed: seed)
        waitingUntil = now
    }

    package var phase: Phase {
        if let question { return .asking(server: servers[question.server], tries: question.tries) }
        return .waiting(until: waitingUntil)
    }

    package func isServer(_ address: PeerAddress) -> Bool { servers.contains(address) }

    package var nextDeadline: MeshInstant? {
        guard !servers.isEmpty else { return nil }
        return question?.nextTry ?? waitingUntil
    }

    /// Asks again soon: our address may have changed.
    package mutating func localAddressChanged(now: MeshInstant) {
        guard question == nil else { return }
        waitingUntil = min(waitingUntil, now + settings.afterChange)
    }

    package mutating func tick(now: MeshInstant) -> [Directive] {
        guard !servers.isEmpty else { return [] }
        if var asked = question {
            guard now >= asked.nextTry else { return [] }
            if asked.tries >= settings.maxTries {
                question = nil
                outcome = .noAnswer
                giveUp(now: now)
                return []
            }
            asked.tries += 1
            asked.rto = asked.rto * 2
            asked.nextTry = now + asked.rto
            question = asked
            counters.requestsSent += 1
            return [.send(asked.request, to: servers[asked.server])]
        }
        guard now >= waitingUntil else { return [] }
        let id = StunMessage.TransactionID(random: &random)
        let request = StunMessage(method: .binding, messageClass: .request, transactionID: id).encoded(
            fingerprint: true)
        let server = nextServer % servers.count
        question = Question(
            id: id, server: server, tries: 1, nextTry: now + settings.initialRTO,
            rto: settings.initialRTO, request: request)
        counters.requestsSent += 1
        return [.send(request, to: servers[server])]
    }

    /// A datagram from one of the servers that looks like STUN.
    package mutating func handle(_ bytes: [UInt8], from source: PeerAddress, now: MeshInstant) -> [Directive] {
        guard let asked = question, servers[asked.server] == source,
            let received = try? StunMessage.decode(bytes), received.fingerprintIsValid,
            received.message.transactionID == asked.id, received.message.method == .binding,
            received.unknownRequired.isEmpty
        else {
            counters.dropped += 1
            return []
        }
        let message = received.message
        switch message.messageClass {
        case .success:
            guard let address = message.xorMappedAddress else {
                counters.dropped += 1
                return []
            }
            question = nil
            counters.answers += 1
            outcome = .answered
            answeredBy = source
            failures = 0
            waitingUntil = now + settings.requery
            guard address != mapped else { return [] }
            mapped = address
            return [.learnt(address)]
        case .error:
            question = nil
            let error = message.errorCode ?? (code: 0, reason: "")
            outcome = .error(code: error.code, reason: error.reason)
            giveUp(now: now)
            return []
        case .request, .indication:
            counters.dropped += 1
            return []
        }
    }

    private mutating func giveUp(now: MeshInstant) {
        failures += 1
        nextServer += 1
        let exponent = min(failures - 1, 10)
        waitingUntil = now + min(settings.firstRetry * Double(1 << exponent), settings.maxRetry)
    }
}
