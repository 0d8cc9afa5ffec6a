//! The report as a document: sections of paragraphs, lists, tables and figures, rendered
//! once to Markdown and once to HTML so both say the same thing.

/// One section (a `##` heading).
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Anchor id, lower case, no spaces.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Content in order.
    pub blocks: Vec<Block>,
}

impl Section {
    /// An empty section.
    pub fn new(id: &str, title: &str) -> Self {
        Section {
            id: id.to_string(),
            title: title.to_string(),
            blocks: Vec::new(),
        }
    }

    /// Adds a paragraph.
    pub fn paragraph(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Paragraph(text.into()));
    }

    /// Adds a sub-heading.
    pub fn heading(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Heading(text.into()));
    }
}

/// A piece of a section.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A `###` heading.
    Heading(String),
    /// Plain text (escaped by the renderers).
    Paragraph(String),
    /// A bulleted list of plain text items.
    List(Vec<String>),
    /// A table.
    Table(Table),
    /// Figures shown side by side (one or more).
    Figures(Vec<Figure>),
}

/// A table of plain text cells; the first `label_columns` are left aligned, the rest are
/// numbers and right aligned.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column headings.
    pub header: Vec<String>,
    /// Rows, each as long as the header.
    pub rows: Vec<Vec<String>>,
    /// Leading columns that hold labels rather than numbers.
    pub label_columns: usize,
}

impl Table {
    /// A table with these headings.
    pub fn new(header: &[&str], label_columns: usize) -> Self {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            label_columns,
        }
    }

    /// Appends a row, padded or cut to the header's width.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }
}

/// An SVG figure with its caption.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name under `figures/`, e.g. `latency-0.svg`.
    pub file: String,
    /// The SVG document (no XML prolog, so it can also be inlined into HTML).
    pub svg: String,
    /// What the figure shows, in words: what box, whisker, line and bar mean.
    pub caption: String,
}

/// Milliseconds from µs, with as many decimals as the magnitude deserves.
pub fn ms(us: f64) -> String {
    let ms = us / 1_000.0;
    if ms.abs() >= 100.0 {
        format!("{ms:.1}")
    } else if ms.abs() >= 1.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.3}")
    }
}

/// Milliseconds from µs with the decimals `like` (another value in µs) would get, so an
/// IQR prints as `1.00` beside a median of `4.00`, not `0.999`.
pub fn ms_like(us: f64, like: f64) -> String {
    let ms = us / 1_000.0;
    let like = like.abs() / 1_000.0;
    if like >= 100.0 {
        format!("{ms:.1}")
    } else if like >= 1.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.3}")
    }
}

/// A signed difference in ms from µs (`+2.48`, `-0.100`).
pub fn signed_ms(us: f64) -> String {
    signed(ms(us), us)
}

/// A signed difference in ms with the decimals `like` would get (see [`ms_like`]).
pub fn signed_ms_like(us: f64, like: f64) -> String {
    signed(ms_like(us, like), us)
}

fn signed(text: String, value: f64) -> String {
    if value >= 0.0 {
        format!("+{text}")
    } else {
        text
    }
}

/// A rate in msg/s, rounded to whole messages with thousands separators.
pub fn rate(msgs_per_s: f64) -> String {
    let rounded = msgs_per_s.round();
    if !rounded.is_finite() {
        return "n/a".to_string();
    }
    let digits = format!("{:.0}", rounded.abs());
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if rounded < 0.0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

/// A UTC date and time from Unix ms: `2026-05-01 12:34:56 UTC`.
pub fn utc(unix_ms: u64) -> String {
    crate::civil::utc_text(unix_ms)
}

/// Nanoseconds as a short human duration: `1.25 ms`, `80 µs`, `0 ns`.
pub fn duration_ns(ns: f64) -> String {
    let abs = ns.abs();
    if abs >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if abs >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if abs >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_777_638_896_789), "2026-05-01 12:34:56 UTC");
    }

    #[test]
    fn numbers_read_like_the_study() {
        assert_eq!(ms(5_390.0), "5.39");
        assert_eq!(ms(272_480.0), "272.5");
        assert_eq!(ms(120.0), "0.120");
        assert_eq!(ms_like(999.0, 4_000.0), "1.00");
        assert_eq!(ms_like(30.0, 400.0), "0.030");
        assert_eq!(signed_ms(-100.0), "-0.100");
        assert_eq!(signed_ms(2_480.0), "+2.48");
        assert_eq!(signed_ms_like(-51.0, 2_500.0), "-0.05");
        assert_eq!(rate(139_999.6), "140,000");
        assert_eq!(rate(999.0), "999");
        assert_eq!(rate(1_234_567.0), "1,234,567");
        assert_eq!(duration_ns(1_250_000.0), "1.250 ms");
        assert_eq!(duration_ns(-80_000.0), "-80.0 µs");
    }

    #[test]
    fn rows_take_the_header_width() {
        let mut table = Table::new(&["a", "b"], 1);
        table.row(vec!["x".into()]);
        table.row(vec!["1".into(), "2".into(), "3".into()]);
        assert_eq!(table.rows, vec![vec!["x", ""], vec!["1", "2"]]);
    }
}
