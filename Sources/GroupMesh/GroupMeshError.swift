import MeshCore
import MeshCrypto
import MeshStore

/// Everything the runtime can report to a user, each as one readable line. A case carries a
/// `String` only where that text is the whole of what there is to say (a reason from the
/// system, or the node's own answer over the control socket).
public enum GroupMeshError: Error, Equatable, Sendable, CustomStringConvertible {
    case dataDirectory(path: String, reason: String)
    case dataDirectoryLocked(path: String, holder: String?)
    case dataDirectoryFormat(path: String, found: String)
    case sessionMismatch(path: String)
    /// An invite of this data dir's session, of a key epoch so old that the node no longer keeps it.
    case inviteTooOld(path: String)
    case invalidAddress(String)
    /// Why an invite token does not parse, as the parser says it ("bad invite: …").
    case invalidInvite(String)
    /// A key or secret file that cannot be read or written, or that others could read.
    case keyFile(String)
    case bindFailed(address: String, reason: String)
    case noNodeRunning(path: String)
    /// The node's answer to a control request, or why it could not be asked.
    case control(String)
    /// The node refused a control request: its one line, and what kind of failure it was.
    case refused(String, kind: FailureKind)
    case notRunning
    /// The disk refused (full, unwritable…).
    case store(String)
    /// A file that cannot be attached (no such file, not a regular file, changed while read…).
    case attachment(String)
    case attachmentTooLarge(size: UInt64, limit: UInt64)
    case metadataTooLarge(size: Int, limit: Int)
    case unknownAttachment(String)
    case ambiguousAttachment(String)
    case attachmentPrefixTooShort(String)
    /// `get --output` over one of the node's own files.
    case outputIsNodeFile(String)
    /// `get --output` names something that is not a regular file; the text says what it is.
    case outputNotRegularFile(String, String)
    case manifestUnavailable(attachment: String)
    case chunksUnavailable(attachment: String, missing: Int, total: Int)
    case cannotRemoveSelf
    case alreadyRemoved(member: String)
    case sessionTooLarge(limit: Int)
    case epochNotStored(reason: String)
    case removalInProgress
    /// An attachment's metadata does not decode as the type asked for.
    case metadataType(attachment: String, type: String)
    /// Another live node has this identity and started first: this one stopped.
    case identityConflict(twin: String)
    /// The session was ended by `by` (a member's name and id start): it is over, for good.
    case sessionEnded(by: String)
    /// This data dir's session was ended; it cannot start again.
    case sessionEndedHere(path: String, by: String)
    /// A key epoch without this node was made: it is no longer a member.
    case removedFromSession(by: String)
    /// Addresses to join through, no invite, and a data dir with no session yet: the node would
    /// make a session of its own, which no member there could open.
    case joinWithoutInvite(address: String, path: String)
    /// `SessionOffers` made the session but nobody takes it from `sessions()` (not read, or full).
    case offerNotTaken(waiting: Int)
    /// `get` without `--force`: a file is at the output path already, and it was kept.
    case outputExists(String)
    /// The caller gave the request up (its task was cancelled, `get` was interrupted).
    case cancelled

    public var description: String {
        switch self {
        case let .dataDirectory(path, reason):
            return "cannot use data dir \(path): \(reason)"
        case let .dataDirectoryLocked(path, holder):
            let who = holder.map { " (pid \($0))" } ?? ""
            return "another groupmesh node\(who) is running on data dir \(path); stop it or pick another --data-dir"
        case let .dataDirectoryFormat(path, found):
            return
                "data dir \(path) has format '\(found)', which this groupmesh does not read (it reads \(DataDirectory.formatVersion))"
        case let .sessionMismatch(path):
            return
                "data dir \(path) already belongs to another session; use a fresh --data-dir to join with this invite"
        case let .inviteTooOld(path):
            return
                "the invite is of a key epoch of data dir \(path)'s session that its node no longer keeps (it keeps the latest \(KeyEpochs.maxTransitions)); start it without the invite, or ask a member for a new one"
        case let .invalidAddress(text):
            return "invalid address '\(text)': expected HOST:PORT, e.g. 127.0.0.1:7946 or [::1]:7946"
        case let .invalidInvite(message), let .keyFile(message), let .control(message), let .store(message),
            let .attachment(message),
            let .refused(message, _):
            return message
        case let .bindFailed(address, reason):
            return "cannot listen on \(address): \(reason)"
        case let .noNodeRunning(path):
            return Self.noNodeRunning(path)
        case .notRunning:
            return "the node is not running (it stopped or left); start it again with groupmesh run"
        case let .attachmentTooLarge(size, limit):
            return StorageFailure.tooLarge(size: size, limit: limit).description
        case let .metadataTooLarge(size, limit):
            return "metadata of \(size) bytes is over the \(limit / 1024) KiB limit; nothing was stored"
        case let .unknownAttachment(text):
            return "unknown attachment '\(text)' (see groupmesh attachments)"
        case let .ambiguousAttachment(text):
            return "'\(text)' matches several attachments; give more of the id"
        case let .attachmentPrefixTooShort(text):
            return "'\(text)' is too short to name an attachment; give at least 4 characters of its id"
        case let .outputIsNodeFile(path):
            return "\(path) is one of the node's own files; write the attachment somewhere else"
        case let .outputNotRegularFile(path, kind):
            return "\(path) is \(kind); get writes only regular files, and nothing was written"
        case let .manifestUnavailable(attachment):
            return "unavailable: no reachable member holds the manifest of \(attachment.prefix(16)); "
                + "try again once a member that holds it is online (groupmesh attachments shows who does)"
        case let .chunksUnavailable(attachment, missing, total):
            return
                "unavailable: no reachable member holds \(missing) of the \(total) chunks of \(attachment.prefix(16)); "
                + "the chunks held are kept: get it again once a holder is online"
        case .cannotRemoveSelf:
            return "cannot remove this node itself; to go, use groupmesh leave"
        case let .alreadyRemoved(member):
            return "\(member) was already removed"
        case let .sessionTooLarge(limit):
            return
                "cannot remove: the session has more than \(limit) other members (a key rotation travels in one datagram)"
        case let .epochNotStored(reason):
            return "cannot store the new key epoch, nothing changed: \(reason)"
        case .removalInProgress:
            return "another member removal is under way (one of many members takes a key rotation every "
                + "few seconds); run remove-member again once it is done"
        case let .metadataType(attachment, type):
            return "the metadata of attachment \(attachment.prefix(16)) is not a \(type)"
        case let .identityConflict(twin):
            return "another node with this node's identity runs at \(twin), started earlier (a copied data dir?); "
                + "this one stopped. Give each node a data dir of its own: a new one makes a new identity"
        case let .sessionEnded(by):
            return
                "the session was ended by \(by); start a new one in another data dir, or ask for an invite to another"
        case let .sessionEndedHere(path, by):
            return
                "the session of \(path) was ended by \(by); its invites no longer work. Start a new session in another data dir"
        case let .joinWithoutInvite(address, path):
            return
                "--join \(address) reaches a session only with its invite, and data dir \(path) holds none yet: "
                + "give --invite, --invite-file or $GROUPMESH_INVITE (run without --join makes a new session)"
        case let .removedFromSession(by):
            return
                "this node was removed from the session by \(by); ask a member for a new invite and join with another data dir"
        case let .outputExists(path):
            return "\(path) exists and was kept; give --force to replace it, or another -o PATH"
        case .cancelled:
            return "cancelled before it completed; nothing was written"
        case let .offerNotTaken(waiting):
            return
                "the offered session was not taken: \(waiting) offered sessions already wait, or sessions() is no longer read"
        }
    }
}

extension StorageFailure {
    /// The store's error as the core carries it.
    init(_ error: GroupMeshError) {
        switch error {
        case let .attachmentTooLarge(size, limit): self = .tooLarge(size: size, limit: limit)
        case let .attachment(message): self = .unreadable(message)
        // The output named by the user, found wrong only when it was written: bad input still.
        case .outputExists, .outputNotRegularFile, .outputIsNodeFile: self = .unreadable(error.description)
        default: self = .failed(error.description)
        }
    }
}

extension GroupMeshError {
    /// A core error as a user reads it; `names` gives members' display names.
    init(_ error: NodeError, names: (NodeID) -> String) {
        switch error {
        case .stopped: self = .notRunning
        case .cancelled: self = .cancelled
        case let .messageTooLarge(size, limit):
            self = .refused(MessengerError.tooLarge(size: size, limit: limit).description, kind: .input)
        case let .notDelivered(failures):
            self = .refused(MessengerError(failures, names: names).description, kind: .unavailable)
        case let .metadataTooLarge(size, limit): self = .metadataTooLarge(size: size, limit: limit)
        case let .unknownAttachment(id): self = .unknownAttachment(id.hex)
        case let .unknownAttachmentID(id): self = .unknownAttachment(id.hex)
        case let .manifestUnavailable(id): self = .manifestUnavailable(attachment: id.hex)
        case let .chunksUnavailable(id, missing, total):
            self = .chunksUnavailable(attachment: id.hex, missing: missing, total: total)
        case let .store(.tooLarge(size, limit)): self = .attachmentTooLarge(size: size, limit: limit)
        case let .store(.unreadable(message)): self = .attachment(message)
        case let .store(.failed(message)): self = .store(message)
        case let .store(.damaged(message)):
            self = .store(
                "the attachment is damaged on disk (\(message)) and could not be fetched again whole; nothing was written"
            )
        case .cannotRemoveSelf: self = .cannotRemoveSelf
        case let .alreadyRemoved(id): self = .alreadyRemoved(member: names(id))
        case let .sessionTooLarge(limit): self = .sessionTooLarge(limit: limit)
        case let .epochNotStored(failure): self = .epochNotStored(reason: failure.description)
        case .removalInProgress: self = .removalInProgress
        case let .introducedMembers(id, introduced):
            self = .refused(
                "\(names(id)) introduced \(Self.list(introduced, names)) still in the session: remove them with it "
                    + "(--with-introduced), keep them (--keep-introduced) or name those to keep (--keep NAME,…); "
                    + "nothing was removed", kind: .input)
        case let .tooManyToRemove(id, introduced, limit):
            self = .refused(
                "\(names(id)) introduced \(introduced) members still in the session; one removal takes at most "
                    + "\(limit) with it: keep some (--keep NAME,…) or remove them first; nothing was removed",
                kind: .input)
        case let .removalCutShort(id, removed, left, because):
            // The next rotation's own failure, without its "nothing changed": some did.
            let reason: GroupMeshError =
                if case let .epochNotStored(failure) = because {
                    .store("cannot store the next key epoch: \(failure.description)")
                } else { GroupMeshError(because, names: names) }
            self = .refused(
                "removed \(Self.list(removed, names)), but not \(Self.list(left, names)) that \(names(id)) "
                    + "introduced: \(reason.description); remove them by name", kind: reason.kind)
        case .removalOutpaced:
            self = .refused(
                "other members' key rotations kept taking back whom the removal's rotations removed",
                kind: .unavailable)
        case let .sessionEnded(by): self = .sessionEnded(by: names(by))
        case let .notReachable(id):
            self = .refused(
                "\(names(id)) is not reachable (dead, left, or never met); see groupmesh status", kind: .unavailable)
        case let .pingTimedOut(id): self = .refused("no answer from \(names(id)) within 2 s", kind: .unavailable)
        }
    }
}

extension GroupMeshError {
    /// An attachment a command named that names none, or several, or is too short to tell.
    init(_ error: AttachmentLookupError) {
        switch error {
        case let .unknown(text): self = .unknownAttachment(text)
        case let .ambiguous(text): self = .ambiguousAttachment(text)
        case let .tooShort(text): self = .attachmentPrefixTooShort(text)
        }
    }
}

extension GroupMeshError {
    /// Members as one phrase: "1 member (bob …)", "3 members (bob …, carol …, dave …)", the first
    /// eight named.
    static func list(_ members: [NodeID], _ names: (NodeID) -> String) -> String {
        let named = members.prefix(8).map(names).joined(separator: ", ") + (members.count > 8 ? ", …" : "")
        return "\(members.count) member\(members.count == 1 ? "" : "s") (\(named))"
    }
}

extension GroupMeshError {
    /// A failed file write as its one line: a full disk says so, and that nothing was lost.
    package static func fileWrite(_ code: Int32, _ path: String, doing action: String) -> GroupMeshError {
        FileIO.isOutOfSpace(code)
            ? .store("no space left to write \(path); nothing was lost")
            : .store("cannot \(action) \(path): \(FileIO.describe(code))")
    }
}

/// How a failure ends a command, in the terms of sysexits(3), so that a script can tell apart
/// what it got wrong, what is not there now, and the rest (Docs/CLI.md §Exit status).
public enum FailureKind: String, Codable, Sendable {
    /// The request is wrong: a bad invite or address, an unknown attachment or member, a file or
    /// message over the limit. Exit 65 (EX_DATAERR).
    case input
    /// What was asked for cannot be had now: no node running, no member holding the data, the
    /// node stopped. Exit 69 (EX_UNAVAILABLE).
    case unavailable
    /// Anything else (the disk, the system). Exit 1.
    case other

    public var exitStatus: Int32 {
        switch self {
        case .input: 65
        case .unavailable: 69
        case .other: 1
        }
    }
}

extension GroupMeshError {
    /// No node answers on `path`: what to start, said from what is there, so that the advice never
    /// founds a second session beside the one the user meant.
    static func noNodeRunning(_ path: String) -> String {
        let line = "no groupmesh node is running on data dir \(path)"
        let directory = DataDirectory(path: path)
        if directory.isOtherThanDirectory { return "\(line): it is a file; give the directory a node runs on" }
        // A run there would only say why it cannot start: said here instead.
        if let by = directory.loadRemoved() {
            return "\(line): this node was removed from the session by \(by); "
                + "ask a member for a new invite and join with another data dir"
        }
        if let by = directory.loadEnded() {
            return "\(line): the session was ended by \(by), and its invites no longer work; "
                + "start a new session in another data dir"
        }
        if directory.hasSession { return "\(line) (start one with: groupmesh run --data-dir \(path))" }
        let nested = DataDirectory(path: path + "/.groupmesh")
        if nested.hasSession {
            return "\(line), which holds no session; \(nested.path) does: --data-dir \(nested.path)?"
        }
        return "\(line), which holds no session (groupmesh run --data-dir \(path) would start a new one)"
    }

    public var kind: FailureKind {
        switch self {
        case .invalidAddress, .invalidInvite, .sessionMismatch, .inviteTooOld, .attachment, .attachmentTooLarge,
            .metadataTooLarge,
            .unknownAttachment, .ambiguousAttachment, .attachmentPrefixTooShort, .outputIsNodeFile,
            .outputNotRegularFile,
            .cannotRemoveSelf, .alreadyRemoved, .metadataType, .outputExists, .joinWithoutInvite:
            .input
        case .noNodeRunning, .notRunning, .manifestUnavailable, .chunksUnavailable, .sessionEnded, .sessionEndedHere,
            .removedFromSession, .identityConflict:
            .unavailable
        case let .refused(_, kind):
            kind
        case .dataDirectory, .dataDirectoryLocked, .dataDirectoryFormat, .keyFile, .bindFailed, .control, .store,
            .sessionTooLarge, .epochNotStored, .removalInProgress, .offerNotTaken, .cancelled:
            .other
        }
    }
}

extension MessengerError {
    public var kind: FailureKind {
        switch self {
        case .tooLarge, .unknownMember, .ambiguousMember: .input
        case .notDelivered, .notRunning, .sessionEnded, .removed: .unavailable
        }
    }
}
