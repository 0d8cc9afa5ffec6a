//! How some CSV fields are spelled: numbers rounded for reading, lists joined into one
//! field, error counts as `kind=count`, verdicts as `yes`/`no`, sweep points by their
//! label (`-`, `1KB`, `100`). Each encoding reads back
//! what it writes, so a row type can carry typed values both ways.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `value` with `DECIMALS` decimals (`12.50`), so figures read as figures.
pub fn decimals<const DECIMALS: usize, S: Serializer>(
    value: &f64,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{value:.DECIMALS$}"))
}

/// As [`decimals`]; absent is an empty field.
pub fn decimals_or_empty<const DECIMALS: usize, S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.collect_str(&format_args!("{value:.DECIMALS$}")),
        None => serializer.serialize_none(),
    }
}

/// Texts in one field, separated by `; ` (loadgen's reasons and QoS violations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextList(pub Vec<String>);

const LIST_SEPARATOR: &str = "; ";

impl Serialize for TextList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.join(LIST_SEPARATOR))
    }
}

impl<'de> Deserialize<'de> for TextList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(TextList(if text.is_empty() {
            Vec::new()
        } else {
            text.split(LIST_SEPARATOR).map(str::to_string).collect()
        }))
    }
}

/// Failures by kind in one field: `connect=2;timeout=1`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorCounts(pub BTreeMap<String, u64>);

impl Serialize for ErrorCounts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for ErrorCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (kind, count)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{kind}={count}")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for ErrorCounts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let mut counts = BTreeMap::new();
        for pair in text.split(';').filter(|p| !p.is_empty()) {
            let (kind, count) = pair
                .rsplit_once('=')
                .ok_or_else(|| D::Error::custom(format!("{pair:?} is not kind=count")))?;
            let count = count
                .parse()
                .map_err(|_| D::Error::custom(format!("{pair:?}: the count is not a number")))?;
            counts.insert(kind.to_string(), count);
        }
        Ok(ErrorCounts(counts))
    }
}

/// A verdict as `yes` or `no`; absent (nothing to judge) is an empty field.
pub mod yes_no {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `yes`, `no` or nothing.
    pub fn serialize<S: Serializer>(
        value: &Option<bool>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(true) => serializer.serialize_str("yes"),
            Some(false) => serializer.serialize_str("no"),
            None => serializer.serialize_none(),
        }
    }

    /// Reads what [`serialize`] writes.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<bool>, D::Error> {
        match Option::<String>::deserialize(deserializer)?.as_deref() {
            None | Some("") => Ok(None),
            Some("yes") => Ok(Some(true)),
            Some("no") => Ok(Some(false)),
            Some(other) => Err(D::Error::custom(format!("{other:?} is neither yes nor no"))),
        }
    }
}

/// A sweep point by its label, as in cell ids: `-`, a payload size with its unit (`1KB`), a
/// number of client pairs (`100`).
pub mod point_label {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::plan::CellPoint;

    /// Writes [`CellPoint::label`].
    pub fn serialize<S: Serializer>(point: &CellPoint, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&point.label())
    }

    /// Reads what [`serialize`] writes: a size always has a unit, a number of pairs never.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<CellPoint, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "-" {
            return Ok(CellPoint::Single);
        }
        if let Ok(pairs) = text.parse::<u32>() {
            return Ok(CellPoint::Clients(pairs));
        }
        text.parse()
            .map(CellPoint::Payload)
            .map_err(|_| D::Error::custom(format!("{text:?} is neither -, a size nor a number")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        #[serde(serialize_with = "decimals::<2, _>")]
        cpu: f64,
        #[serde(serialize_with = "decimals_or_empty::<1, _>")]
        rss: Option<f64>,
        reasons: TextList,
        errors: ErrorCounts,
        #[serde(with = "yes_no", default)]
        limited: Option<bool>,
    }

    fn round_trip(row: &Row) -> (String, Row) {
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.serialize(row).expect("serialize");
        let text = String::from_utf8(writer.into_inner().expect("flush")).expect("utf-8");
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let back = reader
            .deserialize()
            .next()
            .expect("one row")
            .expect("deserialize");
        (text, back)
    }

    #[test]
    fn fields_read_back_what_they_write() {
        let row = Row {
            cpu: 12.5,
            rss: Some(3.0),
            reasons: TextList(vec!["backlog grew".into(), "halves differ, 7 %".into()]),
            errors: ErrorCounts([("connect".to_string(), 2), ("timeout".to_string(), 1)].into()),
            limited: Some(false),
        };
        let (text, back) = round_trip(&row);
        assert_eq!(
            text,
            "cpu,rss,reasons,errors,limited\n\
             12.50,3.0,\"backlog grew; halves differ, 7 %\",connect=2;timeout=1,no\n"
        );
        assert_eq!(back, row);
        let empty = Row {
            cpu: 0.0,
            rss: None,
            reasons: TextList::default(),
            errors: ErrorCounts::default(),
            limited: None,
        };
        let (text, back) = round_trip(&empty);
        assert!(text.ends_with("\n0.00,,,,\n"), "{text}");
        assert_eq!(back, empty);
    }

    #[test]
    fn sweep_points_are_written_and_read_as_their_labels() {
        use crate::plan::CellPoint;
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Point {
            #[serde(with = "point_label")]
            point: CellPoint,
        }
        for (point, label) in [
            (CellPoint::Single, "-"),
            (CellPoint::Payload(loadgen::size::ByteSize(1_000)), "1KB"),
            (CellPoint::Payload(loadgen::size::ByteSize(100)), "100B"),
            (CellPoint::Clients(100), "100"),
        ] {
            let mut writer = csv::Writer::from_writer(Vec::new());
            writer.serialize(Point { point }).expect("serialize");
            let text = String::from_utf8(writer.into_inner().expect("flush")).expect("utf-8");
            assert_eq!(text, format!("point\n{label}\n"));
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            let back: Point = reader.deserialize().next().expect("a row").expect("read");
            assert_eq!(back.point, point);
        }
        let mut reader = csv::Reader::from_reader("point\nlots\n".as_bytes());
        let bad: Result<Point, _> = reader.deserialize().next().expect("a row");
        assert!(bad.is_err(), "{bad:?}");
    }
}
