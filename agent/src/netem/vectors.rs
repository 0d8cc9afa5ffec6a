//! Test vectors: the netlink requests iproute2's `tc` sends for netem, captured with strace by
//! `testdata/capture.sh` (see the header of `testdata/tc-netem-requests.tsv`), and the
//! [`NetemParams`] each one stands for.

use std::time::Duration;

use domain::netem::{GilbertElliott, NetemParams};

const REQUESTS: &str = include_str!("testdata/tc-netem-requests.tsv");

/// `nlmsghdr` (16 bytes) + `tcmsg` (20 bytes).
const HEADERS_LEN: usize = 36;
const TCA_OPTIONS: u16 = 2;

/// One captured `tc qdisc {add,replace} dev lo root netem ...` request.
#[derive(Debug, Clone)]
pub(crate) struct TcRequest {
    pub name: String,
    /// `add` or `replace`.
    pub verb: String,
    /// The netem arguments given to tc.
    pub args: String,
    /// The whole netlink message, sequence number, port id and ifindex zeroed.
    pub message: Vec<u8>,
    /// The payload of its `TCA_OPTIONS` attribute.
    pub options: Vec<u8>,
}

/// All captured requests.
pub(crate) fn requests() -> Vec<TcRequest> {
    REQUESTS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 4, "bad vector line: {line}");
            let message = hex(cols[3]);
            let options = options_of(&message);
            TcRequest {
                name: cols[0].to_owned(),
                verb: cols[1].to_owned(),
                args: cols[2].to_owned(),
                message,
                options,
            }
        })
        .collect()
}

/// The parameters each vector was captured for, as a user would write them.
pub(crate) fn params(name: &str) -> NetemParams {
    let ms =
        |v: f64, j: f64, l: f64| NetemParams::from_millis(v, j, l).expect("valid vector params");
    match name {
        "delay" => ms(10.0, 0.0, 0.0),
        "delay_jitter" => ms(10.0, 2.0, 0.0),
        "loss" => ms(0.0, 0.0, 1.0),
        "delay_loss" => ms(10.0, 0.0, 1.0),
        "delay_jitter_loss" => ms(10.0, 2.0, 1.0),
        // tc's "1mbit" is 10^6 bit/s.
        "rate" => NetemParams {
            rate_bytes_per_sec: Some(125_000),
            ..Default::default()
        },
        "rate64" => NetemParams {
            rate_bytes_per_sec: Some(5_000_000_000),
            ..Default::default()
        },
        "limit" => NetemParams {
            limit_packets: Some(500),
            ..Default::default()
        },
        "edge_side" => ms(1.25, 0.25, 0.02),
        "cloud_side" => ms(3.125, 0.625, 0.05),
        "loss10" => ms(0.0, 0.0, 10.0),
        "all" => NetemParams {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(1),
            loss_percent: 0.5,
            rate_bytes_per_sec: Some(1_250_000),
            limit_packets: Some(2000),
            gilbert_elliott: None,
        },
        // tc's `loss gemodel P R 1-H 1-K`.
        "gemodel" => NetemParams {
            gilbert_elliott: Some(gemodel(5.0, 50.0, 100.0, 0.0)),
            ..Default::default()
        },
        "edge_gemodel" => NetemParams {
            gilbert_elliott: Some(gemodel(1.0, 25.0, 70.0, 0.1)),
            ..ms(1.25, 0.25, 0.0)
        },
        "gemodel_rate" => NetemParams {
            rate_bytes_per_sec: Some(1_250_000),
            limit_packets: Some(2000),
            gilbert_elliott: Some(gemodel(2.0, 40.0, 100.0, 0.0)),
            ..ms(5.0, 0.0, 0.0)
        },
        // h = u32::MAX - rint(1-h): 0x7fffffff and 0xe6666665, as tc sends them.
        "gemodel_half" => NetemParams {
            gilbert_elliott: Some(gemodel(50.0, 50.0, 50.0, 0.0)),
            ..Default::default()
        },
        "gemodel_tenth" => NetemParams {
            gilbert_elliott: Some(gemodel(10.0, 10.0, 10.0, 0.0)),
            ..Default::default()
        },
        other => panic!("no params for vector {other}"),
    }
}

fn gemodel(p: f64, r: f64, bad: f64, good: f64) -> GilbertElliott {
    GilbertElliott {
        p_percent: p,
        r_percent: r,
        bad_loss_percent: bad,
        good_loss_percent: good,
    }
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn options_of(message: &[u8]) -> Vec<u8> {
    let mut at = HEADERS_LEN;
    while at + 4 <= message.len() {
        let len = usize::from(u16::from_ne_bytes([message[at], message[at + 1]]));
        let kind = u16::from_ne_bytes([message[at + 2], message[at + 3]]);
        if kind == TCA_OPTIONS {
            return message[at + 4..at + len].to_vec();
        }
        at += len.next_multiple_of(4);
    }
    panic!("no TCA_OPTIONS in captured request");
}

#[test]
fn add_and_replace_differ_only_in_flags() {
    let all = requests();
    for add in all.iter().filter(|r| r.verb == "add") {
        let replace = all
            .iter()
            .find(|r| r.verb == "replace" && r.name == add.name)
            .expect("replace captured too");
        assert_eq!(add.options, replace.options, "{}", add.name);
        // nlmsg_flags at bytes 6-7: add = REQUEST|ACK|EXCL|CREATE, replace = REQUEST|ACK|REPLACE|CREATE.
        assert_eq!(u16::from_ne_bytes([add.message[6], add.message[7]]), 0x0605);
        assert_eq!(
            u16::from_ne_bytes([replace.message[6], replace.message[7]]),
            0x0505
        );
        assert_eq!(add.message[..6], replace.message[..6]);
        assert_eq!(add.message[8..], replace.message[8..]);
    }
}
