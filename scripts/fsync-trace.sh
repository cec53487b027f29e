#!/usr/bin/env bash
# Shows, with strace, what one acknowledged write puts on disk before its 200: every object
# file and the directories that gained entries are fsync'd, then the ref and its directory.
#
#   scripts/fsync-trace.sh [WRITES]     (needs strace and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
writes=${1:-10}
bin=target/release/planfiles
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
cleanup() {
  # Killing strace only detaches it; stop the traced server itself.
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cp -r repos-fixture/tenants "$work/"
port=$((20000 + RANDOM % 20000))
PLANFILES_DATA_DIR=$work PLANFILES_BIND=127.0.0.1:$port PLANFILES_LOG=warn \
  strace -f -y -T -e trace=fsync,fdatasync,rename,link,mkdir -o "$work/trace" "$bin" serve &
tracer=$!
sleep 1.5
server=$(pgrep -P "$tracer")
token=$(PLANFILES_DATA_DIR=$work "$bin" token --tenant globex)
: > "$work/all"
for i in $(seq 1 "$writes"); do
  : > "$work/trace"
  curl -s -o /dev/null -X PUT "localhost:$port/plans/integration-file" -H "Authorization: Bearer $token" \
    -H 'content-type: application/json' -d "{\"content\": {\"write\": $i}}"
  sleep 0.2
  cat "$work/trace" >> "$work/all"
done
echo "== the last write, as traced"
grep -a -vE 'ENOENT|EEXIST|exited|resumed' "$work/trace" | sed -E 's/^[0-9]+ +//'
echo "== $writes writes"
grep -a 'fsync(' "$work/all" | grep -aoE '<[0-9.]+>$' | tr -d '<>' |
  awk -v w="$writes" '{s+=$1; n++} END {printf "fsyncs: %d (%.1f per write), time in fsync: %.2f ms per write (mean %.3f ms each)\n", n, n/w, s*1000/w, s*1000/n}'
