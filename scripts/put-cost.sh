#!/usr/bin/env bash
# What one serial PUT costs the server: latency, server CPU (from /proc/<pid>/stat) and
# syscalls (strace -c), measured with wrk at concurrency 1 against `planfiles serve` on a
# fresh data dir. Give two binaries to compare them in alternating runs.
#
#   scripts/put-cost.sh [SECONDS] BINARY [BINARY...]
#   scripts/put-cost.sh 5 target/release/planfiles /tmp/planfiles-before
#
# Needs wrk and strace (Debian packages). Data dirs go under $PUT_COST_DIR (default: a new
# temporary directory on the volume of /tmp), which is removed at the end. Background repacks
# are off (storage.repack_loose_objects = 0), so that every run measures writes alone. On ext4
# without a journal, files deleted in the minutes before a run raise its CPU (see
# docs/PERFORMANCE.md).
set -euo pipefail
secs=${1:?usage: put-cost.sh SECONDS BINARY...}
shift
[ $# -ge 1 ] || { echo "usage: put-cost.sh SECONDS BINARY..." >&2; exit 2; }
for tool in wrk strace; do
  command -v "$tool" >/dev/null || { echo "put-cost.sh needs $tool" >&2; exit 2; }
done
port=18099
work=${PUT_COST_DIR:-}
# shellcheck source=lib/cost.sh
source "$(dirname "$0")/lib/cost.sh"
printf '[storage]\nrepack_loose_objects = 0\n' >"$work/config.toml"

cat >"$work/put.lua" <<'EOF'
-- Every body is new (a counter and the time), so every PUT makes a commit.
counter = 0
request = function()
  counter = counter + 1
  local body = string.format(
    '{"content":{"aws":[{"account_id":"%012d","regions":["us-east-1"],"type":"aws"}]}}',
    (os.time() % 100000) * 1000000 + counter)
  return wrk.format("PUT", "/plans/integration-file",
    {["Authorization"] = "Bearer " .. TOKEN, ["Content-Type"] = "application/json"}, body)
end
EOF

run() {
  local bin=$1 mode=$2
  start "$bin" "$work/config.toml"
  local token
  token=$(cd "$repo_root" && PLANFILES_CONFIG="$work/config.toml" "$bin" token --tenant acme)
  sed "1i TOKEN = \"$token\"" "$work/put.lua" >"$work/put-run.lua"
  wrk -t1 -c1 -d1s -s "$work/put-run.lua" "http://127.0.0.1:$port" >/dev/null
  local out n
  if [ "$mode" = strace ]; then
    strace -f -c -p "$pid" -o "$work/strace.txt" 2>/dev/null &
    local spid=$!
    sleep 0.5
    out=$(wrk -t1 -c1 -d"${secs}s" -s "$work/put-run.lua" "http://127.0.0.1:$port")
    kill -INT "$spid"
    wait "$spid" 2>/dev/null || true
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    printf '%-28s syscalls per PUT (strace, %s PUTs): %s\n' "$(basename "$bin")" "$n" \
      "$(per_request "$work/strace.txt" "$n" 1)"
  else
    local u0 s0 u1 s1 hz
    hz=$(getconf CLK_TCK)
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    out=$(wrk -t1 -c1 -d"${secs}s" --latency -s "$work/put-run.lua" "http://127.0.0.1:$port")
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    printf '%-28s %6s PUTs  p50 %-8s p99 %-8s server CPU per PUT %5d us (user %d%%)  %s\n' \
      "$(basename "$bin")" "$n" "$(awk '$1=="50%" {print $2}' <<<"$out")" \
      "$(awk '$1=="99%" {print $2}' <<<"$out")" \
      $(( (u1 - u0 + s1 - s0) * 1000000 / hz / n )) \
      $(( (u1 - u0) * 100 / (u1 - u0 + s1 - s0 + 1) )) \
      "$(grep -o 'Non-2xx.*' <<<"$out" || true)"
  fi
  stop
}

for round in 1 2; do
  for bin in "$@"; do run "$bin" time; done
done
for bin in "$@"; do run "$bin" strace; done
