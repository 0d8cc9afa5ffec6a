//! A strict well-formedness check of the SVG this module writes, kept only for the
//! end-to-end suite in `agent/tests/controller_e2e.rs` ("every figure is valid SVG"), which
//! cannot reach the controller's dev-dependencies; the controller's own tests parse figures
//! with roxmltree. It goes when that suite moves beside them.
//!
//! It accepts the subset of XML the report uses (elements, double-quoted attributes, text,
//! the five named entities and character references; no comments, CDATA or DOCTYPE) and
//! checks one root element, properly nested and closed tags, unique attribute names, no
//! stray `<` or `&`, plus the SVG essentials: namespace, viewBox, title and some text.

/// `Ok` when `text` is a well-formed SVG document of the report's kind, else what is wrong.
pub fn check_svg(text: &str) -> Result<(), String> {
    for needed in [
        "xmlns=\"http://www.w3.org/2000/svg\"",
        "viewBox=\"",
        "<title>",
        "<text",
    ] {
        if !text.contains(needed) {
            return Err(format!("no {needed}"));
        }
    }
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_:.-".contains(c))
            && !n.starts_with(|c: char| c.is_ascii_digit() || c == '-')
    };
    let entities_ok = |t: &str| {
        t.split('&').skip(1).all(|rest| {
            let Some(end) = rest.find(';') else {
                return false;
            };
            let entity = &rest[..end];
            ["amp", "lt", "gt", "quot", "apos"].contains(&entity)
                || entity
                    .strip_prefix("#x")
                    .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
                || entity
                    .strip_prefix('#')
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        })
    };
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let (before, after) = rest.split_at(open);
        if !entities_ok(before) || (stack.is_empty() && !before.trim().is_empty()) {
            return Err(format!("bad text {before:?}"));
        }
        let close = after.find('>').ok_or("unclosed tag")?;
        let tag = &after[1..close];
        rest = &after[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop() != Some(name.trim()) {
                return Err(format!("</{name}> closes nothing open"));
            }
            continue;
        }
        let empty = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name = tag.split_whitespace().next().unwrap_or("");
        if !name_ok(name) {
            return Err(format!("bad tag name {name:?}"));
        }
        let mut attributes = tag[name.len()..].trim();
        let mut seen = Vec::new();
        while !attributes.is_empty() {
            let (attribute, value) = attributes
                .split_once("=\"")
                .ok_or(format!("unquoted attribute in <{tag}>"))?;
            let end = value.find('"').ok_or("unterminated attribute")?;
            let attribute = attribute.trim();
            if !name_ok(attribute)
                || seen.contains(&attribute)
                || value[..end].contains('<')
                || !entities_ok(&value[..end])
            {
                return Err(format!("bad attribute {attribute:?} in <{tag}>"));
            }
            seen.push(attribute);
            attributes = value[end + 1..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !empty {
            stack.push(name);
        }
    }
    match (roots, stack.is_empty(), rest.trim().is_empty()) {
        (1, true, true) => Ok(()),
        _ => Err(format!("{roots} roots, open at end: {stack:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 1 1\">\n\
        <title>a &amp; b</title><text x=\"0\">&#60;&#x3e;</text><line x1=\"0\"/></svg>\n";

    #[test]
    fn well_formed_svg_passes() {
        assert_eq!(check_svg(GOOD), Ok(()));
    }

    #[test]
    fn malformed_svg_is_caught() {
        for (bad, why) in [
            (GOOD.replace("</text>", ""), "unclosed element"),
            (GOOD.replace("a &amp; b", "a & b"), "bare ampersand"),
            (
                GOOD.replace("x=\"0\">", "x=\"0\" x=\"1\">"),
                "duplicate attribute",
            ),
            (GOOD.replace("x1=\"0\"", "x1=0"), "unquoted attribute"),
            (GOOD.replace("<title>a", "<title>a < c"), "stray <"),
            (format!("{GOOD}<svg/>"), "two roots"),
            (GOOD.replace(" viewBox=\"0 0 1 1\"", ""), "no viewBox"),
        ] {
            assert!(check_svg(&bad).is_err(), "{why}: {bad}");
        }
    }
}
