//! `report.md`: the sections as Markdown, figures linked from `figures/`.

use std::fmt::Write as _;

use super::model::{Block, Section, Table};

/// Plain text made inert in Markdown: characters that start markup are backslash-escaped
/// and line breaks become spaces.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn table(out: &mut String, table: &Table) {
    let row = |cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| escape(c)).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    out.push_str(&row(&table.header));
    let rule: Vec<&str> = (0..table.header.len())
        .map(|i| {
            if i < table.label_columns {
                ":---"
            } else {
                "---:"
            }
        })
        .collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for cells in &table.rows {
        out.push_str(&row(cells));
    }
    out.push('\n');
}

/// The whole document.
pub fn render(title: &str, intro: &str, sections: &[Section], appendix: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", escape(title));
    let _ = writeln!(out, "{}\n", escape(intro));
    for section in sections {
        let _ = writeln!(out, "## {}\n", escape(&section.title));
        for block in &section.blocks {
            match block {
                Block::Heading(text) => {
                    let _ = writeln!(out, "### {}\n", escape(text));
                }
                Block::Paragraph(text) => {
                    let _ = writeln!(out, "{}\n", escape(text));
                }
                Block::List(items) => {
                    for item in items {
                        let _ = writeln!(out, "- {}", escape(item));
                    }
                    out.push('\n');
                }
                Block::Table(t) => table(&mut out, t),
                Block::Figures(figures) => {
                    for figure in figures {
                        let _ = writeln!(
                            out,
                            "![{}](figures/{})\n\n*{}*\n",
                            escape(&figure.file),
                            figure.file,
                            escape(&figure.caption)
                        );
                    }
                }
            }
        }
    }
    if !appendix.is_empty() {
        out.push_str("## Plan as run\n\n~~~~toml\n");
        out.push_str(appendix.replace("~~~~", "~ ~ ~ ~").trim_end());
        out.push_str("\n~~~~\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::Figure;

    #[test]
    fn markup_in_text_stays_text() {
        assert_eq!(escape("a|b *c* <d> _e_"), "a\\|b \\*c\\* \\<d\\> \\_e\\_");
    }

    #[test]
    fn tables_align_numbers_right_and_figures_link_their_files() {
        let mut section = Section::new("s", "S");
        let mut t = Table::new(&["Broker", "Median (ms)"], 1);
        t.row(vec!["mosquitto".into(), "4.00".into()]);
        section.blocks.push(Block::Table(t));
        section.blocks.push(Block::Figures(vec![Figure {
            file: "latency-0.svg".into(),
            svg: String::new(),
            caption: "Box: p25..p75".into(),
        }]));
        let md = render("T", "i", &[section], "name = \"x\"\n");
        assert!(md.contains("| Broker | Median (ms) |\n|:---|---:|\n| mosquitto | 4.00 |"));
        assert!(md.contains("![latency-0.svg](figures/latency-0.svg)"));
        assert!(md.ends_with("~~~~toml\nname = \"x\"\n~~~~\n"));
    }
}
