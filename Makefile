GO        ?= go
PKGS      := ./...
# Nested modules (their own go.mod): the CLI, the gateway, contrib/prometheus, contrib/otel, contrib/goredis,
# the browser test and tools/modproxy (used by release-check). They build against the root module (and each other) as it is
# here through go.work.
NESTED    := cmd/worqr gateway contrib/prometheus contrib/otel contrib/goredis test/browser tools/modproxy
# The root module requires no other module of the repository: it builds and is
# tested against its own go.mod, as a user of the library gets it, not against
# the versions the workspace picks for all the modules together.
ROOTGO    := GOWORK=off $(GO)
STATICCHECK_VERSION ?= v0.6.1

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build every package and the binaries into ./bin (bin/worqr: the operator CLI, a nested module)
	$(ROOTGO) build $(PKGS)
	$(ROOTGO) build -o bin/worqr-example ./cmd/worqr-example
	cd cmd/worqr && $(GO) build -o ../../bin/worqr .

run: ## run the demo (embedded Redis unless WORQR_REDIS_URL is set)
	$(ROOTGO) run ./cmd/worqr-example

test: ## unit + integration tests with -race, the CLI's, the gateway's (its conformance test needs node >= 18), the contrib modules', the root's suites again on go-redis (test-goredis) and the dashboard's browser test too (needs redis-server >= 7.0; chromium, or the browser test skips)
	$(ROOTGO) test -race -count=1 -timeout 10m $(PKGS)
	cd cmd/worqr && $(GO) test -race -count=1 -timeout 5m ./...
	cd gateway && $(GO) test -race -count=1 -timeout 5m ./...
	cd contrib/prometheus && $(GO) test -race -count=1 -timeout 5m ./...
	cd contrib/otel && $(GO) test -race -count=1 -timeout 5m ./...
	cd contrib/goredis && $(GO) test -race -count=1 -timeout 5m ./...
	$(MAKE) test-goredis
	cd test/browser && $(GO) test -count=1 -timeout 3m ./...

# test/chaos runs on go-redis without -race: its timing bounds (a timer
# fires within 800 ms with no fault in between) hold for one set of
# race-built worker processes on two cores, not for the heavier go-redis
# ones (timers 0.8-1.5 s late); -race covers the same code in the redigo
# run and contrib/goredis's own tests.
test-goredis: ## the root's worqr, test/integration, test/chaos (without -race) and test/cluster tests, and test/sentinel's failover tests, with their pools and worker processes on go-redis clients (contrib/goredis/suite)
	bash contrib/goredis/suite -race -count=1 -timeout 15m ./worqr ./test/integration ./test/cluster
	bash contrib/goredis/suite -count=1 -timeout 10m ./test/chaos
	$(MAKE) test-goredis-failover

test-goredis-failover: ## test/sentinel's failover tests alone on go-redis failover clients (part of test-goredis)
	bash contrib/goredis/suite -race -count=1 -timeout 10m \
		-run 'TestWorkersKeepRunningThroughFailovers|TestLostTakeCancelledAfterFailover|TestReplicationLoss' ./test/sentinel

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(ROOTGO) vet $(PKGS)
	$(ROOTGO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)
	for m in $(NESTED); do (cd $$m && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...) || exit 1; done

screenshots: ## capture docs/img/*.png of every dashboard page with headless Chromium
	cd test/browser && $(GO) test -count=1 -run TestScreenshots -screenshots=../../docs/img ./...

release-check: ## publish every module at VERSION into a module proxy on disk from a clone of the last commit, then go install the CLI and build a program from it (docs/RELEASING.md)
	bash .ci/release-check

.PHONY: help build run test test-goredis test-goredis-failover lint screenshots release-check

# The gateway's generated code is committed: only changing gateway/proto needs protoc.
PROTOC_GEN_GO_VERSION         ?= v1.36.10
PROTOC_GEN_CONNECT_GO_VERSION ?= v1.19.1

proto: ## regenerate gateway/gen from gateway/proto (needs protoc: apt-get install protobuf-compiler)
	GOBIN=$(CURDIR)/bin/tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/bin/tools $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	cd gateway && PATH=$(CURDIR)/bin/tools:$$PATH protoc -I proto \
		--go_out=gen --go_opt=paths=source_relative \
		--connect-go_out=gen --connect-go_opt=paths=source_relative \
		worqr/gateway/v1/gateway.proto
	perl gateway/proto/tools/oncevalue.pl gateway/gen/worqr/gateway/v1/gateway.pb.go > gateway/gen/worqr/gateway/v1/gateway.pb.go.tmp
	mv gateway/gen/worqr/gateway/v1/gateway.pb.go.tmp gateway/gen/worqr/gateway/v1/gateway.pb.go

.PHONY: proto

BENCH_FLAGS ?=

bench: ## worqr vs asynq, own redis-server, then redigo vs go-redis (bench-clients), ~7 min (BENCH_FLAGS="-only a,b -reps 5"; docs/BENCHMARKS.md)
	$(ROOTGO) run ./cmd/worqr-bench $(BENCH_FLAGS)
	$(MAKE) bench-clients

bench-clients: ## worqr on a redigo pool vs a go-redis client, same redis-server, same run: enqueue and drain per task, Redis commands, CPU; 3 runs (contrib/goredis BenchmarkClients)
	cd contrib/goredis && $(GO) test -run '^$$' -bench BenchmarkClients -benchtime 20000x -count 3 .

BENCH_NET_FLAGS ?= -rtt 600us -only b,c -concurrency 10,50 -n 20000 -reps 3

bench-net: ## worqr vs asynq through a 0.6 ms RTT delay proxy: drain at C=10 and 50, 1,000 jobs/s costs, ~5 min
	$(ROOTGO) run ./cmd/worqr-bench $(BENCH_NET_FLAGS) $(BENCH_FLAGS)

.PHONY: bench bench-clients bench-net

CHAOS_DURATION ?= 10m
CHAOS_TASKS    ?= 100000
CHAOS_TIMEOUT  ?= 1h

chaos: ## mixed-fault, fair-queue and flow-timer chaos runs, own redis-servers (CHAOS_DURATION=10m CHAOS_TASKS=100000; docs/RELIABILITY.md)
	WORQR_CHAOS=long WORQR_CHAOS_DURATION=$(CHAOS_DURATION) WORQR_CHAOS_TASKS=$(CHAOS_TASKS) \
		$(ROOTGO) test -count=1 -timeout $(CHAOS_TIMEOUT) -v -run 'TestChaos(Mixed|Durability|Fair|Timers)$$' ./test/chaos

.PHONY: chaos
