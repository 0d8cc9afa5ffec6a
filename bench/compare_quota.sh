#!/usr/bin/env bash
# `controller compare` on two real runs: one plan run twice against two private Mosquittos on
# loopback, the second time with one of them ("held") held to a share of a CPU by a cgroup
# quota. Prints the comparison's rows: the held broker should come out worse with
# significance, the other ("free") with no significant difference. A figure of this machine,
# not a test: whether "free" stays level depends on how quiet the machine is between runs.
#
# Needs root, mosquitto and a cgroup CPU controller (v1 at /sys/fs/cgroup/cpu or v2).
# Usage: bash bench/compare_quota.sh [REPETITIONS (default 8)] [CPU SHARE (default 0.03)]
set -euo pipefail
cd "$(dirname "$0")/.."
repetitions=${1:-8}
share=${2:-0.03}
work=$(mktemp -d /tmp/compare-quota.XXXXXX)
pids=()
held_pid=""
group=""
cleanup() {
  for pid in "${pids[@]}" $held_pid; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$group" ] && [ -d "$group" ]; then
    rmdir "$group" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p controller
controller=target/release/controller

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_mosquitto() { # name port
  printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$2" > "$work/$1.conf"
  /usr/sbin/mosquitto -c "$work/$1.conf" > "$work/$1.log" 2>&1 &
  pids+=("$!")
  echo "$!"
}
free_port_n=$(free_port); held_port=$(free_port)
start_mosquitto free "$free_port_n" > /dev/null
held_pid=$(start_mosquitto held "$held_port")
sleep 1

plan() { # name
  cat <<PLAN
name = "$1"
repetitions = $repetitions
results_dir = "$work/results"

[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen"]

[[brokers]]
name = "free"
kind = "external"
address = "127.0.0.1:$free_port_n"

[[brokers]]
name = "held"
kind = "external"
address = "127.0.0.1:$held_port"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["tester"]
[tests.workload]             # the study's 100 publishers at QoS 1, every 10 ms: 10,000 msg/s
messages_per_publisher = 30
warmup_messages = 2
pacing = { mode = "open-loop", interval = "10ms" }
PLAN
}
plan before > "$work/before.toml"
plan after > "$work/after.toml"

echo "== run A: both brokers free"
"$controller" "$work/before.toml" 2>&1 | tail -n 3
echo "== run B: 'held' limited to $share of a CPU"
# One write of the whole value: the kernel refuses one split over two writes.
# A 100 ms period: the kernel's smallest quota is 1 ms, so shares down to 1 % are possible.
quota_us=$(python3 -c "print(max(1000, int($share * 100000)))")
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_period_us ]; then
  group=/sys/fs/cgroup/cpu/continuum-compare-quota
  mkdir -p "$group"
  echo 100000 > "$group/cpu.cfs_period_us"
  echo "$quota_us" > "$group/cpu.cfs_quota_us"
  echo "$held_pid" > "$group/tasks"
else
  group=/sys/fs/cgroup/continuum-compare-quota
  mkdir -p "$group"
  echo "$quota_us 100000" > "$group/cpu.max"
  echo "$held_pid" > "$group/cgroup.procs"
fi
"$controller" "$work/after.toml" 2>&1 | tail -n 3
# Back out of the group so that it can be removed.
if [ -f "$group/tasks" ]; then echo "$held_pid" > /sys/fs/cgroup/cpu/tasks; else echo "$held_pid" > /sys/fs/cgroup/cgroup.procs; fi

a=$(ls -d "$work"/results/before-*); b=$(ls -d "$work"/results/after-*)
"$controller" compare "$a" "$b" --out "$work/compare" | head -n 1
echo "== B against A (median transit latency per repetition, ms)"
grep -E '^\| (free|held) ' "$work/compare/compare.md" | cut -d'|' -f2,7-14
