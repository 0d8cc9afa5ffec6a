#!/usr/bin/env python3
"""MQTT over QUIC in loadgen's three stream modes, side by side on one mqttv5 broker.

Run: python3 bench/quic_streams.py [--rounds N] [--mqttv5 PATH]

Needs the release loadgen (cargo build --release -p loadgen), the mqttv5 broker (crates.io:
`cargo install mqttv5-cli --version 0.29.10`) and openssl (for a test CA and certificate for
127.0.0.1, made in a temporary folder).

Per delivery of the broker (`control_only`, then `per_topic`), one mqttv5 on 127.0.0.1 with a
QUIC listener, and loadgen's modes against it in turn, round after round (single, per-topic,
per-publish, single, ...), so that every mode sees the same machine:
  burst   10 publisher/subscriber pairs, each pair on its own topic, QoS 1, 2,000 messages
          each, as fast as they go: loadgen's and the broker's CPU per message delivered (whole
          processes, connections and goodbyes included), and the load time (loadgen's own, from
          the first message sent to the last received).
  paced   the same pairs at an offered 2,000 msg/s in all for 3 s (1 s warm-up): transit
          latency p50 and p99 (from the actual send to the arrival), per run.
The single mode is left out against `per_topic` delivery (it does not read the broker's
streams). Read each mode against the single one within a round (the ratio), and the medians
over rounds: this machine is shared and noisy.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadgen import LOADGEN, free_port, process_cpu_s  # noqa: E402  (bench/loadgen.py)

PAIRS, BURST_MESSAGES, PACED_RATE = 10, 2000, 2000
MODES = ["single", "per-topic", "per-publish"]


def make_certificate(workdir):
    """A CA and a certificate for 127.0.0.1 it signed; returns (ca, cert, key) paths."""
    ca_key, ca, key, csr, cert = (os.path.join(workdir, name) for name in
                                  ("ca.key", "ca.pem", "broker.key", "broker.csr", "broker.pem"))
    ext = os.path.join(workdir, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for command in (
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=bench CA"],
        ["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", ext],
    ):
        subprocess.run(command, check=True, capture_output=True)
    return ca, cert, key


def start_mqttv5(mqttv5, workdir, cert, key, delivery):
    """mqttv5 with TCP and QUIC listeners on 127.0.0.1, in memory; returns (process, QUIC port)."""
    tcp, quic = free_port(), free_port()
    broker = subprocess.Popen(
        [mqttv5, "broker", "--host", f"127.0.0.1:{tcp}", "--quic-host", f"127.0.0.1:{quic}",
         "--tls-cert", cert, "--tls-key", key, "--quic-delivery-strategy", delivery,
         "--allow-anonymous", "true", "--storage-backend", "memory", "--max-clients", "10000",
         "--non-interactive"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, f"mqttv5-{delivery}.log"), "w"),
        start_new_session=True, cwd=workdir)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", tcp), timeout=0.2).close()
            time.sleep(0.3)
            return broker, quic
        except OSError:
            time.sleep(0.05)
    broker.kill()
    sys.exit("mqttv5 did not start within 20 s")


def run(args, port, ca, mode, broker_pid):
    """One loadgen run; returns (its summary, its CPU s, the broker's CPU s)."""
    command = [LOADGEN, "--no-progress", "--json", *args, "--broker", f"127.0.0.1:{port}",
               "--transport", "quic", "--tls-ca", ca, "--quic-streams", mode]
    broker_before = process_cpu_s(broker_pid)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        broker_cpu = process_cpu_s(broker_pid) - broker_before
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed: {stderr.strip()[-500:]}")
    summary = json.loads(stdout)
    if summary.get("lost"):
        sys.exit(f"{mode}: {summary['lost']} messages lost")
    return summary, usage.ru_utime + usage.ru_stime, broker_cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mqttv5", default=shutil.which("mqttv5") or "/usr/local/bin/mqttv5")
    options = parser.parse_args()
    if not os.access(LOADGEN, os.X_OK):
        sys.exit(f"{LOADGEN} missing: cargo build --release -p loadgen")
    burst = ["throughput", "--clients", str(PAIRS), "--messages", str(BURST_MESSAGES), "--qos", "1"]
    paced = ["throughput", "--clients", str(PAIRS), "--qos", "1", "--rate", str(PACED_RATE),
             "--duration", "3s", "--warmup", "1s"]
    with tempfile.TemporaryDirectory(prefix="quic-streams-") as workdir:
        ca, cert, key = make_certificate(workdir)
        for delivery in ["control-only", "per-topic"]:
            broker, port = start_mqttv5(options.mqttv5, workdir, cert, key, delivery)
            modes = MODES if delivery == "control-only" else MODES[1:]
            figures = {mode: [] for mode in modes}
            try:
                for _ in range(options.rounds):
                    for mode in modes:
                        summary, cpu, broker_cpu = run(burst, port, ca, mode, broker.pid)
                        delivered = max(summary["received"], 1)
                        paced_summary, *_ = run(paced, port, ca, mode, broker.pid)
                        transit = paced_summary["transit_latency"]
                        figures[mode].append({
                            "cpu_us": cpu * 1e6 / delivered,
                            "broker_us": broker_cpu * 1e6 / delivered,
                            "load_ms": summary["load_wall_ms"],
                            "p50_us": transit["p50_us"],
                            "p99_us": transit["p99_us"],
                        })
            finally:
                broker.kill()
                broker.wait()
            print(f"mqttv5 delivering {delivery}; {options.rounds} rounds; burst of {PAIRS} pairs x "
                  f"{BURST_MESSAGES} at QoS 1, paced {PACED_RATE} msg/s for 3 s; median (range):")
            for mode in modes:
                rows = figures[mode]

                def spread(key, rows=rows):
                    values = [row[key] for row in rows]
                    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

                line = (f"  {mode:12} loadgen CPU/msg {spread('cpu_us')} us, broker CPU/msg "
                        f"{spread('broker_us')} us, burst load {spread('load_ms')} ms, paced transit "
                        f"p50 {spread('p50_us')} us p99 {spread('p99_us')} us")
                base = figures.get(modes[0])
                if mode != modes[0]:
                    ratios = [row["cpu_us"] / first["cpu_us"] for row, first in zip(rows, base)]
                    line += f"; CPU/msg against {modes[0]} per round: {statistics.median(ratios):.2f}"
                print(line)


if __name__ == "__main__":
    main()
