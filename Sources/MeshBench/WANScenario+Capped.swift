import Foundation
import GroupMesh
import MeshTestKit

/// The capped home lines (`home50`, `home10`), each beside a CUBIC download.
extension WANScenario {
    static func cappedLine(_ line: CappedProfile, file: String, tools: Tools, quick: Bool) async throws -> [BenchResult]
    {
        guard let rateMbit = line.profile.rateMbit else { return [] }
        let cap = rateMbit * 1e6 / 8  // bytes per second
        print("wan \(line.name): \(line.profile)")
        let link = try WANLink(lab: tools.lab, host: 3, profile: line.profile)
        defer { link.tearDown() }

        // Baseline: CUBIC alone through the link (after its first seconds), and the drops it causes.
        let warmUp = 4.0
        let aloneSeconds = quick ? 4.0 : 8.0
        let before = try tools.bottleneck()
        let alonePing = LinePing.start(lab: tools.lab)
        let competitor = try await tools.startCompetitor(seconds: Int(warmUp + aloneSeconds) + 2)
        try await Task.sleep(for: .seconds(warmUp + aloneSeconds))
        let after = try tools.bottleneck()
        let aloneIntervals = competitor.stop()
        let alone = Competitor.bytes(in: aloneIntervals, from: warmUp, to: warmUp + aloneSeconds) / aloneSeconds
        let aloneDrops = after.dropShare(since: before)
        let aloneRoundTrip = alonePing.flatMap {
            LinePing.summary(
                $0.stop(), from: competitor.startedAt + warmUp, to: competitor.startedAt + warmUp + aloneSeconds)
        }
        print(
            "  CUBIC alone: \(format(alone / 1_048_576)) MiB/s of \(format(cap / 1_048_576)) (\(format(alone / cap * 100))%), drops \(format(aloneDrops * 100))%\(pingText(aloneRoundTrip))"
        )

        // Baseline for the get: what TCP itself gives a latecomer. A CUBIC download of the same
        // size starts beside a CUBIC download that filled the line first; its rate is the fair
        // share as TCP plays it, slow start against a full queue included.
        let latecomer: Double
        do {
            let incumbent = try await tools.startCompetitor(seconds: 150)
            defer { _ = incumbent.stop() }
            try await Task.sleep(for: .seconds(warmUp))
            latecomer = try await tools.tcpDownload(bytes: line.size, timeout: .seconds(80))
            print(
                "  CUBIC latecomer of \(line.size >> 20) MiB beside CUBIC: \(format(latecomer)) MiB/s (\(format(latecomer * 1_048_576 / cap * 100))% of the cap)"
            )
        }

        var results: [BenchResult] = []
        // What replication fetched per round on this line, for the steady control.
        var replicationRates: [Double] = []
        let mib = line.size >> 20
        // What every fetch through the line reports: its rate (of the round shown, named by `roundShown`),
        // and the most drops and holders' bytes of its rounds.
        func rows(prefix: String, fetch: Fetch, rounds: [Fetch], roundShown: String = "") -> [BenchResult] {
            let most = rounds.count > 1 ? ", the most of \(rounds.count) rounds" : ""
            return [
                BenchResult(
                    scenario: prefix + "fetch rate" + roundShown, figure: fetch.fetchRate, unit: "MiB/s",
                    baselineName: "the cap", baseline: cap / 1_048_576, goal: "-"),
                BenchResult(
                    scenario: prefix + "packets dropped at the bottleneck" + most,
                    figure: (rounds.map(\.dropShare).max() ?? 0) * 100,
                    unit: "%", baselineName: "CUBIC alone", baseline: aloneDrops * 100, goal: "≤ 2%"),
                BenchResult(
                    scenario: prefix + "holders' bytes ÷ file" + most, figure: rounds.map(\.holderRatio).max() ?? 0,
                    unit: "×",
                    baselineName: "every byte once", baseline: 1, goal: "≤ 1.1×"),
            ]
        }
        // WAN_MODES=get runs some of the fetches only (while tuning one).
        let modes = ProcessInfo.processInfo.environment["WAN_MODES"].map {
            $0.split(separator: ",").compactMap { Mode(rawValue: String($0)) }
        }
        for mode in modes ?? [.alone, .replication, .get] {
            if mode == .alone {
                let mesh = try await Holders(lab: tools.lab, file: file)
                defer { mesh.stop() }
                // The line idle (the joiner starting) before the fetch, and loaded by it alone.
                let ping = LinePing.start(lab: tools.lab)
                if ping != nil { try await Task.sleep(for: .seconds(1)) }
                let fetch = try await fetchThrough(
                    mesh: mesh, mode: mode, size: line.size, tools: tools, timeout: .seconds(80))
                let samples = ping?.stop() ?? []
                let idle = LinePing.summary(samples, from: 0, to: fetch.window.start)
                let loaded = LinePing.summary(samples, from: fetch.window.start, to: fetch.window.end)
                let prefix = "wan \(line.name), get of \(mib) MiB alone: "
                if !fetch.finished {
                    print("  warning: the lone get did not finish within its bound; the rate is over what arrived")
                }
                print(
                    "  get alone: fetch \(format(fetch.fetchRate)) MiB/s, get wall time \(format(fetch.getRate)), drops \(format(fetch.dropShare * 100))% (\(fetch.drops.dropped) of \(fetch.drops.dropped + fetch.drops.sent) packets), holders sent \(format(fetch.holderRatio))×\(pingText(loaded)), idle line\(pingText(idle)); \(fetch.cpuSummary); downlink: \(fetch.downlinkSummary)"
                )
                results += rows(prefix: prefix, fetch: fetch, rounds: [fetch])
                if let loaded, let idle {
                    results.append(
                        BenchResult(
                            scenario: prefix + "a ping's round trip through the line during the fetch (median)",
                            figure: loaded.median, unit: "ms", baselineName: "the idle line, just before",
                            baseline: idle.median, goal: "-"))
                }
                continue
            }
            // A get beside CUBIC in rounds (a loss-bound CUBIC's rate over 10 s moves a lot from
            // one to the next), each beside the same CUBIC flow alone over the 8 s before the
            // joiner starts. Replication too where the line drops packets at random (CUBIC is
            // loss-bound there, and one round's ratio is mostly its baseline's noise); once on a
            // clean line (on home50 it runs its full minute, and
            // CUBIC's share is judged as a share of the line).
            let roundsWanted = mode == .get || line.profile.lossPercent > 0 ? roundCount(quick: quick) : 1
            var rounds: [BesideCUBIC] = []
            let steadyRate =
                replicationRates.isEmpty
                ? cap / 2 : replicationRates.reduce(0, +) / Double(replicationRates.count) * 1_048_576
            // A ping's round trips beside CUBIC alone (just before each fetch) and beside the fetch, pooled.
            var pings: (alone: [LinePing.Sample], beside: [LinePing.Sample]) = ([], [])
            for _ in 1...roundsWanted {
                let mesh = try await Holders(lab: tools.lab, file: file)
                defer { mesh.stop() }
                let ping = LinePing.start(lab: tools.lab)
                let competitor = try await tools.startCompetitor(seconds: 150)
                defer { _ = competitor.stop() }
                try await Task.sleep(for: .seconds(warmUp + aloneSeconds))
                var fetch = Fetch()
                if mode == .nothing {
                    let start = Date().timeIntervalSinceReferenceDate
                    try await Task.sleep(for: .seconds(12))
                    fetch.window = (start, Date().timeIntervalSinceReferenceDate)
                } else if mode == .steady {
                    let start = Date().timeIntervalSinceReferenceDate
                    // iperf3's control connection can fail on this lossy line (a read that timed
                    // out): the round is left out, not the run.
                    do {
                        let received = try await tools.iperfTest(
                            ["-R", "-u", "-b", "\(Int(steadyRate * 8))", "-l", "1472", "-t", "12"],
                            wrappedIn: ["timeout", "40"], timeout: .seconds(45))
                        print(
                            "  steady UDP at \(format(steadyRate / 1_048_576)) MiB/s: \(format(received)) MiB/s received"
                        )
                    } catch {
                        print("  steady: round left out, iperf3 failed: \(error)")
                        _ = ping?.stop()
                        continue
                    }
                    fetch.window = (start, Date().timeIntervalSinceReferenceDate)
                } else {
                    fetch = try await fetchThrough(
                        mesh: mesh, mode: mode, size: line.size, tools: tools,
                        timeout: .seconds(mode == .replication ? 60 : 80))
                }
                // Where loss holds CUBIC down, the same flow alone again after the fetch: its rate
                // over 8 s moves a lot from one window to the next, so the baseline is the mean of
                // both sides of the fetch.
                // A fetch that did not finish left the holders' queued pieces still crossing the
                // line: then only the side before counts.
                var afterFrom: Double?
                if line.profile.lossPercent > 0, fetch.finished {
                    try await Task.sleep(for: .seconds(0.5))
                    afterFrom = Date().timeIntervalSinceReferenceDate
                    try await Task.sleep(for: .seconds(aloneSeconds))
                }
                let intervals = competitor.stop()
                let samples = ping?.stop() ?? []
                let aloneFrom = competitor.startedAt + warmUp
                pings.alone += samples.filter { $0.at >= aloneFrom && $0.at <= aloneFrom + aloneSeconds }
                pings.beside += samples.filter { $0.at >= fetch.window.start && $0.at <= fetch.window.end }
                let before =
                    Competitor.bytes(in: intervals, from: warmUp, to: warmUp + aloneSeconds) / aloneSeconds / cap
                let after = afterFrom.map {
                    Competitor.bytes(
                        in: intervals, from: $0 - competitor.startedAt, to: $0 - competitor.startedAt + aloneSeconds)
                        / aloneSeconds / cap
                }
                let window = fetch.window
                let seconds = window.end - window.start
                let share =
                    seconds > 0
                    ? Competitor.bytes(
                        in: intervals, from: window.start - competitor.startedAt, to: window.end - competitor.startedAt)
                        / seconds / cap
                    : 0
                if !fetch.finished {
                    print("  warning: \(mode.rawValue) did not finish within its bound; the rate is over what arrived")
                }
                print(
                    "  \(mode.rawValue): fetch \(format(fetch.fetchRate)) MiB/s over \(format(seconds)) s, competitor \(format(share * 100))% (\(format(before * 100))% alone just before\(after.map { ", \(format($0 * 100))% just after" } ?? ""))\(pingText(LinePing.summary(samples, from: window.start, to: window.end))) (alone\(pingText(LinePing.summary(samples, from: aloneFrom, to: aloneFrom + aloneSeconds)))), drops \(format(fetch.dropShare * 100))% (\(fetch.drops.dropped) of \(fetch.drops.dropped + fetch.drops.sent) packets), holders sent \(format(fetch.holderRatio))×; \(fetch.cpuSummary); downlink: \(fetch.downlinkSummary)"
                )
                if ProcessInfo.processInfo.environment["WAN_PING_TRACE"] != nil {
                    // Beside the downlink's trace: the highest ping of each half second of the fetch.
                    let highest = LinePing.highest(samples, from: window.start, to: window.end, every: 0.5)
                    print(
                        "  ping, highest per 0.5 s of the fetch (ms): \(highest.map { $0.map(format) ?? "-" }.joined(separator: " "))"
                    )
                    let first = samples.filter { $0.at >= window.start - 0.5 && $0.at < window.start + 3 }
                    print(
                        "  ping, first 3 s (s from the fetch's start: ms): \(first.map { "\(format($0.at - window.start)):\(format($0.milliseconds))" }.joined(separator: " "))"
                    )
                }
                var round = BesideCUBIC(fetch: fetch, share: share, alone: after.map { (before + $0) / 2 } ?? before)
                if mode == .get, fetch.secondHalfSeconds > 0, fetch.fetchSeconds >= fetch.secondHalfSeconds {
                    // A short get spends its first seconds finding out that the queue is another
                    // flow's; its second half (of the chunks, as the node logs it) shows the share it
                    // then holds, beside CUBIC's over the same seconds: timed from the get's start by
                    // the node's own clock (the get's exit, as the bench sees it, adds its write-out
                    // and up to 20 ms of polling).
                    let later = fetch.secondHalfSeconds
                    let fetchEnd = window.start + fetch.fetchSeconds
                    let competitorLater =
                        Competitor.bytes(
                            in: intervals, from: fetchEnd - later - competitor.startedAt,
                            to: fetchEnd - competitor.startedAt) / later / cap
                    let getLater = Double(line.size - line.size / 2) / later / cap
                    print(
                        "  get, second half: \(format(getLater * 100))% of the cap, CUBIC \(format(competitorLater * 100))%"
                    )
                    round.later = (getLater, competitorLater)
                }
                rounds.append(round)
            }
            let n = rounds.count
            let prefix = "wan \(line.name), \(mode.rawValue) of \(mib) MiB beside CUBIC: "
            let before =
                "CUBIC alone, the same flow over the \(Int(aloneSeconds)) s before the joiner starts"
                + (line.profile.lossPercent > 0 ? " and after the fetch" : "")
            // CUBIC's share is judged on its mean over the rounds beside the mean of the same flow
            // alone before them, and after them on a lossy line (each round's share weighs the
            // same, however long its fetch): a
            // loss-bound CUBIC's 8 s alone moves widely from one round to the next, so one round's
            // ratio is mostly its denominator's noise.
            // Judged as the goal is: against the same flow alone where loss holds it down, else
            // as a share of the line.
            let mean = (
                share: rounds.map(\.share).reduce(0, +) / Double(n), alone: rounds.map(\.alone).reduce(0, +) / Double(n)
            )
            let shareGoal = competitorShareGoal(replication: mode == .replication, aloneShare: mean.alone)
            let judged: (BesideCUBIC) -> Double = shareGoal.againstAlone ? { $0.ofAlone } : { $0.share }
            // The fetch's own rows show one round: the median by what the goal judges.
            let shown = medianRound(rounds, by: judged)
            let of = n > 1 ? " (the median round of \(n) by CUBIC's share)" : ""
            if n > 1 {
                print(
                    "  \(mode.rawValue) rounds: CUBIC's share \(rounds.map { format($0.share * 100) }.joined(separator: ", "))%, ÷ alone \(rounds.map { format($0.ofAlone) }.joined(separator: ", ")) (means: \(format(mean.share * 100))% ÷ \(format(mean.alone * 100))%); fetch \(rounds.map { format($0.fetch.fetchRate) }.joined(separator: ", ")) MiB/s"
                )
            }
            if mode == .replication { replicationRates += rounds.map(\.fetch.fetchRate) }
            // The controls' rounds are printed only: there is no fetch to judge.
            if mode == .nothing || mode == .steady { continue }
            results += rows(prefix: prefix, fetch: shown.fetch, rounds: rounds.map(\.fetch), roundShown: of)
            results.append(
                BenchResult(
                    scenario: prefix + "CUBIC competitor's share" + (n > 1 ? " (mean of \(n) rounds)" : ""),
                    figure: mean.share * 100, unit: "%",
                    baselineName: before + (n > 1 ? " (mean)" : ""), baseline: mean.alone * 100, goal: shareGoal.text))
            if n > 1, let lowest = rounds.min(by: { judged($0) < judged($1) }) {
                results.append(
                    BenchResult(
                        scenario: prefix + "CUBIC competitor's share, the lowest of \(n) rounds",
                        figure: lowest.share * 100, unit: "%",
                        baselineName: before, baseline: lowest.alone * 100, goal: "-"))
            }
            if let beside = LinePing.summary(pings.beside, from: -.infinity, to: .infinity),
                let alone = LinePing.summary(pings.alone, from: -.infinity, to: .infinity)
            {
                print(
                    "  \(mode.rawValue) rounds: a ping's round trip beside the fetches\(pingText(beside)), beside CUBIC alone\(pingText(alone))"
                )
                results.append(
                    BenchResult(
                        scenario: prefix
                            + "a ping's round trip through the line during the fetch (median of \(n == 1 ? "the round" : "all \(n) rounds"))",
                        figure: beside.median, unit: "ms", baselineName: "beside CUBIC alone, just before",
                        baseline: alone.median, goal: "-"))
            }
            if mode == .get {
                results.append(
                    BenchResult(
                        scenario: prefix + "get wall time" + of, figure: shown.fetch.getRate, unit: "MiB/s",
                        baselineName: "a CUBIC latecomer of the same size beside the same download",
                        baseline: latecomer, goal: "fair: about even"))
                if let later = shown.later {
                    results.append(
                        BenchResult(
                            scenario: prefix + "the get's share of the cap in its second half" + of,
                            figure: later.get * 100, unit: "%", baselineName: "CUBIC's, the same half",
                            baseline: later.competitor * 100, goal: "fair: about even"))
                }
            }
        }
        link.tearDown()
        print("  emulator late \(late(link))")
        return results
    }

    /// One fetch beside CUBIC: CUBIC's share of the cap over it and alone (the same flow, over the
    /// 8 s before the joiner starts, or on a lossy line the mean of those and the 8 s after the
    /// fetch), and the shares of the get's second half.
    struct BesideCUBIC {
        var fetch: Fetch
        var share: Double
        var alone: Double
        var later: (get: Double, competitor: Double)?
        /// CUBIC's share beside the fetch ÷ alone (before it, or the mean of before and after).
        var ofAlone: Double { share / max(alone, 1e-9) }
    }
}
