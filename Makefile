# mcpgate: `make dev` runs it locally, `make test` tests it, `sam deploy` ships it.

GO      ?= go
NPM     ?= npm
# SAM passes ARTIFACTS_DIR to build-GatewayFunction; `make build` uses bin/.
ARTIFACTS_DIR ?= $(CURDIR)/bin/gateway
TEST_TIMEOUT  ?= 15m

.PHONY: help dev dev-fresh check test test-proc test-race soak mutants lint validate deps chromium tables build build-GatewayFunction cli vet fmt fuzz bench screenshots clean

# make help prints the "## " lines just above each target: the first after
# "make <target>", the others indented under it.
help:
	@awk '/^## /{h[n++]=substr($$0,4);next} n&&/^[a-zA-Z_-]+:/{sub(/:.*/,"");printf "make %-12s%s\n",$$0,h[0];for(i=1;i<n;i++)printf "%17s%s\n","",h[i]} {n=0}' $(firstword $(MAKEFILE_LIST))

# Node packages. make dev needs only dynalite (the "dependencies"); the
# tests also need the "devDependencies" and the optional Node 22 binary,
# some of which declare Node >= 22 (npm warns EBADENGINE on Node 20; the
# conformance suite and the AI SDK run under the Node 22 binary, the
# Inspector's CLI and the TypeScript SDKs on Node 20). `npm ci` replaces node_modules, so each install leaves its
# own stamp, and a full install also serves make dev.
NODE_DEV  := infra/node_modules/.mcpgate-dev
NODE_TEST := infra/node_modules/.mcpgate-test

## install every Node package (dynalite and the test-only ones), the Go modules
## and Debian's chromium (the console's browser tests)
deps: $(NODE_TEST) chromium
	$(GO) mod download

# The console's browser tests (internal/console) drive Debian's chromium;
# installed with apt-get when it is missing (as root, on Debian or Ubuntu).
chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then apt-get update && apt-get install -y chromium; \
	else echo "chromium is missing and this is not a Debian system: install Chromium, or set CHROMIUM to its path"; fi

$(NODE_TEST): infra/package.json infra/package-lock.json
	cd infra && $(NPM) ci --no-audit --no-fund
	touch $@

$(NODE_DEV): infra/package.json infra/package-lock.json
	@if [ -f $(NODE_TEST) ] && [ $(NODE_TEST) -nt infra/package.json ] && [ $(NODE_TEST) -nt infra/package-lock.json ]; then :; \
	else cd infra && $(NPM) ci --omit=dev --omit=optional --no-audit --no-fund; fi
	touch $@

## run the gateway locally: store, tables, demo upstream (cap 2), dev key, gateway
## ports: DEV_STORE_PORT (8000), DEV_GATEWAY_ADDR (127.0.0.1:8080), DEV_DEMO_PORT (9100);
## a taken port is replaced by a free one, and printed. DEV_STATE_DIR (.dev) keeps the
## store (servers, keys) and the dev key across runs, with the logs; Ctrl-C stops it, exit 0
dev: $(NODE_DEV)
	./infra/dev.sh

## make dev, starting over: the store's data and the dev key deleted first (DEV_FRESH=1)
dev-fresh: $(NODE_DEV)
	DEV_FRESH=1 ./infra/dev.sh

# The packages whose tests run their goroutines in the test binary run under
# the race detector; functions/gateway and infra run the gateway and the
# local stack as child processes, which it would not see, so they run
# without it (and their multi-process tests take most of make test's time).
# PROC_PKGS is every other package, so a new one is not left out.
RACE_PKGS := ./internal/... ./cmd/...
PROC_PKGS = $(shell $(GO) list ./... | grep -v -e /internal/ -e /cmd/)

## run every test (starts and stops its own dynalite and gateways),
## those of internal/ and cmd/ under the race detector
test: $(NODE_TEST)
	$(MAKE) --no-print-directory -k -j2 --output-sync=target test-proc test-race

# make test's two halves, run at once, each target's output shown when it
# ends; one failing does not stop the other (-k). test-proc's packages
# spend most of their time waiting on their processes (timeouts, leases,
# pauses, tasks), so they start at once, beside go vet and then the
# race-detected packages, which keep the cores busy meanwhile.
test-proc: $(NODE_TEST)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PROC_PKGS)

test-race: $(NODE_TEST) vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	# The limiter again on a store that returns no item with a failed
	# conditional write: its fallback read. Only the tests on dynalite:
	# those skipped run on the in-memory store (the fault simulation, the
	# mutants, the model's own tests, the adaptive limit's long runs), which
	# the switch does not reach.
	STORETEST_CCF_ITEM=off $(GO) test -count=1 \
		-skip '^(TestFaultSimulation|TestMutantsFailTheSimulation|TestModel.*|TestAdaptiveLimit.*)$$' ./internal/lease

# The inner loop, without Node, dynalite, moto_server or child processes:
# under -short the tests that need one skip (storetest.Shared,
# secrettest.Shared, testkit.Binary), so this is build, vet and the tests
# that run in the test binary alone.
## build, vet and the quick tests (go test -short: no Node, store or processes): about 35 s on
## 2 cores with a warm build cache, 6 to 9 minutes with an empty one
check:
	$(GO) build ./...
	$(GO) vet ./...
	$(GO) test -short -count=1 ./...

# staticcheck, at a pinned version, installed into bin/ (git-ignored) on
# first use. internal/gateway and internal/upstream turn SA1019 off in their
# staticcheck.conf: they forward MCP features deprecated in 2026-07-28.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := bin/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	GOBIN=$(CURDIR)/$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## run staticcheck (installed into bin/ on first use)
lint: $(STATICCHECK)
	$(STATICCHECK) ./...

# Thousands of calls over six gateway processes with processes killed and
# restarted, the store stopped and restarted and the upstream stalled, against
# a stateful and a stateless upstream (functions/gateway/soak_test.go).
# SOAK_CALLS and SOAK_PROCS size each run. Then the lease protocol's fault
# simulation (internal/lease/sim_test.go) over SIM_SEEDS schedules, where
# make test runs 300; a failing seed prints how to replay it.
SIM_SEEDS ?= 10000
## the fault soak: kills, store outage, stalled upstream, over 6 processes;
## then the lease protocol's fault simulation over SIM_SEEDS (10000) seeded schedules
soak: $(NODE_TEST)
	MCPGATE_SOAK=1 $(GO) test -count=1 -timeout 10m -run '^TestSoak$$' -v ./functions/gateway
	LEASE_SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -timeout 20m -run '^TestFaultSimulation$$' ./internal/lease

# Mutants (internal/lease/mutants_test.go): one-line changes that break a
# promise of the lease protocol, each built in place with go test -overlay;
# the fault simulation must fail every one within 3000 seeds.
## plant each known bug in the lease protocol: the fault simulation must catch every one
mutants:
	LEASE_MUTANTS=1 $(GO) test -count=1 -timeout 20m -run '^TestMutantsFailTheSimulation$$' -v ./internal/lease

# The limiter's benchmark (functions/gateway/bench_test.go): prints one
# table and writes results/bench.json. `make test` runs a brief smoke of it.
# BENCH_ONLY, comma-separated scenario names, runs only those (empty: all):
# uncontended, traced (the same with tracing on, exporting to infra/otelcol),
# saturation, hotkey, itemsize, coldstart, coldfleet, waiters,
# bulkhead, tenants, tasks (100 waiting tasks against 100 synchronous
# waiters behind a Lambda-like front: invocation-seconds per call-second,
# store requests per call, hand-overs), ratelimits, adaptive (which also draws
# results/adaptive.svg), queuecost (10, 100 and 1,000 callers queued on one
# item in fake time, in internal/lease: reads, read units, writes and write
# units per waiter-second, the item's size). BENCH_PROFILE=dir (relative to the repository's root,
# e.g. results/profile) writes a CPU and an allocation profile of the
# uncontended path there: cpu.pprof, and allocs.pprof with its base
# allocs.base.pprof (go tool pprof -base); see docs/performance.md.
# BENCH_GATEWAY_ENV (space-separated NAME=value) is given to every gateway
# process the bench starts: AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256 runs them
# with the memory limit and threads of the template's function.
## measure the limiter (store cost, tracing off/on, saturation, in-process baseline, hot key, cold start, cold fleet,
## waiters, bulkhead, two tenants, tasks vs synchronous waiters, rate limits, adaptive) into results/, with results/cap.svg
## (the upstream's calls in flight over time) and results/adaptive.svg (the adaptive limit);
## BENCH_ONLY=waiters,bulkhead make bench runs only the scenarios named (empty: all);
## BENCH_PROFILE=results/profile also writes CPU and allocation profiles of the uncontended path
bench: $(NODE_TEST)
	MCPGATE_BENCH=1 $(GO) test -count=1 -timeout 20m -run '^TestBench$$' -v ./functions/gateway | grep -v '^        {'
	MCPGATE_BENCH=1 $(GO) test -count=1 -timeout 30m -run '^TestQueueCostGrowsLinearly$$' -v ./internal/lease

# The console's screens, as the browser tests drive them (internal/console),
# into results/console/ (git-ignored).
## screenshots of every console screen into results/console/ (needs chromium: make deps)
screenshots: $(NODE_TEST) chromium
	@mkdir -p results/console
	CONSOLE_SCREENSHOTS=$(CURDIR)/results/console $(GO) test -count=1 -run '^(TestConsole|TestConsoleSaysWhenTheStoreIsDown)$$' ./internal/console
	@ls results/console/*.png

# sam validate needs AWS credentials; this needs python3 with
# aws-sam-translator and cfn-lint, and no account. infra/template's tests
# run the same script.
## check template.yaml offline as sam validate --lint does: the SAM translator, then cfn-lint
validate:
	python3 infra/template/validate.py template.yaml

## create the tables where AWS_ENDPOINT_URL_DYNAMODB / AWS_REGION point (the tasks
## table too when TASKS_TABLE is set)
tables:
	$(GO) run ./cmd/mcpgate tables create

# The Lambda bootstrap. SAM's makefile builder calls this target with
# ARTIFACTS_DIR set, which keeps internal/ in the build.
build-GatewayFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
		-o $(ARTIFACTS_DIR)/bootstrap ./functions/gateway

## build the Lambda bootstrap (linux/arm64) into bin/gateway/
build: build-GatewayFunction
	@ls -l $(ARTIFACTS_DIR)/bootstrap

# The admin CLI for this machine, for a deployed stack (make dev puts its
# own copy on PATH through .dev/env).
## build the admin CLI for this machine into bin/mcpgate (or: go install ./cmd/mcpgate)
cli:
	$(GO) build -o bin/mcpgate ./cmd/mcpgate
	@echo "bin/mcpgate built; put it on PATH, or run: go install ./cmd/mcpgate"

vet:
	$(GO) vet ./...

# Fuzz the MCP and REST request decoding (FUZZTIME each; the seed corpus
# also runs in `make test`).
FUZZTIME ?= 60s
## fuzz the MCP and REST request decoding
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzMCPRequest$$' -fuzztime $(FUZZTIME) ./internal/gateway
	$(GO) test -run '^$$' -fuzz '^FuzzRESTCall$$' -fuzztime $(FUZZTIME) ./internal/gateway

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .aws-sam .dev results
