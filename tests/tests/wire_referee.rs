//! The wire as the referee of loadgen's latency figures (issue 32).
//!
//! The study's latency preset (100 publishers every 250 ms, QoS 1, one subscriber) runs
//! against a real Mosquitto on loopback while a packet socket records each PUBLISH as it
//! enters and leaves the broker. Per message the capture gives the broker's own transit (wire
//! in to wire out) and, with the run clock's origin, the time from loadgen's actual send to
//! the delivery leaving the broker. Loadgen's transit latency adds only its receive side to
//! that, so its p50 and p99 must lie within a stated margin of it; the open-loop latency adds
//! loadgen's send delay on top. Run once quietly and once beside a CPU hog: on a contended
//! host the pacer (which spins the last stretch before each message is due) loses its CPU
//! for whole scheduler slices while the broker and the subscriber, asleep in epoll, are woken
//! at once, so the open-loop tail becomes loadgen's and must be marked as such. The hog also
//! delays the subscriber's reads: loadgen's read delay (from the kernel's receive stamp) says
//! by how much, and is what lets the verdict tell that tail from the broker's.

use std::process::{Child, Command, Stdio};

use loadgen::Summary;
use loadgen::tail::TailOwner;
use tests::wire::{WireCapture, WireRecord};
use tests::{Mosquitto, MosquittoOptions};

/// Loadgen's receive side on top of the wire: the subscriber's wake-up, its read and decode,
/// in this unoptimised test build. Measured on 2026-12-03 on the 2-core VM over eight runs of
/// each test, with other builds beside them (host CPU pressure 12-36 %, 85-99 % with the hog):
/// loadgen's transit p50 exceeded the send-to-wire-out p50 by 60-120 µs, its p99 by 0.2-1.1 ms
/// quietly and by 0.5-2.3 ms beside the hog (the hog delays the subscriber's wake-ups too).
/// The margins leave room for a slower day; the p50 one stays far below the open-loop figures
/// it tells apart. Beside the hog the p99 has no bound worth asserting: a CI run saw it 4.66 ms
/// above the wire, as long as the scheduler kept the subscriber off a CPU; the read delay
/// reports that, and the verdict must name it.
const RECEIVE_SIDE_MARGIN_P50_NS: u64 = 500_000;
const RECEIVE_SIDE_MARGIN_P99_NS: u64 = 5_000_000;
/// The run clock's origin is one reading of two clocks (monotonic, then wall): aligning the
/// capture's wall-clock stamps with it can be off by this much.
const CLOCK_ALIGNMENT_NS: u64 = 50_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transit_latency_is_the_brokers_wire_transit_plus_loadgens_receive_side_when_quiet() {
    let Some((summary, wire)) = measure(None).await else {
        return;
    };
    check_transit_against_wire(&summary, &wire, Contention::Quiet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_cpu_hog_the_open_loop_tail_is_marked_loadgens_and_transit_still_holds() {
    let Some((summary, wire)) = measure(Some(2)).await else {
        return;
    };
    check_transit_against_wire(&summary, &wire, Contention::BesideAHog);
    let tail = summary
        .latency_tail
        .as_ref()
        .expect("an open loop is judged");
    assert_eq!(
        tail.owner,
        TailOwner::Loadgen,
        "beside the hog the open-loop tail is loadgen's lateness: {}",
        tail.note
    );
    assert!(
        summary.read_delay.count > 0,
        "the kernel stamped the subscriber's reads: the read delay was measured"
    );
}

/// What one run measured: loadgen's summary and the broker's transit per message.
struct WireFigures {
    /// Wire in to wire out, per measured message, ns, sorted.
    broker_transit_ns: Vec<u64>,
    /// Loadgen's actual send (its header stamp) to wire out, per measured message, ns, sorted.
    send_to_wire_out_ns: Vec<u64>,
    gaps: u64,
}

/// Runs the latency preset against a fresh Mosquitto under capture, beside `hogs` busy
/// processes when asked; `None` when the test is skipped here.
async fn measure(hogs: Option<usize>) -> Option<(Summary, WireFigures)> {
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            !tests::running_in_ci(),
            "CI runs as root: the capture needs CAP_NET_RAW"
        );
        eprintln!("SKIPPED: a packet capture needs root");
        return None;
    }
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = loadgen::presets::latency();
    spec.broker.port = broker.port();
    let capture =
        WireCapture::start(broker.port(), spec.header_encoding()).expect("a capture on lo");
    let hog = hogs.map(CpuHog::start);
    let (result, summary) = tests::load::run_dedicated(spec.clone()).await;
    drop(hog);
    let record = capture.finish().expect("the capture ends");
    let figures = wire_figures(&record, spec.warmup_messages, result.clock_origin_unix_ns);
    let quantile = |v: &[u64], q: f64| tests::wire::quantile_us(v, q);
    eprintln!(
        "{}: wire transit p50 {:.1} µs p99 {:.1} µs; actual send to wire out p50 {:.1} p99 {:.1} µs; \
         transit latency p50 {:.1} p99 {:.1} µs; open-loop latency p50 {:.1} p99 {:.1} µs; \
         send delay p50 {:.1} p99 {:.1} µs; read delay p50 {:.1} p99 {:.1} µs; \
         host CPU pressure {:?} %; capture gaps {}; verdict: {}",
        if hogs.is_some() {
            "beside a CPU hog"
        } else {
            "quiet"
        },
        quantile(&figures.broker_transit_ns, 0.5),
        quantile(&figures.broker_transit_ns, 0.99),
        quantile(&figures.send_to_wire_out_ns, 0.5),
        quantile(&figures.send_to_wire_out_ns, 0.99),
        summary.transit_latency.p50_us,
        summary.transit_latency.p99_us,
        summary.latency.p50_us,
        summary.latency.p99_us,
        summary.send_delay.p50_us,
        summary.send_delay.p99_us,
        summary.read_delay.p50_us,
        summary.read_delay.p99_us,
        summary.generator.host_cpu_pressure_percent,
        figures.gaps,
        summary
            .latency_tail
            .as_ref()
            .map_or("none", |t| t.note.as_str()),
    );
    tests::load::assert_nothing_lost(&summary);
    Some((summary, figures))
}

/// The broker's transit and the send-to-wire-out time of each measured message.
fn wire_figures(record: &WireRecord, warmup: u64, origin_unix_ns: u64) -> WireFigures {
    let measured = |seq: u32| u64::from(seq) >= warmup;
    let mut broker_transit_ns = record.transits_ns_where(|p| measured(p.seq));
    broker_transit_ns.sort_unstable();
    let mut send_to_wire_out_ns: Vec<u64> = record
        .first_out_by_message()
        .into_iter()
        .filter(|message| measured(message.seq))
        .filter_map(|message| {
            let out_unix_ns = message.at_unix_ns;
            // The compact header keeps the low 40 bits of the send stamp: restore it from the
            // time it was on the wire, as the subscriber does.
            let out_run_ns = out_unix_ns.checked_sub(origin_unix_ns)?;
            let elapsed = out_run_ns.wrapping_sub(message.stamp_ns) & ((1 << 40) - 1);
            (elapsed < 1 << 39).then_some(elapsed)
        })
        .collect();
    send_to_wire_out_ns.sort_unstable();
    assert!(
        broker_transit_ns.len() >= 1_000,
        "the capture saw {} messages through the broker",
        broker_transit_ns.len()
    );
    WireFigures {
        broker_transit_ns,
        send_to_wire_out_ns,
        gaps: record.gaps,
    }
}

/// Whether a CPU hog ran beside the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contention {
    Quiet,
    BesideAHog,
}

/// Loadgen's transit latency = (actual send to wire out) + its receive side, which the margins
/// bound (at p99 only on a quiet host); and it is never below what the wire shows.
fn check_transit_against_wire(summary: &Summary, wire: &WireFigures, contention: Contention) {
    let ns = |us: f64| (us * 1e3) as u64;
    let p99_margin = match contention {
        Contention::Quiet => RECEIVE_SIDE_MARGIN_P99_NS,
        Contention::BesideAHog => u64::MAX / 2,
    };
    for (q, loadgen_ns, margin) in [
        (
            0.5,
            ns(summary.transit_latency.p50_us),
            RECEIVE_SIDE_MARGIN_P50_NS,
        ),
        (0.99, ns(summary.transit_latency.p99_us), p99_margin),
    ] {
        let on_wire = tests::wire::quantile_ns(&wire.send_to_wire_out_ns, q);
        assert!(
            loadgen_ns + CLOCK_ALIGNMENT_NS >= on_wire,
            "transit latency q{q} {loadgen_ns} ns is below the send-to-wire-out {on_wire} ns"
        );
        assert!(
            loadgen_ns <= on_wire + margin,
            "transit latency q{q} {loadgen_ns} ns exceeds the send-to-wire-out {on_wire} ns by more than {margin} ns"
        );
        let broker = tests::wire::quantile_ns(&wire.broker_transit_ns, q);
        assert!(
            loadgen_ns + CLOCK_ALIGNMENT_NS >= broker,
            "transit latency q{q} {loadgen_ns} ns is below the broker's own {broker} ns"
        );
    }
}

/// Busy processes at normal priority, one per CPU asked, stopped when dropped; each also ends
/// by itself after a minute, should the test die without dropping it.
struct CpuHog(Vec<Child>);

impl CpuHog {
    fn start(processes: usize) -> Self {
        CpuHog(
            (0..processes)
                .map(|_| {
                    Command::new("timeout")
                        .args(["-s", "KILL", "60", "sh", "-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("a busy shell")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SIGTERM, which timeout passes on to the shell (a SIGKILL would stop only timeout).
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let _ = child.wait();
        }
    }
}
