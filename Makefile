# idrecon — `make demo` runs the main job end to end, `make test` builds and tests.
SHELL := /bin/bash
SWIFT ?= swift
DEB_PACKAGES := librdkafka-dev libsqlite3-dev libssl-dev pkg-config
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE_BIN := .build/release
DEMO_DIR := .demo
DEMO_EVENTS ?= 100000

.PHONY: all build release test demo bench deps clean

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

release: deps
	$(SWIFT) build -c release --product idrecon
	$(SWIFT) build -c release --product idrecon-gen

## test: build everything and run every test.
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

## demo: generate a realistic stream, ingest it, query it.
demo: release
	@mkdir -p $(DEMO_DIR) && rm -f $(DEMO_DIR)/idrecon.sqlite*
	@echo "== generating $(DEMO_EVENTS) events (seeded) =="
	$(RELEASE_BIN)/idrecon-gen --events $(DEMO_EVENTS) --output $(DEMO_DIR)/events.jsonl --manifest $(DEMO_DIR)/manifest.json
	@cat $(DEMO_DIR)/manifest.json
	@echo "== ingest =="
	$(RELEASE_BIN)/idrecon ingest $(DEMO_DIR)/events.jsonl --db $(DEMO_DIR)/idrecon.sqlite --format table
	@echo "== ingest again: nothing new =="
	$(RELEASE_BIN)/idrecon ingest $(DEMO_DIR)/events.jsonl --db $(DEMO_DIR)/idrecon.sqlite --format table
	@echo "== stats =="
	$(RELEASE_BIN)/idrecon stats --db $(DEMO_DIR)/idrecon.sqlite --format table
	@echo "== quarantine (first 10) =="
	$(RELEASE_BIN)/idrecon quarantine list --db $(DEMO_DIR)/idrecon.sqlite --limit 10 --format table
	$(RELEASE_BIN)/idrecon quarantine show 1 --db $(DEMO_DIR)/idrecon.sqlite --format table

## bench: throughput and memory (see tools/bench.sh; EVENTS=N to change the size).
bench: release
	tools/bench.sh

clean:
	rm -rf .build $(DEMO_DIR) .bench
