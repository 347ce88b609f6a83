// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "GroupMesh",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "GroupMesh", targets: ["GroupMesh"]),
        .executable(name: "groupmesh", targets: ["groupmesh"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        .target(
            name: "MeshCrypto",
            dependencies: [
                "CSodium",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "MeshCore",
            dependencies: [
                "MeshCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // Small C shims for system calls Swift's Glibc module does not expose.
        .target(name: "CMeshSystem"),
        .target(
            name: "MeshStore",
            dependencies: [
                "CMeshSystem",
                "MeshCore",
                "MeshCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .target(
            name: "GroupMesh",
            dependencies: [
                "MeshCore",
                "MeshCrypto",
                "MeshStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .executableTarget(
            name: "groupmesh",
            dependencies: [
                "GroupMesh",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .target(
            name: "MeshTestKit",
            dependencies: ["MeshCore", "MeshCrypto", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .executableTarget(
            name: "MeshBench",
            dependencies: [
                "MeshCore",
                "MeshCrypto",
                "MeshTestKit",
                "GroupMesh",
                "CSodium",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // libFuzzer harness over every decoder of outside bytes; built only by `make fuzz`.
        .executableTarget(
            name: "MeshFuzz",
            dependencies: ["GroupMesh", "MeshCore", "MeshCrypto", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
        .testTarget(name: "MeshCryptoTests", dependencies: ["MeshCrypto"]),
        .testTarget(
            name: "MeshCoreTests",
            dependencies: [
                "MeshCore", "MeshCrypto", "MeshTestKit",
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
        .testTarget(name: "MeshStoreTests", dependencies: ["MeshStore", "MeshCrypto", "CMeshSystem"]),
        .testTarget(
            name: "GroupMeshTests",
            dependencies: [
                "GroupMesh", "MeshTestKit", "MeshCore", "MeshCrypto", "MeshStore",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        .testTarget(name: "MeshTestKitTests", dependencies: ["MeshTestKit", "MeshCore"]),
        .testTarget(
            name: "GroupMeshCLITests",
            dependencies: [
                "GroupMesh", "MeshTestKit", "MeshCrypto", "MeshCore", "MeshStore",
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
    ]
)
