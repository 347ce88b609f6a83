import CSodium
import Foundation
import MeshCrypto

/// Foundation scenario: sealing, opening and hashing throughput on one core, beside memcpy of
/// the same sizes and libsodium's portable SHA-256, measured in the same run.
enum CryptoScenario {
    static func run(quick: Bool) -> [BenchResult] {
        let seconds = quick ? 0.1 : 0.4
        let runs = quick ? 3 : 5
        let sealer = try! PacketSealer(key: SecureRandom.bytes(32))  // safe: 32 bytes
        var results: [BenchResult] = []
        for size in [1200, 64 * 1024, 1024 * 1024] {
            let label = size == 1200 ? "1200 B" : "\(size / 1024) KiB"
            var plaintext = SecureRandom.bytes(size)
            var output = [UInt8](repeating: 0, count: size + PacketSealer.tagByteCount)
            let ad = [UInt8](repeating: 1, count: 42)
            var copyTarget = [UInt8](repeating: 0, count: size)
            let memcpyRate = measureThroughput(bytes: size, seconds: seconds, runs: runs) {
                copyTarget.withUnsafeMutableBytes { dst in
                    plaintext.withUnsafeBytes { src in _ = memcpy(dst.baseAddress!, src.baseAddress!, size) }
                }
            }
            var number: UInt64 = 0
            let sealRate = measureThroughput(bytes: size, seconds: seconds, runs: runs) {
                number += 1
                plaintext.withUnsafeBytes { pt in
                    ad.withUnsafeBytes { adp in
                        output.withUnsafeMutableBytes { out in
                            _ = sealer.seal(pt, associatedData: adp, nonce: .packetNumber(number), into: out)
                        }
                    }
                }
            }
            let sealed = sealer.seal(plaintext, associatedData: ad, nonce: .packetNumber(1))
            let openRate = measureThroughput(bytes: size, seconds: seconds, runs: runs) {
                sealed.withUnsafeBytes { ct in
                    ad.withUnsafeBytes { adp in
                        plaintext.withUnsafeMutableBytes { out in
                            _ = sealer.open(ct, associatedData: adp, nonce: .packetNumber(1), into: out)
                        }
                    }
                }
            }
            let shaRate = measureThroughput(bytes: size, seconds: seconds, runs: runs) {
                _ = plaintext.withUnsafeBytes { SHA256Digest.hashing($0) }
            }
            var sodiumDigest = [UInt8](repeating: 0, count: 32)
            let sodiumShaRate = measureThroughput(bytes: size, seconds: seconds, runs: runs) {
                _ = crypto_hash_sha256(&sodiumDigest, plaintext, UInt64(size))
            }
            results.append(
                BenchResult(
                    scenario: "seal \(label)", figure: sealRate, unit: "MB/s",
                    baselineName: "memcpy", baseline: memcpyRate, goal: "-"))
            results.append(
                BenchResult(
                    scenario: "open \(label)", figure: openRate, unit: "MB/s",
                    baselineName: "memcpy", baseline: memcpyRate, goal: "-"))
            results.append(
                BenchResult(
                    scenario: "sha256 \(label)", figure: shaRate, unit: "MB/s",
                    baselineName: "libsodium sha256", baseline: sodiumShaRate,
                    goal: size >= 65536 ? "ratio > 1" : "-"))
        }
        return results
    }
}
