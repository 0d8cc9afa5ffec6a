//! What the controller's report tests ask of every SVG figure, written once for both.

/// `Ok` when `text` parses as XML and is an SVG document of the report's kind: the SVG
/// namespace, a viewBox, an accessible title and some text.
pub fn check_svg(text: &str) -> Result<(), String> {
    let document = roxmltree::Document::parse(text).map_err(|e| e.to_string())?;
    let root = document.root_element();
    if root.tag_name().name() != "svg"
        || root.tag_name().namespace() != Some("http://www.w3.org/2000/svg")
    {
        return Err(format!("the root is {:?}, not SVG", root.tag_name()));
    }
    if root.attribute("viewBox").is_none() {
        return Err("no viewBox".to_string());
    }
    for needed in ["title", "text"] {
        if !root.descendants().any(|n| n.has_tag_name(needed)) {
            return Err(format!("no <{needed}>"));
        }
    }
    Ok(())
}
