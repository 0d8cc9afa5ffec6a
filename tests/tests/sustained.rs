//! Sustained throughput against real brokers: a timed run is steady, the deliveries it counts
//! equal the broker's own counters exactly, its rate over the measured window agrees with the
//! rate the broker's counters show over that window, and the saturation search finds a rate
//! that holds at 0.8x and breaks at 1.25x.

use std::time::Duration;

use loadgen::Summary;
use loadgen::saturation::{Probe, Search, SearchEnd, SearchSettings, probe_spec};
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, Qos, WorkloadSpec};
use tests::load::run_dedicated as run;
use tests::{CpuQuota, Mosquitto, MosquittoOptions, RabbitMq, skip_unless_installed};

/// `pairs` publisher/subscriber pairs at an offered `rate` for `duration` after `warmup`.
fn timed(port: u16, pairs: u32, rate: u64, duration: u64, warmup: u64) -> WorkloadSpec {
    let mut spec = loadgen::presets::throughput();
    spec.broker.port = port;
    spec.publishers = pairs;
    spec.subscribers = pairs;
    spec.payload = ByteSize(32);
    spec.messages_per_publisher = 0;
    spec.duration = Some(Duration::from_secs(duration));
    spec.warmup = Some(Duration::from_secs(warmup));
    spec.pacing = Pacing::Rate { rate };
    spec
}

/// The halves of the measured window each lie within 5 % of the whole, and loadgen calls the
/// rate sustained; or, where this shared machine starved loadgen of CPU and loadgen said so
/// (every reason a wait for a CPU), generator-limited: the one other verdict let pass, as in
/// the WebSocket tests. The halves must agree either way.
fn assert_steady(summary: &Summary) {
    let steady = summary.steadiness.as_ref().expect("a timed run is judged");
    assert!(steady.steady, "not steady: {:?}", steady.reasons);
    for half in [
        steady.receive_first_half_msgs_per_s,
        steady.receive_second_half_msgs_per_s,
    ] {
        let off = (half - steady.receive_msgs_per_s).abs() / steady.receive_msgs_per_s;
        assert!(off <= 0.05, "a half is {:.1} % off", off * 100.0);
    }
    let reasons = &summary.generator.reasons;
    let starved = summary.rate_kind == loadgen::summary::RateKind::GeneratorLimited
        && !reasons.is_empty()
        && reasons.iter().all(|r| r.contains("waited for a CPU"));
    if starved {
        eprintln!("not judged, the machine was oversubscribed: {reasons:?}");
        return;
    }
    assert_eq!(
        summary.rate_kind,
        loadgen::summary::RateKind::Sustained,
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_mosquitto_run_is_steady_and_matches_the_brokers_counters_and_rate() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let before = broker.counters_settled().expect("counters before");
    // 10,000 msg/s: at 20,000 this unoptimised test build of loadgen needed 76-100 % of its one
    // CPU on 2026-12-03 (the same code had passed at 20,000 that morning) and rightly called its
    // figures generator-limited; how fast loadgen goes is bench/'s question, not this test's.
    let (result, summary) = run(timed(broker.port(), 20, 10_000, 10, 2)).await;
    let after = broker.counters_settled().expect("counters after");
    assert_steady(&summary);
    assert_eq!(summary.lost, Some(0));
    assert_eq!(
        after.publish_sent - before.publish_sent,
        summary.received,
        "the broker sent exactly what the subscribers received"
    );
    assert_eq!(
        after.publish_received - before.publish_received,
        summary.published
    );

    // The broker's rate over the window, from the $SYS updates published inside it.
    let window = result.measured_window.expect("timed");
    let (from, until) = (
        result.clock_origin_unix_ns + window.from_ns,
        result.clock_origin_unix_ns + window.until_ns,
    );
    let inside: Vec<_> = broker
        .counter_history()
        .expect("history")
        .into_iter()
        .filter(|(at, _)| (from..until).contains(at))
        .collect();
    assert!(
        inside.len() >= 3,
        "$SYS updates inside the window: {inside:?}"
    );
    let ((t0, first), (t1, last)) = (inside[0], inside[inside.len() - 1]);
    let broker_rate = (last.publish_sent - first.publish_sent) as f64 * 1e9 / (t1 - t0) as f64;
    let loadgen_rate = summary.receive_rate.msgs_per_s;
    let off = (broker_rate - loadgen_rate).abs() / loadgen_rate;
    eprintln!(
        "receive rate: loadgen {loadgen_rate:.0} msg/s over the window, Mosquitto's $SYS {broker_rate:.0} msg/s over {:.2} s inside it ({:.2} % apart)",
        (t1 - t0) as f64 / 1e9,
        off * 100.0
    );
    assert!(off <= 0.03, "{:.2} % apart", off * 100.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_rabbitmq_run_is_steady_and_matches_its_delivered_counter() {
    skip_unless_installed!(
        tests::rabbitmq::RABBITMQ_SERVER,
        tests::rabbitmq::RABBITMQCTL
    );
    let broker = RabbitMq::start().expect("rabbitmq starts");
    let before = broker.counters_settled().expect("counters before");
    // A rate this 2-core machine holds beside an Erlang VM: at 5000 msg/s loadgen's pacer
    // waited ~80 µs for a CPU at each wake-up (62 % of its runnable time) and loadgen rightly
    // called its own figures generator-limited.
    let mut spec = timed(broker.port(), 5, 1_000, 10, 2);
    spec.qos = Qos::AtLeastOnce;
    let (_, summary) = run(spec).await;
    let after = broker.counters_settled().expect("counters after");
    assert_steady(&summary);
    assert_eq!(summary.lost, Some(0));
    assert_eq!(
        after.messages_delivered - before.messages_delivered,
        summary.received,
        "RabbitMQ delivered exactly what the subscribers received"
    );
    assert_eq!(
        after.messages_received - before.messages_received,
        summary.published
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_saturation_point_holds_at_four_fifths_and_breaks_at_five_quarters() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    if let Some(reason) = tests::cpu_quota_unavailable() {
        assert!(!tests::running_in_ci(), "CI needs a CPU quota: {reason}");
        eprintln!("SKIPPED: {reason}");
        return;
    }
    // A broker held to 15 % of a core, as on a small edge node: loadgen has CPU to spare, so
    // what the search finds is the broker's limit, not the generator's. Not 30 %: at 1.25
    // times what a 30 % broker sustains (about 30k msg/s) this unoptimised test build came
    // to 79-91 % of loadgen's one core on slower days, which loadgen rightly called
    // generator-limited.
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let _quota = CpuQuota::limit(broker.pid(), 0.15).expect("quota");
    // On a shared virtual machine loadgen's threads sometimes wait for a CPU a quarter of the
    // time they are ready to run, and loadgen then says its figures may be its own limit; or
    // the broker itself gets slower per message between the search and the check. Such an
    // attempt proves nothing either way and is made again (at most three in all); anything
    // else that goes wrong fails at once.
    let mut disturbed = Vec::new();
    for _ in 0..3 {
        match saturation_attempt(broker.port()).await {
            Ok(()) => return,
            Err(reasons) => {
                eprintln!("attempt disturbed: {reasons:?}");
                disturbed.push(reasons);
            }
        }
    }
    panic!("three attempts, each disturbed: {disturbed:?}");
}

/// The reasons loadgen gave when it called itself the limit only because its threads waited
/// for a CPU (the machine was oversubscribed); any other reason fails the test.
fn only_cpu_waits(reasons: &[String]) -> Result<(), Vec<String>> {
    let waits = reasons.iter().all(|r| r.contains("waited for a CPU"));
    assert!(
        waits && !reasons.is_empty(),
        "loadgen was the limit for a reason other than waiting for a CPU: {reasons:?}"
    );
    Err(reasons.to_vec())
}

/// When the check at 4/5 of the found rate was not sustained (unsteady, or its p99 over the
/// search's bound) and the broker spent more than 10 % more CPU per delivery in it than at
/// the found rate, its capacity under the quota moved between the two (this shared machine's
/// speed changes by that much within minutes; one CI check ran at 4.3 µs per delivery against
/// about 3.5 in the search, which put 0.8 of the rate at the broker's new capacity and its p99
/// at 134 ms): the attempt proves nothing either way. With the broker's cost unchanged, a miss
/// still fails.
fn broker_slowed_down(
    cost_at: &[(u64, f64)],
    found: u64,
    below: &Summary,
    p99_bound: Duration,
) -> Option<String> {
    let sustained = below.steadiness.as_ref().is_some_and(|s| s.steady)
        && below.latency.p99_us <= p99_bound.as_secs_f64() * 1e6;
    let at_found = cost_at.iter().rev().find(|(rate, _)| *rate == found)?.1;
    let in_check = below.broker_on_host.as_ref()?.cpu_per_delivered_message_us;
    (!sustained && in_check > at_found * 1.1).then(|| {
        format!(
            "the broker got slower per delivery between the search and the check at 0.8: \
             {at_found:.1} -> {in_check:.1} µs of CPU (its capacity under the quota moved)"
        )
    })
}

/// The mirror of [`broker_slowed_down`]: when the check at 5/4 of the found rate was steady
/// and the broker spent more than 10 % less CPU per delivery in it than at the found rate, its
/// capacity under the quota rose between the two (one such check on a contended host ran at
/// 7.2 µs per delivery against 8.9 in the search, enough for 1.25 times the rate): the
/// attempt proves nothing either way. With the broker's cost unchanged, a hold still fails.
fn broker_sped_up(cost_at: &[(u64, f64)], found: u64, above: &Summary) -> Option<String> {
    let steady = above.steadiness.as_ref().is_some_and(|s| s.steady);
    let at_found = cost_at.iter().rev().find(|(rate, _)| *rate == found)?.1;
    let in_check = above.broker_on_host.as_ref()?.cpu_per_delivered_message_us;
    (steady && in_check * 1.1 < at_found).then(|| {
        format!(
            "the broker got cheaper per delivery between the search and the check at 1.25: \
             {at_found:.1} -> {in_check:.1} µs of CPU (its capacity under the quota moved)"
        )
    })
}

/// The search converges, 0.8 of its rate holds and 1.25 breaks through the broker; `Err` when
/// loadgen said it was disturbed by CPU waits.
async fn saturation_attempt(port: u16) -> Result<(), Vec<String>> {
    let base = timed(port, 10, 1, 1, 1);
    let settings = SearchSettings {
        probe: Duration::from_secs(2),
        probe_warmup: Duration::from_millis(500),
        ..SearchSettings::default()
    };
    let began = std::time::Instant::now();
    let mut search = Search::new(settings.clone());
    // The broker's CPU per delivery in each offered probe: its capacity under the quota.
    let mut broker_cost = Vec::new();
    while let Some(probe) = search.next_probe() {
        let started = std::time::Instant::now();
        let (_, summary) = run(probe_spec(&base, probe, &settings)).await;
        if let (Probe::Offered { rate }, Some(broker)) = (probe, &summary.broker_on_host) {
            broker_cost.push((rate, broker.cpu_per_delivered_message_us));
        }
        let outcome =
            loadgen::saturation::ProbeOutcome::of(probe, &summary, &settings, started.elapsed());
        eprintln!("{}", loadgen::output::probe_line(&outcome));
        search.record(outcome);
    }
    let report = search.report();
    eprint!("{}", loadgen::output::saturation_summary(&report));
    if report.end == SearchEnd::GeneratorLimited {
        // The probe that ended the search; its reasons about the generator name loadgen (the
        // others are about steadiness and latency).
        let last = report.probes.last().expect("the search ran probes");
        let reasons: Vec<String> = last
            .reasons
            .iter()
            .filter(|r| r.starts_with("loadgen "))
            .cloned()
            .collect();
        return only_cpu_waits(&reasons);
    }
    assert_eq!(report.end, SearchEnd::Converged, "{report:?}");
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "{:?}",
        began.elapsed()
    );
    let rate = report.rate.expect("a rate was sustained");

    let probe_at = |share: f64| {
        let mut spec = probe_spec(
            &base,
            Probe::Offered {
                rate: (rate as f64 * share) as u64,
            },
            &settings,
        );
        spec.duration = Some(Duration::from_secs(3));
        spec
    };
    let (_, below) = run(probe_at(0.8)).await;
    if below.generator.limited {
        return only_cpu_waits(&below.generator.reasons);
    }
    if let Some(slower) = broker_slowed_down(&broker_cost, rate, &below, settings.p99_bound) {
        return Err(vec![slower]);
    }
    assert_steady(&below);
    assert!(
        below.latency.p99_us <= settings.p99_bound.as_secs_f64() * 1e6,
        "p99 {} µs",
        below.latency.p99_us
    );

    let (_, above) = run(probe_at(1.25)).await;
    if above.generator.limited {
        return only_cpu_waits(&above.generator.reasons);
    }
    if let Some(faster) = broker_sped_up(&broker_cost, rate, &above) {
        return Err(vec![faster]);
    }
    let verdict = above.steadiness.as_ref().expect("judged");
    assert!(!verdict.steady, "1.25 R must not be sustained");
    assert!(
        verdict.reasons.iter().any(|r| r.contains("backlog grew")),
        "{:?}",
        verdict.reasons
    );
    assert_eq!(above.rate_kind, loadgen::summary::RateKind::Unsteady);
    Ok(())
}
