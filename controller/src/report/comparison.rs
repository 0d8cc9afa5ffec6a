//! Whether two brokers differ: for each test, scenario and point, each pair of brokers'
//! per-repetition figures compared with the Mann-Whitney U test (exact for small samples)
//! and Cliff's delta as the effect size, instead of leaving it to the eye.

use std::collections::{BTreeMap, BTreeSet};

use super::input::RunData;
use super::model::{Section, Table, ms, rate};
use super::throughput::sustained;
use crate::plan::{Measures, Sweep};
use crate::stats::{self, Magnitude, PValueMethod};

/// Below this p-value a difference is called significant.
pub const SIGNIFICANCE: f64 = 0.05;

/// What is compared, and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    /// Median transit latency of a repetition (lower is better): from the actual send, so
    /// loadgen's own lateness on a busy host does not count against a broker.
    Latency,
    /// Median open-loop latency of a repetition (lower is better), for results written
    /// before the transit latency was kept.
    OpenLoopLatency,
    /// Sustained receive rate of a repetition (higher is better): closed loops, where the
    /// rate is the broker's to make.
    SustainedRate,
    /// Median transit latency of a repetition that sustained an offered rate (lower is
    /// better): brokers that all kept up with one offered rate deliver it alike, so their
    /// rates rank nothing; their latency at that load does.
    LatencyAtOfferedRate,
    /// Highest sustained offered rate of a search (higher is better).
    SaturationRate,
}

impl Metric {
    /// True for latencies.
    pub fn lower_is_better(self) -> bool {
        matches!(
            self,
            Metric::Latency | Metric::OpenLoopLatency | Metric::LatencyAtOfferedRate
        )
    }

    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Latency => "median transit latency (ms)",
            Metric::OpenLoopLatency => "median open-loop latency (ms)",
            Metric::SustainedRate => "sustained receive rate (msg/s)",
            Metric::LatencyAtOfferedRate => {
                "median transit latency at the offered rate, sustained repetitions (ms)"
            }
            Metric::SaturationRate => "saturation rate (msg/s)",
        }
    }

    /// Short name in CSV files.
    pub fn id(self) -> &'static str {
        match self {
            Metric::Latency => "latency",
            Metric::OpenLoopLatency => "open_loop_latency",
            Metric::SustainedRate => "sustained_rate",
            Metric::LatencyAtOfferedRate => "latency_at_offered_rate",
            Metric::SaturationRate => "saturation_rate",
        }
    }

    /// The unit of its raw values.
    pub fn unit(self) -> &'static str {
        if self.lower_is_better() {
            "us"
        } else {
            "msg/s"
        }
    }

    /// A value as tables show it (ms for latencies).
    pub fn show(self, v: f64) -> String {
        match self {
            Metric::Latency | Metric::OpenLoopLatency | Metric::LatencyAtOfferedRate => ms(v),
            _ => rate(v),
        }
    }
}

/// Per-repetition values of one broker at one test, scenario and point.
pub type Samples = BTreeMap<(usize, usize, u64, Metric), BTreeMap<usize, Vec<f64>>>;

/// Every per-repetition figure the report compares, keyed (test, scenario, point, metric),
/// then broker.
pub fn samples(data: &RunData) -> Samples {
    let plan = &data.manifest.plan;
    let mut out: Samples = BTreeMap::new();
    for cell in &data.cells {
        let measures = plan.tests[cell.test].kind.measures();
        let (metric, value) = match measures {
            Measures::Latency if cell.summary.transit_latency.count > 0 => {
                (Metric::Latency, cell.summary.transit_latency.p50_us)
            }
            Measures::Latency => (Metric::OpenLoopLatency, cell.summary.latency.p50_us),
            Measures::SustainedRate
                if sustained(cell)
                    && cell.summary.offered_rate_msgs_per_s.is_some()
                    && cell.summary.transit_latency.count > 0 =>
            {
                (
                    Metric::LatencyAtOfferedRate,
                    cell.summary.transit_latency.p50_us,
                )
            }
            Measures::SustainedRate if sustained(cell) => match &cell.summary.steadiness {
                Some(s) => (Metric::SustainedRate, s.receive_msgs_per_s),
                None => continue,
            },
            _ => continue,
        };
        out.entry((cell.test, cell.scenario, cell.point, metric))
            .or_default()
            .entry(cell.broker)
            .or_default()
            .push(value);
    }
    for search in &data.searches {
        if let Some(found) = search.report.rate {
            out.entry((
                search.test,
                search.scenario,
                search.point,
                Metric::SaturationRate,
            ))
            .or_default()
            .entry(search.broker)
            .or_default()
            .push(found as f64);
        }
    }
    out
}

/// Two brokers compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The better broker (by median).
    pub better: usize,
    /// The other.
    pub worse: usize,
    /// Their medians.
    pub medians: (f64, f64),
    /// Two-sided Mann-Whitney p-value and whether it was exact.
    pub p_value: f64,
    /// Exact or normal approximation.
    pub exact: bool,
    /// Cliff's delta of better vs worse, signed so that positive favours `better`.
    pub delta: f64,
    /// Repetitions of each.
    pub n: (usize, usize),
}

impl Comparison {
    /// The difference is significant at [`SIGNIFICANCE`] (never where the repetitions
    /// cannot be tested).
    pub fn significant(&self) -> bool {
        self.testable() && self.p_value < SIGNIFICANCE
    }

    /// Whether these repetitions could show a significant difference at all.
    pub fn testable(&self) -> bool {
        testable(self.n.0, self.n.1)
    }

    /// How much better, as a share of the worse median (always positive).
    pub fn advantage(&self) -> f64 {
        (self.medians.1 - self.medians.0).abs() / self.medians.1.abs().max(f64::MIN_POSITIVE)
    }
}

/// The smallest two-sided Mann-Whitney p-value `n_a` against `n_b` repetitions can give:
/// complete separation, `2 / C(n_a + n_b, n_a)` (at most 1).
pub fn smallest_p_value(n_a: usize, n_b: usize) -> f64 {
    let (n, k) = (n_a + n_b, n_a.min(n_b));
    // C(n, k) as a product of ratios, exact enough for the counts of repetitions.
    let ways = (0..k).fold(1.0, |ways, i| ways * (n - i) as f64 / (i + 1) as f64);
    (2.0 / ways).min(1.0)
}

/// Whether `n_a` against `n_b` repetitions can show a difference at [`SIGNIFICANCE`]: 2 or
/// 3 on each side never can, whatever the figures.
pub fn testable(n_a: usize, n_b: usize) -> bool {
    smallest_p_value(n_a, n_b) < SIGNIFICANCE
}

/// One paragraph, said once, for the comparisons whose repetitions (`counts`: the pairs of
/// repetition counts compared) cannot reach significance in a plan of `repetitions`.
pub fn untestable_note(counts: &BTreeSet<(usize, usize)>, repetitions: u32) -> String {
    untestable_note_of(counts, repetitions, "brokers")
}

/// [`untestable_note`] for comparisons of `compared` ("brokers", "transports").
pub fn untestable_note_of(
    counts: &BTreeSet<(usize, usize)>,
    repetitions: u32,
    compared: &str,
) -> String {
    let pairs: Vec<String> = counts
        .iter()
        .map(|&(n_a, n_b)| {
            format!(
                "{n_a} against {n_b} (smallest p {:.3})",
                smallest_p_value(n_a, n_b)
            )
        })
        .collect();
    let advice = if repetitions < 4 {
        format!("repeat the plan at least 4 times to tell {compared} apart")
    } else {
        "fewer repetitions counted than the plan ran (only sustained repetitions and searches \
         that found a rate count)"
            .to_string()
    };
    format!(
        "Where repetitions are too few to test, no difference can be significant at p < \
         {SIGNIFICANCE} whatever the figures (the exact Mann-Whitney test's smallest p-value \
         for {}): the differences shown are between medians only; {advice}.",
        pairs.join(", ")
    )
}

/// A test's point as tables show it: a payload size, client pairs, or "-".
pub fn point_text(plan: &crate::plan::Plan, test: usize, point: u64) -> String {
    match plan.tests[test].kind.sweep() {
        Sweep::Payloads => loadgen::size::ByteSize(point).to_string(),
        Sweep::Single => "-".to_string(),
        Sweep::Clients => format!("{point} pairs"),
    }
}

/// Compares two brokers' values of `metric`; `None` without values on both sides.
pub fn compare(metric: Metric, a: (usize, &[f64]), b: (usize, &[f64])) -> Option<Comparison> {
    let (ma, mb) = (stats::median(a.1)?, stats::median(b.1)?);
    let a_better = if metric.lower_is_better() {
        ma <= mb
    } else {
        ma >= mb
    };
    let ((better, bv, bm), (worse, wv, wm)) = if a_better {
        ((a.0, a.1, ma), (b.0, b.1, mb))
    } else {
        ((b.0, b.1, mb), (a.0, a.1, ma))
    };
    let test = stats::mann_whitney_u(bv, wv)?;
    let delta = stats::cliffs_delta(bv, wv)?;
    // With ties the test falls back to the normal approximation, which can go below what any
    // permutation of so few values gives; the exact permutation p never does.
    let p_value = if bv.len() + wv.len() <= stats::EXACT_MAX_TOTAL {
        test.p_value.max(smallest_p_value(bv.len(), wv.len()))
    } else {
        test.p_value
    };
    Some(Comparison {
        better,
        worse,
        medians: (bm, wm),
        p_value,
        exact: test.method == PValueMethod::Exact,
        // Cliff's delta is positive when `better`'s values tend to be larger: flip for latency.
        delta: if metric.lower_is_better() {
            -delta
        } else {
            delta
        },
        n: (bv.len(), wv.len()),
    })
}

/// A comparison in words: "mosquitto higher by 12 % (p = 0.008, δ = 1.00 large)"; without
/// the test where the repetitions cannot reach significance ([`untestable_note`] says why).
pub fn sentence(metric: Metric, names: &[String], c: &Comparison) -> String {
    let direction = if metric.lower_is_better() {
        "lower"
    } else {
        "higher"
    };
    if !c.testable() {
        return format!(
            "{} {direction} than {} by {:.1} % ({} vs {}; medians of {} and {} repetitions, too few to test)",
            names[c.better],
            names[c.worse],
            c.advantage() * 100.0,
            metric.show(c.medians.0),
            metric.show(c.medians.1),
            c.n.0,
            c.n.1,
        );
    }
    let magnitude = Magnitude::from_delta(c.delta).map_or("?", Magnitude::label);
    format!(
        "{} {direction} than {} by {:.1} % ({} vs {}); {} (Mann-Whitney p = {:.3}{}, Cliff's δ = {:.2}, {magnitude}; {} vs {} repetitions)",
        names[c.better],
        names[c.worse],
        c.advantage() * 100.0,
        metric.show(c.medians.0),
        metric.show(c.medians.1),
        if c.significant() {
            "significant"
        } else {
            "not significant"
        },
        c.p_value,
        if c.exact { ", exact" } else { "" },
        c.delta,
        c.n.0,
        c.n.1,
    )
}

/// The section: every pair of brokers at every test, scenario and point with values for both.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let names: Vec<String> = plan.brokers.iter().map(|b| b.name.clone()).collect();
    let mut table = Table::new(
        &[
            "Test",
            "Scenario",
            "Point",
            "Figure",
            "Better",
            "Other",
            "Medians",
            "Advantage",
            "Mann-Whitney p",
            "Cliff's δ",
            "Verdict",
        ],
        6,
    );
    let mut untestable: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut testable_rows = 0;
    for ((test, scenario, point, metric), brokers) in samples(data) {
        let brokers: Vec<(usize, Vec<f64>)> = brokers.into_iter().collect();
        for (i, a) in brokers.iter().enumerate() {
            for b in &brokers[i + 1..] {
                let Some(c) = compare(metric, (a.0, &a.1), (b.0, &b.1)) else {
                    continue;
                };
                if c.testable() {
                    testable_rows += 1;
                } else {
                    untestable.insert(c.n);
                }
                let point_text = point_text(plan, test, point);
                let magnitude = Magnitude::from_delta(c.delta).map_or("?", Magnitude::label);
                table.row(vec![
                    super::test_label(plan, test),
                    plan.scenarios[scenario].name.clone(),
                    point_text,
                    metric.name().to_string(),
                    names[c.better].clone(),
                    names[c.worse].clone(),
                    format!(
                        "{} vs {}",
                        metric.show(c.medians.0),
                        metric.show(c.medians.1)
                    ),
                    format!("{:.1} %", c.advantage() * 100.0),
                    format!("{:.3}{}", c.p_value, if c.exact { " (exact)" } else { "" }),
                    format!("{:.2} ({magnitude})", c.delta),
                    if !c.testable() {
                        "too few repetitions to test".to_string()
                    } else if c.significant() {
                        "differ".to_string()
                    } else {
                        "no significant difference".to_string()
                    },
                ]);
            }
        }
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("comparisons", "Broker comparisons");
    if testable_rows == 0 {
        // A table of verdicts none of which could be anything but "no difference".
        section.paragraph(format!(
            "Brokers measured at the same test, scenario and point are not compared here. {}",
            untestable_note(&untestable, plan.repetitions)
        ));
        return Some(section);
    }
    section.paragraph(format!(
        "Each pair of brokers measured at the same test, scenario and point, compared on the \
         per-repetition figure named: the median of each, how much better the better one is, \
         the two-sided Mann-Whitney U test over the repetitions (exact when there are no ties \
         and at most 40 values) and Cliff's delta with its magnitude (negligible < 0.147 < \
         small < 0.33 < medium < 0.474 < large). Brokers differ when p < {SIGNIFICANCE}. \
         Throughput counts only sustained repetitions; brokers that sustained one offered \
         rate are compared on their latency at it (which includes loadgen's receive cadence \
         where the throughput section names one).{}",
        if untestable.is_empty() {
            String::new()
        } else {
            format!(" {}", untestable_note(&untestable, plan.repetitions))
        }
    ));
    section.blocks.push(super::model::Block::Table(table));
    Some(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_better_broker_is_named_with_a_signed_effect() {
        let fast = [1.0, 1.1, 1.2, 1.05, 1.15];
        let slow = [2.0, 2.1, 2.2, 2.05, 2.15];
        let c = compare(Metric::Latency, (0, &slow), (1, &fast)).expect("values");
        assert_eq!((c.better, c.worse), (1, 0), "lower latency is better");
        assert!(c.significant(), "{c:?}");
        assert!(
            (c.delta - 1.0).abs() < 1e-9,
            "complete separation in favour of the better"
        );
        let c = compare(Metric::SustainedRate, (0, &slow), (1, &fast)).expect("values");
        assert_eq!(c.better, 0, "a higher rate is better");
        let names = vec!["a".to_string(), "b".to_string()];
        assert!(sentence(Metric::SustainedRate, &names, &c).starts_with("a higher than b by"));
        let two = compare(
            Metric::Latency,
            (0, &[1_000.0, 2_000.0]),
            (1, &[3_000.0, 4_000.0]),
        )
        .expect("values");
        assert!(
            !two.significant(),
            "2 vs 2 repetitions cannot reach 0.05: {two:?}"
        );
        assert!(!two.testable());
        let said = sentence(Metric::Latency, &names, &two);
        assert!(
            said.ends_with("(1.50 vs 3.50; medians of 2 and 2 repetitions, too few to test)")
                && !said.contains("significant"),
            "{said}"
        );
    }

    #[test]
    fn the_smallest_p_value_decides_whether_repetitions_can_be_tested() {
        // Complete separation: the exact test's own p-value is the bound.
        for (n_a, n_b) in [(2, 2), (3, 3), (4, 4), (3, 5), (8, 8)] {
            let a: Vec<f64> = (0..n_a).map(|i| i as f64).collect();
            let b: Vec<f64> = (0..n_b).map(|i| 100.0 + i as f64).collect();
            let exact = stats::mann_whitney_u(&a, &b).expect("values").p_value;
            assert!(
                (smallest_p_value(n_a, n_b) - exact).abs() < 1e-9,
                "{n_a} vs {n_b}: {} against the test's {exact}",
                smallest_p_value(n_a, n_b)
            );
        }
        assert!(!testable(2, 2) && !testable(3, 3) && !testable(1, 8));
        assert!(testable(4, 4) && testable(3, 5));
    }

    #[test]
    fn ties_never_make_untestable_repetitions_look_significant() {
        // With ties the normal approximation gives p = 0.047 for 3 against 3: below what any
        // permutation of six values can give (0.1).
        let tied = compare(
            Metric::SaturationRate,
            (0, &[1.0, 1.0, 1.0]),
            (1, &[2.0, 2.0, 2.0]),
        )
        .expect("values");
        assert!(!tied.testable() && !tied.significant(), "{tied:?}");
        assert!(tied.p_value >= smallest_p_value(3, 3), "{tied:?}");
        let note = untestable_note(&BTreeSet::from([(2, 2), (2, 3)]), 2);
        assert!(
            note.contains("2 against 2 (smallest p 0.333), 2 against 3 (smallest p 0.200)")
                && note.ends_with("repeat the plan at least 4 times to tell brokers apart."),
            "{note}"
        );
        assert!(
            untestable_note(&BTreeSet::from([(1, 3)]), 5).contains("fewer repetitions counted"),
            "a plan of 5 repetitions is not told to repeat 4 times"
        );
    }
}
