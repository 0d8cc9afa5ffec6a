//! Calendar dates from Unix time (UTC), without a date crate.

/// A UTC date and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// Year.
    pub year: i64,
    /// Month, 1-12.
    pub month: i64,
    /// Day of the month, 1-31.
    pub day: i64,
    /// Hour, 0-23.
    pub hour: u64,
    /// Minute.
    pub minute: u64,
    /// Second.
    pub second: u64,
}

impl UtcTime {
    /// The time `unix_secs` seconds after the epoch (Howard Hinnant's days-to-civil).
    pub fn from_unix_secs(unix_secs: u64) -> Self {
        let days = (unix_secs / 86_400) as i64;
        let rest = unix_secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rest / 3_600,
            minute: rest % 3_600 / 60,
            second: rest % 60,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(
            UtcTime::from_unix_secs(0),
            UtcTime {
                year: 1970,
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0
            }
        );
        // 2024-02-29 12:34:56 UTC (a leap day).
        assert_eq!(
            UtcTime::from_unix_secs(1_709_210_096),
            UtcTime {
                year: 2024,
                month: 2,
                day: 29,
                hour: 12,
                minute: 34,
                second: 56
            }
        );
    }
}
