# mcpgate: `make dev` runs it locally, `make test` tests it, `sam deploy` ships it.

GO      ?= go
NPM     ?= npm
# SAM passes ARTIFACTS_DIR to build-GatewayFunction; `make build` uses bin/.
ARTIFACTS_DIR ?= $(CURDIR)/bin/gateway
TEST_TIMEOUT  ?= 15m

.PHONY: help dev test soak deps tables build build-GatewayFunction vet fmt fuzz bench clean

help:
	@echo "make dev     run the gateway locally (store, tables, demo upstream, dev key) on 127.0.0.1:8080"
	@echo "make test    run every test (starts and stops its own dynalite and gateways)"
	@echo "make soak    the fault soak: kills, store outage, stalled upstream, over 6 processes"
	@echo "make tables  create the three tables where AWS_ENDPOINT_URL_DYNAMODB / AWS_REGION point"
	@echo "make build   build the Lambda bootstrap (linux/arm64) into bin/gateway/"
	@echo "make deps    install the Node packages (dynalite) and Go modules"
	@echo "make fuzz    fuzz the MCP and REST request decoding"
	@echo "make bench   measure the limiter (store cost, saturation, in-process baseline, hot key, cold start) into results/"

deps: infra/node_modules/.package-lock.json
	$(GO) mod download

infra/node_modules/.package-lock.json: infra/package.json infra/package-lock.json
	cd infra && $(NPM) ci --no-audit --no-fund

dev: infra/node_modules/.package-lock.json
	./infra/dev.sh

test: infra/node_modules/.package-lock.json
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	# The limiter again on a store that returns no item with a failed
	# conditional write: its fallback read.
	STORETEST_CCF_ITEM=off $(GO) test -count=1 ./internal/lease

# Thousands of calls over six gateway processes with processes killed and
# restarted, the store stopped and restarted and the upstream stalled, against
# a stateful and a stateless upstream (functions/gateway/soak_test.go).
# SOAK_CALLS and SOAK_PROCS size each run.
soak: infra/node_modules/.package-lock.json
	MCPGATE_SOAK=1 $(GO) test -count=1 -timeout 10m -run '^TestSoak$$' -v ./functions/gateway

# The limiter's benchmark (functions/gateway/bench_test.go): prints one
# table and writes results/bench.json. `make test` runs a brief smoke of it.
bench: infra/node_modules/.package-lock.json
	MCPGATE_BENCH=1 $(GO) test -count=1 -timeout 15m -run '^TestBench$$' -v ./functions/gateway | grep -v '^        {'

tables:
	$(GO) run ./cmd/mcpgate tables create

# The Lambda bootstrap. SAM's makefile builder calls this target with
# ARTIFACTS_DIR set, which keeps internal/ in the build.
build-GatewayFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
		-o $(ARTIFACTS_DIR)/bootstrap ./functions/gateway

build: build-GatewayFunction
	@ls -l $(ARTIFACTS_DIR)/bootstrap

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
