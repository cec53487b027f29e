#!/usr/bin/env bash
# Two planfiles shards and HAProxy on loopback, with deploy/haproxy.cfg and deploy/tenants.map
# as shipped (docs/SCALING.md, "Try it on one machine").
#
#   scripts/local-shards.sh         start them, print what to try, stop all three on Ctrl-C
#   scripts/local-shards.sh --try   also move globex to shard b under a write loop, check
#                                   that no acknowledged write was lost, and stop
#
# Shard a (127.0.0.1:8081) starts with the demo tenants, shard b (127.0.0.1:8082) empty,
# HAProxy routes on 127.0.0.1:8080. Everything lives in target/local-shards (made afresh each
# run; PLANFILES_LOCAL_DIR picks another folder). PLANFILES_LOCAL_PORTS="8080 8081 8082"
# picks other ports: the copy of haproxy.cfg is then changed to match. PLANFILES_BIN names a
# planfiles binary to run instead of building the release one (tests/shards.rs does).
# Needs: git, curl, python3, haproxy (apt-get install haproxy), and cargo unless PLANFILES_BIN
# is set.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

try=false
case "${1:-}" in
  --try) try=true ;;
  "") ;;
  *) echo "usage: $0 [--try]" >&2; exit 2 ;;
esac
# cargo only to build the binary: with PLANFILES_BIN, a machine without Rust runs the recipe.
tools="git curl python3 haproxy"
[ -n "${PLANFILES_BIN:-}" ] || tools="cargo $tools"
for tool in $tools; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing (haproxy: apt-get install haproxy)" >&2; exit 1; }
done

read -r router port_a port_b <<<"${PLANFILES_LOCAL_PORTS:-8080 8081 8082}"
dir=${PLANFILES_LOCAL_DIR:-$root/target/local-shards}
for port in "$router" "$port_a" "$port_b"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "$0: 127.0.0.1:$port is taken (a planfiles from cargo run?): stop it, or set PLANFILES_LOCAL_PORTS" >&2
    exit 1
  fi
done

bin=${PLANFILES_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet
  bin=${CARGO_TARGET_DIR:-$root/target}/release/planfiles
fi
bin=$(realpath "$bin")
rm -rf "$dir"
mkdir -p "$dir/a/data" "$dir/b/data"
# The binary these run, as $dir/planfiles: the commands of docs/SCALING.md use that name.
ln -s "$bin" "$dir/planfiles"

pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

# Each shard: its own data dir and port; the same token secret (the built-in demo secret,
# which planfiles accepts on loopback only); each lists the other as a peer.
shard_config() { # name port peer_port seed_from
  cat >"$dir/$1.toml" <<EOF
[server]
bind = "127.0.0.1:$2"

[storage]
data_dir = "$dir/$1/data"
seed_from = "$4"

[cluster]
self_url = "http://127.0.0.1:$2"
peers = ["http://127.0.0.1:$3"]

[validation]
# Both shards judge by the same schemas (a move checks that they do); named here, a folder
# that is not there stops the shard instead of serving without validation.
schemas_dir = "$root/schemas"
EOF
}
shard_config a "$port_a" "$port_b" "$root/repos-fixture"
shard_config b "$port_b" "$port_a" ""

wait_ready() { # url what
  for _ in $(seq 200); do
    curl -sf -o /dev/null "$1/readyz" && return 0
    sleep 0.05
  done
  echo "$0: $2 did not start; its log:" >&2
  cat "$dir/$2.log" >&2
  exit 1
}

"$bin" --config "$dir/a.toml" serve >"$dir/a.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$port_a" a
# Cursors and idempotency keys must hold on a tenant's next shard, and its commits keep their
# signer: b gets a's data dir key and commit signing key.
cp "$dir/a/data/cursor.key" "$dir/b/data/cursor.key"
cp -p "$dir/a/data/signing_key" "$dir/b/data/signing_key"
"$bin" --config "$dir/b.toml" serve >"$dir/b.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$port_b" b

cp deploy/haproxy.cfg deploy/tenants.map "$dir/"
if [ "$router $port_a $port_b" != "8080 8081 8082" ]; then
  sed -i -e "s/127.0.0.1:8080/127.0.0.1:$router/" -e "s/127.0.0.1:8081/127.0.0.1:$port_a/" \
    -e "s/127.0.0.1:8082/127.0.0.1:$port_b/" "$dir/haproxy.cfg"
fi
(cd "$dir" && exec haproxy -db -f haproxy.cfg >haproxy.log 2>&1) &
pids+=($!)
wait_ready "http://127.0.0.1:$router" haproxy
sleep 0.5 # HAProxy's first health checks

front=http://127.0.0.1:$router
move=("$dir/planfiles" --config "$dir/a.toml" tenant move globex --to "http://127.0.0.1:$port_b"
  --haproxy "$dir/admin.sock" --map tenants.map --map-file "$dir/tenants.map" --backend shard_b)

if ! $try; then
  cat <<EOF

Running (logs and configs in $dir):
  HAProxy  $front    (tenants.map: acme, globex, initech -> shard_a)
  shard a  http://127.0.0.1:$port_a    acme, globex, initech
  shard b  http://127.0.0.1:$port_b    (empty)

In another terminal, in $root:

  TOKEN=\$($dir/planfiles --config $dir/a.toml token --tenant globex)
  curl -s $front/plans/configuration-file -H "Authorization: Bearer \$TOKEN"

Move globex to shard b (docs/SCALING.md, "Try it on one machine", has a write loop to run
beside it):

  ${move[*]}

Ctrl-C stops all three.
EOF
  wait -n "${pids[@]}"
  echo "$0: a process ended; its log is in $dir" >&2
  exit 1
fi

# --try: a read-modify-write loop on globex's configuration through HAProxy, the move in the
# middle of it, then every acknowledged commit must be in shard b's history.
token=$("$bin" --config "$dir/a.toml" token --tenant globex)
# First, the shipped map sends each demo tenant to the shard that holds it.
for tenant in acme globex initech; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$front/plans/integration-file" \
    -H "Authorization: Bearer $("$bin" --config "$dir/a.toml" token --tenant "$tenant")")
  echo "== GET $tenant's integration file through HAProxy: $code"
  [ "$code" = 200 ] || { echo "FAIL: tenants.map does not send $tenant to its shard" >&2; exit 1; }
done
loop() {
  local i=0 sha code
  while [ ! -e "$dir/stop" ]; do
    sha=$(curl -s "$front/plans/configuration-file" -H "Authorization: Bearer $token" |
      python3 -c 'import json, sys; print(json.load(sys.stdin).get("sha", ""))' 2>/dev/null || true)
    [ -n "$sha" ] || { sleep 0.05; continue; }
    i=$((i + 1))
    code=$(curl -s -o "$dir/put.json" -w '%{http_code}' -X PUT "$front/plans/configuration-file" \
      -H "Authorization: Bearer $token" -H 'content-type: application/json' \
      -d "{\"payload\": {\"folders\": [{\"path\": \"loop-$i\"}]}, \"file_sha\": \"$sha\"}")
    if [ "$code" = 200 ]; then
      python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["commit_sha"])' "$dir/put.json" >>"$dir/acked"
    else
      echo "$code" >>"$dir/refused"
      sleep 0.05 # 409 (another write won), 421 or 503 tenant_moving: read again and retry
    fi
  done
}
touch "$dir/acked" "$dir/refused"
loop &
loop_pid=$!
sleep 2
before=$(wc -l <"$dir/acked")
echo "== $before writes acknowledged before the move; ${move[*]}"
"${move[@]}"
sleep 2
touch "$dir/stop"
wait "$loop_pid"

acked=$(wc -l <"$dir/acked")
lost=0
for commit in $(cat "$dir/acked"); do
  git --git-dir "$dir/b/data/tenants/globex.git" merge-base --is-ancestor "$commit" main || lost=$((lost + 1))
done
refused=$(sort "$dir/refused" | uniq -c | awk '{printf "%s %s, ", $1, $2}')
served=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port_b/plans/configuration-file" -H "Authorization: Bearer $token")
old=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port_a/plans/configuration-file" -H "Authorization: Bearer $token")
echo "== $acked writes acknowledged through HAProxy, $lost of them missing from shard b's history"
echo "   refused and retried: ${refused:-none}"
echo "   shard b answers globex with $served, shard a with $old; tenants.map: $(grep '^globex' "$dir/tenants.map")"
if [ "$lost" -ne 0 ] || [ "$before" -eq 0 ] || [ "$acked" -le "$before" ] || [ "$served" != 200 ] || [ "$old" != 421 ]; then
  echo "FAIL" >&2
  exit 1
fi
echo "PASS"
