//! One timed cell over time: publish and receive rate in 100 ms steps with the measured
//! window shaded (warm-up before it, drain after it), and below it the backlog of deliveries
//! owed, so a reader sees warm-up, steady state and drain.
//!
//! [`CellSeries`] turns a result's 10 ms rate buckets into those steps; [`figure`] draws them
//! in a [`Frame`] holding two plots, rates above and backlog below.

use loadgen::RunResult;

use super::axes::{self, LegendItem, Plot, Scale, tick_label};
use super::frame::Frame;
use super::model::Figure;
use super::svg;

/// A timed cell's publish and receive rates over time, in 100 ms steps.
#[derive(Debug, Clone, PartialEq)]
pub struct CellSeries {
    /// Step width, s.
    pub step_s: f64,
    /// Time of each step since the start barrier, s.
    pub at_s: Vec<f64>,
    /// Publishes per second in each step.
    pub publish: Vec<f64>,
    /// Deliveries per second in each step.
    pub receive: Vec<f64>,
    /// Deliveries owed at the end of each step.
    pub backlog: Vec<f64>,
    /// The measured window, s since the start barrier.
    pub window_s: (f64, f64),
}

impl CellSeries {
    /// The series of a timed result; `None` for counted runs.
    pub fn of(result: &RunResult) -> Option<Self> {
        let window = result.measured_window?;
        let spec = &result.spec;
        // Deliveries owed per publish, on average over the publishers.
        let fanout = loadgen::spec::Routing::of(spec).ok()?.owed_per_round() as f64
            / f64::from(spec.publishers.max(1));
        const PER_STEP: usize = 10; // 10 buckets of 10 ms
        let bucket_s = loadgen::series::BUCKET_NS as f64 / 1e9;
        let start = usize::try_from(window.start_ns / loadgen::series::BUCKET_NS).ok()?;
        let len = result
            .publish_series
            .counts
            .len()
            .max(result.receive_series.counts.len());
        let (mut at_s, mut publish, mut receive, mut backlog) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut published, mut received) = (0.0, 0.0);
        let count = |series: &loadgen::series::RateSeries, i: usize| {
            series.counts.get(i).copied().unwrap_or(0) as f64
        };
        for (k, i) in (0..len).enumerate() {
            published += count(&result.publish_series, i);
            received += count(&result.receive_series, i);
            if i < start || (k + 1) % PER_STEP != 0 {
                continue;
            }
            let steps = (i + 1 - PER_STEP)..=i;
            let sum = |series: &loadgen::series::RateSeries| {
                steps.clone().map(|j| count(series, j)).sum::<f64>()
            };
            at_s.push((i + 1 - start) as f64 * bucket_s);
            publish.push(sum(&result.publish_series) / (PER_STEP as f64 * bucket_s));
            receive.push(sum(&result.receive_series) / (PER_STEP as f64 * bucket_s));
            backlog.push((published * fanout - received).max(0.0));
        }
        let to_s = |ns: u64| ns.saturating_sub(window.start_ns) as f64 / 1e9;
        Some(CellSeries {
            step_s: PER_STEP as f64 * bucket_s,
            at_s,
            publish,
            receive,
            backlog,
            window_s: (to_s(window.from_ns), to_s(window.until_ns)),
        })
    }
}

const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 380.0;

/// The figure of `series` titled `title`, written as `file`.
pub fn figure(title: &str, series: &CellSeries, file: String, caption_cell: &str) -> Figure {
    Figure {
        file,
        svg: render(title, series),
        caption: format!(
            "{caption_cell}: publish (dashed) and receive (solid) rate in msg/s per 100 ms step \
             against seconds since the start, all clients together; shaded: the measured \
             window, before it the warm-up, after it the drain. Below: deliveries owed \
             (published times subscribers, minus received) at the end of each step: it stays \
             flat when the broker keeps up and climbs when it falls behind."
        ),
    }
}

fn render(title: &str, series: &CellSeries) -> String {
    let (publish_colour, receive_colour, backlog_colour) =
        (svg::colour(0), svg::colour(1), svg::colour(2));
    let items = [
        LegendItem {
            label: "publish".into(),
            colour: publish_colour,
            dash: "6 3",
            line: true,
            marker: None,
        },
        LegendItem {
            label: "receive".into(),
            colour: receive_colour,
            dash: "",
            line: true,
            marker: None,
        },
        LegendItem {
            label: "backlog (deliveries owed)".into(),
            colour: backlog_colour,
            dash: "",
            line: true,
            marker: None,
        },
    ];
    let mut frame = Frame::new(WIDTH, HEIGHT, title, &items);
    // Two plots: the rates, and under them the backlog.
    let whole = frame.plot();
    let rates = Plot {
        bottom: 230.0 + frame.shift,
        ..whole
    };
    let backlog = Plot {
        top: 262.0 + frame.shift,
        bottom: frame.height - 48.0,
        ..whole
    };
    let doc = &mut frame.doc;
    let last = series
        .at_s
        .last()
        .copied()
        .unwrap_or(1.0)
        .max(series.step_s);
    let x = |s: f64| rates.left + s / last * (rates.right - rates.left);
    let top_rate = series
        .publish
        .iter()
        .chain(&series.receive)
        .copied()
        .fold(0.0, f64::max)
        .max(1.0);
    let y = Scale::linear(top_rate, rates.bottom, rates.top);
    let (from, until) = series.window_s;
    for plot in [&rates, &backlog] {
        doc.rect(
            (x(from), plot.top),
            ((x(until) - x(from)).max(0.0), plot.bottom - plot.top),
            "#eef2f7",
            "",
        );
    }
    axes::y_axis(doc, &rates, &y, "rate (msg/s)");
    let ticks: Vec<(f64, String)> = time_ticks(last)
        .into_iter()
        .map(|s| (x(s), tick_label(s)))
        .collect();
    axes::x_axis(doc, &rates, &ticks, "");
    let line = |values: &[f64], scale: &Scale| -> Vec<(f64, f64)> {
        series
            .at_s
            .iter()
            .zip(values)
            .map(|(t, v)| (x(*t), scale.map(*v)))
            .collect()
    };
    doc.polyline(&line(&series.publish, &y), publish_colour, 1.6, "6 3");
    doc.polyline(&line(&series.receive, &y), receive_colour, 1.6, "");
    let top_backlog = series.backlog.iter().copied().fold(0.0, f64::max).max(1.0);
    let b = Scale::linear(top_backlog, backlog.bottom, backlog.top);
    axes::y_axis(doc, &backlog, &b, "owed");
    axes::x_axis(doc, &backlog, &ticks, "seconds since the start");
    doc.polyline(&line(&series.backlog, &b), backlog_colour, 1.6, "");
    frame.finish()
}

/// Round tick positions over `0..=last` seconds.
fn time_ticks(last: f64) -> Vec<f64> {
    let step = [0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0]
        .into_iter()
        .find(|step| last / step <= 8.0)
        .unwrap_or(1200.0);
    (0..=((last / step).floor() as usize))
        .map(|i| i as f64 * step)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_is_well_formed_and_shades_the_window() {
        let series = CellSeries {
            step_s: 0.1,
            at_s: (1..=40).map(|i| f64::from(i) * 0.1).collect(),
            publish: vec![1000.0; 40],
            receive: (0..40)
                .map(|i| if i < 2 { 500.0 } else { 1000.0 })
                .collect(),
            backlog: vec![3.0; 40],
            window_s: (1.0, 3.5),
        };
        let figure = figure(
            "mosquitto, local, 100 pairs",
            &series,
            "t.svg".into(),
            "cell",
        );
        roxmltree::Document::parse(&figure.svg).expect("well-formed");
        assert!(figure.svg.contains("#eef2f7"), "the window is shaded");
        assert_eq!(
            time_ticks(4.0),
            vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
        );
    }
}
