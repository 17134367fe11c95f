# pipe — build, quickstart, tests, benchmarks. Run `make help` for a list.

GO      ?= go
BIN     := bin/pipe
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/pipebackup/pipe/internal/version.Version=$(VERSION)
# disable_grpc_modules: cloud.google.com/go/storage's documented opt-out of
# its gRPC API (pipe's gcs endpoint uses the JSON API), which drops grpc/xds
# and ~100 packages of Envoy protos from the binary: 83 -> 63 MB, and ~7 ms
# less start-up for pipe and again for its plugin process.
TAGS    ?= disable_grpc_modules
# Through GOFLAGS, so that the binaries tests build (integration/, examples)
# are built the same way.
export GOFLAGS += -tags=$(TAGS)

.PHONY: help build run lint lint-install test test-deps test-short fuzz bench proto docs clean

help:
	@echo "make build        build $(BIN) and $(BIN)-wal (archive_command's quick start)"
	@echo "make run          quickstart: back up examples/data through zstd+age, restore it, compare"
	@echo "make lint         go vet and golangci-lint (installs the pinned version into bin/tools)"
	@echo "make lint-install install the pinned golangci-lint into bin/tools"
	@echo "make test         lint, then every test (unit, CLI scripts, round trips, examples, integration)"
	@echo "make test-deps    install what make test needs (Debian/Ubuntu, root or sudo): tools, test images, linter"
	@echo "make test-short   the tests without containers or large data, in under $(SHORT_TIMEOUT)"
	@echo "make fuzz         fuzz the loader, the manifest decoder and the tar extractor, FUZZTIME each (default 60s)"
	@echo "make bench        benchmarks against cp, zstd, mc and rclone; writes bench/results/latest.md"
	@echo "make proto        regenerate the plugin protocol's Go code (needs protoc and its Go plugins)"
	@echo "make docs         regenerate schemas/endpoints.md from the built-in endpoints' schemas"
	@echo "make clean        remove what the targets above wrote (bin, out, backups, examples/data, bench/results)"
	@echo "make help         this list"

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/pipe
	# pipe-wal never compresses: without cgo it is static and starts
	# 0.6 ms sooner (no dynamic loader), once per WAL segment.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)-wal ./cmd/pipe-wal

run: build
	$(GO) run ./examples/sampledata -out examples/data
	./$(BIN) keygen --if-missing
	rm -rf out/restored
	./$(BIN) run examples/quickstart.hcl --pipeline backup
	./$(BIN) run examples/quickstart.hcl --pipeline restore
	diff -r examples/data out/restored && echo "restored bytes are identical to examples/data"

# golangci-lint, pinned; .golangci.yml says which linters and why. It is
# installed through the Go module proxy into bin/tools, one directory per
# version, so a bump reinstalls it.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

lint-install: $(GOLANGCI_LINT)

$(GOLANGCI_LINT):
	GOBIN=$(abspath $(dir $@)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# The build tags come from GOFLAGS (and .golangci.yml's run.build-tags).
lint: $(GOLANGCI_LINT)
	$(GO) vet ./...
	./$(GOLANGCI_LINT) run ./...

# The timeout is per package: ./integration/ alone takes about 19 minutes
# on 2 CPUs (the database versions included), and CI's budget is 45.
# What make test needs on a fresh Debian or Ubuntu machine: the codecs'
# tools, Redis, the database clients, Docker and the test images, the
# linter (.ci/deps; CI runs it too).
test-deps:
	.ci/deps

test: lint
	$(GO) test -count=1 -timeout 40m ./...

# -short skips the integration tests (containers) and the large round
# trips; a run that takes longer than this has a hung test.
SHORT_TIMEOUT ?= 5m
test-short:
	$(GO) test -short -count=1 -timeout $(SHORT_TIMEOUT) ./...

FUZZTIME ?= 60s
# Each fuzzer runs for FUZZTIME: the pipeline loader, the manifest decoder
# and the tar extractor (what a file, a store and a stream can hold).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME) ./plan/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./manifest/
	$(GO) test -run '^$$' -fuzz FuzzExtract -fuzztime $(FUZZTIME) ./plugins/internal/untar/

# The object-store scenario compares pipe with MinIO's client and rclone,
# built once into $(TOOLS) (versions pinned here; `go install` of each).
TOOLS       := bench/results/tools
MC_VERSION  ?= v0.0.0-20250313080218-cf909e1063a9
RCLONE_VERSION ?= v1.76.0

bench: build $(TOOLS)/mc $(TOOLS)/rclone
	$(GO) run ./bench -pipe ./$(BIN) -mc $(TOOLS)/mc -rclone $(TOOLS)/rclone -out bench/results/latest.md

$(TOOLS)/mc:
	GOBIN=$(abspath $(TOOLS)) $(GO) install github.com/minio/mc@$(MC_VERSION)

$(TOOLS)/rclone:
	GOBIN=$(abspath $(TOOLS)) $(GO) install github.com/rclone/rclone@$(RCLONE_VERSION)

# Regenerate the plugin protocol's Go code (needs protoc, protoc-gen-go and
# protoc-gen-go-grpc on PATH; the generated files are committed).
proto:
	protoc -I schemas --go_out=. --go_opt=module=github.com/pipebackup/pipe \
		--go-grpc_out=. --go-grpc_opt=module=github.com/pipebackup/pipe \
		schemas/pipe/plugin/v1/plugin.proto

# Regenerate schemas/endpoints.md from the built-in endpoints' schemas.
docs:
	$(GO) test ./cmd/pipe -run TestEndpointDocs -update-docs

clean:
	rm -rf bin out backups examples/data bench/results
