//! `report.html`: one self-contained page, figures inlined as SVG, styles inline, no
//! script and nothing fetched from elsewhere.

use std::fmt::Write as _;

use super::model::{Block, Section, Table};
use super::svg::escape;

const STYLE: &str = "\
body{font-family:Helvetica,Arial,sans-serif;color:#222;background:#fff;margin:0;line-height:1.45}
main{max-width:1120px;margin:0 auto;padding:16px 28px 48px}
h1{font-size:26px;margin:18px 0 6px}
h2{font-size:20px;margin:34px 0 8px;padding-top:8px;border-top:2px solid #ddd}
h3{font-size:16px;margin:20px 0 6px}
p,li{font-size:14px;max-width:1000px}
nav{font-size:14px;margin:8px 0 12px}
nav a{margin-right:14px;color:#0b5cad}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:10px 0 18px;font-size:13px}
th,td{border:1px solid #d4d4d4;padding:4px 8px;vertical-align:top}
th{background:#f1f3f5;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fafafa}
.figures{display:flex;flex-wrap:wrap;gap:14px;margin:10px 0}
figure{margin:0;display:table;max-width:100%}
figure svg{display:block;max-width:100%;height:auto;border:1px solid #e2e2e2}
figcaption{display:table-caption;caption-side:bottom;font-size:12.5px;color:#444;padding-top:4px}
pre{background:#f6f8fa;padding:10px;font-size:12px;overflow:auto}
";

fn table(out: &mut String, table: &Table) {
    out.push_str("<div class=\"scroll\"><table>\n<thead><tr>");
    for cell in &table.header {
        let _ = write!(out, "<th>{}</th>", escape(cell));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &table.rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            if i < table.label_columns {
                let _ = write!(out, "<td>{}</td>", escape(cell));
            } else {
                let _ = write!(out, "<td class=\"n\">{}</td>", escape(cell));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n");
}

/// The whole page.
pub fn render(title: &str, intro: &str, sections: &[Section], appendix: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n<h1>{}</h1>\n<p>{}</p>\n<nav>",
        escape(title),
        escape(title),
        escape(intro)
    );
    for section in sections {
        let _ = write!(
            out,
            "<a href=\"#{}\">{}</a>",
            escape(&section.id),
            escape(&section.title)
        );
    }
    out.push_str("</nav>\n");
    for section in sections {
        let _ = writeln!(
            out,
            "<section id=\"{}\">\n<h2>{}</h2>",
            escape(&section.id),
            escape(&section.title)
        );
        for block in &section.blocks {
            match block {
                Block::Heading(text) => {
                    let _ = writeln!(out, "<h3>{}</h3>", escape(text));
                }
                Block::Paragraph(text) => {
                    let _ = writeln!(out, "<p>{}</p>", escape(text));
                }
                Block::List(items) => {
                    out.push_str("<ul>\n");
                    for item in items {
                        let _ = writeln!(out, "<li>{}</li>", escape(item));
                    }
                    out.push_str("</ul>\n");
                }
                Block::Table(t) => table(&mut out, t),
                Block::Figures(figures) => {
                    out.push_str("<div class=\"figures\">\n");
                    for figure in figures {
                        let _ = write!(
                            out,
                            "<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n",
                            figure.svg,
                            escape(&figure.caption)
                        );
                    }
                    out.push_str("</div>\n");
                }
            }
        }
        out.push_str("</section>\n");
    }
    if !appendix.is_empty() {
        let _ = writeln!(
            out,
            "<section id=\"plan\">\n<h2>Plan as run</h2>\n<details><summary>plan.toml, verbatim</summary>\n<pre>{}</pre>\n</details>\n</section>",
            escape(appendix.trim_end())
        );
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained_and_escaped() {
        let mut section = Section::new("run", "Run <1>");
        section.paragraph("a & b");
        let page = render("Report", "intro", &[section], "x = \"<y>\"");
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<h2>Run &lt;1&gt;</h2>") && page.contains("<p>a &amp; b</p>"));
        assert!(page.contains("x = &quot;&lt;y&gt;&quot;"));
        assert!(
            !page.contains("<script") && !page.contains("http://") && !page.contains("https://")
        );
    }
}
