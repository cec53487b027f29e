#!/usr/bin/env bash
# Shows, with strace, what one acknowledged write puts on disk before its 200. In the default
# durability mode (group) the objects are written, a syncfs of the volume makes them durable,
# then the ref moves and a second syncfs makes it durable. With MODE fsync
# (storage.durability = "fsync") every object file and the folders that gained entries are fsync'd,
# then the ref and its folder.
#
#   scripts/fsync-trace.sh [WRITES] [MODE]   (MODE: group or fsync; needs strace)
set -euo pipefail
cd "$(dirname "$0")/.."
writes=${1:-10}
mode=${2:-group}
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
printf '[storage]\ndurability = "%s"\n' "$mode" > "$work/planfiles.toml"
port=$((20000 + RANDOM % 20000))
PLANFILES_CONFIG=$work/planfiles.toml PLANFILES_DATA_DIR=$work PLANFILES_BIND=127.0.0.1:$port PLANFILES_LOG=warn \
  strace -f -y -T -e trace=fsync,fdatasync,syncfs,rename,link,mkdir -o "$work/trace" "$bin" serve &
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
# (The trace file is truncated under strace, which leaves NULs where it had written.)
tr -d '\0' < "$work/trace" | grep -a -vE 'ENOENT|EEXIST|exited|resumed' | sed -E 's/^[0-9]+ +//'
echo "== $writes writes"
for call in fsync syncfs; do
  tr -d '\0' < "$work/all" | { grep -a " $call(" || true; } | { grep -aoE '<[0-9.]+>$' || true; } | tr -d '<>' |
    awk -v w="$writes" -v c="$call" '{s+=$1; n++} END {if (n) printf "%s: %d (%.1f per write), %.2f ms per write (mean %.3f ms each)\n", c, n, n/w, s*1000/w, s*1000/n; else printf "%s: none\n", c}'
done
