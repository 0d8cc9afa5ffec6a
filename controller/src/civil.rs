//! UTC dates and times as the controller writes them, from humantime's RFC 3339 text.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// `(2026-05-01, 12:34:56)`; `None` past year 9999, which RFC 3339 cannot write.
fn date_and_time(unix_secs: u64) -> Option<(String, String)> {
    let time = UNIX_EPOCH.checked_add(Duration::from_secs(unix_secs))?;
    let mut text = String::new();
    // humantime's Display fails (rather than panics) past year 9999.
    write!(text, "{}", humantime::format_rfc3339_seconds(time)).ok()?;
    let (date, time) = text.trim_end_matches('Z').split_once('T')?;
    Some((date.to_string(), time.to_string()))
}

/// `2026-05-01 12:34:56 UTC`, for reports and run listings; a time no calendar of RFC 3339
/// holds (a corrupt manifest's) as its Unix ms.
pub fn utc_text(unix_ms: u64) -> String {
    match date_and_time(unix_ms / 1_000) {
        Some((date, time)) => format!("{date} {time} UTC"),
        None => format!("{unix_ms} ms after the Unix epoch"),
    }
}

/// `20260501-123456`, a run's folder name.
pub fn folder_stamp(unix_secs: u64) -> String {
    match date_and_time(unix_secs) {
        Some((date, time)) => format!("{}-{}", date.replace('-', ""), time.replace(':', "")),
        None => unix_secs.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        // A leap day.
        assert_eq!(utc_text(1_709_210_096_999), "2024-02-29 12:34:56 UTC");
        assert_eq!(folder_stamp(1_709_210_096), "20240229-123456");
    }

    #[test]
    fn times_past_the_calendar_do_not_panic() {
        assert_eq!(
            utc_text(u64::MAX),
            format!("{} ms after the Unix epoch", u64::MAX)
        );
        assert_eq!(folder_stamp(u64::MAX), u64::MAX.to_string());
    }
}
