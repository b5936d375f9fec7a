#!/usr/bin/env bash
# Runs the gateway locally: dynalite (a DynamoDB-compatible server), the three
# tables, the demo upstream with a cap of 2, a dev key, and the gateway.
# Invoked by `make dev`; Ctrl-C stops everything and exits 0.
#
# Ports: DEV_STORE_PORT (8000), DEV_DEMO_PORT (9100), DEV_GATEWAY_ADDR
# (127.0.0.1:8080). A port that is taken is replaced by a free one, which is
# printed. DEV_STATE_DIR (.dev) holds the binaries, logs and the env file
# that exports MCPGATE_URL, MCPGATE_KEY and the AWS settings of this stack.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

store_port=${DEV_STORE_PORT:-8000}
demo_port=${DEV_DEMO_PORT:-9100}
gateway_addr=${DEV_GATEWAY_ADDR:-127.0.0.1:8080}
gateway_host=${gateway_addr%:*}
gateway_port=${gateway_addr##*:}
state=${DEV_STATE_DIR:-.dev}
mkdir -p "$state/bin" "$state/logs"
state=$(cd "$state" && pwd)

export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
export AWS_EC2_METADATA_DISABLED=true
export SERVERS_TABLE=dev-servers LEASES_TABLE=dev-leases KEYS_TABLE=dev-keys
# The demo upstream (and any upstream a developer runs) is on this host.
export ALLOW_LOCAL_UPSTREAMS=on

pids=()
stopping=
started=

# One make dev per state directory: a second would take over the first's
# logs, binaries and env file. (Another stack in another directory is fine:
# its ports are seen as taken and free ones used.)
lock="$state/dev.pid"
if other=$(cat "$lock" 2>/dev/null) && [ -n "$other" ] && [ "$other" != "$$" ] &&
  ps -p "$other" -o args= 2>/dev/null | grep -q 'dev\.sh'; then
  echo "dev: another make dev (pid $other) is running with $state; stop it, or set DEV_STATE_DIR to another directory" >&2
  exit 1
fi
echo $$ >"$lock"

# stop ends every process this script started and waits for them: TERM
# first, KILL for any still running after 5 s.
stop() {
  local pid
  # ${pids[@]+…}: bash before 4.4 (macOS's 3.2) takes an empty array for
  # an unset one under set -u.
  for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=
    for pid in ${pids[@]+"${pids[@]}"}; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  for pid in ${pids[@]+"${pids[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$(cat "$lock" 2>/dev/null)" = "$$" ]; then rm -f "$lock"; fi
}

# A deliberate stop (Ctrl-C, kill) is quiet and successful.
on_signal() {
  stopping=1
  trap - INT TERM
  echo
  echo "dev: stopping…"
  stop
  echo "dev: stopped"
  exit 0
}
trap on_signal INT TERM
trap 'stop' EXIT

# port_taken PORT [HOST]: something accepts connections there.
port_taken() {
  (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
}

# pick NAME PORT [HOST]: PORT if free, else 0 (the process picks a free one).
pick() {
  if port_taken "$2" "${3:-127.0.0.1}"; then
    echo "dev: port $2 ($1) is taken; using a free one" >&2
    echo 0
  else
    echo "$2"
  fi
}

# start NAME CMD...: runs CMD in the background, its output in a fresh
# $state/logs/NAME.log (the previous run's becomes NAME.log.1), and sets
# started to its pid. The log is emptied here, before the process exists:
# were it left to the process's own redirection, a read right after the
# start could find the previous run's lines, and with them its ports.
start() {
  local log="$state/logs/$1.log"
  shift
  if [ -f "$log" ]; then mv -f "$log" "$log.1"; fi
  : >"$log"
  "$@" >>"$log" 2>&1 &
  started=$!
  pids+=("$started")
}

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

# port_of FILE: the port of the first http://host:port in FILE.
port_of() {
  grep -o -m 1 'http://[^ ]*' "$1" | sed -E 's#^http://[^/]*:([0-9]+).*#\1#'
}

if [ ! -d infra/node_modules/dynalite ]; then
  echo "installing dynalite (npm ci in infra/)…"
  (cd infra && npm ci --omit=dev --omit=optional --no-audit --no-fund)
fi
echo "building…"
go build -o "$state/bin/gateway" ./functions/gateway
go build -o "$state/bin/mcpgate" ./cmd/mcpgate
go build -o "$state/bin/demo-upstream" ./infra/demo-upstream

start store node infra/dynalite.js --host 127.0.0.1 --port "$(pick store "$store_port")"
wait_for "$state/logs/store.log" "dynalite listening" "$started"
store_port=$(port_of "$state/logs/store.log")
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$store_port"

"$state/bin/mcpgate" tables create
start demo "$state/bin/demo-upstream" -addr "127.0.0.1:$(pick demo "$demo_port")"
wait_for "$state/logs/demo.log" "demo upstream listening" "$started"
demo_port=$(port_of "$state/logs/demo.log")

sed "s#http://127.0.0.1:9100/mcp#http://127.0.0.1:$demo_port/mcp#" infra/seed/demo-server.json >"$state/demo-server.json"
"$state/bin/mcpgate" servers put "$state/demo-server.json"
key=$("$state/bin/mcpgate" keys create --servers '*' --name dev | grep -o 'mcpg_[A-Za-z0-9_-]*' | head -n 1)

start gateway env GATEWAY_ADDR="$gateway_host:$(pick gateway "$gateway_port" "$gateway_host")" "$state/bin/gateway"
wait_for "$state/logs/gateway.log" '"msg":"listening"' "$started"
gateway_port=$(grep -o -m 1 '"addr":"[^"]*"' "$state/logs/gateway.log" | sed -E 's#.*:([0-9]+)"$#\1#')
url="http://$gateway_host:$gateway_port"

# The env file holds the dev key: readable by its owner only.
(umask 077 && cat >"$state/env" <<ENV)
export MCPGATE_URL=$url
export MCPGATE_KEY=$key
export MCPGATE_LOG=$state/logs/gateway.log
export AWS_REGION=$AWS_REGION AWS_DEFAULT_REGION=$AWS_DEFAULT_REGION
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_EC2_METADATA_DISABLED=true
export AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB
export SERVERS_TABLE=$SERVERS_TABLE LEASES_TABLE=$LEASES_TABLE KEYS_TABLE=$KEYS_TABLE
export ALLOW_LOCAL_UPSTREAMS=on
export PATH="$state/bin:\$PATH"
ENV

cat <<MSG

Gateway ready at $url   (logs in $state/logs/)
Store (dynalite) at $AWS_ENDPOINT_URL_DYNAMODB, demo upstream at http://127.0.0.1:$demo_port/mcp
Demo server "demo" has max_concurrent_requests 2; dev key: $key

In another shell: source $state/env   (exports MCPGATE_URL, MCPGATE_KEY, the AWS settings; mcpgate on PATH)

Six concurrent calls of a 2-second tool; the upstream never sees more than 2
(paste it in another shell: its first line loads this stack's settings):

  source $state/env
  for i in 1 2 3 4 5 6; do
    curl -s \$MCPGATE_URL/mcp-rest/tools/call -H "Authorization: Bearer \$MCPGATE_KEY" \\
      -H 'Content-Type: application/json' \\
      -d '{"server_id":"demo","name":"slow_tool","arguments":{"ms":2000}}' | grep -o '"in_flight_at_entry":[0-9]*' &
  done; wait
  curl -s http://127.0.0.1:$demo_port/stats

Tools:  curl -s \$MCPGATE_URL/mcp-rest/tools/list -H "Authorization: Bearer \$MCPGATE_KEY"
Status: mcpgate status --watch
Refused calls, and why: mcpgate refusals
Console (live caps, queues, breakers and calls, in a browser): mcpgate console
Agents: see "Connect an agent" in README.md (MCP endpoint \$MCPGATE_URL/mcp)

Ctrl-C stops everything.
MSG

# Until a process exits on its own (a signal is handled by on_signal).
# A loop rather than `wait -n`, which bash before 4.3 (macOS's) lacks.
set +e
exited=
while [ -z "$exited" ]; do
  sleep 1
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then exited=$pid; fi
  done
done
wait "$exited"
status=$?
set -e
[ -n "$stopping" ] && exit 0
echo "dev: process $exited exited unexpectedly (status $status); see $state/logs/" >&2
exit 1
