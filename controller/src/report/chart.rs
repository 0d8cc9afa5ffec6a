//! A line chart with markers and vertical error bars, shared by the payload, throughput,
//! saturation and burst figures, drawn inside the common [`Frame`].

use super::axes::{self, LegendItem, Plot, Scale};
use super::frame::Frame;
use super::svg;

/// One point of a series: the value and the ends of its error bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesPoint {
    /// Position on the x axis (data units).
    pub x: f64,
    /// The value drawn.
    pub y: f64,
    /// Bottom of the error bar (equal to `y` for none).
    pub low: f64,
    /// Top of the error bar.
    pub high: f64,
}

/// A line of the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Colour.
    pub colour: &'static str,
    /// Dash pattern, empty for solid.
    pub dash: &'static str,
    /// Points, any order.
    pub points: Vec<SeriesPoint>,
}

/// A chart of series against a numeric x axis with explicit ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Heading drawn inside the figure.
    pub title: String,
    /// X axis label with unit.
    pub x_label: String,
    /// Y axis label with unit.
    pub y_label: String,
    /// X ticks: value and label (the measured points).
    pub x_ticks: Vec<(f64, String)>,
    /// Logarithmic x axis.
    pub x_log: bool,
    /// Values the y scale must cover; charts shown side by side pass the same values so
    /// they share a scale. Empty: the chart's own values.
    pub y_domain: Vec<f64>,
    /// The y axis turns logarithmic when the largest value exceeds the smallest this many
    /// times (and all are positive).
    pub y_log_ratio: f64,
    /// The lines.
    pub series: Vec<Series>,
}

impl LineChart {
    /// The chart as an SVG document of `width` x `height` px.
    pub fn render(&self, width: f64, height: f64) -> String {
        let items: Vec<LegendItem> = self
            .series
            .iter()
            .map(|s| LegendItem {
                label: s.label.clone(),
                colour: s.colour,
                dash: s.dash,
                line: true,
                marker: Some(svg::marker_for(s.colour)),
            })
            .collect();
        let mut frame = Frame::new(width, height, &self.title, &items);
        let plot = frame.plot();
        let doc = &mut frame.doc;
        let own: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|p| [p.y, p.low, p.high]))
            .collect();
        let domain = if self.y_domain.is_empty() {
            &own
        } else {
            &self.y_domain
        };
        let y = Scale::auto(domain, self.y_log_ratio, plot.bottom, plot.top);
        let label = if y.log {
            format!("{} (log scale)", self.y_label)
        } else {
            self.y_label.clone()
        };
        axes::y_axis(doc, &plot, &y, &label);
        let x = self.x_scale(&plot);
        let ticks: Vec<(f64, String)> = self
            .x_ticks
            .iter()
            .map(|(v, text)| (x(*v), text.clone()))
            .collect();
        let x_label = if self.x_log {
            format!("{} (log scale)", self.x_label)
        } else {
            self.x_label.clone()
        };
        axes::x_axis(doc, &plot, &ticks, &x_label);
        let count = self.series.len() as f64;
        for (i, series) in self.series.iter().enumerate() {
            // Shift each series a little sideways so equal error bars do not hide each other.
            let dodge = (i as f64 - (count - 1.0) / 2.0) * 3.0;
            let mut points: Vec<SeriesPoint> = series
                .points
                .iter()
                .copied()
                .filter(|p| p.y.is_finite() && (!y.log || p.y > 0.0))
                .collect();
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            let line: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (x(p.x) + dodge, y.map(p.y)))
                .collect();
            if line.len() > 1 {
                doc.polyline(&line, series.colour, 2.0, series.dash);
            }
            for (point, (px, py)) in points.iter().zip(&line) {
                let (top, bottom) = (y.map(point.high), y.map(point.low));
                if bottom - top > 1.0 {
                    doc.line((*px, top), (*px, bottom), series.colour, 1.2, "");
                    doc.line((px - 4.0, top), (px + 4.0, top), series.colour, 1.2, "");
                    doc.line(
                        (px - 4.0, bottom),
                        (px + 4.0, bottom),
                        series.colour,
                        1.2,
                        "",
                    );
                }
                doc.marker(
                    svg::marker_for(series.colour),
                    (*px, *py),
                    3.2,
                    series.colour,
                );
            }
        }
        frame.finish()
    }

    /// Pixel of an x value: the ticks span the plot with a margin on both sides.
    fn x_scale(&self, plot: &Plot) -> impl Fn(f64) -> f64 + use<> {
        let log = self.x_log;
        let t = move |v: f64| {
            if log {
                v.max(f64::MIN_POSITIVE).log10()
            } else {
                v
            }
        };
        let values: Vec<f64> = self.x_ticks.iter().map(|(v, _)| t(*v)).collect();
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (left, right) = (plot.left + 30.0, plot.right - 30.0);
        move |v: f64| {
            let span = high - low;
            if span.is_finite() && span > 0.0 {
                left + (t(v) - low) / span * (right - left)
            } else {
                (left + right) / 2.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::svg;

    fn chart() -> LineChart {
        LineChart {
            title: "Median <latency>".into(),
            x_label: "payload".into(),
            y_label: "latency (ms)".into(),
            x_ticks: vec![
                (1e3, "1KB".into()),
                (1e4, "10KB".into()),
                (1e6, "1MB".into()),
            ],
            x_log: true,
            y_domain: Vec::new(),
            y_log_ratio: 30.0,
            series: vec![Series {
                label: "a & b".into(),
                colour: svg::colour(0),
                dash: "",
                points: vec![
                    SeriesPoint {
                        x: 1e6,
                        y: 266.0,
                        low: 260.0,
                        high: 279.0,
                    },
                    SeriesPoint {
                        x: 1e3,
                        y: 3.9,
                        low: 3.9,
                        high: 3.9,
                    },
                ],
            }],
        }
    }

    #[test]
    fn a_chart_has_its_labels_legend_and_a_log_axis_when_values_spread() {
        let svg = chart().render(480.0, 320.0);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("viewBox=\"0 0 480 320\""));
        assert!(svg.contains("Median &lt;latency&gt;"));
        assert!(svg.contains("a &amp; b"));
        assert!(svg.contains("latency (ms) (log scale)"));
        assert!(svg.contains("payload (log scale)"));
        // The two points and the legend's swatch: the first series' marker is a disc.
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg, chart().render(480.0, 320.0), "deterministic");
    }

    #[test]
    fn twelve_series_get_twelve_colours_and_twelve_marker_shapes() {
        let mut chart = chart();
        chart.series = (0..12)
            .map(|i| Series {
                label: format!("broker {i}"),
                colour: svg::colour(i),
                ..chart.series[0].clone()
            })
            .collect();
        let text = chart.render(960.0, 480.0);
        let colours: std::collections::BTreeSet<_> = svg::PALETTE.iter().collect();
        let markers: Vec<String> = svg::MARKERS.iter().map(|m| format!("{m:?}")).collect();
        let distinct: std::collections::BTreeSet<_> = markers.iter().collect();
        assert_eq!((colours.len(), distinct.len()), (12, 12));
        // Each series: two points and its legend swatch; one shape a disc, eleven polygons.
        assert_eq!(text.matches("<circle").count(), 3);
        assert_eq!(text.matches("<polygon").count(), 11 * 3);
        for colour in svg::PALETTE {
            assert!(text.contains(&format!("fill=\"{colour}\"")), "{colour}");
        }
    }
}
