#!/usr/bin/env python3
"""loadgen beside another MQTT load tool on one Mosquitto, runs alternating, figures in pairs.

Run: python3 bench/loadgen.py [--pairs N] [--peer PATH] [--spread N] [--latency-runs N]

The peer is mqttv5-cli's `bench` command (crates.io: `cargo install mqttv5-cli --version
0.29.10`, then `mqttv5` on PATH or --peer PATH). Both tools drive the same private Mosquitto on
127.0.0.1 (a free port), alternating A B A B so that both see the same machine; every ratio is
taken within one pair of runs, never against a figure from another day.

Workloads (100 publisher/subscriber pairs, each pair on its own topic, QoS 0, 12-byte payloads:
mqttv5's smallest):
  fast   as fast as each tool goes. loadgen: the study's burst of 1000 messages per publisher.
         mqttv5: `--mode hol-blocking` unpaced for 1 s (it has no counted mode). Its load time
         for 100,000 messages is taken from its own measured rate.
  paced  both at an offered 100,000 msg/s for 1 s (1000 messages per pair).

Per run: the tool's CPU per message delivered (user + system of the whole process, from
getrusage of the child), its wall time, its peak RSS, Mosquitto's CPU per message delivered
(utime + stime from /proc/PID/stat before and after), and the TCP segments per message delivered
(OutSegs of /proc/net/snmp: on loopback how much kernel work each delivery took, on both sides).
Then loadgen alone: --spread consecutive runs of `loadgen throughput --clients 100 --messages
1000` (wall max/min) with the broker's CPU per message and wait for a CPU in each run as loadgen
reports them (a burst is as fast as the
broker, so a slower run shows a broker that spent more per message), and --latency-runs runs of
the latency preset at the study's rate and at ten times it, each with loadgen's own send delay
(how late its messages left against their schedule), the transit latency (from the actual send:
the broker's part when loadgen itself left late), the host's steal and CPU pressure and whose the
open-loop tail was beside the latency.
This machine is shared and noisy: read the ratios within pairs and the medians.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADGEN = os.path.join(ROOT, "target", "release", "loadgen")
PAIRS, MESSAGES, PAYLOAD = 100, 1000, 12
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def start_mosquitto(workdir):
    port = free_port()
    conf = os.path.join(workdir, "mosquitto.conf")
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                "max_queued_messages 1000000\nmax_inflight_messages 0\n")
    # Its own session, as a daemon or a service has: sharing the tools' scheduler autogroup
    # doubled Mosquitto's CPU per QoS 1 message at the latency preset's rate.
    broker = subprocess.Popen(["mosquitto", "-c", conf], stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(workdir, "mosquitto.log"), "w"),
                              start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return broker, port
        except OSError:
            time.sleep(0.05)
    broker.kill()
    sys.exit("mosquitto did not start within 10 s")


class Measured:
    """One run of one tool: what it cost itself and the broker, per message delivered."""

    def __init__(self, tool, wall, cpu, rss_mb, broker_cpu, delivered, load_s, segments, extra=""):
        self.tool, self.wall, self.cpu, self.rss_mb = tool, wall, cpu, rss_mb
        self.broker_cpu, self.delivered, self.load_s, self.extra = broker_cpu, delivered, load_s, extra
        self.segments = segments

    def segments_per_message(self):
        return self.segments / max(self.delivered, 1)

    def cpu_us(self):
        return self.cpu * 1e6 / max(self.delivered, 1)

    def broker_us(self):
        return self.broker_cpu * 1e6 / max(self.delivered, 1)

    def time_per_100k(self):
        return self.load_s * 100_000 / max(self.delivered, 1)


def loopback_segments():
    """TCP segments sent in this network namespace so far (/proc/net/snmp OutSegs). On loopback
    every segment is the kernel's work twice (send and receive, usually in one system call), and
    how many a delivery needs is set by the clients: a reader that acknowledges sooner lets the
    broker's Nagle hold less, so the broker sends more, smaller segments."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    header, values = rows[0], rows[1]
    return int(values[header.index("OutSegs")])


def machine_probe_ms():
    """A fixed piece of CPU work (SHA-256 of 32 MB, in C), timed: when it takes longer, this
    machine is slower for everyone at that moment (a shared host's neighbours), not the tools."""
    block = b"\x5a" * (32 << 20)
    started = time.perf_counter()
    hashlib.sha256(block).digest()
    return (time.perf_counter() - started) * 1e3


def timed(command, broker_pid):
    """Runs `command`, returns (stdout, stderr, wall s, CPU s, peak RSS MB, broker CPU s, TCP
    segments), the CPU and RSS of this child alone (wait4), the segments of all TCP in this
    namespace meanwhile (the run's own, on an otherwise quiet machine)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        segments_before = loopback_segments()
        broker_before = process_cpu_s(broker_pid)
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        broker_cpu = process_cpu_s(broker_pid) - broker_before
        segments = loopback_segments() - segments_before
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {stderr.strip()[-500:]}")
    return (stdout, stderr, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, broker_cpu,
            segments)


def run_loadgen(args, port, broker_pid):
    out, _, wall, cpu, rss, broker_cpu, segments = timed(
        [LOADGEN, "--no-progress", "--json", "throughput", "--broker", f"127.0.0.1:{port}",
         "--clients", str(PAIRS), "--payload", f"{PAYLOAD}B", *args], broker_pid)
    summary = json.loads(out)
    extra = f"loadgen: busy {summary['generator']['busy_percent']:.0f} % of {summary['generator']['cpu_capacity']:.1f} CPU"
    if summary["generator"]["limited"]:
        extra += " GENERATOR-LIMITED: " + "; ".join(summary["generator"]["reasons"])
    return Measured("loadgen", wall, cpu, rss, broker_cpu, summary["received"],
                    summary["load_wall_ms"] / 1e3, segments, extra), summary


def run_peer(peer, args, port, broker_pid):
    out, err, wall, cpu, rss, broker_cpu, segments = timed(
        [peer, "bench", "-H", "127.0.0.1", "-p", str(port), "--mode", "hol-blocking",
         "--topics", str(PAIRS), "--pub-connections", str(PAIRS), "--sub-connections", str(PAIRS),
         "--qos", "0", "--payload-size", str(PAYLOAD), "--warmup", "0", "--duration", "1", *args],
        broker_pid)
    results = json.loads(out)["results"]
    received = results["total_messages"]
    published = re.search(r"published: (\d+)", err)
    rate = results["measured_rate"]
    extra = f"mqttv5: published {published.group(1) if published else '?'}, received {received}"
    return Measured("mqttv5", wall, cpu, rss, broker_cpu, received, received / max(rate, 1), segments,
                    extra)


def print_pairs(title, pairs):
    print(f"\n{title}")
    print("  pair  tool     delivered  CPU/msg(us)  wall(s)  load/100k msgs(s)  RSS(MB)  broker CPU/msg(us)"
          "  TCP segments/msg")
    ratios = {"cpu": [], "wall": [], "load": [], "broker": [], "rss": [], "segments": []}
    for n, (lg, peer) in enumerate(pairs, 1):
        for m in (lg, peer):
            print(f"  {n:>4}  {m.tool:<7} {m.delivered:>10}  {m.cpu_us():>11.2f}  {m.wall:>7.2f}"
                  f"  {m.time_per_100k():>17.3f}  {m.rss_mb:>7.1f}  {m.broker_us():>18.2f}"
                  f"  {m.segments_per_message():>16.2f}")
        ratios["cpu"].append(lg.cpu_us() / peer.cpu_us())
        ratios["wall"].append(lg.wall / peer.wall)
        ratios["load"].append(lg.time_per_100k() / peer.time_per_100k())
        ratios["broker"].append(lg.broker_us() / peer.broker_us())
        ratios["rss"].append(lg.rss_mb / peer.rss_mb)
        ratios["segments"].append(lg.segments_per_message() / max(peer.segments_per_message(), 1e-9))
        print(f"        ratio loadgen/mqttv5: CPU/msg {ratios['cpu'][-1]:.2f}, wall {ratios['wall'][-1]:.2f}, "
              f"load time {ratios['load'][-1]:.2f}, broker CPU/msg {ratios['broker'][-1]:.2f}, RSS {ratios['rss'][-1]:.2f}, "
              f"TCP segments/msg {ratios['segments'][-1]:.2f}")
        print(f"        {lg.extra}; {peer.extra}")
    print("  median ratio (range over pairs) loadgen/mqttv5:")
    for name, label in [("cpu", "tool CPU per message"), ("wall", "wall time, whole process"),
                        ("load", "load time for 100,000 messages"), ("broker", "broker CPU per message"),
                        ("rss", "peak RSS"), ("segments", "TCP segments per message")]:
        values = ratios[name]
        print(f"    {label:<34} {statistics.median(values):.2f}  ({min(values):.2f}..{max(values):.2f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="pairs of runs per workload")
    parser.add_argument("--spread", type=int, default=10, help="consecutive loadgen runs for the spread")
    parser.add_argument("--latency-runs", type=int, default=5, help="runs of each latency preset")
    parser.add_argument("--peer", default=shutil.which("mqttv5"), help="the mqttv5 binary")
    options = parser.parse_args()
    if not shutil.which("mosquitto"):
        sys.exit("mosquitto is not installed (apt-get install mosquitto)")
    if not options.peer or not os.path.exists(options.peer):
        sys.exit("the peer is missing: cargo install mqttv5-cli --version 0.29.10 (or --peer PATH)")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "loadgen"], cwd=ROOT, check=True)
    version = subprocess.run([options.peer, "--version"], capture_output=True, text=True).stdout.strip()
    workdir = tempfile.mkdtemp(prefix="loadgen-bench-")
    broker, port = start_mosquitto(workdir)
    mosquitto_version = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs; {mosquitto_version} on 127.0.0.1:{port}; "
          f"peer {version}; {PAIRS} pairs, QoS 0, {PAYLOAD} B")
    try:
        fast, paced = [], []
        for _ in range(options.pairs):
            lg, _ = run_loadgen(["--messages", str(MESSAGES)], port, broker.pid)
            fast.append((lg, run_peer(options.peer, [], port, broker.pid)))
        for _ in range(options.pairs):
            lg, _ = run_loadgen(["--rate", "100000", "--duration", "1s", "--warmup", "0s"], port, broker.pid)
            paced.append((lg, run_peer(options.peer, ["--rate", "100000"], port, broker.pid)))
        print_pairs("fast: loadgen burst 100 x 1000 | mqttv5 hol-blocking unpaced, 1 s", fast)
        print_pairs("paced: both at an offered 100,000 msg/s for 1 s", paced)

        print(f"\nloadgen alone, {options.spread} consecutive runs of throughput --clients {PAIRS} --messages {MESSAGES}")
        print("  (the broker's figures as loadgen itself reports them: it finds the broker's process by its socket)")
        print("   run  wall(s)  loadgen CPU/msg(us)  broker CPUs busy  broker CPU/msg(us)  broker waited for a CPU(%)  wall per broker CPU/msg  machine probe(ms)  host steal(%)")
        walls, per_broker_cost, notes = [], [], []
        for n in range(1, options.spread + 1):
            probe = machine_probe_ms()
            lg, summary = run_loadgen(["--messages", str(MESSAGES)], port, broker.pid)
            walls.append(lg.wall)
            seen = summary.get("broker_on_host")
            if seen is None:
                sys.exit("loadgen did not find the broker's process on this host")
            per_broker_cost.append(lg.wall / seen["cpu_per_delivered_message_us"])
            print(f"  {n:>4}  {lg.wall:>7.3f}  {summary['loadgen_cpu_per_message_us']:>19.2f}  {seen['cpus_used']:>16.2f}"
                  f"  {seen['cpu_per_delivered_message_us']:>18.2f}  {seen['cpu_wait_percent']:>26.1f}  {per_broker_cost[-1]:>23.4f}  {probe:>17.1f}"
                  f"  {summary['generator'].get('host_steal_percent', 0.0):>13.1f}")
            if summary["generator"]["limited"]:
                notes.append(f"run {n}: " + "; ".join(summary["generator"]["reasons"]))
        print(f"  wall max/min {max(walls) / min(walls):.2f} (at most 1.25 asked)")
        print(f"  wall per broker CPU/msg max/min {max(per_broker_cost) / min(per_broker_cost):.2f}: how much of the spread"
              " is left once the broker's own speed in each run is taken out")
        for note in notes:
            print(f"  loadgen said: {note}")

        for publishers, label in [(100, "the study's rate: 100 publishers every 250 ms"),
                                  (1000, "ten times it: 1000 publishers every 250 ms")]:
            print(f"\nlatency preset at {label}, {options.latency_runs} runs (targets: p50 < 200 us, p99 < 1 ms;"
                  " at ten times the rate p99 < 2 ms)")
            print("   run  open loop p50(us)  p99(us)  p99.9(us)  transit p50(us)  p99(us)"
                  "  send delay p50(us)  p99(us)  measured  host steal(%)  host CPU pressure(%)  tail")
            p99s, transit_p99s = [], []
            for n in range(1, options.latency_runs + 1):
                out, *_ = timed([LOADGEN, "--no-progress", "--json", "latency", "--broker", f"127.0.0.1:{port}",
                                 "--publishers", str(publishers)], broker.pid)
                result = json.loads(out)
                latency, send = result["latency"], result["send_delay"]
                transit = result.get("transit_latency", latency)
                pressure = result["generator"].get("host_cpu_pressure_percent")
                tail = (result.get("latency_tail") or {}).get("owner", "-")
                p99s.append(latency["p99_us"])
                transit_p99s.append(transit["p99_us"])
                print(f"  {n:>4}  {latency['p50_us']:>17.1f}  {latency['p99_us']:>7.1f}  {latency['p999_us']:>9.1f}"
                      f"  {transit['p50_us']:>15.1f}  {transit['p99_us']:>7.1f}"
                      f"  {send['p50_us']:>18.1f}  {send['p99_us']:>7.1f}  {latency['count']:>8}"
                      f"  {result['generator'].get('host_steal_percent', 0.0):>13.1f}"
                      f"  {'-' if pressure is None else f'{pressure:.1f}':>20}  {tail}")
            print(f"  p99 over the runs: open loop {min(p99s):.1f}-{max(p99s):.1f} us,"
                  f" transit {min(transit_p99s):.1f}-{max(transit_p99s):.1f} us"
                  " (open loop: from the intended send time; transit: from the actual send, the broker's part)")
    finally:
        broker.terminate()
        broker.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
