//! TCP and QUIC under the continuum's links: every pair of latency tests (the kinds that
//! measure latency: latency, payload) that differ only in how MQTT travels (TCP, with or
//! without TLS, against QUIC) set side by side per broker, scenario and point: each
//! transport's latency percentiles, connect and reconnect times, delivered and lost; then
//! QUIC's shift against TCP of the per-repetition median and p99, with its distribution-free
//! interval and the Mann-Whitney verdict the broker comparisons use.

use std::collections::{BTreeMap, BTreeSet};

use loadgen::WorkloadSpec;
use loadgen::spec::{QuicStreams, Transport};

use super::comparison::{self, Metric, point_text, untestable_note_of};
use super::estimate::{CONFIDENCE, Estimate, coverage_text};
use super::grouped::by_kind;
use super::input::{CellFigures, RunData};
use super::model::{Block, Section, Table, ms};
use super::test_label;
use crate::plan::{Measures, Plan};
use crate::stats;

/// A test over TCP and one over QUIC that are otherwise the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPair {
    /// Index of the TCP test.
    pub tcp: usize,
    /// Index of the QUIC test.
    pub quic: usize,
}

/// Every TCP latency test paired with every QUIC test whose workload is the same once the
/// transport and the CA are set aside (a plan's `transports` sweep, or two tests written by
/// hand), in plan order.
pub fn transport_pairs(plan: &Plan) -> Vec<TransportPair> {
    let shape = |test: usize| {
        if plan.tests[test].kind.measures() != Measures::Latency {
            return None;
        }
        let spec = plan.first_workload(test).ok()?;
        let transport = spec.broker.transport;
        let entry = &plan.tests[test];
        let key = (
            entry.kind,
            plan.points(test),
            entry.loadgen.clone(),
            entry.spread,
            entry.weights.clone(),
            without_transport(spec),
        );
        Some((transport, key))
    };
    let shapes: Vec<_> = (0..plan.tests.len()).map(shape).collect();
    let mut pairs = Vec::new();
    for (quic, quic_shape) in shapes.iter().enumerate() {
        let Some((Transport::Quic, quic_key)) = quic_shape else {
            continue;
        };
        for (tcp, tcp_shape) in shapes.iter().enumerate() {
            if let Some((Transport::Tcp, tcp_key)) = tcp_shape
                && tcp_key == quic_key
            {
                pairs.push(TransportPair { tcp, quic });
            }
        }
    }
    pairs
}

/// `spec` as compared between transports: TCP, no CA, no QUIC setting.
fn without_transport(mut spec: WorkloadSpec) -> WorkloadSpec {
    spec.broker.transport = Transport::Tcp;
    spec.broker.tls_ca_file = None;
    spec.broker.quic_zero_rtt = false;
    spec.broker.quic_streams = QuicStreams::Single;
    spec
}

/// The section, when the plan pairs a TCP test with a QUIC one and a cell of each was
/// measured.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let mut figures = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Point",
            "Transport",
            "Repetitions",
            "Latency p50 (ms)",
            "p99 (ms)",
            "p99.9 (ms)",
            "Connect p50 (ms)",
            "Reconnect away p50 (ms)",
            "Delivered / expected",
            "Lost",
            "Errors, by kind",
        ],
        5,
    );
    let mut shifts = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Point",
            "Figure",
            "QUIC - TCP (ms)",
            "Verdict",
        ],
        5,
    );
    let mut untestable = BTreeSet::new();
    for pair in transport_pairs(plan) {
        let test = format!(
            "{} / {}",
            test_label(plan, pair.tcp),
            test_label(plan, pair.quic)
        );
        for ((broker, scenario, point), [tcp, quic]) in side_by_side(data, pair) {
            let labels = [
                test.clone(),
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                point_text(plan, pair.tcp, point),
            ];
            let names = [transport_name(&tcp), quic_name(&quic)];
            for (name, cells) in names.iter().zip([&tcp, &quic]) {
                let mut row = labels.to_vec();
                row.push(name.clone());
                row.extend(figures_of(cells));
                figures.row(row);
            }
            for (figure, value) in [
                ("p50", latency_p50 as fn(&CellFigures) -> f64),
                ("p99", latency_p99),
            ] {
                let timed = |cells: &[&CellFigures]| -> Vec<f64> {
                    cells
                        .iter()
                        .filter(|c| latency_of(c).count > 0)
                        .map(|c| value(c))
                        .collect()
                };
                let (a, b) = (timed(&tcp), timed(&quic));
                let Some(compared) = comparison::compare(Metric::Latency, (0, &a), (1, &b)) else {
                    continue;
                };
                if !compared.testable() {
                    untestable.insert(compared.n);
                }
                let mut row = labels.to_vec();
                row.push(figure.to_string());
                row.push(shift_text(&a, &b));
                row.push(comparison::sentence(Metric::Latency, &names, &compared));
                shifts.row(row);
            }
        }
    }
    if figures.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("transports", "TCP and QUIC under the continuum's links");
    section.paragraph(
        "Pairs of latency tests that differ only in how MQTT travels: over TCP (TLS when the \
         test names a CA) and over QUIC (TLS 1.3, every packet on one bidirectional stream \
         unless the transport names a stream per topic or per PUBLISH). \
         Latency is the transit latency, from the moment loadgen handed a message to its \
         connection to its arrival, so loadgen's own send delay counts for neither. \
         Percentiles and connect times are medians over the repetitions, with their interval \
         in brackets where it is not a point (its coverage when below 95 %); counts are sums. \
         A connect time runs until MQTT's CONNACK (and a subscriber's SUBACK) over either \
         transport; before it, QUIC sets up its connection and TLS 1.3 in one round trip and \
         opens its stream, while TCP takes a round trip for its handshake and, with TLS, \
         TLS's own on top.",
    );
    section.paragraph(
        "Every client has a connection of its own over either transport, and with one stream \
         per connection a lost packet holds back the later messages of that client over QUIC \
         as over TCP: single-stream QUIC removes no head-of-line blocking that TCP has. What \
         can differ under loss is how each detects and repairs it (QUIC's acknowledgements and \
         loss timers against the kernel's TCP, in user space against the kernel) and how each \
         backs off. With a stream per topic or per PUBLISH (`broker.quic_streams`), a \
         client's PUBLISH packets leave on streams of their own and loadgen reads those the \
         broker opens: a lost packet then holds back only its own stream.",
    );
    section.blocks.push(Block::Table(figures));
    if !shifts.rows.is_empty() {
        section.paragraph(format!(
            "QUIC against TCP, per repetition: the Hodges-Lehmann shift of QUIC's values \
             against TCP's (positive: QUIC slower) with its distribution-free interval \
             (aiming at {:.0} %, its coverage said when lower), and the two-sided \
             Mann-Whitney test the broker comparisons use.",
            CONFIDENCE * 100.0
        ));
        section.blocks.push(Block::Table(shifts));
    }
    if !untestable.is_empty() {
        section.paragraph(untestable_note_of(
            &untestable,
            plan.repetitions,
            "transports",
        ));
    }
    Some(section)
}

/// The measured cells of the pair's two tests by (broker, scenario, point), TCP's first,
/// where both have one.
fn side_by_side(
    data: &RunData,
    pair: TransportPair,
) -> BTreeMap<(usize, usize, u64), [Vec<&CellFigures>; 2]> {
    let mut groups: BTreeMap<(usize, usize, u64), [Vec<&CellFigures>; 2]> = BTreeMap::new();
    for cell in &data.cells {
        let side = if cell.test == pair.tcp {
            0
        } else if cell.test == pair.quic {
            1
        } else {
            continue;
        };
        groups
            .entry((cell.broker, cell.scenario, cell.point))
            .or_default()[side]
            .push(cell);
    }
    groups.retain(|_, [tcp, quic]| !tcp.is_empty() && !quic.is_empty());
    groups
}

/// "TCP" or "TCP+TLS", as the cells ran.
fn transport_name(cells: &[&CellFigures]) -> String {
    if cells.iter().any(|c| c.spec.broker.tls_ca_file.is_some()) {
        "TCP+TLS".to_string()
    } else {
        "TCP".to_string()
    }
}

/// "QUIC", with its stream mode when it is not the one stream.
fn quic_name(cells: &[&CellFigures]) -> String {
    match cells.first().map(|c| c.spec.broker.quic_streams) {
        Some(QuicStreams::PerTopic) => "QUIC, a stream per topic".to_string(),
        Some(QuicStreams::PerPublish) => "QUIC, a stream per PUBLISH".to_string(),
        Some(QuicStreams::Single) | None => "QUIC".to_string(),
    }
}

/// The latency a cell is compared by: transit when it has it, open loop in older results.
fn latency_of(cell: &CellFigures) -> &loadgen::summary::LatencySummary {
    if cell.summary.transit_latency.count > 0 {
        &cell.summary.transit_latency
    } else {
        &cell.summary.latency
    }
}

fn latency_p50(cell: &CellFigures) -> f64 {
    latency_of(cell).p50_us
}

fn latency_p99(cell: &CellFigures) -> f64 {
    latency_of(cell).p99_us
}

/// One transport's columns, from its repetitions.
fn figures_of(cells: &[&CellFigures]) -> Vec<String> {
    let estimate = |value: &dyn Fn(&CellFigures) -> Option<f64>| {
        let values: Vec<f64> = cells.iter().filter_map(|c| value(c)).collect();
        Estimate::of(&values).map_or("-".to_string(), |e| e.text(ms))
    };
    let timed = |c: &CellFigures, value: fn(&CellFigures) -> f64| {
        (latency_of(c).count > 0).then(|| value(c))
    };
    let expected: u64 = cells.iter().map(|c| c.summary.expected_deliveries).sum();
    let delivered: u64 = cells.iter().map(|c| c.summary.delivered_unique).sum();
    let lost: Option<u64> = cells.iter().map(|c| c.summary.lost).sum();
    let errors = by_kind(cells.iter().map(|c| &c.summary.errors));
    vec![
        cells.len().to_string(),
        estimate(&|c| timed(c, latency_p50)),
        estimate(&|c| timed(c, latency_p99)),
        estimate(&|c| timed(c, |c| latency_of(c).p999_us)),
        estimate(&|c| (c.summary.connect_time.count > 0).then_some(c.summary.connect_time.p50_us)),
        estimate(&|c| {
            c.summary
                .reconnect
                .as_ref()
                .filter(|r| r.time_away.count > 0)
                .map(|r| r.time_away.p50_us)
        }),
        format!("{delivered} / {expected}"),
        lost.map_or("-".to_string(), |lost| lost.to_string()),
        errors,
    ]
}

/// QUIC's Hodges-Lehmann shift against TCP with its interval: "+0.310 [+0.120 to +0.550, 90 %]".
fn shift_text(tcp: &[f64], quic: &[f64]) -> String {
    let Some((shift, interval)) = stats::shift_ci(tcp, quic, CONFIDENCE) else {
        return "-".to_string();
    };
    let signed = |us: f64| {
        if us > 0.0 {
            format!("+{}", ms(us))
        } else {
            ms(us)
        }
    };
    if interval.low == interval.high {
        signed(shift)
    } else if interval.reliable {
        format!(
            "{} [{} to {}]",
            signed(shift),
            signed(interval.low),
            signed(interval.high)
        )
    } else {
        format!(
            "{} [{} to {}, {}]",
            signed(shift),
            signed(interval.low),
            signed(interval.high),
            coverage_text(interval.coverage)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tests: &str) -> Plan {
        let text = format!(
            "name = \"t\"\nrepetitions = 3\n\
             [[nodes]]\nname = \"n\"\nagent = \"local\"\nroles = [\"loadgen\", \"broker\"]\n\
             [[brokers]]\nname = \"b\"\nkind = \"external\"\naddress = \"127.0.0.1:1883\"\n\
             quic_address = \"127.0.0.1:14567\"\n\
             [[scenarios]]\nname = \"local\"\n{tests}"
        );
        Plan::parse(&text, "plan.toml").expect("plan")
    }

    const TCP: &str = "[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\nmessages = 20\n";
    const QUIC: &str = "[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\nmessages = 20\n\
         [tests.workload.broker]\ntransport = \"quic\"\ntls_ca_file = \"/ca.pem\"\n";

    #[test]
    fn tests_that_differ_only_in_transport_are_paired() {
        let pairs = transport_pairs(&plan(&format!("{TCP}{QUIC}")));
        assert_eq!(pairs, [TransportPair { tcp: 0, quic: 1 }]);
        let pairs = transport_pairs(&plan(&format!("{QUIC}{TCP}")));
        assert_eq!(pairs, [TransportPair { tcp: 1, quic: 0 }]);
    }

    #[test]
    fn tests_that_differ_otherwise_are_not_paired() {
        let other = QUIC.replace("messages = 20", "messages = 30");
        assert!(transport_pairs(&plan(&format!("{TCP}{other}"))).is_empty());
        let payload = "[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\nmessages = 20\n";
        assert!(transport_pairs(&plan(&format!("{payload}{QUIC}"))).is_empty());
        assert!(transport_pairs(&plan(&format!("{TCP}{TCP}"))).is_empty());
    }

    #[test]
    fn every_quic_stream_mode_pairs_with_tcp() {
        let per_topic = format!("{QUIC}quic_streams = \"per_topic\"\n");
        let per_publish = format!("{QUIC}quic_streams = \"per_publish\"\n");
        assert_eq!(
            transport_pairs(&plan(&format!("{TCP}{QUIC}{per_topic}{per_publish}"))),
            [
                TransportPair { tcp: 0, quic: 1 },
                TransportPair { tcp: 0, quic: 2 },
                TransportPair { tcp: 0, quic: 3 }
            ]
        );
    }

    #[test]
    fn a_tls_tcp_test_pairs_too() {
        let tls = format!("{TCP}[tests.workload.broker]\ntls_ca_file = \"/ca.pem\"\n");
        assert_eq!(
            transport_pairs(&plan(&format!("{TCP}{tls}{QUIC}"))),
            [
                TransportPair { tcp: 0, quic: 2 },
                TransportPair { tcp: 1, quic: 2 }
            ]
        );
    }

    #[test]
    fn the_shift_says_its_sign_and_interval() {
        // QUIC 0.3 ms slower by the median of the differences (0.1 to 0.5 between them).
        let tcp = [1000.0, 1100.0, 1200.0];
        let quic = [1300.0, 1400.0, 1500.0];
        let text = shift_text(&tcp, &quic);
        assert!(text.starts_with("+0.300 ["), "{text}");
        // Three against three cannot reach 95 %: the coverage is said.
        assert!(text.ends_with(" %]"), "{text}");
        assert!(shift_text(&quic, &tcp).starts_with("-0.300 ["));
        assert_eq!(shift_text(&[], &quic), "-");
    }
}
