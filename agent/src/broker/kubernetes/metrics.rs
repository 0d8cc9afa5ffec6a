//! CPU and memory of a broker's pod, from the Kubernetes metrics API (metrics-server, which
//! k3s runs by default): `kubectl get --raw /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods
//! ?labelSelector=...`.
//!
//! A broker on Kubernetes has no process on the agent's node, so [`PodUsage`] is the
//! [`UsageSampler`] the Metrics RPC reads instead of a PID. What the API reports differs
//! from a process sample in two ways, stated here so nobody compares them blindly: CPU is
//! averaged over metrics-server's window (`window`, about 10-15 s), and memory is the
//! containers' working set (what the kubelet evicts on), not the RSS.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::kubectl::{Kubectl, KubectlError};
use crate::broker::error::BrokerError;
use crate::broker::{BoxFuture, Usage, UsageSampler};

/// How long one metrics API call may take.
const QUERY_LIMIT: Duration = Duration::from_secs(10);

/// Answers younger than this are reused: metrics-server refreshes far less often, and a
/// Metrics stream at 100 ms must not run kubectl ten times a second.
const REUSE_FOR: Duration = Duration::from_secs(1);

/// The usage of the pods of one broker, read from the metrics API.
#[derive(Debug)]
pub struct PodUsage {
    name: String,
    kubectl: Kubectl,
    path: String,
    last: Mutex<Option<(Instant, Option<Usage>)>>,
}

impl PodUsage {
    /// The sampler of broker `name`, whose pods in `namespace` match `selector` (`k=v,...`).
    pub fn new(name: &str, kubectl: Kubectl, namespace: &str, selector: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            kubectl,
            path: format!(
                "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?labelSelector={}",
                percent_encode(selector)
            ),
            last: Mutex::new(None),
        })
    }

    async fn query(&self) -> Result<Option<Usage>, KubectlError> {
        let list: PodMetricsList = self
            .kubectl
            .json(&["get", "--raw", &self.path], QUERY_LIMIT)
            .await?;
        usage_of(&list).map_err(|reason| KubectlError::BadAnswer {
            command: format!("kubectl get --raw {}", self.path),
            reason,
        })
    }
}

impl UsageSampler for PodUsage {
    fn sample(&self) -> BoxFuture<'_, Result<Option<Usage>, BrokerError>> {
        Box::pin(async move {
            // Held across the query: concurrent streams share one kubectl call.
            let mut last = self.last.lock().await;
            if let Some((at, usage)) = *last
                && at.elapsed() < REUSE_FOR
            {
                return Ok(usage);
            }
            let usage = self
                .query()
                .await
                .map_err(|source| BrokerError::Kubernetes {
                    name: self.name.clone(),
                    context: "reading pod metrics (is metrics-server running?)".into(),
                    source,
                })?;
            *last = Some((Instant::now(), usage));
            Ok(usage)
        })
    }
}

/// `metrics.k8s.io/v1beta1` PodMetricsList, the fields used.
#[derive(Debug, Deserialize)]
struct PodMetricsList {
    items: Vec<PodMetrics>,
}

#[derive(Debug, Deserialize)]
struct PodMetrics {
    containers: Vec<ContainerMetrics>,
}

#[derive(Debug, Deserialize)]
struct ContainerMetrics {
    usage: ContainerUsage,
}

#[derive(Debug, Deserialize)]
struct ContainerUsage {
    cpu: String,
    memory: String,
}

/// The summed usage of every container of every pod listed; `None` when no pod is (the
/// API has not scraped a new pod yet, or it is gone).
fn usage_of(list: &PodMetricsList) -> Result<Option<Usage>, String> {
    let containers: Vec<&ContainerUsage> = list
        .items
        .iter()
        .flat_map(|pod| pod.containers.iter().map(|c| &c.usage))
        .collect();
    if containers.is_empty() {
        return Ok(None);
    }
    let mut cores = 0.0;
    let mut bytes = 0.0;
    for usage in containers {
        cores += parse_quantity(&usage.cpu).map_err(|e| format!("cpu {:?}: {e}", usage.cpu))?;
        bytes +=
            parse_quantity(&usage.memory).map_err(|e| format!("memory {:?}: {e}", usage.memory))?;
    }
    Ok(Some(Usage {
        cpu_percent: cores * 100.0,
        // Rounded to whole bytes; a working set is far below u64's range.
        memory_bytes: bytes.round() as u64,
    }))
}

/// A Kubernetes quantity (`250m`, `12345678n`, `1.5`, `123456Ki`, `12Mi`, `1e3`) in its base
/// unit: cores for CPU, bytes for memory.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number"))?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..]
                .parse()
                .map_err(|_| format!("{exponent:?} is not an exponent"))?;
            10.0_f64.powi(power)
        }
        other => return Err(format!("unknown suffix {other:?}")),
    };
    if number < 0.0 {
        return Err("is negative".to_owned());
    }
    Ok(number * factor)
}

/// Percent-encodes what a label selector holds besides unreserved characters (`/`, `=`, `,`).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_in_base_units() {
        let close = |a: f64, b: f64| (a - b).abs() <= b.abs() * 1e-12;
        for (text, value) in [
            ("12345678n", 0.012_345_678),
            ("250m", 0.25),
            ("1500u", 0.0015),
            ("2", 2.0),
            ("1.5", 1.5),
            ("0", 0.0),
            ("123456Ki", 123_456.0 * 1024.0),
            ("12Mi", 12.0 * 1024.0 * 1024.0),
            ("1Gi", 1_073_741_824.0),
            ("128974848", 128_974_848.0),
            ("129e6", 129e6),
            ("1E3", 1000.0),
            ("100M", 1e8),
            ("2k", 2000.0),
        ] {
            let parsed = parse_quantity(text).unwrap();
            assert!(close(parsed, value), "{text}: {parsed} != {value}");
        }
        for bad in ["", "m", "12Xi", "1.2.3", "-5", "3e", "Ki12"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn usage_sums_every_container_of_every_pod() {
        let list: PodMetricsList = serde_json::from_str(
            r#"{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{},
            "items":[
              {"metadata":{"name":"bench-7d9c-a"},"timestamp":"2025-01-01T00:00:00Z",
               "window":"10.5s","containers":[
                 {"name":"emqx","usage":{"cpu":"250000000n","memory":"204800Ki"}},
                 {"name":"side","usage":{"cpu":"50m","memory":"1Mi"}}]},
              {"metadata":{"name":"bench-7d9c-b"},"timestamp":"2025-01-01T00:00:00Z",
               "window":"10.5s","containers":[
                 {"name":"emqx","usage":{"cpu":"1","memory":"0"}}]}]}"#,
        )
        .unwrap();
        let usage = usage_of(&list).unwrap().unwrap();
        assert!((usage.cpu_percent - 130.0).abs() < 1e-9, "{usage:?}");
        assert_eq!(usage.memory_bytes, 204_800 * 1024 + 1024 * 1024);

        let empty: PodMetricsList = serde_json::from_str(r#"{"items":[]}"#).unwrap();
        assert_eq!(usage_of(&empty).unwrap(), None);
        let bad: PodMetricsList = serde_json::from_str(
            r#"{"items":[{"containers":[{"usage":{"cpu":"lots","memory":"1"}}]}]}"#,
        )
        .unwrap();
        assert!(usage_of(&bad).unwrap_err().starts_with("cpu \"lots\""));
    }

    #[test]
    fn the_selector_is_percent_encoded_into_the_path() {
        let sampler = PodUsage::new(
            "bench",
            Kubectl::default(),
            "continuum",
            "app.kubernetes.io/instance=bench,app.kubernetes.io/name=emqx",
        );
        assert_eq!(
            sampler.path,
            "/apis/metrics.k8s.io/v1beta1/namespaces/continuum/pods?labelSelector=\
             app.kubernetes.io%2Finstance%3Dbench%2Capp.kubernetes.io%2Fname%3Demqx"
        );
    }
}
