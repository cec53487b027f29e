#!/usr/bin/env bash
# What durable PUTs at c=64 over 64 tenants cost the server: PUT/s and server CPU per PUT
# (user and system, from /proc/<pid>/stat), with wrk (two threads, 64 connections, each
# request to the next tenant). Give two binaries to compare them: they run in alternating
# rounds, each on a fresh copy of the same 64 tenants.
#
#   scripts/put64-cost.sh SECONDS ROUNDS BINARY [BINARY...]
#   scripts/put64-cost.sh 8 2 target/release/planfiles /tmp/planfiles-before
#
# Needs wrk and curl. Data dirs go under $PUT_COST_DIR (default: a new temporary directory on
# the volume of /tmp), removed at the end; put it on the volume you mean to measure. Background
# repacks are off (storage.repack_loose_objects = 0). A round's CPU per PUT falls as its rate
# rises (bigger group commits), so compare rounds of one run, never figures across runs.
set -euo pipefail
secs=${1:?usage: put64-cost.sh SECONDS ROUNDS BINARY...}
rounds=${2:?usage: put64-cost.sh SECONDS ROUNDS BINARY...}
shift 2
[ $# -ge 1 ] || { echo "usage: put64-cost.sh SECONDS ROUNDS BINARY..." >&2; exit 2; }
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "put64-cost.sh needs $tool" >&2; exit 2; }
done
work=$(mktemp -d -p "${PUT_COST_DIR:-${TMPDIR:-/tmp}}")
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=18098
printf '[storage]\nrepack_loose_objects = 0\n' >"$work/config.toml"
export PLANFILES_CONFIG=$work/config.toml PLANFILES_LOG=warn

# 64 tenants made once by the first binary, and a token for each.
first=$1
echo "tokens = {" >"$work/tokens.lua"
for i in $(seq -w 0 63); do
  PLANFILES_DATA_DIR=$work/template "$first" tenant create "t$i" >/dev/null 2>&1
  printf '"%s",\n' "$(PLANFILES_DATA_DIR=$work/template "$first" token --tenant "t$i")" >>"$work/tokens.lua"
done
echo "}" >>"$work/tokens.lua"
cat >"$work/put.lua" <<EOF
dofile("$work/tokens.lua")
counter = 0
init = function(args) counter = math.random(0, 63) end
-- Each request to the next tenant, with a new body, so that every PUT makes a commit.
request = function()
  counter = counter + 1
  local body = string.format(
    '{"content":{"aws":[{"account_id":"%012d","regions":["us-east-1"],"type":"aws"}]}}',
    math.random(0, 999999) * 1000000 + counter % 1000000)
  return wrk.format("PUT", "/plans/integration-file",
    {["Authorization"] = "Bearer " .. tokens[(counter % 64) + 1],
     ["Content-Type"] = "application/json"}, body)
end
EOF

hz=$(getconf CLK_TCK)
for round in $(seq "$rounds"); do
  for bin in "$@"; do
    rm -rf "$work/data"
    cp -a "$work/template" "$work/data"
    sync
    PLANFILES_DATA_DIR=$work/data PLANFILES_BIND=127.0.0.1:$port "$bin" serve >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
      sleep 0.1
    done
    wrk -t2 -c64 -d2s -s "$work/put.lua" "http://127.0.0.1:$port" >/dev/null
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    out=$(wrk -t2 -c64 -d"${secs}s" -s "$work/put.lua" "http://127.0.0.1:$port")
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    printf 'round %s %-24s %8s PUT/s  server CPU per PUT %5d us (user %d, system %d)  %s\n' \
      "$round" "$(basename "$bin")" "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
      $(( (u1 - u0 + s1 - s0) * 1000000 / hz / n )) \
      $(( (u1 - u0) * 1000000 / hz / n )) $(( (s1 - s0) * 1000000 / hz / n )) \
      "$(grep -o 'Non-2xx.*' <<<"$out" || true)"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
  done
done
