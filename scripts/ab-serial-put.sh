#!/usr/bin/env bash
# Two builds side by side in one run: serial durable PUTs (wrk -c1, a new JSON body per
# request, no file_sha) against each binary on a fresh copy of the demo tenants, in
# alternating rounds (the order flips each round, as the volume's state drifts with time).
#   scripts/ab-serial-put.sh OLD_BIN NEW_BIN [ROUNDS] [DIR]
# DIR (default: a temporary folder under $TMPDIR) holds the data dirs: /dev/shm measures the
# CPU path alone, a disk folder adds its syncs. Needs wrk and curl.
set -euo pipefail
old=$1 new=$2 rounds=${3:-6} base=${4:-${TMPDIR:-/tmp}}
root=$(cd "$(dirname "$0")/.." && pwd)
lua=$(mktemp); trap 'rm -f "$lua"' EXIT
cat > "$lua" <<'LUA'
local seq = 0
request = function()
  seq = seq + 1
  local body = string.format('{"content": {"bench": {"seq": %d}, "aws": [{"account_id": "123456789012", "regions": ["us-east-1"], "type": "aws"}]}}', seq)
  return wrk.format("PUT", "/plans/integration-file", {["Authorization"] = "Bearer " .. os.getenv("TOKEN"), ["Content-Type"] = "application/json", ["Accept"] = "application/json"}, body)
end
LUA
one() { # NAME BIN PORT
  local dir; dir=$(mktemp -d -p "$base")
  printf '[server]\nbind = "127.0.0.1:%s"\n[storage]\ndata_dir = "%s/data"\nseed_from = "%s/repos-fixture"\n[auth]\nsecret = "ab-bench-secret-0123456789abcdef0"\n[validation]\nschemas_dir = "%s/schemas"\n' \
    "$3" "$dir" "$root" "$root" > "$dir/c.toml"
  PLANFILES_LOG=warn "$2" --config "$dir/c.toml" serve > "$dir/log" 2>&1 & local pid=$!
  for _ in $(seq 50); do curl -sf "localhost:$3/readyz" > /dev/null && break; sleep 0.2; done
  TOKEN=$("$2" --config "$dir/c.toml" token --tenant globex) \
    wrk -t1 -c1 -d6s --latency -s "$lua" "http://127.0.0.1:$3" |
    awk -v n="$1" '/ 50%/{p50=$2} / 99%/{p99=$2} /Requests\/sec/{rps=$2} END {print n, "p50=" p50, "p99=" p99, "rps=" rps}'
  kill "$pid"; wait "$pid" 2> /dev/null || true
  rm -rf "$dir"
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then one old "$old" 18480; one new "$new" 18481
  else one new "$new" 18481; one old "$old" 18480; fi
done
