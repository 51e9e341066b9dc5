#!/usr/bin/env bash
# Runs examples/flower on this machine the way it runs on several: Flower's own SuperLink
# (and, for "deployment", two SuperNodes, each a separate process like a separate machine),
# on free ports, then `flwr run`; everything it started is stopped on exit.
#   examples/flower/run_localhost.sh simulation [--run-config "..."]   # 3 simulated clients (ray)
#   examples/flower/run_localhost.sh deployment [--run-config "..."]   # 1 SuperLink + 2 SuperNodes
# The run's history (bytes, bits/entry, accuracy per round): $OUT/history.json (OUT=./flower-out).
set -euo pipefail
mode=${1:-simulation}; shift || true
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${OUT:-flower-out}"); mkdir -p "$out"
export FLWR_HOME=$(mktemp -d) OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} FLWR_DISABLE_UPDATE_CHECK=1
free_port() { python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
port=$(free_port)
printf '[superlink]\ndefault = "here"\n\n[superlink.here]\naddress = "127.0.0.1:%s"\ninsecure = true\n' "$port" > "$FLWR_HOME/config.toml"
pids=()
tree() { local c; for c in $(pgrep -P "$1"); do tree "$c"; done; echo "$1"; }
cleanup() {  # each started process and its descendants (SuperExec, ServerApp, ClientApps)
  local p all=()
  for p in "${pids[@]}"; do all+=($(tree "$p")); done
  [ ${#all[@]} -gt 0 ] && kill "${all[@]}" 2>/dev/null || true
  wait 2>/dev/null || true; rm -rf "$FLWR_HOME"
}
trap cleanup EXIT
sim=(); [ "$mode" = simulation ] && sim=(--simulation)
flower-superlink --insecure "${sim[@]}" --disable-runtime-dependency-installation \
  --host 127.0.0.1 --port "$port" --database :flwr-in-memory: > "$out/superlink.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do sleep 0.5; done
fed=()
if [ "$mode" = deployment ]; then
  for i in 0 1; do
    flower-supernode --insecure --superlink "127.0.0.1:$port" --port "$(free_port)" \
      --node-config "partition-id=$i num-partitions=2" > "$out/supernode$i.log" 2>&1 &
    pids+=($!)
  done
else
  fed=(--federation-config "num-supernodes=3")
fi
flwr run "$here" here --stream "${fed[@]}" --run-config "out='$out'" "$@"
echo "history: $out/history.json"
