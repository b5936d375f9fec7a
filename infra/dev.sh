#!/usr/bin/env bash
# Runs the gateway locally: dynalite (a DynamoDB-compatible server), the four
# tables (servers, leases, keys, tasks), the demo upstream with a cap of 2, a dev key, and the gateway.
# Invoked by `make dev`; Ctrl-C stops everything and exits 0.
#
# Ports: DEV_STORE_PORT (8000), DEV_DEMO_PORT (9100), DEV_GATEWAY_ADDR
# (127.0.0.1:8080). A port that is taken is replaced by a free one, which is
# printed. DEV_STATE_DIR (.dev) holds the binaries, logs, the env file that
# exports MCPGATE_URL, MCPGATE_KEY and the AWS settings of this stack, and
# what a restart keeps: the store's data (store/: tables, servers, keys)
# and the dev key (dev-key). DEV_FRESH=1 (make dev-fresh) deletes both
# first, and the stack starts as on its first run.
set -euo pipefail

# Ctrl-C signals the terminal's foreground process group: under make, make
# is in it too, and make dies of the signal (exit status 130) whatever this
# script does. So, in a terminal, the stack runs as a job of its own that
# holds the terminal (bash's job control): Ctrl-C reaches it alone, and
# make gets its exit status. Ctrl-Z stops that job alone: this shell then
# stops make's job as the terminal would have, and when the shell that
# started make resumes it (fg), gives the terminal back to the stack.
# Should this outer shell die first (make killed), the job notices its
# parent is gone and stops (see the wait loop). bash hands the terminal
# over through standard error: with it redirected, the stack stays in
# make's process group, where Ctrl-C still stops it (but make exits 130).
if [ -t 0 ] && [ -t 2 ] && [ -z "${DEV_JOB:-}" ]; then
  set -m
  status=0
  DEV_JOB=$$ bash "$0" "$@" || status=$?
  # 148-150: stopped by SIGTSTP, SIGTTIN or SIGTTOU.
  while [ "$status" -ge 148 ] && [ "$status" -le 150 ] && jobs %1 >/dev/null 2>&1; do
    kill -TSTP 0
    status=0
    fg %1 >/dev/null || status=$?
  done
  exit "$status"
fi

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
# The store keeps its data here between runs (dynalite's on-disk mode).
store_dir="$state/store"

export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
export AWS_EC2_METADATA_DISABLED=true
export SERVERS_TABLE=dev-servers LEASES_TABLE=dev-leases KEYS_TABLE=dev-keys TASKS_TABLE=dev-tasks
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
  grep -q 'dev\.sh' <<<"$(ps -p "$other" -o args= 2>/dev/null || true)"; then
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
  trap - INT TERM HUP
  echo
  echo "dev: stopping…"
  stop
  echo "dev: stopped"
  exit 0
}
trap on_signal INT TERM HUP
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

# has TEXT PATTERN: a line of TEXT matches PATTERN (a grep regular
# expression). Never `printf … | grep -q` (nor `cmd | grep -q`) under
# pipefail: grep -q exits at the first match, and a writer with a line
# left to write (bash's printf writes a line at a time) is then killed by
# SIGPIPE, which pipefail reports as the pipeline's failure: a match read
# as none, now and then, as the scheduler decides.
has() {
  grep -q -- "$2" <<<"$1"
}

# sha256_hex: the lowercase hex SHA-256 of standard input (how the keys
# table names a key).
sha256_hex() {
  if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -d ' ' -f 1
}

if [ ! -d infra/node_modules/dynalite ]; then
  echo "installing dynalite (npm ci in infra/)…"
  (cd infra && npm ci --omit=dev --omit=optional --no-audit --no-fund)
fi

if [ "${DEV_FRESH:-}" = 1 ]; then
  echo "dev: starting fresh: deleting the store's data and the dev key in $state"
  rm -rf "$store_dir" "$state/dev-key"
fi

# build compiles the three programs in one go, showing how far it is: the
# first build compiles several hundred packages (about 2 minutes on 2
# cores); later builds take seconds. go build -v names each package as it
# compiles it; any other line (an error) is shown as it comes.
build() {
  local total begin
  begin=$(date +%s)
  total=$(go list -deps ./functions/gateway ./cmd/mcpgate ./infra/demo-upstream | wc -l | tr -d ' ')
  echo "dev: building the gateway, the CLI and the demo upstream ($total packages; the first build takes about 2 minutes on 2 cores, later ones seconds)"
  go build -v -o "$state/bin/" ./functions/gateway ./cmd/mcpgate ./infra/demo-upstream 2>&1 |
    awk -v total="$total" -v tty="$([ -t 1 ] && echo 1)" '
      /^[^ :#]+$/ {
        n++
        if (tty) { printf "\r\033[Kdev: compiled %d of %d packages: %s", n, total, $0; line = 1 }
        else if (n % 50 == 0) printf "dev: compiled %d of %d packages\n", n, total
        fflush()
        next
      }
      { if (line) printf "\n"; line = 0; print; fflush() }
      END { if (line) printf "\n" }'
  echo "dev: built in $(($(date +%s) - begin)) s"
}
build

store_kept=
if [ -d "$store_dir" ]; then
  store_kept=1
  echo "dev: using the store kept in $store_dir (tables, servers, keys of earlier runs; make dev-fresh starts over)"
fi
start store node infra/dynalite.js --host 127.0.0.1 --port "$(pick store "$store_port")" --path "$store_dir"
wait_for "$state/logs/store.log" "dynalite listening" "$started"
store_port=$(port_of "$state/logs/store.log")
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$store_port"

"$state/bin/mcpgate" tables create >/dev/null
start demo "$state/bin/demo-upstream" -addr "127.0.0.1:$(pick demo "$demo_port")"
wait_for "$state/logs/demo.log" "demo upstream listening" "$started"
demo_port=$(port_of "$state/logs/demo.log")
demo_url="http://127.0.0.1:$demo_port/mcp"

# The demo server: written on a fresh store; on a kept one, pointed at this
# run's demo upstream if it still points at the last run's, and otherwise
# left as the developer left it (changed, or deleted). $state/demo-server.json
# is the demo server as this script last wrote it to the store: it takes this
# run's url only once the store has it, so that a run stopped before (or one
# that left the demo as it was) does not make the next run take the store's
# url, still the last one written, for a developer's.
demo_json="$state/demo-server.json"
last_demo_url=$(grep -o '"url": *"[^"]*"' "$demo_json" 2>/dev/null | sed -E 's/.*"(http[^"]*)"$/\1/' || true)
sed "s#http://127.0.0.1:9100/mcp#$demo_url#" infra/seed/demo-server.json >"$demo_json.new"
if ! demo_item=$("$state/bin/mcpgate" servers get --reveal demo 2>/dev/null); then
  if [ -z "$store_kept" ]; then
    "$state/bin/mcpgate" servers put "$demo_json.new"
    mv -f "$demo_json.new" "$demo_json"
  else
    echo "dev: the store has no server \"demo\" (deleted?); make dev-fresh starts over with it"
  fi
elif has "$demo_item" "\"url\": *\"$demo_url\""; then
  mv -f "$demo_json.new" "$demo_json"
elif has "$demo_item" "\"url\": *\"$last_demo_url\""; then
  "$state/bin/mcpgate" servers set demo "url=$demo_url" >/dev/null
  mv -f "$demo_json.new" "$demo_json"
  echo "dev: server \"demo\" now points at this run's demo upstream ($demo_url)"
else
  echo "dev: server \"demo\" points elsewhere than the demo upstream ($demo_url); left as it is"
fi
rm -f "$demo_json.new"

# The demo server's cap as it is now (a developer may have changed it).
demo_cap_note="not in the store"
if demo_item=$("$state/bin/mcpgate" servers get demo 2>/dev/null); then
  demo_cap=$(printf '%s' "$demo_item" | grep -o '"max_concurrent_requests": *[-0-9.]*' | grep -o '[-0-9.]*$' || true)
  case "$demo_cap" in
  '') demo_cap_note="no cap" ;;
  -* | 0) demo_cap_note="max_concurrent_requests $demo_cap: no cap" ;;
  *) demo_cap_note="max_concurrent_requests $demo_cap" ;;
  esac
fi

# The dev key: kept in $state/dev-key between runs, while the store still
# has it; otherwise a new one.
key=$(cat "$state/dev-key" 2>/dev/null || true)
if [ -n "$key" ] && { ! keys=$("$state/bin/mcpgate" keys list 2>/dev/null) ||
  ! has "$keys" "^$(printf '%s' "$key" | sha256_hex | cut -c 1-12) "; }; then
  echo "dev: the dev key of the last run is not in the store (revoked?); creating a new one"
  key=
fi
key_note="kept from the last run"
if [ -z "$key" ]; then
  # keys create says on stderr that the key is shown only once; this
  # script keeps it, so only a failure's message is shown.
  if ! created=$("$state/bin/mcpgate" keys create --servers '*' --name dev 2>&1) ||
    ! key=$(printf '%s\n' "$created" | grep -o 'mcpg_[A-Za-z0-9_-]*' | head -n 1) || [ -z "$key" ]; then
    echo "dev: could not create the dev key:" >&2
    printf '%s\n' "$created" >&2
    exit 1
  fi
  (umask 077 && printf '%s\n' "$key" >"$state/dev-key")
  key_note="new"
fi

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
export SERVERS_TABLE=$SERVERS_TABLE LEASES_TABLE=$LEASES_TABLE KEYS_TABLE=$KEYS_TABLE TASKS_TABLE=$TASKS_TABLE
export ALLOW_LOCAL_UPSTREAMS=on
export PATH="$state/bin:\$PATH"
ENV

cat <<MSG

Gateway ready at $url   (logs in $state/logs/)
Store (dynalite) at $AWS_ENDPOINT_URL_DYNAMODB, demo upstream at http://127.0.0.1:$demo_port/mcp
Demo server "demo": $demo_cap_note
Dev key ($key_note): $key
  kept in $state/env and $state/dev-key, and in the store with every server
  and key you add, across runs; make dev-fresh (or DEV_FRESH=1) starts over

In another shell: source $state/env   (exports MCPGATE_URL, MCPGATE_KEY, the AWS settings; mcpgate on PATH)

Six concurrent calls of a 2-second tool; the upstream sees no more than the cap at once
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
  # Run as a job by the outer shell (above): if that shell is gone, make
  # was killed, and nobody is left to stop the stack.
  if [ -n "${DEV_JOB:-}" ] && ! kill -0 "$DEV_JOB" 2>/dev/null; then
    echo "dev: make dev was stopped; stopping"
    stopping=1
    stop
    exit 0
  fi
done
wait "$exited"
status=$?
set -e
[ -n "$stopping" ] && exit 0
echo "dev: process $exited exited unexpectedly (status $status); see $state/logs/" >&2
exit 1
