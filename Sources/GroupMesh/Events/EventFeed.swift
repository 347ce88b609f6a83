import Foundation
import MeshCore
import MeshCrypto

/// One thing that happened to the session, as `groupmesh events` and event handlers see it
/// (Docs/CLI.md §events). Messages are not events: that is `listen`.
public struct MeshEvent: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case memberJoined = "member-joined", memberSuspect = "member-suspect", memberDead = "member-dead"
        case memberLeft = "member-left", memberRejoined = "member-rejoined", memberRemoved = "member-removed"
        case attachmentAdded = "attachment-added", attachmentComplete = "attachment-complete"
        case attachmentRemoved = "attachment-removed", attachmentUnavailable = "attachment-unavailable"
        case attachmentAvailable = "attachment-available"
        case keyEpochChanged = "key-epoch-changed", sessionEnded = "session-ended"
    }

    public struct MemberInfo: Codable, Sendable, Equatable {
        public var id: String
        /// Chosen by that member: untrusted (escape it before a terminal shows it).
        public var name: String
        public var address: String
    }

    public struct AttachmentInfo: Codable, Sendable, Equatable {
        public var id: String
        public var content: String
        public var size: UInt64
    }

    /// Increases by one per event of this node's run (resume after it with `events --after`).
    public var seq: UInt64
    /// When the node saw it, RFC 3339 with milliseconds, UTC.
    public var time: String
    public var type: Kind
    public var member: MemberInfo?
    public var attachment: AttachmentInfo?
    /// The session id (the new one for `key-epoch-changed`).
    public var session: String?
}

/// Turns what the node reports (member changes, the attachment set, epochs) into `MeshEvent`s,
/// numbered, and keeps the last `capacity` for clients that reconnect. Pure: the time is given.
struct EventFeed {
    static let capacity = 1024

    private(set) var ring: [MeshEvent] = []
    private(set) var nextSeq: UInt64 = 1
    private var memberStatus: [NodeID: MemberStatus] = [:]
    private var removed: Set<NodeID> = []
    /// Per attachment: complete here, and its availability, when last seen.
    private var attachments: [AttachmentID: AttachmentSeen] = [:]

    /// What the feed last said of an attachment. Unavailability is a loss: it is said only of an
    /// attachment some live member held (whole or in part) before, never of one just added whose
    /// holders have not been heard of yet (every add would raise it); availability is said
    /// again only after such a loss.
    private struct AttachmentSeen {
        var complete: Bool
        var state: AttachmentAvailability.State
        var info: MeshEvent.AttachmentInfo
        /// Some live member held some of it at some point.
        var wasHeld: Bool
        /// `attachment-unavailable` was said, and no `attachment-available` since.
        var lost: Bool
    }
    private var session: SessionID?

    /// The events after `seq`, and how many of those fell out of the ring already.
    func events(after seq: UInt64) -> (events: [MeshEvent], missed: UInt64) {
        let first = ring.first?.seq ?? nextSeq
        let missed = first > seq + 1 ? first - seq - 1 : 0
        return (ring.filter { $0.seq > seq }, missed)
    }

    /// The session's epoch and removed members at start: not events.
    mutating func start(session: SessionID, removed: Set<NodeID>) {
        self.session = session
        self.removed = removed
    }

    mutating func memberChanged(_ member: Member, now: Date) -> [MeshEvent] {
        let before = memberStatus[member.id]
        memberStatus[member.id] = member.status
        guard before != member.status else { return [] }
        let kind: MeshEvent.Kind?
        switch (before, member.status) {
        case (nil, .alive), (nil, .suspect): kind = .memberJoined
        case (.dead?, .alive), (.left?, .alive), (.dead?, .suspect), (.left?, .suspect): kind = .memberRejoined
        case (_, .suspect): kind = .memberSuspect
        case (_, .dead): kind = removed.contains(member.id) ? nil : .memberDead
        case (_, .left): kind = .memberLeft
        default: kind = nil  // a suspect refuted: alive again, nothing to act on
        }
        guard let kind else { return [] }
        return [record(kind, now: now, member: Self.info(member))]
    }

    mutating func epochChanged(
        _ session: SessionID, removed now: Set<NodeID>, members: [Member], time: Date
    ) -> [MeshEvent] {
        var out: [MeshEvent] = []
        if self.session != session {
            self.session = session
            out.append(record(.keyEpochChanged, now: time, session: session.description))
        }
        for id in now.subtracting(removed).sorted() {
            let member = members.first { $0.id == id }
            out.append(
                record(
                    .memberRemoved, now: time,
                    member: member.map(Self.info) ?? .init(id: id.hex, name: "", address: "")))
        }
        removed.formUnion(now)
        return out
    }

    mutating func attachmentsChanged(
        _ list: [(entry: AttachmentEntry, complete: Bool, state: AttachmentAvailability.State)],
        now: Date
    ) -> [MeshEvent] {
        var out: [MeshEvent] = []
        var seen: Set<AttachmentID> = []
        for (entry, complete, state) in list {
            seen.insert(entry.id)
            let info = MeshEvent.AttachmentInfo(id: entry.id.hex, content: entry.content.hex, size: entry.size)
            let before = attachments[entry.id]
            var seen = AttachmentSeen(
                complete: complete, state: state, info: info,
                wasHeld: (before?.wasHeld ?? false) || state != .unavailable, lost: before?.lost ?? false)
            if before == nil { out.append(record(.attachmentAdded, now: now, attachment: info)) }
            if complete, before?.complete != true {
                out.append(record(.attachmentComplete, now: now, attachment: info))
            }
            if state == .unavailable, before?.wasHeld == true, !seen.lost {
                seen.lost = true
                out.append(record(.attachmentUnavailable, now: now, attachment: info))
            } else if state == .available, seen.lost {
                seen.lost = false
                out.append(record(.attachmentAvailable, now: now, attachment: info))
            }
            attachments[entry.id] = seen
        }
        for id in attachments.keys.filter({ !seen.contains($0) }).sorted() {
            let info = attachments.removeValue(forKey: id)?.info
            out.append(record(.attachmentRemoved, now: now, attachment: info))
        }
        return out
    }

    mutating func sessionEnded(by member: MeshEvent.MemberInfo, now: Date) -> [MeshEvent] {
        [record(.sessionEnded, now: now, member: member)]
    }

    private mutating func record(
        _ kind: MeshEvent.Kind, now: Date, member: MeshEvent.MemberInfo? = nil,
        attachment: MeshEvent.AttachmentInfo? = nil, session: String? = nil
    ) -> MeshEvent {
        let event = MeshEvent(
            seq: nextSeq, time: Self.timestamp(now), type: kind, member: member, attachment: attachment,
            session: session)
        nextSeq += 1
        ring.append(event)
        if ring.count > Self.capacity { ring.removeFirst(ring.count - Self.capacity) }
        return event
    }

    static func info(_ member: Member) -> MeshEvent.MemberInfo {
        MeshEvent.MemberInfo(id: member.id.hex, name: member.record.name, address: member.address?.description ?? "")
    }

    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }
}
