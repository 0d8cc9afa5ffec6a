#!/usr/bin/env python3
"""loadgen's speed and memory figures against Mosquitto on loopback, beside the targets.

Run: python3 bench/loadgen.py [--runs N]. Starts its own Mosquitto on a free 127.0.0.1 port,
builds loadgen in release mode and prints, for each figure, the median over the runs, the
spread, and the target. CPU is loadgen's own (user + system, from the OS: getrusage of the
child), divided by the messages published (each also received once in the throughput test).
This machine is shared and has 2 cores that broker and loadgen share: read medians.
"""
import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADGEN = os.path.join(ROOT, "target", "release", "loadgen")
# mqtt-stresser, the study's tool, on this machine for the same run (see shared/DESIGN.md).
STUDY_TOOL_CPU_US = 8.0
STUDY_TOOL_WALL_S = 0.71


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mosquitto(workdir):
    port = free_port()
    conf = os.path.join(workdir, "mosquitto.conf")
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                "max_queued_messages 1000000\nmax_inflight_messages 0\n")
    broker = subprocess.Popen(["mosquitto", "-c", conf], stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(workdir, "mosquitto.log"), "w"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return broker, port
        except OSError:
            time.sleep(0.05)
    broker.kill()
    sys.exit("mosquitto did not start within 10 s")


def run_loadgen(args):
    """Runs loadgen, returns (summary JSON, CPU seconds of the child, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([LOADGEN, "--no-progress", "--json", *args], capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"loadgen {' '.join(args)} failed: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout), cpu, wall


def row(name, values, target, fmt="{:.2f}", ok=None):
    median = statistics.median(values)
    spread = f"{fmt.format(min(values))}..{fmt.format(max(values))}"
    verdict = "" if ok is None else ("met" if ok(median) else "MISSED")
    print(f"  {name:<48} {fmt.format(median):>12}  ({spread:<22}) target {target:<14} {verdict}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    if not shutil.which("mosquitto"):
        sys.exit("mosquitto is not installed (apt-get install mosquitto)")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "loadgen"], cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="loadgen-bench-")
    broker, port = start_mosquitto(workdir)
    target = ["--broker", f"127.0.0.1:{port}"]
    try:
        print(f"loadgen throughput --clients 100 --messages 1000 against Mosquitto 127.0.0.1:{port}, {options.runs} runs")
        cpu_engine, cpu_process, wall_load, wall_process, receive, publish, per_client, lost = [], [], [], [], [], [], [], []
        for _ in range(options.runs):
            summary, cpu, wall = run_loadgen(["throughput", "--clients", "100", "--messages", "1000", *target])
            cpu_engine.append(summary["loadgen_cpu_per_message_us"])
            cpu_process.append(cpu * 1e6 / summary["published"])
            wall_load.append(summary["load_wall_ms"] / 1e3)
            wall_process.append(wall)
            receive.append(summary["receive_rate"]["msgs_per_s"])
            publish.append(summary["publish_rate"]["msgs_per_s"])
            per_client.append(summary["receive_rate_per_client"]["median_msgs_per_s"])
            lost.append(summary["lost"])
        row("CPU per message, whole process (µs)", cpu_process, f"<= {STUDY_TOOL_CPU_US / 2}", ok=lambda v: v <= STUDY_TOOL_CPU_US / 2)
        row("CPU per message, load phase only (µs)", cpu_engine, f"<= {STUDY_TOOL_CPU_US / 2}", ok=lambda v: v <= STUDY_TOOL_CPU_US / 2)
        row("wall time, load phase (s)", wall_load, f"<= {STUDY_TOOL_WALL_S}", ok=lambda v: v <= STUDY_TOOL_WALL_S)
        row("wall time, whole process incl. 200 connects (s)", wall_process, "(info)")
        row("aggregate receive rate, steady window (msg/s)", receive, "(info)", fmt="{:.0f}")
        row("per-client receive rate, median (msg/s)", per_client, "(info)", fmt="{:.0f}")
        row("messages lost", lost, "0", fmt="{:.0f}", ok=lambda v: v == 0)

        print("\nloadgen throughput --clients 800 --messages 100 (peak memory)")
        rss = []
        for _ in range(max(1, options.runs // 2)):
            summary, _, _ = run_loadgen(["throughput", "--clients", "800", "--messages", "100", *target])
            rss.append(summary["loadgen_peak_rss_mb"])
        row("peak RSS (MB)", rss, "< 100", fmt="{:.1f}", ok=lambda v: v < 100)

        print("\nloadgen latency (100 publishers -> 1 subscriber, 10 B, QoS 1, every 250 ms, 1800 measured)")
        p50, p99, delay = [], [], []
        for _ in range(max(1, options.runs // 2)):
            summary, _, _ = run_loadgen(["latency", *target])
            p50.append(summary["latency"]["p50_us"])
            p99.append(summary["latency"]["p99_us"])
            delay.append(summary["send_delay"]["p50_us"])
        row("latency p50 (µs)", p50, "< 200", fmt="{:.1f}", ok=lambda v: v < 200)
        row("latency p99 (µs)", p99, "< 1000", fmt="{:.1f}", ok=lambda v: v < 1000)
        row("send delay p50, part of the latency (µs)", delay, "(info)", fmt="{:.1f}")
    finally:
        broker.terminate()
        broker.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
