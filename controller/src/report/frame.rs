//! The frame every chart shares: a white canvas, its title fitted to the width (wrapped to a
//! second line, cut with an ellipsis past that), the legend under it, and the plot area
//! left for the marks.

use super::axes::{self, LegendItem, Plot};
use super::svg::{Anchor, Svg, bold_text_width};

/// Title font size, px.
pub const TITLE_SIZE: f64 = 13.0;
/// Baseline of the title's first line.
const TITLE_BASELINE: f64 = 18.0;
/// Distance between the title's lines.
const TITLE_LINE: f64 = 16.0;
/// Room kept free on each side of the title.
const TITLE_MARGIN: f64 = 10.0;
/// Lines a title may take before it is cut.
const TITLE_LINES: usize = 2;
/// Left edge of the legend and the plot (room for the y axis).
const LEFT: f64 = 64.0;

/// A chart's canvas with its title and legend drawn.
#[derive(Debug)]
pub struct Frame {
    /// The document being drawn.
    pub doc: Svg,
    /// Canvas width.
    pub width: f64,
    /// Canvas height: the height asked, plus a wrapped title's second line.
    pub height: f64,
    /// How far a wrapped title pushed everything below it down.
    pub shift: f64,
    /// Where the content starts, below the title and the legend.
    pub top: f64,
}

impl Frame {
    /// A canvas of `width` x `height` (taller by a line when the title wraps) titled `title`,
    /// with `legend` laid out under the title.
    pub fn new(width: f64, height: f64, title: &str, legend: &[LegendItem]) -> Frame {
        let lines = title_lines(title, width - 2.0 * TITLE_MARGIN);
        let shift = (lines.len().max(1) - 1) as f64 * TITLE_LINE;
        let mut doc = Svg::new(width, height + shift, title);
        for (i, line) in lines.iter().enumerate() {
            let y = TITLE_BASELINE + i as f64 * TITLE_LINE;
            doc.text((width / 2.0, y), line, TITLE_SIZE, Anchor::Middle, true);
        }
        let legend_width = width - 80.0;
        axes::legend(&mut doc, legend, (LEFT, 26.0 + shift), legend_width);
        Frame {
            doc,
            width,
            height: height + shift,
            shift,
            top: 34.0 + shift + axes::legend_height(legend, legend_width),
        }
    }

    /// The plot area of a chart with one plot: below the legend, room for the y axis on the
    /// left and for the x axis with its label at the bottom.
    pub fn plot(&self) -> Plot {
        Plot {
            left: LEFT,
            top: self.top,
            right: self.width - 18.0,
            bottom: self.height - 50.0,
        }
    }

    /// The finished document.
    pub fn finish(self) -> String {
        self.doc.finish()
    }
}

/// `title` in lines of at most `width` px: words wrapped, at most [`TITLE_LINES`], the last
/// cut with an ellipsis when the rest does not fit.
pub fn title_lines(title: &str, width: f64) -> Vec<String> {
    let fits = |text: &str| bold_text_width(text, TITLE_SIZE) <= width;
    let mut lines: Vec<String> = Vec::new();
    let mut words = title.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let mut line = word.to_string();
        while let Some(next) = words.peek() {
            let longer = format!("{line} {next}");
            if !fits(&longer) {
                break;
            }
            line = longer;
            words.next();
        }
        if lines.len() + 1 == TITLE_LINES {
            // The last line takes the rest, cut to fit.
            let rest: Vec<&str> = words.by_ref().collect();
            if !rest.is_empty() {
                line = format!("{line} {}", rest.join(" "));
            }
        }
        lines.push(cut_to_fit(&line, &fits));
    }
    lines
}

/// `line`, or as much of it as fits with `…` after it.
fn cut_to_fit(line: &str, fits: &dyn Fn(&str) -> bool) -> String {
    if fits(line) {
        return line.to_string();
    }
    let mut kept: Vec<char> = line.chars().collect();
    while !kept.is_empty() {
        kept.pop();
        let text = format!("{}…", kept.iter().collect::<String>().trim_end());
        if fits(&text) {
            return text;
        }
    }
    "…".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_title_keeps_one_line_and_the_layout() {
        let frame = Frame::new(480.0, 340.0, "Broker CPU per test", &[]);
        assert_eq!((frame.shift, frame.height, frame.top), (0.0, 340.0, 34.0));
        let svg = frame.finish();
        assert_eq!(svg.matches("font-weight=\"bold\"").count(), 1);
        assert!(svg.contains("viewBox=\"0 0 480 340\""));
    }

    #[test]
    fn a_long_title_wraps_then_is_cut() {
        let width = 300.0;
        let title = "Receive rate over time: mosquitto, edge-over-a-congested-satellite-link, \
                     100 pairs, second repetition of the study's burst";
        let lines = title_lines(title, width);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].ends_with('…'), "{lines:?}");
        for line in &lines {
            assert!(bold_text_width(line, TITLE_SIZE) <= width, "{line}");
        }
        assert_eq!(title_lines("two words", width), ["two words"]);
        let unbroken = "x".repeat(200);
        let cut = title_lines(&unbroken, width);
        assert!(cut.len() == 1 && cut[0].ends_with('…'), "{cut:?}");
        let frame = Frame::new(width, 200.0, title, &[]);
        assert_eq!(
            (frame.shift, frame.height),
            (TITLE_LINE, 200.0 + TITLE_LINE)
        );
        let svg = frame.finish();
        assert!(svg.contains(&format!("<title>{title}</title>").replace('\'', "&#39;")));
    }
}
