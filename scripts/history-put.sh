#!/usr/bin/env bash
# A write's cost as the history grows: serial durable PUTs (wrk -c1, a new JSON body per
# request) to one tenant, WINDOWS windows of SECS s back to back on one server over a fresh
# copy of the demo tenants in DIR; per window p50, p99, PUTs, commits on main, server CPU per
# PUT. For runs that do not inherit each other's freed inodes (ext4 without a journal), give
# each run a fresh volume, e.g. as root:
#   fallocate -l 2G v.img; mkfs.ext4 -q -F -O ^has_journal v.img; mount -o loop v.img /mnt/v
#   scripts/history-put.sh target/release/planfiles /mnt/v 12 5
# Needs wrk and curl.
set -euo pipefail
bin=$1 base=$2 windows=${3:-7} secs=${4:-5} port=${5:-18490}
root=$(cd "$(dirname "$0")/.." && pwd)
lua=$(mktemp)
cat > "$lua" <<'LUA'
local seq = 0
request = function()
  seq = seq + 1
  local body = string.format('{"content": {"bench": {"seq": %d, "t": %d}, "aws": [{"account_id": "123456789012", "regions": ["us-east-1"], "type": "aws"}]}}', seq, os.time())
  return wrk.format("PUT", "/plans/integration-file", {["Authorization"] = "Bearer " .. os.getenv("TOKEN"), ["Content-Type"] = "application/json", ["Accept"] = "application/json"}, body)
end
LUA
dir=$(mktemp -d -p "$base")
printf '[server]\nbind = "127.0.0.1:%s"\n[storage]\ndata_dir = "%s/data"\nseed_from = "%s/repos-fixture"\n[auth]\nsecret = "ab-bench-secret-0123456789abcdef0"\n' "$port" "$dir" "$root" > "$dir/c.toml"
PLANFILES_LOG=warn "$bin" --config "$dir/c.toml" serve > "$dir/log" 2>&1 & pid=$!
for _ in $(seq 50); do curl -sf "localhost:$port/readyz" > /dev/null && break; sleep 0.2; done
export TOKEN=$("$bin" --config "$dir/c.toml" token --tenant globex)
for w in $(seq "$windows"); do
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  out=$(wrk -t1 -c1 -d${secs}s --latency -s "$lua" "http://127.0.0.1:$port")
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  n=$(echo "$out" | awk '/requests in/{print $1}')
  commits=$(git -C "$dir/data/tenants/globex.git" rev-list --count main)
  echo "$out" | awk -v w="$w" -v n="$n" -v c="$commits" -v cpu=$((c1-c0)) '/ 50%/{p50=$2} / 99%/{p99=$2} END {printf "window %s: p50=%s p99=%s puts=%s commits=%s cpu/put=%.2f ms\n", w, p50, p99, n, c, cpu*10/n}'
done
kill "$pid"; wait "$pid" 2>/dev/null || true
rm -rf "$dir" "$lua"
