/// Every metric a node reports through swift-metrics, with the help text an exporter prints
/// beside it (Prometheus conventions: `_total` counters, base units `_bytes` and `_seconds`).
/// Labels are closed sets (`kind`, `reason`, `state`, `outcome`): nothing a member chooses, such
/// as a name, ever becomes a label.
public enum GroupMeshMetricNames {
    public static let members = "groupmesh_members"
    public static let attachments = "groupmesh_attachments"
    public static let probeRoundTrip = "groupmesh_probe_rtt_seconds"
    public static let suspicions = "groupmesh_suspicions_total"
    public static let refutations = "groupmesh_refutations_total"
    public static let datagramsSent = "groupmesh_datagrams_sent_total"
    public static let datagramsReceived = "groupmesh_datagrams_received_total"
    public static let bytesSent = "groupmesh_sent_bytes_total"
    public static let bytesReceived = "groupmesh_received_bytes_total"
    public static let drops = "groupmesh_datagrams_dropped_total"
    public static let kernelDrops = "groupmesh_socket_receive_drops_total"
    public static let sendErrors = "groupmesh_send_errors_total"
    public static let retransmissions = "groupmesh_retransmissions_total"
    public static let reliableMessages = "groupmesh_reliable_messages_total"
    public static let chunksFetched = "groupmesh_chunks_fetched_total"
    public static let chunksServed = "groupmesh_chunks_served_total"
    public static let chunksRejected = "groupmesh_chunks_rejected_total"
    public static let fetchedBytes = "groupmesh_fetched_bytes_total"
    public static let servedBytes = "groupmesh_served_bytes_total"
    public static let fetchThroughput = "groupmesh_fetch_throughput_bytes_per_second"
    public static let fetchesFailed = "groupmesh_fetches_failed_total"
    public static let requestTimeouts = "groupmesh_chunk_request_timeouts_total"
    public static let pacesRetold = "groupmesh_paces_retold_total"
    public static let seedingRefusals = "groupmesh_seeding_refusals_total"
    public static let seedingSecondCopies = "groupmesh_seeding_second_copies_total"
    public static let storeBytes = "groupmesh_store_bytes"
    public static let storeFreeBytes = "groupmesh_store_free_bytes"
    public static let localHealth = "groupmesh_local_health"
    public static let keyEpoch = "groupmesh_key_epoch"
    public static let eventHandlerRuns = "groupmesh_event_handler_runs_total"

    /// Each name's help text.
    public static let help: [String: String] = [
        members: "Members in this node's view by state (this node included, as alive).",
        attachments:
            "Attachments in the journal by availability: available (a live member holds it whole), partial, unavailable.",
        probeRoundTrip: "Round trips of direct membership probes answered in time.",
        suspicions: "Members this node began to suspect (its own failed probe, or an accusation it took).",
        refutations:
            "Times this node outbid what others held of it: a suspicion, a death, or a record or departure of an earlier boot.",
        datagramsSent: "UDP datagrams sent, by kind.",
        datagramsReceived: "UDP datagrams received that opened under the session's keys, by kind.",
        bytesSent: "UDP payload bytes sent, by kind.",
        bytesReceived: "UDP payload bytes received that opened under the session's keys, by kind.",
        drops: "Received datagrams dropped, by reason.",
        kernelDrops: "Datagrams the kernel dropped because the node's UDP receive buffer was full.",
        sendErrors: "Datagrams the socket refused to send.",
        retransmissions: "Reliable channel chunks sent again.",
        reliableMessages:
            "Reliable application messages per recipient, by outcome: delivered (acknowledged) or unconfirmed.",
        chunksFetched: "Attachment chunks fetched from members and stored.",
        chunksServed: "Attachment chunks served to members.",
        chunksRejected: "Fetched chunks whose bytes did not match their hash.",
        fetchedBytes: "Bytes of attachment chunks fetched and stored.",
        servedBytes: "Bytes of attachment chunk pieces served to members.",
        fetchThroughput: "Bytes of chunks fetched per second over the last second.",
        fetchesFailed: "Attachment fetches that ended without the attachment.",
        requestTimeouts: "Chunk requests unanswered in time and asked elsewhere.",
        pacesRetold: "Paces told a holder again because its pieces came faster than the pace it was told.",
        seedingRefusals:
            "Wants this uploader answered \"left to others\": the chunk is left to the member that has it or is getting it.",
        seedingSecondCopies:
            "Chunks this uploader sent to a second member: one turned away for 5 s, or a first copy lost or too slow.",
        storeBytes: "Bytes of attachment content held in the data directory (whole and partial).",
        storeFreeBytes: "Free bytes on the data directory's file system.",
        localHealth: "Lifeguard local health: 0 is healthy; higher means this node is slow to answer.",
        keyEpoch: "Key epochs since this node joined (one per member removal).",
        eventHandlerRuns: "Event handler runs, by outcome (ok, failed, timed_out, dropped).",
    ]
}
