//! Hand-written SVG: colours, escaping and a small drawing builder.
//!
//! Coordinates are printed with one decimal and numbers are formatted by hand, so the same
//! figures always give the same bytes.

use std::fmt::Write as _;

/// Series colours: the Okabe-Ito palette (readable with colour-vision deficiencies), minus
/// its yellow, which is too pale on white, then Paul Tol's wine, green, indigo, olive and
/// rose for eight to twelve series (every product and the embedded broker). Some pairs are
/// close for some readers, so each colour also has its own marker shape ([`MARKERS`]): two
/// series differ in shape wherever they could be confused in hue.
pub const PALETTE: [&str; 12] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255",
    "#117733", "#332288", "#999933", "#CC6677",
];

/// A point marker's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// A disc.
    Circle,
    /// A square.
    Square,
    /// A triangle pointing up.
    TriangleUp,
    /// A diamond.
    Diamond,
    /// A triangle pointing down.
    TriangleDown,
    /// A plus sign.
    Plus,
    /// A triangle pointing right.
    TriangleRight,
    /// A five-pointed star.
    Star,
    /// A diagonal cross.
    Cross,
    /// A triangle pointing left.
    TriangleLeft,
    /// Two triangles tip to tip, one above the other.
    Hourglass,
    /// Two triangles tip to tip, side by side.
    Bowtie,
}

/// The marker of each [`PALETTE`] colour, by index.
pub const MARKERS: [Marker; 12] = [
    Marker::Circle,
    Marker::Square,
    Marker::TriangleUp,
    Marker::Diamond,
    Marker::TriangleDown,
    Marker::Plus,
    Marker::TriangleRight,
    Marker::Star,
    Marker::Cross,
    Marker::TriangleLeft,
    Marker::Hourglass,
    Marker::Bowtie,
];

/// The marker that goes with `colour` (a disc for a colour not in the palette).
pub fn marker_for(colour: &str) -> Marker {
    PALETTE
        .iter()
        .position(|known| *known == colour)
        .map_or(Marker::Circle, |i| MARKERS[i])
}

/// Line dash patterns, to tell scenarios apart where colour tells brokers apart.
pub const DASHES: [&str; 4] = ["", "7 4", "2 3", "10 3 2 3"];

/// Colour of item `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Dash pattern of item `i`.
pub fn dash(i: usize) -> &'static str {
    DASHES[i % DASHES.len()]
}

/// Text made safe for XML and HTML: markup characters escaped, control characters (not
/// allowed in XML 1.0) replaced by spaces.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate: one decimal, no trailing `.0`, never `-0`.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".to_string();
    }
    let text = format!("{:.1}", v);
    let text = text.strip_suffix(".0").unwrap_or(&text);
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// Rough width of `text` at `size` px in a sans-serif font, for layout.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.56
}

/// Rough width of bold `text` at `size` px, for fitting titles: bold glyphs run wider, and
/// erring wide keeps a title inside its figure.
pub fn bold_text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.62
}

/// How text sits on its anchor point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// Left edge at x.
    Start,
    /// Centred on x.
    Middle,
    /// Right edge at x.
    End,
}

/// An SVG document being drawn.
#[derive(Debug)]
pub struct Svg {
    width: f64,
    height: f64,
    title: String,
    body: String,
}

impl Svg {
    /// A blank white canvas; `title` becomes the accessible `<title>`.
    pub fn new(width: f64, height: f64, title: &str) -> Self {
        Svg {
            width,
            height,
            title: title.to_string(),
            body: String::new(),
        }
    }

    /// A straight line; `dash` empty for solid.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64, dash: &str) {
        let _ = write!(
            self.body,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{stroke}\" stroke-width=\"{}\"",
            num(from.0),
            num(from.1),
            num(to.0),
            num(to.1),
            num(width)
        );
        if !dash.is_empty() {
            let _ = write!(self.body, " stroke-dasharray=\"{dash}\"");
        }
        self.body.push_str("/>\n");
    }

    /// A rectangle; `stroke` empty for none.
    pub fn rect(&mut self, at: (f64, f64), size: (f64, f64), fill: &str, stroke: &str) {
        let _ = write!(
            self.body,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"",
            num(at.0),
            num(at.1),
            num(size.0.max(0.0)),
            num(size.1.max(0.0))
        );
        if !stroke.is_empty() {
            let _ = write!(self.body, " stroke=\"{stroke}\" stroke-width=\"1.2\"");
        }
        self.body.push_str("/>\n");
    }

    /// A dot.
    pub fn circle(&mut self, centre: (f64, f64), radius: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{fill}\"/>",
            num(centre.0),
            num(centre.1),
            num(radius)
        );
    }

    /// A point marker of `shape`, about `2 * radius` across, centred on `centre`.
    pub fn marker(&mut self, shape: Marker, centre: (f64, f64), radius: f64, fill: &str) {
        let (x, y) = centre;
        let polygon = |points: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
            points
                .into_iter()
                .map(|(dx, dy)| (x + dx * radius, y + dy * radius))
                .collect()
        };
        // Corners of a regular polygon of `n` corners, the first straight up, at `scale`.
        let regular = |n: usize, scale: f64, turn: f64| -> Vec<(f64, f64)> {
            (0..n)
                .map(|k| {
                    let angle = turn + k as f64 * std::f64::consts::TAU / n as f64;
                    (scale * angle.sin(), -scale * angle.cos())
                })
                .collect()
        };
        let plus = |turn: f64| -> Vec<(f64, f64)> {
            let (w, l) = (0.5, 1.35);
            let arm = [
                (-w, -l),
                (w, -l),
                (w, -w),
                (l, -w),
                (l, w),
                (w, w),
                (w, l),
                (-w, l),
                (-w, w),
                (-l, w),
                (-l, -w),
                (-w, -w),
            ];
            let (sin, cos) = turn.sin_cos();
            arm.iter()
                .map(|(px, py)| (px * cos - py * sin, px * sin + py * cos))
                .collect()
        };
        let points = match shape {
            Marker::Circle => {
                self.circle(centre, radius, fill);
                return;
            }
            Marker::Square => polygon(regular(4, 1.2, std::f64::consts::FRAC_PI_4)),
            Marker::TriangleUp => polygon(regular(3, 1.35, 0.0)),
            Marker::Diamond => polygon(regular(4, 1.3, 0.0)),
            Marker::TriangleDown => polygon(regular(3, 1.35, std::f64::consts::PI)),
            Marker::Plus => polygon(plus(0.0)),
            Marker::TriangleRight => polygon(regular(3, 1.35, std::f64::consts::FRAC_PI_2)),
            Marker::Star => {
                let outer = regular(5, 1.45, 0.0);
                let inner = regular(5, 0.6, std::f64::consts::PI / 5.0);
                let star = outer
                    .into_iter()
                    .zip(inner)
                    .flat_map(|(o, i)| [o, i])
                    .collect();
                polygon(star)
            }
            Marker::Cross => polygon(plus(std::f64::consts::FRAC_PI_4)),
            Marker::TriangleLeft => polygon(regular(3, 1.35, -std::f64::consts::FRAC_PI_2)),
            Marker::Hourglass => polygon(vec![
                (-1.2, -1.3),
                (1.2, -1.3),
                (0.25, 0.0),
                (1.2, 1.3),
                (-1.2, 1.3),
                (-0.25, 0.0),
            ]),
            Marker::Bowtie => polygon(vec![
                (-1.3, -1.2),
                (0.0, -0.25),
                (1.3, -1.2),
                (1.3, 1.2),
                (0.0, 0.25),
                (-1.3, 1.2),
            ]),
        };
        let list: Vec<String> = points
            .iter()
            .map(|(px, py)| format!("{},{}", num(*px), num(*py)))
            .collect();
        let _ = writeln!(
            self.body,
            // A thin white edge keeps a shape apart from its own line (a plus on a line).
            "<polygon points=\"{}\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"0.6\"/>",
            list.join(" ")
        );
    }

    /// A line through points.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, dash: &str) {
        let list: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
            .collect();
        let _ = write!(
            self.body,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"{}\"",
            list.join(" "),
            num(width)
        );
        if !dash.is_empty() {
            let _ = write!(self.body, " stroke-dasharray=\"{dash}\"");
        }
        self.body.push_str("/>\n");
    }

    /// Text at a point (baseline at y); `rotate` turns it to read bottom-up.
    pub fn text(&mut self, at: (f64, f64), text: &str, size: f64, anchor: Anchor, bold: bool) {
        self.text_rotated(at, text, size, anchor, bold, false);
    }

    /// Text, optionally turned 90° to read bottom-up (y axis labels).
    pub fn text_rotated(
        &mut self,
        at: (f64, f64),
        text: &str,
        size: f64,
        anchor: Anchor,
        bold: bool,
        rotate: bool,
    ) {
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let _ = write!(
            self.body,
            "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{anchor}\" fill=\"#222222\"",
            num(at.0),
            num(at.1),
            num(size)
        );
        if bold {
            self.body.push_str(" font-weight=\"bold\"");
        }
        if rotate {
            let _ = write!(
                self.body,
                " transform=\"rotate(-90 {} {})\"",
                num(at.0),
                num(at.1)
            );
        }
        let _ = writeln!(self.body, ">{}</text>", escape(text));
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
             font-family=\"Helvetica, Arial, sans-serif\" role=\"img\">\n<title>{}</title>\n\
             <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n{}</svg>\n",
            escape(&self.title),
            self.body,
            w = num(self.width),
            h = num(self.height)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(
            escape("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt; "
        );
    }

    #[test]
    fn numbers_print_the_same_every_time() {
        assert_eq!(num(12.04), "12");
        assert_eq!(num(-0.01), "0");
        assert_eq!(num(3.25), "3.2");
        assert_eq!(num(f64::NAN), "0");
    }
}
