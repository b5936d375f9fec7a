# mcpgate: `make dev` runs it locally, `make test` tests it, `sam deploy` ships it.

GO      ?= go
NPM     ?= npm
# SAM passes ARTIFACTS_DIR to build-GatewayFunction; `make build` uses bin/.
ARTIFACTS_DIR ?= $(CURDIR)/bin/gateway
TEST_TIMEOUT  ?= 15m

.PHONY: help dev test soak deps tables build build-GatewayFunction cli vet fmt fuzz bench clean

help:
	@echo "make dev     run the gateway locally: store, tables, demo upstream (cap 2), dev key, gateway"
	@echo "             ports: DEV_STORE_PORT (8000), DEV_GATEWAY_ADDR (127.0.0.1:8080), DEV_DEMO_PORT (9100);"
	@echo "             a taken port is replaced by a free one, and printed. State and logs: DEV_STATE_DIR (.dev)"
	@echo "make test    run every test (starts and stops its own dynalite and gateways)"
	@echo "make soak    the fault soak: kills, store outage, stalled upstream, over 6 processes;"
	@echo "             then the lease protocol's fault simulation over SIM_SEEDS (10000) seeded schedules"
	@echo "make tables  create the three tables where AWS_ENDPOINT_URL_DYNAMODB / AWS_REGION point"
	@echo "make build   build the Lambda bootstrap (linux/arm64) into bin/gateway/"
	@echo "make cli     build the admin CLI for this machine into bin/mcpgate (or: go install ./cmd/mcpgate)"
	@echo "make deps    install every Node package (dynalite and the test-only ones) and the Go modules"
	@echo "make fuzz    fuzz the MCP and REST request decoding"
	@echo "make bench   measure the limiter (store cost, saturation, in-process baseline, hot key, cold start, cold fleet,"
	@echo "             waiters, bulkhead, two tenants, rate limits, adaptive) into results/, with results/cap.svg"
	@echo "             (the upstream's calls in flight over time) and results/adaptive.svg (the adaptive limit);"
	@echo "             BENCH_ONLY=waiters,bulkhead make bench runs only the scenarios named (empty: all)"

# Node packages. make dev needs only dynalite (the "dependencies"); the
# tests also need the "devDependencies" and the optional Node 22 binary,
# some of which declare Node >= 22 (npm warns EBADENGINE on Node 20; the
# conformance suite runs under the Node 22 binary, the Inspector's CLI runs
# on Node 20). `npm ci` replaces node_modules, so each install leaves its
# own stamp, and a full install also serves make dev.
NODE_DEV  := infra/node_modules/.mcpgate-dev
NODE_TEST := infra/node_modules/.mcpgate-test

deps: $(NODE_TEST)
	$(GO) mod download

$(NODE_TEST): infra/package.json infra/package-lock.json
	cd infra && $(NPM) ci --no-audit --no-fund
	touch $@

$(NODE_DEV): infra/package.json infra/package-lock.json
	@if [ -f $(NODE_TEST) ] && [ $(NODE_TEST) -nt infra/package.json ] && [ $(NODE_TEST) -nt infra/package-lock.json ]; then :; \
	else cd infra && $(NPM) ci --omit=dev --omit=optional --no-audit --no-fund; fi
	touch $@

dev: $(NODE_DEV)
	./infra/dev.sh

test: $(NODE_TEST)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	# The limiter again on a store that returns no item with a failed
	# conditional write: its fallback read.
	STORETEST_CCF_ITEM=off $(GO) test -count=1 ./internal/lease

# Thousands of calls over six gateway processes with processes killed and
# restarted, the store stopped and restarted and the upstream stalled, against
# a stateful and a stateless upstream (functions/gateway/soak_test.go).
# SOAK_CALLS and SOAK_PROCS size each run. Then the lease protocol's fault
# simulation (internal/lease/sim_test.go) over SIM_SEEDS schedules, where
# make test runs 300; a failing seed prints how to replay it.
SIM_SEEDS ?= 10000
soak: $(NODE_TEST)
	MCPGATE_SOAK=1 $(GO) test -count=1 -timeout 10m -run '^TestSoak$$' -v ./functions/gateway
	LEASE_SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -timeout 20m -run '^TestFaultSimulation$$' ./internal/lease

# The limiter's benchmark (functions/gateway/bench_test.go): prints one
# table and writes results/bench.json. `make test` runs a brief smoke of it.
# BENCH_ONLY, comma-separated scenario names, runs only those (empty: all):
# uncontended, saturation, hotkey, itemsize, coldstart, coldfleet, waiters,
# bulkhead, tenants, ratelimits, adaptive (which also draws
# results/adaptive.svg).
bench: $(NODE_TEST)
	MCPGATE_BENCH=1 $(GO) test -count=1 -timeout 20m -run '^TestBench$$' -v ./functions/gateway | grep -v '^        {'

tables:
	$(GO) run ./cmd/mcpgate tables create

# The Lambda bootstrap. SAM's makefile builder calls this target with
# ARTIFACTS_DIR set, which keeps internal/ in the build.
build-GatewayFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
		-o $(ARTIFACTS_DIR)/bootstrap ./functions/gateway

build: build-GatewayFunction
	@ls -l $(ARTIFACTS_DIR)/bootstrap

# The admin CLI for this machine, for a deployed stack (make dev puts its
# own copy on PATH through .dev/env).
cli:
	$(GO) build -o bin/mcpgate ./cmd/mcpgate
	@echo "bin/mcpgate built; put it on PATH, or run: go install ./cmd/mcpgate"

vet:
	$(GO) vet ./...

# Fuzz the MCP and REST request decoding (FUZZTIME each; the seed corpus
# also runs in `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzMCPRequest$$' -fuzztime $(FUZZTIME) ./internal/gateway
	$(GO) test -run '^$$' -fuzz '^FuzzRESTCall$$' -fuzztime $(FUZZTIME) ./internal/gateway

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .aws-sam .dev results
