# Shared by scripts/put-cost.sh and scripts/get-cost.sh (sourced, not run): a work directory
# removed at exit, a planfiles server on a fresh copy of the demo tenants, and strace's
# counts per request. Set `port` (and `work`, to choose the directory) before sourcing.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${work:-$(mktemp -d)}
mkdir -p "$work"
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start BINARY CONFIG [WRAPPER...]: serves a fresh data dir on $port (under WRAPPER, such as
# valgrind, when given) and waits until it answers; sets pid.
start() {
  local bin=$1 config=$2 data
  shift 2
  data=$(mktemp -d -p "$work")
  (cd "$repo_root" && PLANFILES_LOG=warn PLANFILES_DATA_DIR="$data" PLANFILES_CONFIG="$config" \
    PLANFILES_BIND=127.0.0.1:$port exec "$@" "$bin" serve >"$work/serve.log" 2>&1) &
  pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return
    sleep 0.2
  done
  echo "the server did not start: $(cat "$work/serve.log")" >&2
  exit 1
}

stop() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

# per_request FILE N MIN: strace -c's FILE as calls per request over N requests: the total,
# then each call made at least MIN times per request.
per_request() {
  awk -v n="$2" -v min="$3" '$NF=="total" {t=$4/n}
    NR>2 && $NF!="total" && $4/n>=min {l=l sprintf(" %s %.2f", $NF, $4/n)}
    END {printf "%.2f in all:%s", t, l}' "$1"
}
