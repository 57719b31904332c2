# idrecon — `make demo` runs the main job end to end, `make test` builds and tests.
SHELL := /bin/bash
SWIFT ?= swift
DEB_PACKAGES := librdkafka-dev libsqlite3-dev libjemalloc-dev libssl-dev pkg-config sqlite3 curl prometheus
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE_BIN := .build/release
# Release code reaches a generic type's metadata through its accessor, not by its mangled name, which
# the runtime resolves by scanning the binary's 10,000 protocol conformance records once per type:
# a query starts about 6 ms sooner (schemas/performance.md, "Fewer conformance scans at start").
RELEASE_FLAGS := -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors

.PHONY: all build release test demo bench fuzz deps clean

all: build

## deps: install the Debian packages the build needs, when missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build

## release: optimized binaries in .build/release; the compiler's output goes to a log,
## shown only when the build fails.
release: deps
	@mkdir -p .build; log=.build/release-build.log; : > $$log; \
	echo "building release binaries (about 10 minutes the first time; log: $$log)"; \
	for product in idrecon idrecon-gen idrecon-bench; do \
	  $(SWIFT) build -c release --product $$product --static-swift-stdlib $(RELEASE_FLAGS) >> $$log 2>&1 \
	    || { tail -40 $$log; echo "release build failed: see $$log"; exit 1; }; \
	done; echo "built: $(RELEASE_BIN)/idrecon $(RELEASE_BIN)/idrecon-gen"

## test: build everything and run every test.
## SwiftPM's build database (llbuild) has been seen to abort on a fresh clone before compiling anything
## ("The database connection could not be closed"): a build killed by a signal is retried once; a build
## that fails on its own (exit status below 128) is not.
test: deps
	@$(SWIFT) build --build-tests || { rc=$$?; [ $$rc -gt 128 ] || exit $$rc; \
	  echo "swift build was killed by signal $$((rc - 128)); retrying once"; $(SWIFT) build --build-tests; }
	$(SWIFT) test --skip-build

## demo: generate a realistic stream, ingest it, query it (tools/demo.sh).
demo: release
	@tools/demo.sh

## bench: throughput, memory and latency vs a hand-written baseline (tools/bench.py; EVENTS=N, ARGS=--quick).
bench: release
	tools/bench.sh $(ARGS)

## fuzz: libFuzzer over the record path (FUZZ_SECONDS=600); findings go to .fuzz/, keep them in tools/idrecon-fuzz/crashers.
## (Swift's backtracer is off so that libFuzzer's own handler saves the crashing input.)
FUZZ_SECONDS ?= 600
fuzz: deps
	$(SWIFT) build -c release --product idrecon-fuzz --scratch-path .build-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING \
	  --toolset tools/idrecon-fuzz/toolset.json
	mkdir -p .fuzz/corpus && cp -n tools/idrecon-fuzz/corpus/* tools/idrecon-fuzz/crashers/* .fuzz/corpus/
	SWIFT_BACKTRACE=enable=no .build-fuzz/release/idrecon-fuzz .fuzz/corpus -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=10 \
	  -rss_limit_mb=2048 -artifact_prefix=.fuzz/ -print_final_stats=1

clean:
	rm -rf .build .build-fuzz .demo .bench .fuzz
