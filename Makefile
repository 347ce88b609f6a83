# GroupMesh — every target installs what it needs first (see README.md).
SWIFT        ?= swift
# Every swift command below takes the same flags, so none rebuilds what another built. (Not
# --disable-index-store: on Linux the test build discovers the tests through the index store.)
SWIFT_FLAGS  ?=
DATA_DIR     ?= ./.groupmesh
RUN_ARGS     ?=
FUZZ_SECONDS ?= 60
QUICK        ?=
SEEDS        ?= 200
PREFIX       ?= /usr/local
DESTDIR      ?=

.PHONY: deps build run test test-parts format format-check docs docs-check bench demo fuzz soak install clean

deps:
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "error: swift is not on PATH (need Swift 6.x)"; exit 1; }
	@if ! pkg-config --exists libsodium 2>/dev/null; then \
		echo "libsodium not found by pkg-config: installing libsodium-dev"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libsodium-dev pkg-config; \
	fi
	@# The WAN link emulator (tools/wanlink, WANLink, bench/wan-link-check.sh) and the NAT laboratory
	@# (NATLab: conntrack expires its routers' mappings) need root anyway: installed only as root, and
	@# never an error (their tests skip with a reason without these).
	@if [ "$$(id -u)" -eq 0 ]; then \
		missing=; \
		pkg-config --exists libnetfilter_queue 2>/dev/null || missing="$$missing libnetfilter-queue-dev"; \
		{ command -v ip && command -v tc; } >/dev/null 2>&1 || missing="$$missing iproute2"; \
		command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
		command -v iperf3 >/dev/null 2>&1 || missing="$$missing iperf3"; \
		command -v ping >/dev/null 2>&1 || missing="$$missing iputils-ping"; \
		command -v conntrack >/dev/null 2>&1 || missing="$$missing conntrack"; \
		command -v nft >/dev/null 2>&1 || missing="$$missing nftables"; \
		command -v tmux >/dev/null 2>&1 || missing="$$missing tmux"; \
		{ command -v miniupnpd && command -v upnpc && command -v natpmpc && command -v nft; } >/dev/null 2>&1 || missing="$$missing miniupnpd miniupnpc natpmpc nftables"; \
		command -v turnserver >/dev/null 2>&1 || missing="$$missing coturn"; \
		if [ -n "$$missing" ]; then \
			echo "WAN link emulator and NAT laboratory: installing$$missing"; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } \
				|| echo "warning: could not install$$missing; the tests and bench rows that need them will be skipped"; \
		fi; \
	fi

# What a user runs and installs: the optimized groupmesh (the tests build their own, in debug).
BIN = .build/release/groupmesh
build: deps
	$(SWIFT) build -c release --product groupmesh $(SWIFT_FLAGS)

run: build
	$(BIN) run --data-dir $(DATA_DIR) $(RUN_ARGS)

# Seeded simulations and pure logic run on every core at once (they live in simulated time);
# tests with real sockets, processes and clocks run one at a time, so they never starve each other.
SEEDED_TESTS   = ^(MeshCoreTests|MeshCryptoTests|MeshStoreTests|MeshTestKitTests)\.
REALTIME_TESTS = ^(GroupMeshTests|GroupMeshCLITests)\.

test: deps format-check
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	$(MAKE) --no-print-directory docs-check
	sync  # the build's writes go to disk now, not under the end-to-end tests' fsyncs
	@# The previous release's binary (a compatibility test runs it) builds beside the tests, at the
	@# lowest priority, instead of inside that test, which runs last and waits for it (and, if it
	@# cannot be had, says why and skips). Not beside the build above: that made the build a few
	@# minutes longer. Its output goes to .build/previous-release.log (.build made here when
	@# SWIFT_FLAGS moves the scratch path). Stopped with Ctrl-C, it finishes on its own (an hour at
	@# most).
	mkdir -p .build; nice -n 19 scripts/previous-release.sh > .build/previous-release.log 2>&1 & \
	$(MAKE) --no-print-directory test-parts; status=$$?; wait; exit $$status
	# A test target in neither list still runs (today this runs nothing).
	$(SWIFT) test --skip-build --no-parallel $(SWIFT_FLAGS) --skip '$(SEEDED_TESTS)' --skip '$(REALTIME_TESTS)'

# The two parts of the suite side by side, from the build `make test` made: the seeded tests are CPU
# and simulated time (what they see does not depend on load), the real-time tests mostly wait on
# the network and pass beside busy loops. The seeded part prints when it is done (at a lower
# priority it crawled beside other busy processes: four loops would have held it for hours). Each
# part runs the test binary itself, as `swift test` does (`--testing-library swift-testing`): two
# `swift test` at once both open the build's database, and on a loaded machine one failed on its
# lock before running a test. Swift Testing captures a backtrace for every error thrown, caught or
# not: the decoder tests throw hundreds of thousands (every malformed input), and those backtraces
# were a third of their time. The compatibility test runs last, when the previous release's build
# is most likely done. Ctrl-C stops both parts (the seeded one with SIGTERM: a job a
# non-interactive shell starts in the background ignores SIGINT).
# (`sync` before: the build's writes go to disk then, not under the end-to-end tests' fsyncs.)
PREVIOUS_RELEASE_TESTS = ^GroupMeshCLITests\.PreviousReleaseTests
TEST_BINARY = GroupMeshPackageTests.xctest
test-parts:
	bin=$$($(SWIFT) build --show-bin-path $(SWIFT_FLAGS))/$(TEST_BINARY); \
	[ -x "$$bin" ] || { echo "make test-parts: no $$bin: run make test (it builds it)"; exit 1; }; \
	SWT_SWIFT_ERROR_BACKTRACING_ENABLED=0 NO_COLOR=1 "$$bin" --testing-library swift-testing \
		--filter '$(SEEDED_TESTS)' > .build/seeded-tests.log 2>&1 & seeded=$$!; \
	trap 'kill -TERM $$seeded 2>/dev/null; exit 130' INT TERM HUP; \
	NO_COLOR=1 "$$bin" --testing-library swift-testing --no-parallel --filter '$(REALTIME_TESTS)' \
		--skip '$(PREVIOUS_RELEASE_TESTS)'; realtime=$$?; \
	NO_COLOR=1 "$$bin" --testing-library swift-testing --no-parallel --filter '$(PREVIOUS_RELEASE_TESTS)'; \
	previous=$$?; wait $$seeded; seededstatus=$$?; \
	echo "== the seeded tests (they ran beside the real-time ones; also in .build/seeded-tests.log)"; \
	cat .build/seeded-tests.log; \
	[ $$realtime -eq 0 ] || echo "make test: the real-time tests failed (above the seeded tests' output)"; \
	[ $$previous -eq 0 ] || echo "make test: the previous release's test failed (above the seeded tests' output)"; \
	[ $$seededstatus -eq 0 ] || echo "make test: the seeded tests failed"; \
	[ $$realtime -eq 0 ] && [ $$previous -eq 0 ] && [ $$seededstatus -eq 0 ]

# The code's layout (.swift-format: the toolchain's swift-format, lines of 120 columns). `make format`
# rewrites it; `make test` fails on any difference first, in seconds.
FORMAT_PATHS = Package.swift Sources Tests
format:
	$(SWIFT) format format --in-place --recursive --parallel $(FORMAT_PATHS)
format-check:
	$(SWIFT) format lint --strict --recursive --parallel $(FORMAT_PATHS)

# The DocC catalog of the library (the API's articles, the porting guide) against the built
# module's public symbols: a broken link or an unknown symbol fails. HTML in .build/docs.
DOCC ?= docc
docs: deps docs-check
docs-check:
	$(SWIFT) package $(SWIFT_FLAGS) dump-symbol-graph --minimum-access-level public >/dev/null
	rm -rf .build/docs-symbols && mkdir -p .build/docs-symbols
	cp "$$($(SWIFT) build --show-bin-path $(SWIFT_FLAGS))/../symbolgraph/"GroupMesh*.symbols.json .build/docs-symbols/
	$(DOCC) convert Sources/GroupMesh/GroupMesh.docc --additional-symbol-graph-dir .build/docs-symbols \
		--output-path .build/docs --fallback-display-name GroupMesh \
		--fallback-bundle-identifier org.groupmesh.GroupMesh --warnings-as-errors
	@echo "documentation built: .build/docs"

# libtorrent, the peer the loopback `get`s are measured beside (bench/libtorrent-swarm.py; without
# it that row is skipped): Debian's python3-libtorrent, for Debian's /usr/bin/python3, installed
# here as root (only the bench uses it), on its own so that its absence costs nothing else.
bench: deps
	@if [ "$$(id -u)" -eq 0 ] && ! /usr/bin/python3 -c 'import libtorrent' >/dev/null 2>&1; then \
		echo "libtorrent for the bench's peer row: installing python3-libtorrent"; \
		DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq python3-libtorrent \
			|| echo "warning: could not install python3-libtorrent; the libtorrent row will be skipped"; \
	fi
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	QUICK=$(QUICK) .build/release/MeshBench

# The story in under a minute after the build: three nodes, a message, an attachment, a late joiner.
demo: build
	GROUPMESH_BIN=$(BIN) bash scripts/demo.sh

# libFuzzer over every decoder of outside bytes (datagrams, frames, invites, journal, transfer,
# control-socket requests, a gateway's port-mapping answers), for a bounded
# time. Crash inputs land in bench/fuzz-artifacts/; add each as a regression test.
fuzz: deps
	$(SWIFT) build -c debug --product MeshFuzz --scratch-path .build-fuzz \
		-Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING
	mkdir -p .build-fuzz/corpus bench/fuzz-artifacts
	.build-fuzz/debug/MeshFuzz -max_total_time=$(FUZZ_SECONDS) -max_len=2048 \
		-artifact_prefix=bench/fuzz-artifacts/ .build-fuzz/corpus

# The whole-node simulation over SEEDS seeds per scenario (seeds 1...SEEDS), optimized (with
# testing enabled, in a scratch path of its own: `make bench`'s release build is left alone). A
# failing seed is named as SIM_SEED=N; `SIM_SEED=N swift test --filter WholeNodeSimulation` replays
# it (the same run in a debug build).
SOAK_FLAGS = -c release -Xswiftc -enable-testing --scratch-path .build-soak
soak: deps
	$(SWIFT) build --build-tests $(SOAK_FLAGS) $(SWIFT_FLAGS)
	SIM_SEEDS=$(SEEDS) $(SWIFT) test --skip-build $(SOAK_FLAGS) $(SWIFT_FLAGS) --filter WholeNodeSimulation

# The release binary, its man page (generated from the argument parser) and shell completions,
# under $(DESTDIR)$(PREFIX).
MAN_PAGE = .build/plugins/GenerateManual/outputs/groupmesh/groupmesh.1
# After `make build` this takes well under two minutes: the man page's plugin builds the package's
# other programs in release mode too (the benchmark and fuzz drivers), not groupmesh again.
install: build
	$(SWIFT) package plugin generate-manual
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/groupmesh
	install -m 644 $(MAN_PAGE) $(DESTDIR)$(PREFIX)/share/man/man1/groupmesh.1
	$(BIN) --generate-completion-script bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/groupmesh
	$(BIN) --generate-completion-script zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_groupmesh
	$(BIN) --generate-completion-script fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/groupmesh.fish
	@echo "installed groupmesh, its man page and completions under $(DESTDIR)$(PREFIX)"

clean:
	rm -rf .build .build-fuzz
