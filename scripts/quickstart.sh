#!/usr/bin/env bash
# Runs the study's three tests (short versions) with loadgen against a private Mosquitto on a
# free loopback port, and writes the figures to ./results/quickstart-<time>/.
# Until the controller lands this is the quickstart; it needs `mosquitto` (apt-get install mosquitto).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mosquitto >/dev/null || { echo "quickstart: mosquitto is not installed (apt-get install mosquitto)" >&2; exit 1; }
cargo build --release -q -p loadgen
out="results/quickstart-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$port" > "$out/mosquitto.conf"
mosquitto -c "$out/mosquitto.conf" 2> "$out/mosquitto.log" &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
lg() { local test=$1; shift; ./target/release/loadgen "$test" --broker "127.0.0.1:$port" --csv "$out/summary.csv" "$@"; }
echo "== latency offset (10 B)";  lg latency --messages 12 --warmup 2 --hgrm "$out/latency-10B"
for size in 1KB 10KB 1MB; do
  echo "== latency vs payload ($size)"; lg payload --size "$size" --messages 12 --warmup 2 --hgrm "$out/latency-$size"
done
for clients in 100 200; do
  echo "== throughput ($clients clients x 1000 messages)"; lg throughput --clients "$clients" --messages 1000
done
echo "figures: $out/summary.csv, histograms: $out/latency-*/"
