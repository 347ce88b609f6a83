import MeshCore
import MeshCrypto
import Testing

@Suite struct PeerVersionsTests {
    let member = NodeID(high: 7, low: 7)

    @Test("a boot is asked `attempts` times, then taken for protocol 1, and asked again only every `recheck`")
    func unansweredIsProtocolOne() {
        var versions = PeerVersions()
        let settings = PeerVersions.Settings()
        versions.met(member, boot: 1, now: .zero)
        var asked = 0
        var now = MeshInstant.zero
        for _ in 0..<(settings.attempts + 1) {
            guard let deadline = versions.nextDeadline else { break }
            now = deadline
            asked += versions.due(now: now, reachable: { _ in true }).ask.count
        }
        #expect(asked == settings.attempts)
        #expect(versions.versions(of: member) == .unannounced)
        #expect(versions.nextDeadline == now + settings.recheck, "asked again, once a recheck later")
        #expect(versions.allows(.data, to: member))
        // Its answers were lost, not unknown: a recheck finds it out.
        now = now + settings.recheck
        #expect(versions.due(now: now, reachable: { _ in true }).ask == [member])
        #expect(versions.allows(.protocolVersion, to: member))
        _ = versions.received(VersionAnnouncement(versions: .this, isAnswer: true), from: member, boot: 1, now: now)
        #expect(versions.versions(of: member) == .this && versions.nextDeadline == nil)
        versions.met(member, boot: 1, now: now)
        #expect(versions.nextDeadline == nil, "the same boot is not asked again")
        versions.met(member, boot: 2, now: now)
        #expect(versions.versions(of: member) == nil && versions.nextDeadline == now, "a new boot is")
    }

    @Test("a member not reached is sent nothing and its attempts wait; once reached it is asked")
    func unreachedWaits() {
        var versions = PeerVersions()
        versions.met(member, boot: 1, now: .zero)
        var now = MeshInstant.zero
        for _ in 0..<20 {
            now = versions.nextDeadline ?? now
            #expect(versions.due(now: now, reachable: { _ in false }).ask.isEmpty)
        }
        #expect(versions.versions(of: member) == nil && versions.spoken(with: member) == 1)
        #expect(versions.allows(.protocolVersion, to: member))
        now = versions.nextDeadline ?? now
        #expect(versions.due(now: now, reachable: { _ in true }).ask == [member])
    }

    @Test("a frame is answered unless it is an answer; a gap is reported once per boot")
    func answersAndGaps() {
        var versions = PeerVersions()
        versions.met(member, boot: 1, now: .zero)
        let future = SpokenVersions(current: 4, oldest: 3)
        let first = versions.received(.init(versions: future, isAnswer: false), from: member, boot: 1, now: .zero)
        #expect(first.answer)
        #expect(first.gap == PeerVersions.Gap(member: member, theirs: future, ours: .this))
        let again = versions.received(.init(versions: future, isAnswer: true), from: member, boot: 1, now: .zero)
        #expect(!again.answer && again.gap == nil)
        #expect(versions.nextDeadline == nil)
        let soon = versions.received(.init(versions: future, isAnswer: true), from: member, boot: 2, now: .zero)
        #expect(soon.gap == nil, "a new boot within a minute is not reported again")
        let recheck = PeerVersions.Settings().recheck
        let newBoot = versions.received(
            .init(versions: future, isAnswer: true), from: member, boot: 5, now: .zero + recheck)
        #expect(newBoot.gap != nil, "a new boot is reported again, a minute later")
        let current = versions.received(
            .init(versions: .this, isAnswer: true), from: member, boot: 3, now: .zero + recheck)
        #expect(current.gap == nil && versions.spoken(with: member) == ProtocolVersion.current)
    }

    @Test("answers to one member: two at once, then one per window, whatever boots its frames name")
    func answersAreSpacedPerMember() {
        var versions = PeerVersions()
        let settings = PeerVersions.Settings()
        versions.met(member, boot: 1, now: .zero)
        let ask = VersionAnnouncement(versions: .this, isAnswer: false)
        // An honest member's first ask and its re-ask with its introduction, a round trip apart.
        #expect(versions.received(ask, from: member, boot: 1, now: .zero).answer)
        #expect(versions.received(ask, from: member, boot: 1, now: .zero + .milliseconds(10)).answer)
        #expect(!versions.received(ask, from: member, boot: 1, now: .zero + .milliseconds(20)).answer)
        #expect(
            !versions.received(ask, from: member, boot: 2, now: .zero + .milliseconds(30)).answer,
            "a new boot does not open the window")
        #expect(versions.received(ask, from: member, boot: 2, now: .zero + settings.answerWindow).answer)
        // Another member has a window of its own.
        #expect(versions.received(ask, from: NodeID(high: 8, low: 8), boot: 1, now: .zero + .milliseconds(40)).answer)
        // A storm of asks, each naming a new boot, for 10 s: at most two answers a window.
        var answered = 0
        for step in 0..<1000 {
            let now = MeshInstant.zero + .seconds(2) + .milliseconds(10 * step)
            if versions.received(ask, from: member, boot: UInt64(100 + step), now: now).answer { answered += 1 }
        }
        #expect(answered <= settings.answersPerWindow * 11)
        #expect(answered >= settings.answersPerWindow * 9, "an honest pace is still answered")
    }

    @Test("versions meet at the newest both speak, N and N-1 included")
    func common() {
        let this = SpokenVersions.this
        #expect(this.common(with: .this) == ProtocolVersion.current)
        #expect(this.common(with: .unannounced) == ProtocolVersion.oldestSpoken)
        #expect(this.common(with: SpokenVersions(current: 3, oldest: 2)) == 2)
        #expect(this.common(with: SpokenVersions(current: 4, oldest: 3)) == nil)
        #expect(SpokenVersions(current: 3, oldest: 2).common(with: .unannounced) == nil)
    }
}
