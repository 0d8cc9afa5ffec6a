//! Block-style YAML that reads the same under YAML 1.1 and 1.2.
//!
//! kubectl parses manifests as YAML 1.1, where a plain `yes`, `on` or `off` is a boolean:
//! `DOCKER_VERNEMQ_ACCEPT_EULA: yes` in a ConfigMap makes the apply fail ("cannot unmarshal
//! bool into ... of type string"). serde_yaml_ng writes YAML 1.2 and leaves those plain,
//! with no option to quote them, so manifests are written here instead, from the objects'
//! JSON form: a string stays plain only when no YAML version could read it as anything but
//! that string, multi-line strings become literal blocks, everything else is double-quoted.

use serde_json::Value;

/// `value` (a JSON object) as one block-style YAML document, without the `---` line.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => mapping(map, 0, &mut out),
        other => {
            out.push_str(&inline(other).unwrap_or_else(|| quoted_json(other)));
            out.push('\n');
        }
    }
    out
}

fn mapping(map: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&scalar(key));
        out.push(':');
        nested(value, indent, out);
    }
}

/// What follows `key:` or `-`: an inline value, a literal block, or a nested block.
fn nested(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            mapping(map, indent + 2, out);
        }
        // Kubernetes style: a list under a key starts at the key's own indentation.
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            sequence(items, indent, out);
        }
        Value::String(text) if text.contains('\n') && literal_ok(text) => {
            literal(text, indent + 2, out);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other).unwrap_or_else(|| quoted_json(other)));
            out.push('\n');
        }
    }
}

fn sequence(items: &[Value], indent: usize, out: &mut String) {
    for item in items {
        match item {
            Value::Array(inner) if !inner.is_empty() => {
                out.push_str(&" ".repeat(indent));
                out.push_str("-\n");
                sequence(inner, indent + 2, out);
            }
            Value::Object(map) if !map.is_empty() => {
                // The first key goes on the dash's line, the rest under it.
                let mut block = String::new();
                mapping(map, indent + 2, &mut block);
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                out.push_str(&block[indent + 2..]);
            }
            other => {
                out.push_str(&" ".repeat(indent));
                out.push('-');
                nested(other, indent, out);
            }
        }
    }
}

/// A scalar or empty collection on one line; `None` for non-empty collections.
fn inline(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => scalar(text),
        Value::Array(items) if items.is_empty() => "[]".to_owned(),
        Value::Object(map) if map.is_empty() => "{}".to_owned(),
        Value::Array(_) | Value::Object(_) => return None,
    })
}

/// A string as a plain scalar where that is unambiguous, double-quoted otherwise.
fn scalar(text: &str) -> String {
    if plain_ok(text) {
        text.to_owned()
    } else {
        quoted_json(&Value::String(text.to_owned()))
    }
}

/// JSON's double-quoted strings are valid YAML double-quoted scalars.
fn quoted_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// Words YAML 1.1 reads as booleans or null (1.2 as strings, but kubectl reads 1.1).
const KEYWORDS: [&str; 26] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
    "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL", "~",
];

/// True when `text` reads as this very string, plain, in every YAML version: letters,
/// digits and `._/-:` only, not starting with `-`, `.` or `:` nor ending with `:`, not a
/// keyword, and, when it starts with a digit, holding a letter that no hex, octal, binary
/// or exponent number contains (`100m`, `1.6.15-openssl`; but `2024.3`, `0x1F`, `1e3` and
/// the YAML 1.1 sexagesimal `1:30` are quoted).
fn plain_ok(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    let charset = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-' | ':'));
    let numeric_start = first.is_ascii_digit();
    charset
        && !matches!(first, '-' | '.' | ':')
        // A colon is plain inside a word (`image:tag`), a mapping indicator at its end.
        && !text.ends_with(':')
        && !KEYWORDS.contains(&text)
        && (!numeric_start
            || (!text.contains('_')
                && text
                    .chars()
                    .any(|c| c.is_ascii_alphabetic() && !"abcdefABCDEFoxOX".contains(c))))
}

/// Literal blocks keep the text exactly, unless it starts with a space (that would need
/// an indentation indicator) or holds characters YAML does not allow in one.
fn literal_ok(text: &str) -> bool {
    !text.starts_with([' ', '\t'])
        && !text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
}

fn literal(text: &str, indent: usize, out: &mut String) {
    let trailing = text.len() - text.trim_end_matches('\n').len();
    out.push_str(match trailing {
        0 => " |-\n",
        1 => " |\n",
        _ => " |+\n",
    });
    for line in text.trim_end_matches('\n').split('\n') {
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_yaml_1_1_reads_as_booleans_are_quoted() {
        let text = to_yaml(&json!({
            "data": {"EULA": "yes", "ANON": "on", "OFF": "off", "flag": "true", "empty": ""},
            "real": true,
        }));
        assert_eq!(
            text,
            "data:\n  EULA: \"yes\"\n  ANON: \"on\"\n  \"OFF\": \"off\"\n  flag: \"true\"\n  \
             empty: \"\"\nreal: true\n"
        );
    }

    #[test]
    fn numbers_stay_numbers_and_number_like_strings_are_quoted() {
        for (value, written) in [
            (json!("0"), "\"0\""),
            (json!("2024.3"), "\"2024.3\""),
            (json!("3.11.28"), "\"3.11.28\""),
            (json!("1e3"), "\"1e3\""),
            (json!("0x1F"), "\"0x1F\""),
            (json!("1_000"), "\"1_000\""),
            (json!("100m"), "100m"),
            (json!("2Gi"), "2Gi"),
            (json!("1.6.15-openssl"), "1.6.15-openssl"),
            (json!("app.kubernetes.io/name"), "app.kubernetes.io/name"),
            (json!("-x"), "\"-x\""),
            (json!("a: b"), "\"a: b\""),
            (json!("a:"), "\"a:\""),
            (json!("1:30"), "\"1:30\""),
            (json!("emqx:5.0.22"), "emqx:5.0.22"),
            (json!("[rabbitmq_mqtt]."), "\"[rabbitmq_mqtt].\""),
            (json!(1883), "1883"),
            (json!(false), "false"),
        ] {
            assert_eq!(to_yaml(&json!({ "k": value })), format!("k: {written}\n"));
        }
    }

    #[test]
    fn nesting_lists_and_blocks_look_like_kubectl_output() {
        let text = to_yaml(&json!({
            "spec": {
                "ports": [{"name": "mqtt", "port": 1883}, {"name": "http", "port": 8888}],
                "args": ["a", "yes"],
                "empty": [],
                "none": {},
            },
            "conf": "listener 1883\nallow_anonymous true\n",
            "bare": "a\nb",
            "spaced": "  indented\n",
        }));
        assert_eq!(
            text,
            "spec:\n  ports:\n  - name: mqtt\n    port: 1883\n  - name: http\n    port: 8888\n  \
             args:\n  - a\n  - \"yes\"\n  empty: []\n  none: {}\nconf: |\n  listener 1883\n  \
             allow_anonymous true\nbare: |-\n  a\n  b\nspaced: \"  indented\\n\"\n"
        );
    }

    #[test]
    fn what_is_written_reads_back_as_the_same_value() {
        let value = json!({
            "a": {"b": [{"c": "yes", "d": ["x", {"e": "line 1\n\nline 3\n\n"}, [["y"], "z"]]}]},
            "f": "tab\there", "g": "quote \" and \\ back", "h": 1.5, "i": null,
        });
        let back: Value = serde_yaml_ng::from_str(&to_yaml(&value)).unwrap();
        assert_eq!(back, value);
    }
}
