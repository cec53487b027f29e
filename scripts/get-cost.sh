#!/usr/bin/env bash
# What one cached GET costs the server, in figures that do not drift with the machine's load:
# user-space instructions per GET (callgrind, one worker, REQUESTS GETs on one keep-alive
# connection after a warm-up) and system calls per GET (strace -c over 3 s of wrk at c=64).
# Give two binaries to compare them.
#
#   scripts/get-cost.sh REQUESTS BINARY [BINARY...]
#   scripts/get-cost.sh 2000 target/release/planfiles /tmp/planfiles-before
#
# The server runs with PLANFILES_LOG=warn, so the counts leave out the request log line that
# the default filter (info) writes. Needs valgrind, wrk and strace (Debian packages) and curl.
# Data dirs go under a new temporary directory, removed at the end. callgrind counts
# `rep stos` byte by byte, so actix's zeroing of its header table weighs more here than in
# time; compare builds, not absolute figures.
set -euo pipefail
requests=${1:?usage: get-cost.sh REQUESTS BINARY...}
shift
[[ $requests =~ ^[1-9][0-9]*$ ]] || { echo "REQUESTS must be a positive number" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: get-cost.sh REQUESTS BINARY..." >&2; exit 2; }
for tool in valgrind callgrind_control wrk strace curl; do
  command -v "$tool" >/dev/null || { echo "get-cost.sh needs $tool" >&2; exit 2; }
done
port=18098
# shellcheck source=lib/cost.sh
source "$(dirname "$0")/lib/cost.sh"
printf '[server]\nworkers = 1\n' >"$work/one-worker.toml"
printf '[server]\n' >"$work/default.toml"

# GETs the integration file N times over one connection (curl reuses it for repeated URLs).
gets() {
  local n=$1 url="http://127.0.0.1:$port/plans/integration-file" urls=()
  for _ in $(seq "$n"); do urls+=("$url"); done
  curl -sf -H "Authorization: Bearer $token" "${urls[@]}" >/dev/null
}

for bin in "$@"; do
  token=$(cd "$repo_root" && PLANFILES_CONFIG="$work/default.toml" "$bin" token --tenant acme)
  start "$bin" "$work/one-worker.toml" valgrind --tool=callgrind \
    --callgrind-out-file="$work/callgrind.%p"
  gets 200
  callgrind_control -z "$pid" >/dev/null 2>&1
  gets "$requests"
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  ir=$(awk '/^summary:/ {print $2}' "$(ls -t "$work"/callgrind.* | head -1)")
  stop
  rm -f "$work"/callgrind.*

  start "$bin" "$work/default.toml"
  gets 10
  wrk -t1 -c64 -d1s -H "Authorization: Bearer $token" "http://127.0.0.1:$port/plans/integration-file" >/dev/null
  strace -f -c -p "$pid" -o "$work/strace.txt" 2>/dev/null &
  spid=$!
  sleep 0.5
  n=$(wrk -t1 -c64 -d3s -H "Authorization: Bearer $token" \
    "http://127.0.0.1:$port/plans/integration-file" | awk '/requests in/ {print $1}')
  kill -INT "$spid"
  wait "$spid" 2>/dev/null || true
  stop
  printf '%-28s %6d instructions per GET (callgrind, %s GETs); syscalls per GET (strace, %s GETs at c=64): %s\n' \
    "$(basename "$bin")" $((ir / requests)) "$requests" "$n" \
    "$(per_request "$work/strace.txt" "$n" 0.05)"
done
