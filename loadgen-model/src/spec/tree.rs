//! A topic tree: topics named by a pattern with counts (`site/{site}/device/{device}/temp`
//! with 4 sites and 25 devices is 100 topics), published by the workload's publishers in
//! turn, and read by subscribers through filters with `+` and `#`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::filter::{TopicFilter, check_topic_name};

/// Most topics one tree names (each needs a publisher of its own).
pub const MAX_TREE_TOPICS: u64 = super::validate::MAX_CLIENTS as u64;
/// Most filters one tree is read through.
pub const MAX_TREE_FILTERS: usize = 1_000;

/// Topics from a pattern with counts, and the filters subscribers read them through.
/// Publisher `p` publishes to topic `p mod topics` (topics numbered with the pattern's first
/// placeholder the most significant), subscriber `s` subscribes with filter `s mod filters`
/// (the subscribers taking one `$share/<group>/...` entry are that group's members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicTree {
    /// The topics' names below the run's prefix, with `{name}` for each counted level
    /// (values 0 to count - 1).
    pub pattern: String,
    /// How many values each placeholder of the pattern takes.
    pub counts: BTreeMap<String, u32>,
    /// The filters subscribers read the tree through, below the run's prefix; a shared
    /// subscription is `$share/<group>/<filter>`, its members every subscriber taking it.
    pub subscribe: Vec<String>,
}

/// One piece of a pattern: literal text, or a placeholder with its count.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Counted { name: String, count: u32 },
}

/// A pattern taken apart, its counts attached: names topic `i` without string searching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicNames {
    pieces: Vec<Piece>,
    topics: u64,
}

impl TopicNames {
    /// How many topics the tree names.
    pub fn len(&self) -> u64 {
        self.topics
    }

    /// True when the tree names no topic (never, once checked: every count is at least 1).
    pub fn is_empty(&self) -> bool {
        self.topics == 0
    }

    /// The name of topic `index` (taken modulo the topic count).
    pub fn name(&self, index: u64) -> String {
        let mut rest = index % self.topics.max(1);
        let mut values = Vec::new();
        for piece in self.pieces.iter().rev() {
            if let Piece::Counted { count, .. } = piece {
                values.push(rest % u64::from(*count));
                rest /= u64::from(*count);
            }
        }
        let mut name = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => name.push_str(text),
                Piece::Counted { .. } => {
                    let value = values.pop().unwrap_or_default();
                    name.push_str(&value.to_string());
                }
            }
        }
        name
    }

    /// The longest name the tree has: every placeholder at its largest value.
    fn longest(&self) -> String {
        self.pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Counted { count, .. } => (count - 1).to_string(),
            })
            .collect()
    }
}

impl TopicTree {
    /// Whether some subscribers read through a shared subscription (`$share/<group>/...`).
    pub fn has_shared(&self) -> bool {
        self.subscribe
            .iter()
            .any(|entry| entry.starts_with("$share/"))
    }

    /// The pattern's topics, checked: every placeholder counted once, every count used and
    /// at least 1, at most [`MAX_TREE_TOPICS`] topics, each a topic name without wildcards.
    /// The error is (TOML path below `topics`, value, problem).
    pub fn names(&self) -> Result<TopicNames, (String, String, String)> {
        let pattern_error = |problem: String| {
            (
                "pattern".to_string(),
                format!("{:?}", self.pattern),
                problem,
            )
        };
        let mut pieces = Vec::new();
        let mut rest = self.pattern.as_str();
        while let Some(open) = rest.find('{') {
            let (text, after) = rest.split_at(open);
            let close = after.find('}').ok_or_else(|| {
                pattern_error("a { without its }: placeholders are {name}".to_string())
            })?;
            let name = &after[1..close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(pattern_error(format!(
                    "a placeholder is {{name}} with letters, digits or _, not {{{name}}}"
                )));
            }
            if pieces
                .iter()
                .any(|piece| matches!(piece, Piece::Counted { name: seen, .. } if seen == name))
            {
                return Err(pattern_error(format!("{{{name}}} appears twice")));
            }
            let count = *self.counts.get(name).ok_or_else(|| {
                pattern_error(format!("{{{name}}} has no count in topics.counts"))
            })?;
            if count == 0 {
                return Err((
                    format!("counts.{name}"),
                    "0".to_string(),
                    "a counted level takes at least one value".to_string(),
                ));
            }
            if !text.is_empty() {
                pieces.push(Piece::Text(text.to_string()));
            }
            pieces.push(Piece::Counted {
                name: name.to_string(),
                count,
            });
            rest = &after[close + 1..];
        }
        if rest.contains('}') {
            return Err(pattern_error("a } without its {".to_string()));
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        // Values are written in decimal without padding: a placeholder beside another one or
        // beside a digit would give two topics one name ({a}{b}: a=1 b=11 and a=11 b=1).
        for pair in pieces.windows(2) {
            let ambiguous = match (&pair[0], &pair[1]) {
                (Piece::Counted { .. }, Piece::Counted { .. }) => true,
                (Piece::Text(text), Piece::Counted { .. }) => {
                    text.ends_with(|c: char| c.is_ascii_digit())
                }
                (Piece::Counted { .. }, Piece::Text(text)) => {
                    text.starts_with(|c: char| c.is_ascii_digit())
                }
                _ => false,
            };
            if ambiguous {
                return Err(pattern_error(
                    "a placeholder beside another one or a digit would give two topics one name: \
                     put a separator between them (site{a}-{b})"
                        .to_string(),
                ));
            }
        }
        for (name, count) in &self.counts {
            let used = pieces
                .iter()
                .any(|piece| matches!(piece, Piece::Counted { name: seen, .. } if seen == name));
            if !used {
                return Err((
                    format!("counts.{name}"),
                    count.to_string(),
                    format!("the pattern has no {{{name}}}"),
                ));
            }
        }
        let topics = pieces.iter().try_fold(1u64, |product, piece| match piece {
            Piece::Counted { count, .. } => product
                .checked_mul(u64::from(*count))
                .filter(|topics| *topics <= MAX_TREE_TOPICS),
            Piece::Text(_) => Some(product),
        });
        let topics = topics.ok_or_else(|| {
            pattern_error(format!(
                "names more than {MAX_TREE_TOPICS} topics (the counts multiplied)"
            ))
        })?;
        let names = TopicNames { pieces, topics };
        if self.pattern.starts_with('/') || self.pattern.ends_with('/') {
            return Err(pattern_error(
                "a topic below the run's prefix neither starts nor ends with /".to_string(),
            ));
        }
        check_topic_name(&names.longest()).map_err(pattern_error)?;
        Ok(names)
    }

    /// The filters, checked; the error is (TOML path below `topics`, value, problem).
    pub fn filters(&self) -> Result<Vec<TopicFilter>, (String, String, String)> {
        if self.subscribe.is_empty() {
            return Err((
                "subscribe".to_string(),
                "[]".to_string(),
                "at least one filter reads the tree".to_string(),
            ));
        }
        if self.subscribe.len() > MAX_TREE_FILTERS {
            return Err((
                "subscribe".to_string(),
                format!("{} filters", self.subscribe.len()),
                format!("at most {MAX_TREE_FILTERS}"),
            ));
        }
        self.subscribe
            .iter()
            .enumerate()
            .map(|(at, text)| {
                let error =
                    |problem: String| (format!("subscribe[{at}]"), format!("{text:?}"), problem);
                let filter = TopicFilter::parse(text).map_err(error)?;
                if filter.group().is_some() && self.subscribe[..at].contains(text) {
                    return Err(error(
                        "a shared subscription is listed once: its members are the subscribers that take this entry".to_string(),
                    ));
                }
                if filter.filter().starts_with('/') {
                    return Err(error(
                        "a filter below the run's prefix does not start with /".to_string(),
                    ));
                }
                Ok(filter)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(pattern: &str, counts: &[(&str, u32)], subscribe: &[&str]) -> TopicTree {
        TopicTree {
            pattern: pattern.to_string(),
            counts: counts.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_pattern_names_its_topics_first_placeholder_most_significant() {
        let names = tree(
            "site/{site}/device/{device}/temp",
            &[("site", 4), ("device", 25)],
            &["#"],
        )
        .names()
        .expect("valid");
        assert_eq!(names.len(), 100);
        assert_eq!(names.name(0), "site/0/device/0/temp");
        assert_eq!(names.name(26), "site/1/device/1/temp");
        assert_eq!(names.name(99), "site/3/device/24/temp");
        assert_eq!(names.name(100), "site/0/device/0/temp");
        let inside = tree("d{id}x", &[("id", 3)], &["#"]).names().expect("valid");
        assert_eq!(
            (0..3).map(|i| inside.name(i)).collect::<Vec<_>>(),
            ["d0x", "d1x", "d2x"]
        );
        let plain = tree("fixed/topic", &[], &["#"]).names().expect("valid");
        assert_eq!((plain.len(), plain.name(5)), (1, "fixed/topic".to_string()));
    }

    #[test]
    fn bad_patterns_and_filters_name_their_field() {
        let path = |t: TopicTree| t.names().expect_err("refused").0;
        let problem = |t: TopicTree| t.names().expect_err("refused").2;
        assert_eq!(path(tree("a/{x}", &[], &["#"])), "pattern");
        assert!(problem(tree("a/{x}", &[], &["#"])).contains("{x} has no count"));
        assert_eq!(path(tree("a/{x}", &[("x", 0)], &["#"])), "counts.x");
        assert_eq!(
            path(tree("a/{x}", &[("x", 1), ("y", 2)], &["#"])),
            "counts.y"
        );
        assert!(problem(tree("a/{x", &[("x", 1)], &["#"])).contains("without its }"));
        assert!(problem(tree("a/x}", &[], &["#"])).contains("without its {"));
        assert!(problem(tree("a/{x}/{x}", &[("x", 2)], &["#"])).contains("twice"));
        assert!(problem(tree("a/{x y}", &[("x y", 2)], &["#"])).contains("placeholder"));
        assert!(problem(tree("a/+/{x}", &[("x", 2)], &["#"])).contains("wildcard"));
        assert!(problem(tree("/a", &[], &["#"])).contains("starts nor ends"));
        for ambiguous in ["{a}{b}", "x{a}1{b}", "d1{a}"] {
            assert!(
                problem(tree(
                    ambiguous,
                    &[("a", 12), ("b", 12)]
                        .iter()
                        .filter(|(n, _)| ambiguous.contains(&format!("{{{n}}}")))
                        .copied()
                        .collect::<Vec<_>>(),
                    &["#"]
                ))
                .contains("one name"),
                "{ambiguous}"
            );
        }
        assert!(
            problem(tree("{a}/{b}", &[("a", 100_000), ("b", 2)], &["#"])).contains("more than")
        );
        let filter_error =
            |subscribe: &[&str]| tree("a", &[], subscribe).filters().expect_err("refused");
        assert_eq!(filter_error(&[]).0, "subscribe");
        assert_eq!(filter_error(&["a/#", "a/#/b"]).0, "subscribe[1]");
        assert!(filter_error(&["a/b+"]).2.contains("+ stands alone"));
        assert!(
            filter_error(&["$share/g/a", "$share/g/a"])
                .2
                .contains("listed once")
        );
        assert!(
            filter_error(&["$share/g//a"])
                .2
                .contains("does not start with /")
        );
        assert!(filter_error(&["$share//a"]).2.contains("group"));
    }
}
