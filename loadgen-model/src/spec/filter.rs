//! MQTT topic filters (MQTT 5.0 §4.7, §4.8.2): checked where a workload names one, and
//! matched against topic names, so that what each subscriber should receive can be computed
//! from the topics published and the filters subscribed. The first brick of topic trees,
//! wildcards and shared subscriptions in workloads; the engine does not subscribe with them
//! yet.

/// Longest topic name or filter MQTT can carry: a UTF-8 string's two-byte length.
pub const MAX_TOPIC_BYTES: usize = 65_535;

/// The prefix of a shared subscription's filter (`$share/<group>/<filter>`).
const SHARE_PREFIX: &str = "$share/";

/// A subscription's topic filter, checked: `+` only as a whole level, `#` only as the whole
/// last level, and a shared subscription's `$share/<group>/` taken apart from the filter it
/// shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFilter {
    /// The filter the broker matches topics with, without a `$share/<group>/` prefix.
    filter: String,
    /// A shared subscription's group.
    group: Option<String>,
}

impl TopicFilter {
    /// Checks `text` as a subscription's topic filter; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        check_string(text)?;
        let (group, filter) = match text.strip_prefix(SHARE_PREFIX) {
            Some(shared) => {
                let (group, filter) = shared.split_once('/').ok_or_else(|| {
                    "a shared subscription is $share/<group>/<filter>: no filter after the group"
                        .to_string()
                })?;
                if group.is_empty() || group.contains(['+', '#']) {
                    return Err(format!(
                        "a shared subscription's group is a name without + or #, not {group:?}"
                    ));
                }
                (Some(group), filter)
            }
            None => (None, text),
        };
        if filter.is_empty() {
            return Err("a topic filter is at least one character".to_string());
        }
        let levels: Vec<&str> = filter.split('/').collect();
        for (at, level) in levels.iter().enumerate() {
            if *level == "#" && at + 1 != levels.len() {
                return Err("# is the last level of a filter: no level may follow it".to_string());
            }
            if level.contains('#') && *level != "#" {
                return Err(format!(
                    "# stands alone as the last level of a filter, not in {level:?}"
                ));
            }
            if level.contains('+') && *level != "+" {
                return Err(format!("+ stands alone as a whole level, not in {level:?}"));
            }
        }
        Ok(TopicFilter {
            filter: filter.to_string(),
            group: group.map(str::to_string),
        })
    }

    /// The filter topics are matched with (a shared subscription's without its prefix).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    /// A shared subscription's group.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// True when a message published to `topic` matches this filter: level by level, `+`
    /// matching one level, `#` the level above it and any below; a topic beginning with `$`
    /// is not matched by a filter beginning with a wildcard.
    pub fn matches(&self, topic: &str) -> bool {
        if topic.starts_with('$') && self.filter.starts_with(['+', '#']) {
            return false;
        }
        let mut topic_levels = topic.split('/');
        for level in self.filter.split('/') {
            match (level, topic_levels.next()) {
                ("#", _) => return true,
                ("+", Some(_)) => {}
                (level, Some(name)) if level == name => {}
                _ => return false,
            }
        }
        topic_levels.next().is_none()
    }
}

/// Checks `text` as a topic name messages are published to: no wildcard, at least one
/// character.
pub fn check_topic_name(text: &str) -> Result<(), String> {
    check_string(text)?;
    if text.is_empty() {
        return Err("a topic name is at least one character".to_string());
    }
    if text.contains(['+', '#']) {
        return Err(format!("a topic name has no wildcard (+ or #): {text:?}"));
    }
    Ok(())
}

/// What MQTT asks of every topic string: a two-byte length, no NUL.
fn check_string(text: &str) -> Result<(), String> {
    if text.len() > MAX_TOPIC_BYTES {
        return Err(format!(
            "a topic is at most {MAX_TOPIC_BYTES} bytes, not {}",
            text.len()
        ));
    }
    if text.contains('\0') {
        return Err("a topic has no NUL character".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(text: &str) -> TopicFilter {
        TopicFilter::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    /// The examples of MQTT 5.0 §4.7.1.2 (multi-level wildcard) and §4.7.1.3 (single level).
    #[test]
    fn the_specifications_wildcard_examples_match_as_it_says() {
        let tennis = filter("sport/tennis/player1/#");
        for topic in [
            "sport/tennis/player1",
            "sport/tennis/player1/ranking",
            "sport/tennis/player1/score/wimbledon",
        ] {
            assert!(tennis.matches(topic), "{topic}");
        }
        assert!(filter("sport/#").matches("sport"));
        assert!(filter("#").matches("sport/tennis"));
        let plus = filter("sport/tennis/+");
        assert!(plus.matches("sport/tennis/player1") && plus.matches("sport/tennis/player2"));
        assert!(!plus.matches("sport/tennis/player1/ranking"));
        assert!(!filter("sport/+").matches("sport"));
        assert!(filter("sport/+").matches("sport/"));
        assert!(filter("+/+").matches("/finance"));
        assert!(filter("/+").matches("/finance"));
        assert!(!filter("+").matches("/finance"));
        assert!(filter("+/tennis/#").matches("sport/tennis/player1"));
        for valid in ["#", "+", "+/tennis/#", "sport/+/player1", "/", "a//b"] {
            TopicFilter::parse(valid).unwrap_or_else(|e| panic!("{valid:?}: {e}"));
        }
        for invalid in [
            "sport/tennis#",
            "sport/tennis/#/ranking",
            "sport+",
            "",
            "#/x",
        ] {
            assert!(TopicFilter::parse(invalid).is_err(), "{invalid:?} accepted");
        }
    }

    /// §4.7.2: a topic that begins with `$` is matched only by a filter that names it.
    #[test]
    fn dollar_topics_escape_leading_wildcards() {
        assert!(!filter("#").matches("$SYS/broker/clients"));
        assert!(!filter("+/monitor/Clients").matches("$SYS/monitor/Clients"));
        assert!(filter("$SYS/#").matches("$SYS/monitor/Clients"));
        assert!(filter("$SYS/monitor/+").matches("$SYS/monitor/Clients"));
    }

    /// Exact levels match only themselves, level for level.
    #[test]
    fn plain_filters_match_only_their_topic() {
        let exact = filter("site/3/device/7/temp");
        assert!(exact.matches("site/3/device/7/temp"));
        for other in [
            "site/3/device/7",
            "site/3/device/7/temp/x",
            "site/3/device/8/temp",
        ] {
            assert!(!exact.matches(other), "{other}");
        }
        let tree = filter("site/+/device/+/temp");
        assert!(tree.matches("site/1/device/24/temp"));
        assert!(!tree.matches("site/1/device/24/humidity"));
        assert!(filter("site/2/#").matches("site/2/device/0/temp"));
        assert!(!filter("site/2/#").matches("site/20/device/0/temp"));
    }

    /// §4.8.2: `$share/<group>/<filter>`, the group a name without wildcards or `/`.
    #[test]
    fn shared_subscriptions_are_taken_apart() {
        let shared = filter("$share/backend/site/+/device/+/temp");
        assert_eq!(shared.group(), Some("backend"));
        assert_eq!(shared.filter(), "site/+/device/+/temp");
        assert!(shared.matches("site/1/device/2/temp"));
        assert_eq!(filter("site/#").group(), None);
        for invalid in [
            "$share//x",
            "$share/g",
            "$share/g/",
            "$share/g+/x",
            "$share/#/x",
        ] {
            assert!(TopicFilter::parse(invalid).is_err(), "{invalid:?} accepted");
        }
    }

    #[test]
    fn topic_names_have_no_wildcards_and_fit_a_length() {
        assert!(check_topic_name("site/1/device/2/temp").is_ok());
        for invalid in ["", "site/+", "site/#", "a\0b"] {
            assert!(check_topic_name(invalid).is_err(), "{invalid:?} accepted");
        }
        let long = "a".repeat(MAX_TOPIC_BYTES + 1);
        assert!(check_topic_name(&long).is_err());
        assert!(TopicFilter::parse(&long).is_err());
        assert!(check_topic_name(&long[1..]).is_ok());
    }
}
