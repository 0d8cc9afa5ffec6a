//! One timed cell over time: publish and receive rate in 100 ms steps with the measured
//! window shaded (warm-up before it, drain after it), and below it the backlog of deliveries
//! owed, so a reader sees warm-up, steady state and drain.

use super::axes::{self, LegendItem, Plot, Scale, tick_label};
use super::input::CellSeries;
use super::model::Figure;
use super::svg::{self, Anchor, Svg};

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
    let mut doc = Svg::new(WIDTH, HEIGHT, title);
    doc.text((WIDTH / 2.0, 18.0), title, 13.0, Anchor::Middle, true);
    let (publish_colour, receive_colour, backlog_colour) =
        (svg::colour(0), svg::colour(1), svg::colour(2));
    let items = [
        LegendItem {
            label: "publish".into(),
            colour: publish_colour,
            dash: "6 3",
            line: true,
        },
        LegendItem {
            label: "receive".into(),
            colour: receive_colour,
            dash: "",
            line: true,
        },
        LegendItem {
            label: "backlog (deliveries owed)".into(),
            colour: backlog_colour,
            dash: "",
            line: true,
        },
    ];
    axes::legend(&mut doc, &items, (64.0, 26.0), WIDTH - 80.0);
    let rates = Plot {
        left: 64.0,
        top: 52.0,
        right: WIDTH - 18.0,
        bottom: 230.0,
    };
    let backlog = Plot {
        left: 64.0,
        top: 262.0,
        right: WIDTH - 18.0,
        bottom: HEIGHT - 48.0,
    };
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
    axes::y_axis(&mut doc, &rates, &y, "rate (msg/s)");
    let ticks: Vec<(f64, String)> = time_ticks(last)
        .into_iter()
        .map(|s| (x(s), tick_label(s)))
        .collect();
    axes::x_axis(&mut doc, &rates, &ticks, "");
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
    axes::y_axis(&mut doc, &backlog, &b, "owed");
    axes::x_axis(&mut doc, &backlog, &ticks, "seconds since the start");
    doc.polyline(&line(&series.backlog, &b), backlog_colour, 1.6, "");
    doc.finish()
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
