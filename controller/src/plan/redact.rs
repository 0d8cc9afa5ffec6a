//! Secrets out of what a run records: a plan may carry a broker's password (`[tests.workload]
//! broker.password`), which the cells need to connect but no file of the results folder (the
//! manifest's plan and plan text, and the reports that print them) may hold, since a results
//! folder is shared and published. A password read from a file or the environment
//! (`password_file`, `password_env`) is the same secret once read: the key that named its
//! source stays in the plan's text, the password itself is redacted like one written inline.
//!
//! The plan text keeps every byte but the secret values, each replaced by [`REDACTED`] as a
//! TOML string, so the manifest still shows the plan as written and still parses.

use toml::de::{DeTable, DeValue};

use super::types::Plan;

/// What a secret value is replaced by.
pub const REDACTED: &str = "<redacted>";

/// The words that make a key a secret, alone or as the last part of a `_` name
/// (`password`, `broker_password`); `username` and `password_env` are not secrets.
const SECRET_WORDS: [&str; 4] = ["password", "passwd", "secret", "token"];

/// True for a key whose value is a credential.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_WORDS
        .iter()
        .any(|word| key == *word || key.ends_with(&format!("_{word}")))
}

/// `text` (TOML) with the value of every secret key, at any depth, replaced by
/// `"<redacted>"`; everything else as written. Text that does not parse is not shown at all,
/// since where its secrets are cannot be told.
pub fn redact_plan_text(text: &str) -> String {
    let Ok(root) = DeTable::parse(text) else {
        return format!(
            "# the plan's text is not shown: it does not parse as TOML, and a password in it could not be told apart ({} bytes)\n",
            text.len()
        );
    };
    let mut spans = Vec::new();
    secret_spans_of_table(root.get_ref(), &mut spans);
    // From the end, so the earlier spans keep their offsets.
    spans.sort_by_key(|span| std::cmp::Reverse(span.start));
    let mut redacted = text.to_string();
    let replacement = format!("\"{REDACTED}\"");
    for span in spans {
        if span.end <= redacted.len() && span.start <= span.end {
            redacted.replace_range(span, &replacement);
        }
    }
    redacted
}

fn secret_spans_of_table(table: &DeTable<'_>, spans: &mut Vec<std::ops::Range<usize>>) {
    for (key, value) in table {
        if is_secret_key(key.get_ref()) {
            spans.push(value.span());
        } else {
            secret_spans_of_value(value.get_ref(), spans);
        }
    }
}

fn secret_spans_of_value(value: &DeValue<'_>, spans: &mut Vec<std::ops::Range<usize>>) {
    match value {
        DeValue::Table(table) => secret_spans_of_table(table, spans),
        DeValue::Array(items) => {
            for item in items.iter() {
                secret_spans_of_value(item.get_ref(), spans);
            }
        }
        _ => {}
    }
}

/// `table` with every secret key's value, at any depth, replaced by `"<redacted>"`.
pub fn redact_table(table: &mut toml::Table) {
    for (key, value) in table.iter_mut() {
        if is_secret_key(key) {
            *value = toml::Value::String(REDACTED.to_string());
        } else {
            redact_value(value);
        }
    }
}

fn redact_value(value: &mut toml::Value) {
    match value {
        toml::Value::Table(table) => redact_table(table),
        toml::Value::Array(items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

impl Plan {
    /// The plan as a results folder may hold it: every secret of its tests' workload tables
    /// replaced by `"<redacted>"` (the run itself uses the plan as given).
    pub fn redacted(&self) -> Plan {
        let mut plan = self.clone();
        for table in plan.tests.iter_mut().filter_map(|t| t.workload.as_mut()) {
            redact_table(table);
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_wherever_and_however_they_are_written() {
        let text = r#"name = "p" # a comment stays
[[tests]]
kind = "custom"
[tests.workload]
broker = { username = "bob", password = "hunter2" }
[[tests]]
kind = "latency"
[tests.workload.broker]
username = "carol"
"password" = '''
multi
line'''
[[tests]]
kind = "latency"
workload.broker.password = "s3cr3t\"x"
workload.broker.password_env = "BROKER_PASSWORD"
api_token = 5
"#;
        let redacted = redact_plan_text(text);
        for secret in ["hunter2", "multi", "s3cr3t", "= 5"] {
            assert!(!redacted.contains(secret), "{secret} left in:\n{redacted}");
        }
        for kept in [
            "# a comment stays",
            "username = \"bob\"",
            "username = \"carol\"",
            "password_env = \"BROKER_PASSWORD\"",
        ] {
            assert!(redacted.contains(kept), "{kept} lost:\n{redacted}");
        }
        assert_eq!(redacted.matches("\"<redacted>\"").count(), 4, "{redacted}");
        let parsed: toml::Table = toml::from_str(&redacted).expect("still TOML");
        let first = &parsed["tests"][0]["workload"]["broker"];
        assert_eq!(first["password"].as_str(), Some(REDACTED));
        assert_eq!(first["username"].as_str(), Some("bob"));
    }

    #[test]
    fn text_that_does_not_parse_is_not_shown() {
        let redacted = redact_plan_text("password = \"hunter2\" = oops");
        assert!(!redacted.contains("hunter2"), "{redacted}");
    }

    #[test]
    fn only_credential_keys_are_secrets() {
        for secret in [
            "password",
            "Password",
            "broker_password",
            "secret",
            "api_token",
        ] {
            assert!(is_secret_key(secret), "{secret}");
        }
        for plain in [
            "username",
            "password_env",
            "password_file",
            "tokens",
            "name",
        ] {
            assert!(!is_secret_key(plain), "{plain}");
        }
    }
}
