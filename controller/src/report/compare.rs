//! `controller compare RUN_A RUN_B`: two runs side by side (before and after a broker
//! upgrade, a config change, a new kernel), cell group by cell group, with significance
//! instead of guesswork.
//!
//! Cells match by broker, scenario and test name and point; each figure is the one the
//! report compares brokers on ([`comparison::samples`]: transit latency, latency at an
//! offered rate, sustained or saturation rate), one value per repetition. Per match: both
//! medians, B - A as the Hodges-Lehmann shift and B / A as its ratio (the shift of the logs),
//! each with its distribution-free interval and the coverage it really has; the two-sided
//! Mann-Whitney p and Cliff's delta; and a verdict. The runs' conditions (versions, kernel,
//! hosts, brokers, netem read back) stand side by side, with a warning where they differ.
//! Written as Markdown, HTML and CSV into a folder of its own; the runs' folders are only read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::comparison::{self, Metric, SIGNIFICANCE};
use super::estimate::{CONFIDENCE, coverage_text};
use super::input::{self, RunData};
use super::model::{Block, Section, Table};
use super::{ReportError, html, markdown};
use crate::stats::{self, Magnitude};

/// What a comparison wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparisonFiles {
    /// `compare.md`.
    pub markdown: PathBuf,
    /// `compare.html`.
    pub html: PathBuf,
    /// `compare.csv`: one row per matched figure.
    pub csv: PathBuf,
    /// Figures measured in both runs.
    pub matched: usize,
    /// Figures measured in one run only.
    pub unmatched: usize,
}

/// Why two runs cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A run's folder could not be read, or the comparison not written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// Not one figure was measured in both runs.
    #[error(
        "{a} and {b} share no measured cell (broker, scenario, test and point): A has {only_a}, B has {only_b}"
    )]
    NothingShared {
        /// Run A's folder.
        a: String,
        /// Run B's folder.
        b: String,
        /// What A measured, in words.
        only_a: String,
        /// What B measured, in words.
        only_b: String,
    },
}

/// Where a figure was measured, by name, so that two plans can match.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    broker: String,
    scenario: String,
    test: String,
    point: String,
    metric: Metric,
}

impl Place {
    fn text(&self) -> String {
        format!(
            "{} / {} / {} / {}: {}",
            self.broker,
            self.scenario,
            self.test,
            self.point,
            self.metric.name()
        )
    }
}

/// Every compared figure of a run, one value per repetition.
fn figures(data: &RunData) -> BTreeMap<Place, Vec<f64>> {
    let plan = &data.manifest.plan;
    let mut out = BTreeMap::new();
    for ((test, scenario, point, metric), brokers) in comparison::samples(data) {
        for (broker, values) in brokers {
            out.insert(
                Place {
                    broker: plan.brokers[broker].name.clone(),
                    scenario: plan.scenarios[scenario].name.clone(),
                    test: super::test_label(plan, test),
                    point: comparison::point_text(plan, test, point),
                    metric,
                },
                values,
            );
        }
    }
    out
}

/// B against A at one place.
#[derive(Debug, Clone, PartialEq)]
struct Matched {
    place: Place,
    median_a: f64,
    median_b: f64,
    /// B - A: the Hodges-Lehmann shift and its interval.
    shift: (f64, stats::Interval),
    /// B / A from the shift of the logs; absent unless every value is positive.
    ratio: Option<(f64, stats::Interval)>,
    p_value: f64,
    /// Cliff's delta, positive when B's values tend to be larger.
    delta: f64,
    n: (usize, usize),
}

/// What B is at a place, compared with A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Better,
    Worse,
    NoSignificantDifference,
    NotEnoughRepetitions,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Better => "B better",
            Verdict::Worse => "B worse",
            Verdict::NoSignificantDifference => "no significant difference",
            Verdict::NotEnoughRepetitions => "not enough repetitions",
        }
    }
}

impl Matched {
    fn of(place: Place, a: &[f64], b: &[f64]) -> Option<Self> {
        let shift = stats::shift_ci(a, b, CONFIDENCE)?;
        let positive = a.iter().chain(b).all(|v| *v > 0.0);
        let ratio = positive
            .then(|| {
                let logs = |v: &[f64]| v.iter().map(|x| x.ln()).collect::<Vec<_>>();
                stats::shift_ci(&logs(a), &logs(b), CONFIDENCE).map(|(estimate, interval)| {
                    (
                        estimate.exp(),
                        stats::Interval {
                            low: interval.low.exp(),
                            high: interval.high.exp(),
                            ..interval
                        },
                    )
                })
            })
            .flatten();
        let test = stats::mann_whitney_u(b, a)?;
        let n = (a.len(), b.len());
        let p_value = if n.0 + n.1 <= stats::EXACT_MAX_TOTAL {
            // As in the report: ties must not push p below what any permutation gives.
            test.p_value.max(comparison::smallest_p_value(n.0, n.1))
        } else {
            test.p_value
        };
        Some(Matched {
            median_a: stats::median(a)?,
            median_b: stats::median(b)?,
            shift,
            ratio,
            p_value,
            delta: stats::cliffs_delta(b, a)?,
            n,
            place,
        })
    }

    fn verdict(&self) -> Verdict {
        if !comparison::testable(self.n.0, self.n.1) {
            return Verdict::NotEnoughRepetitions;
        }
        if self.p_value >= SIGNIFICANCE || self.delta == 0.0 {
            return Verdict::NoSignificantDifference;
        }
        // The direction the test measured: Cliff's delta, positive when B's values are larger.
        let b_lower = self.delta < 0.0;
        if b_lower == self.place.metric.lower_is_better() {
            Verdict::Better
        } else {
            Verdict::Worse
        }
    }
}

/// An interval's text, with its coverage where it falls short of [`CONFIDENCE`].
fn interval_text(
    estimate: f64,
    interval: &stats::Interval,
    show: impl Fn(f64) -> String,
) -> String {
    let coverage = if interval.reliable {
        String::new()
    } else {
        format!(", {}", coverage_text(interval.coverage))
    };
    format!(
        "{} [{} to {}{coverage}]",
        show(estimate),
        show(interval.low),
        show(interval.high)
    )
}

/// Compares run B with run A and writes `compare.md`, `compare.html` and `compare.csv`
/// into `out` (created if needed).
pub fn write_comparison(a: &Path, b: &Path, out: &Path) -> Result<ComparisonFiles, CompareError> {
    let (data_a, data_b) = (input::load(a)?, input::load(b)?);
    let (figures_a, figures_b) = (figures(&data_a), figures(&data_b));
    let mut matched = Vec::new();
    for (place, values_a) in &figures_a {
        if let Some(values_b) = figures_b.get(place)
            && let Some(m) = Matched::of(place.clone(), values_a, values_b)
        {
            matched.push(m);
        }
    }
    let only = |mine: &BTreeMap<Place, Vec<f64>>, theirs: &BTreeMap<Place, Vec<f64>>| {
        mine.keys()
            .filter(|place| !theirs.contains_key(*place))
            .map(Place::text)
            .collect::<Vec<_>>()
    };
    let (only_a, only_b) = (only(&figures_a, &figures_b), only(&figures_b, &figures_a));
    if matched.is_empty() {
        let described = |figures: &BTreeMap<Place, Vec<f64>>| match figures.len() {
            0 => "no compared figure".to_string(),
            n => format!(
                "{n} figure(s), e.g. {}",
                figures.keys().next().map(Place::text).unwrap_or_default()
            ),
        };
        return Err(CompareError::NothingShared {
            a: a.display().to_string(),
            b: b.display().to_string(),
            only_a: described(&figures_a),
            only_b: described(&figures_b),
        });
    }
    let sections = vec![
        matched_section(&matched),
        unmatched_section(&only_a, &only_b),
        conditions_section(&data_a, &data_b),
    ];
    let title = format!(
        "Continuum comparison: {} (A) and {} (B)",
        data_a.manifest.plan.name, data_b.manifest.plan.name
    );
    let intro = format!(
        "A: {} (started {}). B: {} (started {}). Built from the files of both results folders; \
         'controller compare A B' writes it again.",
        a.display(),
        super::model::utc(data_a.manifest.started_unix_ms),
        b.display(),
        super::model::utc(data_b.manifest.started_unix_ms)
    );
    std::fs::create_dir_all(out).map_err(|source| {
        ReportError::Write(host::FolderError::Io {
            path: out.display().to_string(),
            source,
        })
    })?;
    let folder = host::Folder::open(out).map_err(ReportError::from)?;
    let files = ComparisonFiles {
        markdown: out.join("compare.md"),
        html: out.join("compare.html"),
        csv: out.join("compare.csv"),
        matched: matched.len(),
        unmatched: only_a.len() + only_b.len(),
    };
    folder
        .replace(
            "compare.md",
            markdown::render(&title, &intro, &sections, "").as_bytes(),
        )
        .map_err(ReportError::from)?;
    folder
        .replace(
            "compare.html",
            html::render(&title, &intro, &sections, "").as_bytes(),
        )
        .map_err(ReportError::from)?;
    folder
        .replace("compare.csv", csv(&matched).as_bytes())
        .map_err(ReportError::from)?;
    Ok(files)
}

fn matched_section(matched: &[Matched]) -> Section {
    let mut section = Section::new("compared", "B against A");
    section.paragraph(format!(
        "Each figure measured in both runs, one value per repetition: the medians; B - A as \
         the Hodges-Lehmann shift (the median of all differences between B's and A's \
         repetitions) and B / A as the same of their logarithms, each with its distribution-free \
         interval from the Mann-Whitney null distribution, which covers the true difference \
         with a probability of at least {CONFIDENCE} where no percentage is given (fewer \
         repetitions give the widest interval and name its coverage); the two-sided \
         Mann-Whitney p and Cliff's delta (positive: B's values larger). B is better or worse \
         where p < {SIGNIFICANCE}; with 2 or 3 repetitions on a side no difference can reach \
         that, whatever the figures: the verdict says not enough repetitions."
    ));
    let mut table = Table::new(
        &[
            "Broker",
            "Scenario",
            "Test",
            "Point",
            "Figure",
            "A median",
            "B median",
            "B - A [interval]",
            "B / A [interval]",
            "Mann-Whitney p",
            "Cliff's δ",
            "Repetitions",
            "Verdict",
        ],
        5,
    );
    for m in matched {
        let show = |v: f64| m.place.metric.show(v);
        let magnitude = Magnitude::from_delta(m.delta).map_or("?", Magnitude::label);
        table.row(vec![
            m.place.broker.clone(),
            m.place.scenario.clone(),
            m.place.test.clone(),
            m.place.point.clone(),
            m.place.metric.name().to_string(),
            show(m.median_a),
            show(m.median_b),
            interval_text(m.shift.0, &m.shift.1, show),
            m.ratio
                .as_ref()
                .map_or("-".to_string(), |(estimate, interval)| {
                    interval_text(*estimate, interval, |v| format!("{v:.3}"))
                }),
            format!("{:.3}", m.p_value),
            format!("{:.2} ({magnitude})", m.delta),
            format!("{} vs {}", m.n.0, m.n.1),
            m.verdict().text().to_string(),
        ]);
    }
    section.blocks.push(Block::Table(table));
    section
}

fn unmatched_section(only_a: &[String], only_b: &[String]) -> Section {
    let mut section = Section::new("unmatched", "Measured in one run only");
    if only_a.is_empty() && only_b.is_empty() {
        section.paragraph("Every figure of either run was measured in the other.");
        return section;
    }
    for (run, list) in [("A", only_a), ("B", only_b)] {
        if list.is_empty() {
            section.paragraph(format!("Only in {run}: none."));
        } else {
            section.paragraph(format!("Only in {run} ({}):", list.len()));
            section.blocks.push(Block::List(list.to_vec()));
        }
    }
    section
}

/// One condition of each run, in words.
type Condition = (String, String, String);

fn conditions(a: &RunData, b: &RunData) -> Vec<Condition> {
    let mut rows: Vec<Condition> = vec![(
        "controller".to_string(),
        a.manifest.controller_version.clone(),
        b.manifest.controller_version.clone(),
    )];
    rows.push((
        "repetitions".to_string(),
        a.manifest.plan.repetitions.to_string(),
        b.manifest.plan.repetitions.to_string(),
    ));
    let keyed = |data: &RunData| {
        let mut map: BTreeMap<String, String> = BTreeMap::new();
        for node in &data.manifest.nodes {
            map.insert(
                format!("node {}", node.name),
                format!(
                    "{} {} cores, {:.1} GiB, kernel {}, {}, agent {}",
                    node.arch,
                    node.cores,
                    node.memory_bytes as f64 / f64::from(1u32 << 30),
                    node.kernel,
                    node.os,
                    node.agent_version
                ),
            );
        }
        for broker in &data.manifest.brokers {
            map.insert(format!("broker {}", broker.name), broker.detail.clone());
        }
        // Tests match by name: their workloads say whether they are the same test.
        let plan = &data.manifest.plan;
        for test in 0..plan.tests.len() {
            map.insert(
                format!("test {}", super::test_label(plan, test)),
                super::workload_line(data, test).unwrap_or_else(|| "not measured".to_string()),
            );
        }
        for netem in &data.manifest.netem {
            map.insert(
                format!(
                    "netem {} / {} on {} {}",
                    netem.broker, netem.scenario, netem.node, netem.interface
                ),
                netem.read_back_text(),
            );
        }
        map
    };
    let (map_a, map_b) = (keyed(a), keyed(b));
    let names: BTreeSet<&String> = map_a.keys().chain(map_b.keys()).collect();
    for name in names {
        let text = |map: &BTreeMap<String, String>| {
            map.get(name).cloned().unwrap_or_else(|| "-".to_string())
        };
        rows.push((name.clone(), text(&map_a), text(&map_b)));
    }
    rows
}

fn conditions_section(a: &RunData, b: &RunData) -> Section {
    let mut section = Section::new("conditions", "Conditions");
    let rows = conditions(a, b);
    let differing: Vec<&str> = rows
        .iter()
        .filter(|(_, in_a, in_b)| in_a != in_b)
        .map(|(name, _, _)| name.as_str())
        .collect();
    section.paragraph(if differing.is_empty() {
        "The two runs ran under the same recorded conditions.".to_string()
    } else {
        format!(
            "Warning: the runs differ in {} ({}): a difference above may come from them as well \
             as from what was changed on purpose.",
            if differing.len() == 1 {
                "one condition".to_string()
            } else {
                format!("{} conditions", differing.len())
            },
            differing.join(", ")
        )
    });
    let mut table = Table::new(&["Condition", "A", "B", "Same"], 1);
    for (name, in_a, in_b) in &rows {
        let same = if in_a == in_b { "yes" } else { "DIFFERS" };
        table.row(vec![
            name.clone(),
            in_a.clone(),
            in_b.clone(),
            same.to_string(),
        ]);
    }
    section.blocks.push(Block::Table(table));
    section
}

/// The matched figures as CSV, numbers raw (µs for latencies, msg/s for rates).
fn csv(matched: &[Matched]) -> String {
    let mut out = String::from(
        "broker,scenario,test,point,figure,unit,median_a,median_b,shift,shift_low,shift_high,\
         shift_coverage,ratio,ratio_low,ratio_high,ratio_coverage,mann_whitney_p,cliffs_delta,\
         repetitions_a,repetitions_b,verdict\n",
    );
    let quoted = |text: &str| {
        if text.contains([',', '"', '\n']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_string()
        }
    };
    for m in matched {
        let (ratio, ratio_low, ratio_high, ratio_coverage) = match &m.ratio {
            Some((estimate, interval)) => (
                estimate.to_string(),
                interval.low.to_string(),
                interval.high.to_string(),
                interval.coverage.to_string(),
            ),
            None => Default::default(),
        };
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{ratio},{ratio_low},{ratio_high},{ratio_coverage},{},{},{},{},{}",
            quoted(&m.place.broker),
            quoted(&m.place.scenario),
            quoted(&m.place.test),
            quoted(&m.place.point),
            m.place.metric.id(),
            m.place.metric.unit(),
            m.median_a,
            m.median_b,
            m.shift.0,
            m.shift.1.low,
            m.shift.1.high,
            m.shift.1.coverage,
            m.p_value,
            m.delta,
            m.n.0,
            m.n.1,
            m.verdict().text(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(metric: Metric) -> Place {
        Place {
            broker: "mosquitto".into(),
            scenario: "local".into(),
            test: "latency".into(),
            point: "-".into(),
            metric,
        }
    }

    #[test]
    fn a_slower_b_is_worse_on_latency_and_better_on_rate_only_with_enough_repetitions() {
        let a = [400.0, 410.0, 405.0, 398.0, 402.0, 407.0, 399.0, 404.0];
        let b = [520.0, 530.0, 515.0, 525.0, 518.0, 522.0, 528.0, 519.0];
        let latency = Matched::of(place(Metric::Latency), &a, &b).expect("values");
        assert_eq!(latency.verdict(), Verdict::Worse, "{latency:?}");
        let (shift, interval) = &latency.shift;
        assert!(
            *shift > 100.0 && interval.low > 0.0 && interval.reliable,
            "{latency:?}"
        );
        let (ratio, ratio_interval) = latency.ratio.expect("positive values");
        assert!(
            ratio > 1.2 && ratio_interval.low > 1.0,
            "{ratio} {ratio_interval:?}"
        );
        assert!(latency.delta > 0.99, "B's values are all larger");
        let rate = Matched::of(place(Metric::SaturationRate), &a, &b).expect("values");
        assert_eq!(rate.verdict(), Verdict::Better, "a higher rate is better");
        let same = Matched::of(place(Metric::Latency), &a, &a).expect("values");
        assert_eq!(same.verdict(), Verdict::NoSignificantDifference);
        let two = Matched::of(place(Metric::Latency), &a[..2], &b[..2]).expect("values");
        assert_eq!(two.verdict(), Verdict::NotEnoughRepetitions);
        assert!(
            !two.shift.1.reliable,
            "two against two never reaches the usual coverage"
        );
    }

    #[test]
    fn the_csv_has_one_row_per_figure_with_the_header_s_columns() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let m = Matched::of(place(Metric::Latency), &a, &[2.0, 3.0, 4.0, 5.0]).expect("values");
        let text = csv(&[m]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{text}"
        );
        assert!(
            lines[1].starts_with("mosquitto,local,latency,-,latency,us,2.5,3.5,1,"),
            "{text}"
        );
    }
}
