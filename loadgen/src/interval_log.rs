//! A run's latency per interval as an HdrHistogram interval log (`.hlog`): the format
//! HdrHistogram's `HistogramLogProcessor` and its ports read, so a reader can plot the run's
//! own latency over time with the field's tools.
//!
//! Values are ns, as in every histogram of a result; `Interval_Max` is in ms (the log's
//! max-value divisor). `StartTime` and `BaseTime` are the run clock's origin, so each
//! interval's timestamp is seconds since the run began.

use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;

use crate::result::RunResult;

/// The interval log of `result`'s open-loop (end-to-end) latency; a log with its header and
/// no interval when nothing was measured.
pub fn latency_log(result: &RunResult) -> Result<String, String> {
    let origin = UNIX_EPOCH + Duration::from_nanos(result.clock_origin_unix_ns);
    let intervals = &result.latency_intervals;
    let length = Duration::from_nanos(intervals.interval_ns);
    let mut bytes = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "Continuum loadgen run {}: latency from the intended send time (ns), per {} s \
                 of the run clock by receive time",
                result.run_id,
                length.as_secs_f64()
            ))
            .with_start_time(origin)
            .with_base_time(origin)
            .with_max_value_divisor(1e6)
            .begin_log_with(&mut bytes, &mut serializer)
            .map_err(|e| e.to_string())?;
        for interval in &intervals.intervals {
            let start = Duration::from_nanos(interval.index.saturating_mul(intervals.interval_ns));
            log.write_histogram(&interval.histogram, start, length, None)
                .map_err(|e| e.to_string())?;
        }
    }
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn the_log_reads_back_interval_by_interval_with_its_start_times() {
        let spec = crate::presets::latency();
        let mut result = RunResult::empty(&spec, "hlog-test");
        result.clock_origin_unix_ns = 1_777_638_896_000_000_000;
        result.latency_intervals.record(2_100_000_000, 150_000);
        result.latency_intervals.record(2_200_000_000, 250_000);
        result.latency_intervals.record(5_000_000_000, 4_000_000);
        let log = latency_log(&result).expect("a log");
        assert!(log.contains("#[StartTime: 1777638896.000"), "{log}");
        assert!(log.contains("#[BaseTime: 1777638896.000"), "{log}");

        let mut read = Vec::new();
        for entry in IntervalLogIterator::new(log.as_bytes()) {
            if let LogEntry::Interval(interval) = entry.expect("parses") {
                let bytes = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    interval.encoded_histogram(),
                )
                .expect("base64");
                let histogram: hdrhistogram::Histogram<u64> = Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .expect("a histogram");
                read.push((
                    interval.start_timestamp().as_secs_f64(),
                    interval.duration().as_secs_f64(),
                    histogram.len(),
                    histogram.max(),
                    interval.max(),
                ));
            }
        }
        assert_eq!(read.len(), 2, "{log}");
        assert_eq!((read[0].0, read[0].1, read[0].2), (2.0, 1.0, 2));
        assert_eq!((read[1].0, read[1].2), (5.0, 1));
        assert!(
            (read[1].4 - 4.0).abs() < 0.01,
            "Interval_Max in ms: {}",
            read[1].4
        );
        assert_eq!(
            read[1].3,
            result.latency_intervals.intervals[1].histogram.max()
        );
    }
}
