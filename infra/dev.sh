#!/usr/bin/env bash
# Runs the gateway locally: dynalite (a DynamoDB-compatible store), the three
# tables, the demo upstream with a cap of 2, a dev key, and the gateway on
# 127.0.0.1:8080. Ctrl-C stops everything. Invoked by `make dev`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

store_port=${DEV_STORE_PORT:-8000}
demo_port=${DEV_DEMO_PORT:-9100}
gateway_addr=${DEV_GATEWAY_ADDR:-127.0.0.1:8080}
state=.dev
mkdir -p "$state/bin" "$state/logs"

export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
export AWS_EC2_METADATA_DISABLED=true
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$store_port"
export SERVERS_TABLE=dev-servers LEASES_TABLE=dev-leases KEYS_TABLE=dev-keys

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "stopping…"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for FILE PATTERN PID: until FILE has a line matching PATTERN.
wait_for() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 600); do
    if grep -q -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dev: process for $file exited:" >&2; cat "$file" >&2; exit 1
    fi
    sleep 0.1
  done
  echo "dev: timed out waiting for $file" >&2; cat "$file" >&2; exit 1
}

if [ ! -d infra/node_modules/dynalite ]; then
  echo "installing dynalite (npm ci in infra/)…"
  (cd infra && npm ci --no-audit --no-fund)
fi
echo "building…"
go build -o "$state/bin/gateway" ./functions/gateway
go build -o "$state/bin/mcpgate" ./cmd/mcpgate
go build -o "$state/bin/demo-upstream" ./infra/demo-upstream

node infra/dynalite.js --host 127.0.0.1 --port "$store_port" >"$state/logs/store.log" 2>&1 &
pids+=($!)
wait_for "$state/logs/store.log" "dynalite listening" $!

"$state/bin/mcpgate" tables create
"$state/bin/demo-upstream" -addr "127.0.0.1:$demo_port" >"$state/logs/demo.log" 2>&1 &
pids+=($!)
wait_for "$state/logs/demo.log" "demo upstream listening" $!

sed "s#http://127.0.0.1:9100/mcp#http://127.0.0.1:$demo_port/mcp#" infra/seed/demo-server.json >"$state/demo-server.json"
"$state/bin/mcpgate" servers put "$state/demo-server.json"
key=$("$state/bin/mcpgate" keys create --servers '*' --name dev | grep -o 'mcpg_[A-Za-z0-9_-]*' | head -n 1)

GATEWAY_ADDR=$gateway_addr "$state/bin/gateway" >"$state/logs/gateway.log" 2>&1 &
pids+=($!)
wait_for "$state/logs/gateway.log" '"msg":"listening"' $!

cat >"$state/env" <<ENV
export AWS_REGION=$AWS_REGION AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_EC2_METADATA_DISABLED=true
export AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB
export SERVERS_TABLE=$SERVERS_TABLE LEASES_TABLE=$LEASES_TABLE KEYS_TABLE=$KEYS_TABLE
export PATH="$root/$state/bin:\$PATH"
ENV

url="http://$gateway_addr"
cat <<MSG

Gateway ready at $url   (logs in $state/logs/)
Demo server "demo" has max_concurrent_requests 2; dev key: $key

Six concurrent calls of a 2-second tool; the upstream never sees more than 2:

  for i in 1 2 3 4 5 6; do
    curl -s $url/mcp-rest/tools/call -H 'Authorization: Bearer $key' \\
      -H 'Content-Type: application/json' \\
      -d '{"server_id":"demo","name":"slow_tool","arguments":{"ms":2000}}' | grep -o '"in_flight_at_entry":[0-9]*' &
  done; wait
  curl -s http://127.0.0.1:$demo_port/stats

Tools: curl -s '$url/mcp-rest/tools/list?server_id=demo' -H 'Authorization: Bearer $key'
Admin CLI, in another shell: source $state/env && mcpgate status

Ctrl-C stops everything.
MSG
wait -n
echo "dev: a process exited; see $state/logs/" >&2
exit 1
