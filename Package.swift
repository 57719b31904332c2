// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "idrecon",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "idrecon", targets: ["idrecon"]),
        .executable(name: "idrecon-gen", targets: ["idrecon-gen"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
    ],
    targets: [
        // The build's version: a release number and the commit (`git describe` at build time).
        .plugin(name: "BuildInfoPlugin", capability: .buildTool(), path: "tools/BuildInfoPlugin"),
        .target(name: "IdreconVersion", plugins: ["BuildInfoPlugin"]),
        // Pure domain: event model, JSON, validation, canonical form. No I/O.
        .target(
            name: "IdreconDomain",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
        // SQLite's process-wide settings (`sqlite3_config`, variadic in C), for the log only.
        .target(name: "CSQLiteSettings", linkerSettings: [.linkedLibrary("sqlite3")]),
        // The log: events, quarantine, consumed positions, migrations, SQLite's C API for the hot paths (GRDB).
        .target(
            name: "IdreconLog",
            dependencies: [
                "IdreconDomain", "CSQLiteSettings", "CPrefetch", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        // The projection engine: one file per projection, live folds and replay's bulk load.
        .target(
            name: "IdreconProjections",
            dependencies: [
                "IdreconDomain", "IdreconLog", "CPrefetch", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The store callers use (`EventStore`: open, append, replay) and the read side: queries,
        // exports, audit, erasure, backup.
        .target(
            name: "IdreconStore",
            dependencies: [
                "IdreconDomain", "IdreconLog", "IdreconProjections", "CSQLiteSettings",
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Reading sources (JSON lines files) in batches into the store.
        .target(
            name: "IdreconIngest",
            dependencies: ["IdreconDomain", "IdreconStore", .product(name: "_CryptoExtras", package: "swift-crypto")]
        ),
        // Debian's librdkafka 2.0.2 (with the mock cluster API), for the Kafka layer only: its headers at
        // build time, the library loaded when first used (librdkafka-dev, from `make deps`).
        .target(name: "CRdKafka", linkerSettings: [.linkedLibrary("dl")]),
        // The process's allocator: Debian's jemalloc (libjemalloc-dev, from `make deps`) and its settings
        // (`MemoryPolicy`). `malloc_conf` is exported so that the library finds it (`--no-export-dynamic`).
        .target(
            name: "CMalloc",
            linkerSettings: [
                .linkedLibrary("jemalloc"),
                .unsafeFlags(["-Xlinker", "--export-dynamic-symbol=malloc_conf"]),
            ]
        ),
        // The CPUs a process may run on and pinning a thread to one (glibc's `_GNU_SOURCE` calls): the
        // read API's event loops, one to a core.
        .target(name: "CAffinity"),
        // Compiler hints Swift does not expose: prefetches for the bulk folds' scattered reads and
        // the branch-free search of the replay's partitions.
        .systemLibrary(name: "CPrefetch", path: "Sources/CPrefetch"),
        // Thin Kafka layer: consumer with offsets in SQLite, producer, embedded mock cluster.
        .target(
            name: "IdreconKafka",
            dependencies: [
                "CRdKafka", "IdreconDomain", "IdreconStore", "IdreconIngest",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The running service's outside: Prometheus metrics and health over HTTP (Hummingbird).
        .target(
            name: "IdreconService",
            dependencies: [
                "IdreconDomain", "IdreconStore", "IdreconKafka", "IdreconVersion",
                .target(name: "CAffinity", condition: .when(platforms: [.linux])),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The command line.
        .executableTarget(
            name: "idrecon",
            dependencies: [
                "IdreconDomain", "IdreconStore", "IdreconIngest", "IdreconKafka", "IdreconService", "IdreconVersion",
                .target(name: "CMalloc", condition: .when(platforms: [.linux])),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // The static Swift runtime's link arguments export every symbol of the executable
            // (40,000), and the runtime's one `dladdr` at start-up walked them all; nothing
            // looks our symbols up by name. Queries are whole processes (`schemas/performance.md`).
            linkerSettings: [.unsafeFlags(["-Xlinker", "--no-export-dynamic"], .when(platforms: [.linux]))]
        ),
        // Deterministic, seeded event-stream generator (library + CLI).
        .target(name: "EventGenerator", dependencies: ["IdreconDomain"], path: "tools/EventGenerator"),
        .executableTarget(
            name: "idrecon-gen",
            dependencies: [
                "EventGenerator", "IdreconVersion",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "tools/idrecon-gen"
        ),
        // Benchmark helper: the storage module's raw append limit.
        .executableTarget(
            name: "idrecon-bench", dependencies: ["IdreconStore", "IdreconIngest", "CMalloc"], path: "tools/idrecon-bench"
        ),
        // The record path under libFuzzer (`make fuzz`); built normally it replays inputs.
        .target(
            name: "IdreconFuzzing",
            dependencies: ["IdreconDomain", .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "_CryptoExtras", package: "swift-crypto")],
            path: "tools/IdreconFuzzing"
        ),
        .target(name: "CFuzzDriver", path: "tools/CFuzzDriver"),
        .executableTarget(
            name: "idrecon-fuzz", dependencies: ["IdreconFuzzing", "CFuzzDriver"], path: "tools/idrecon-fuzz",
            exclude: ["corpus", "crashers", "toolset.json"]  // the fuzzer's inputs and build settings, not sources
        ),
        .testTarget(
            name: "IdreconDomainTests",
            dependencies: [
                "IdreconDomain", "IdreconFuzzing",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
        .testTarget(
            name: "IdreconStoreTests",
            dependencies: [
                "IdreconStore", "IdreconLog", "IdreconProjections", "IdreconIngest", "EventGenerator",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "IdreconCLITests",
            dependencies: ["IdreconStore", "IdreconKafka", "EventGenerator", .product(name: "GRDB", package: "GRDB.swift")]
        ),
    ]
)
