import Foundation
import GroupMesh

/// `get`'s progress on stderr. On a terminal, one line redrawn in place: percent, bytes, the
/// rate of the last seconds, how many members are sending, the time left; it ends with the 100%
/// line. Elsewhere (a log, a pipe), a plain line every 2 s. Either way, a summary at the end.
/// Rates count only what was fetched: chunks that were here already are not.
final class ProgressDisplay: @unchecked Sendable {
    /// The span the current rate is measured over.
    static let rateWindow = Duration.seconds(2)
    static let plainInterval = Duration.seconds(2)
    /// How long a fetch may show no holder sending before the line says it waits for one.
    static let quietStart = Duration.seconds(1)

    private let terminal: Bool
    private let lock = NSLock()
    private let started = ContinuousClock.now
    /// Bytes held when the first progress came: not fetched by this `get`.
    private var initialBytes: UInt64?
    private var samples: [(at: ContinuousClock.Instant, bytes: UInt64)] = []
    private var latest: TransferProgress?
    private var lastPlainLine: ContinuousClock.Instant?
    private var drawn = false

    init(terminal: Bool) { self.terminal = terminal }

    struct Summary {
        var size: UInt64
        var fetched: UInt64
        var seconds: Double

        func line(to path: String) -> String {
            let time = String(format: "%.1f s", seconds)
            guard fetched > 0 else {
                return "wrote \(ByteCount.text(size)) to \(path) in \(time) (all of it was here already)"
            }
            let rate = ByteCount.text(UInt64(Double(fetched) / max(seconds, 0.001)))
            // The rate is of what was fetched: said so when some of it was here already.
            let here = fetched < size ? ", \(ByteCount.text(size - fetched)) of it was here already" : ""
            return "got \(ByteCount.text(size)) in \(time) (\(rate)/s on average\(here)): \(path)"
        }
    }

    func show(_ progress: TransferProgress) {
        lock.withLock {
            let now = ContinuousClock.now
            let bytes = progress.bytes
            if initialBytes == nil { initialBytes = bytes }
            latest = progress
            samples.append((now, bytes))
            samples.removeAll { now - $0.at > Self.rateWindow }
            if terminal {
                write("\r\u{1B}[K" + describe(progress, now: now))
                drawn = true
            } else if lastPlainLine.map({ now - $0 >= Self.plainInterval }) ?? (now - started >= Self.plainInterval) {
                lastPlainLine = now
                write("get: " + describe(progress, now: now) + "\n")
            }
        }
    }

    /// The fetch is done: the 100% line on a terminal; what the summary says.
    func finish() -> Summary {
        lock.withLock {
            let size = latest?.size ?? 0
            if terminal, let latest {
                var whole = latest
                whole.chunksHave = whole.chunks
                whole.bytesHave = whole.size
                whole.holdersSending = 0
                write("\r\u{1B}[K" + describe(whole, now: ContinuousClock.now) + "\n")
                drawn = false
            }
            let seconds = (ContinuousClock.now - started).seconds
            return Summary(size: size, fetched: size - min(size, initialBytes ?? size), seconds: seconds)
        }
    }

    /// Ends a drawn line, so that an error line that follows stands on its own.
    func abandon() {
        lock.withLock {
            if drawn { write("\n") }
            drawn = false
        }
    }

    func interrupted(_ path: String, afterWriting written: Bool = false) {
        lock.withLock {
            if drawn { write("\n") }
            drawn = false
            let shown = TerminalText.escaped(path)
            write(
                written
                    ? "groupmesh: interrupted, but \(shown) was written whole already\n"
                    : "groupmesh: interrupted: nothing was written to \(shown)\n")
        }
    }

    /// `42%  42.0 MiB of 100.0 MiB  12.5 MiB/s from 3 members  ETA 5 s`
    private func describe(_ progress: TransferProgress, now: ContinuousClock.Instant) -> String {
        let bytes = progress.bytes
        let percent = progress.size == 0 ? 100 : Int(Double(bytes) / Double(progress.size) * 100)
        var parts = [String(format: "%3d%%", percent), "\(ByteCount.text(bytes)) of \(ByteCount.text(progress.size))"]
        let rate = currentRate()
        if bytes < progress.size {
            let sending = progress.holdersSending ?? 0
            // Nothing comes and nobody is asked (no holder known, or all gone): said in words,
            // once a start's first requests would have gone out.
            if sending == 0, rate == 0, progress.holdersSending != nil, now - started >= Self.quietStart {
                parts.append("waiting for a member that holds it")
                return parts.joined(separator: "  ")
            }
            let from = sending > 0 ? " from \(sending) member\(sending == 1 ? "" : "s")" : ""
            parts.append("\(ByteCount.text(UInt64(rate)))/s" + from)
            parts.append(rate > 0 ? "ETA \(Self.duration(Double(progress.size - bytes) / rate))" : "ETA -")
        }
        return parts.joined(separator: "  ")
    }

    private func currentRate() -> Double {
        guard let first = samples.first, let last = samples.last, last.at > first.at else { return 0 }
        return Double(last.bytes - min(last.bytes, first.bytes)) / (last.at - first.at).seconds
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "-" }
        let whole = Int(seconds.rounded(.up))
        if whole < 60 { return "\(whole) s" }
        if whole < 3600 { return "\(whole / 60) min \(whole % 60) s" }
        return "\(whole / 3600) h \(whole / 60 % 60) min"
    }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}
