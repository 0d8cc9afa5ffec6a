//! Scales with round ticks, axes and legends, drawn with [`Svg`].

use super::svg::{Anchor, Marker, Svg, text_width};

/// A tick label: `0.25`, `12.5`, `400`, `80k`, `1.5M`.
pub fn tick_label(v: f64) -> String {
    let trim = |text: String| {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    };
    let abs = v.abs();
    if abs >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if abs >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if abs >= 100.0 {
        format!("{v:.0}")
    } else if abs >= 10.0 {
        trim(format!("{v:.1}"))
    } else if abs >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

/// The plot area, px.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plot {
    /// Left edge.
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Right edge.
    pub right: f64,
    /// Bottom edge.
    pub bottom: f64,
}

/// Maps values to pixels, linearly from zero or logarithmically.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Value at `from`.
    pub min: f64,
    /// Value at `to`.
    pub max: f64,
    /// Logarithmic.
    pub log: bool,
    /// Pixel of `min`.
    pub from: f64,
    /// Pixel of `max`.
    pub to: f64,
}

fn nice_step(rough: f64) -> f64 {
    let power = 10f64.powf(rough.log10().floor());
    let fraction = rough / power;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|n| fraction <= *n)
        .unwrap_or(10.0);
    nice * power
}

impl Scale {
    /// Linear from 0 to a round number at or above `max_value`.
    pub fn linear(max_value: f64, from: f64, to: f64) -> Self {
        let max_value = if max_value.is_finite() && max_value > 0.0 {
            max_value
        } else {
            1.0
        };
        let step = nice_step(max_value / 5.0);
        Scale {
            min: 0.0,
            max: (max_value / step).ceil() * step,
            log: false,
            from,
            to,
        }
    }

    /// Logarithmic over whole decades around the values.
    pub fn log(min_value: f64, max_value: f64, from: f64, to: f64) -> Self {
        let low = min_value.max(f64::MIN_POSITIVE).log10().floor();
        let high = max_value.max(min_value).log10().ceil().max(low + 1.0);
        Scale {
            min: 10f64.powf(low),
            max: 10f64.powf(high),
            log: true,
            from,
            to,
        }
    }

    /// Log when every value is positive and they span more than `ratio` times, else linear
    /// from 0.
    pub fn auto(values: &[f64], ratio: f64, from: f64, to: f64) -> Self {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let max = finite.iter().copied().fold(0.0, f64::max);
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        if min > 0.0 && max / min > ratio {
            Scale::log(min, max, from, to)
        } else {
            Scale::linear(max, from, to)
        }
    }

    /// Pixel of `value`, clamped to the scale.
    pub fn map(&self, value: f64) -> f64 {
        let share = if self.log {
            let v = value.max(self.min).min(self.max);
            (v.log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (value.clamp(self.min, self.max) - self.min) / (self.max - self.min)
        };
        self.from + share * (self.to - self.from)
    }

    /// Round values to label: about five steps (linear), or 1-2-5 per decade (log).
    pub fn ticks(&self) -> Vec<f64> {
        if self.log {
            let decades = (self.max.log10() - self.min.log10()).round() as i32;
            let start = self.min.log10().round() as i32;
            let steps: &[f64] = if decades <= 2 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut ticks = Vec::new();
            for decade in start..=start + decades {
                for step in steps {
                    let v = step * 10f64.powi(decade);
                    if v <= self.max * 1.000_001 {
                        ticks.push(v);
                    }
                }
            }
            ticks
        } else {
            let step = nice_step(self.max / 5.0);
            let count = (self.max / step).round() as usize;
            (0..=count).map(|i| i as f64 * step).collect()
        }
    }
}

/// Grid lines, tick labels and a rotated label for a vertical value axis.
pub fn y_axis(svg: &mut Svg, plot: &Plot, scale: &Scale, label: &str) {
    for tick in scale.ticks() {
        let y = scale.map(tick);
        svg.line((plot.left, y), (plot.right, y), "#e3e3e3", 1.0, "");
        svg.text(
            (plot.left - 6.0, y + 4.0),
            &tick_label(tick),
            11.0,
            Anchor::End,
            false,
        );
    }
    let middle = (plot.top + plot.bottom) / 2.0;
    svg.text_rotated((16.0, middle), label, 12.0, Anchor::Middle, false, true);
}

/// Tick marks and labels under the plot, the axis label below them, and the axis lines.
pub fn x_axis(svg: &mut Svg, plot: &Plot, ticks: &[(f64, String)], label: &str) {
    for (x, text) in ticks {
        svg.line(
            (*x, plot.bottom),
            (*x, plot.bottom + 5.0),
            "#444444",
            1.0,
            "",
        );
        svg.text((*x, plot.bottom + 18.0), text, 11.0, Anchor::Middle, false);
    }
    svg.text(
        ((plot.left + plot.right) / 2.0, plot.bottom + 38.0),
        label,
        12.0,
        Anchor::Middle,
        false,
    );
    svg.line(
        (plot.left, plot.top),
        (plot.left, plot.bottom),
        "#444444",
        1.0,
        "",
    );
    svg.line(
        (plot.left, plot.bottom),
        (plot.right, plot.bottom),
        "#444444",
        1.0,
        "",
    );
}

/// One legend entry: a filled box or a line in the series' colour and dash.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendItem {
    /// Text.
    pub label: String,
    /// Colour.
    pub colour: &'static str,
    /// Dash pattern (lines only).
    pub dash: &'static str,
    /// A line swatch rather than a box.
    pub line: bool,
    /// The marker drawn on a line swatch, as the chart draws it on the series' points.
    pub marker: Option<Marker>,
}

const LEGEND_ROW: f64 = 17.0;

fn legend_rows(items: &[LegendItem], width: f64) -> Vec<Vec<(f64, &LegendItem)>> {
    let mut rows: Vec<Vec<(f64, &LegendItem)>> = vec![Vec::new()];
    let mut x = 0.0;
    for item in items {
        let w = 30.0 + text_width(&item.label, 11.0) + 14.0;
        if x > 0.0 && x + w > width {
            rows.push(Vec::new());
            x = 0.0;
        }
        if let Some(row) = rows.last_mut() {
            row.push((x, item));
        }
        x += w;
    }
    rows
}

/// Height the legend takes when laid out in `width`.
pub fn legend_height(items: &[LegendItem], width: f64) -> f64 {
    if items.is_empty() {
        0.0
    } else {
        legend_rows(items, width).len() as f64 * LEGEND_ROW
    }
}

/// Draws the legend with its top-left corner at `at`, wrapping within `width`.
pub fn legend(svg: &mut Svg, items: &[LegendItem], at: (f64, f64), width: f64) {
    for (r, row) in legend_rows(items, width).iter().enumerate() {
        let y = at.1 + r as f64 * LEGEND_ROW + 11.0;
        for (dx, item) in row {
            let x = at.0 + dx;
            if item.line {
                svg.line(
                    (x, y - 4.0),
                    (x + 24.0, y - 4.0),
                    item.colour,
                    2.2,
                    item.dash,
                );
                if let Some(marker) = item.marker {
                    // On the line, so a reader matches shapes as well as hues.
                    svg.marker(marker, (x + 12.0, y - 4.0), 3.2, item.colour);
                }
            } else {
                svg.rect((x + 6.0, y - 10.0), (12.0, 12.0), item.colour, "");
            }
            svg.text((x + 30.0, y), &item.label, 11.0, Anchor::Start, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::svg::colour;

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(80_000.0), "80k");
        assert_eq!(tick_label(1_500_000.0), "1.5M");
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(2.5), "2.5");
    }

    #[test]
    fn scales_round_out_and_pick_log_for_wide_ranges() {
        let linear = Scale::linear(17.3, 300.0, 0.0);
        assert_eq!((linear.min, linear.max, linear.log), (0.0, 20.0, false));
        assert_eq!(linear.ticks(), vec![0.0, 5.0, 10.0, 15.0, 20.0]);
        assert_eq!(linear.map(10.0), 150.0);
        let log = Scale::auto(&[120.0, 15_000.0], 30.0, 300.0, 0.0);
        assert!(log.log);
        assert_eq!((log.min, log.max), (100.0, 100_000.0));
        assert_eq!(log.ticks(), vec![100.0, 1_000.0, 10_000.0, 100_000.0]);
        assert!(!Scale::auto(&[0.0, 15_000.0], 30.0, 300.0, 0.0).log);
        let narrow = Scale::log(3.0, 40.0, 100.0, 0.0);
        assert_eq!(narrow.ticks(), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
    }

    #[test]
    fn legends_wrap_to_the_width() {
        let item = |label: &str| LegendItem {
            label: label.to_string(),
            colour: colour(0),
            dash: "",
            line: true,
            marker: None,
        };
        let items: Vec<LegendItem> = (0..6).map(|i| item(&format!("broker {i}"))).collect();
        assert_eq!(legend_height(&items, 2_000.0), LEGEND_ROW);
        assert!(legend_height(&items, 200.0) > 2.0 * LEGEND_ROW);
        assert_eq!(legend_height(&[], 200.0), 0.0);
    }
}
