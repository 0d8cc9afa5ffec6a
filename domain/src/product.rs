//! [`Product`]: the brokers of the study by name, as plans, agents and the wire name them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::invalid_spec::InvalidSpec;

/// The brokers Continuum runs: the study's five (PAPER.md, Table I), then those added since
/// because they install on a node from a registry the project reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Product {
    /// Eclipse Mosquitto.
    Mosquitto,
    /// RabbitMQ with its MQTT plugin.
    RabbitMq,
    /// EMQX (5.x).
    Emqx,
    /// VerneMQ.
    VerneMq,
    /// HiveMQ Community Edition.
    HiveMq,
    /// The broker of the `mqttv5-cli` crate (`mqttv5 broker`): Rust, MQTT 5 and 3.1.1 over TCP,
    /// TLS, WebSocket and QUIC.
    Mqttv5,
    /// aedes, the Node.js broker, run by its command line (`aedes-cli`).
    Aedes,
    /// amqtt, Python's asyncio broker (MQTT 3.1.1).
    Amqtt,
    /// Apache ActiveMQ Classic, through its MQTT transport connector.
    ActiveMq,
    /// ejabberd, the Erlang XMPP server, through its `mod_mqtt`.
    Ejabberd,
    /// rmqtt, the Rust broker (its server engine, run by Continuum's `continuum-rmqtt`).
    Rmqtt,
}

impl Product {
    /// Every product: the study's, in its order, then the others.
    pub const ALL: [Product; 11] = [
        Product::Mosquitto,
        Product::Emqx,
        Product::RabbitMq,
        Product::VerneMq,
        Product::HiveMq,
        Product::Mqttv5,
        Product::Aedes,
        Product::Amqtt,
        Product::ActiveMq,
        Product::Ejabberd,
        Product::Rmqtt,
    ];

    /// The lower-case name used in plans and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Product::Mosquitto => "mosquitto",
            Product::RabbitMq => "rabbitmq",
            Product::Emqx => "emqx",
            Product::VerneMq => "vernemq",
            Product::HiveMq => "hivemq",
            Product::Mqttv5 => "mqttv5",
            Product::Aedes => "aedes",
            Product::Amqtt => "amqtt",
            Product::ActiveMq => "activemq",
            Product::Ejabberd => "ejabberd",
            Product::Rmqtt => "rmqtt",
        }
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Product {
    type Err = InvalidSpec;

    /// Parses a product name, case-insensitively; `hivemq-ce` is accepted for HiveMQ.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let lower = text.trim().to_ascii_lowercase();
        if lower == "hivemq-ce" {
            return Ok(Product::HiveMq);
        }
        Product::ALL
            .into_iter()
            .find(|product| product.as_str() == lower)
            .ok_or_else(|| {
                let known: Vec<&str> = Product::ALL.iter().map(|p| p.as_str()).collect();
                InvalidSpec::new(
                    "kind.product",
                    text,
                    format!(
                        "is not a known product (expected one of {})",
                        known.join(", ")
                    ),
                )
            })
    }
}

impl Serialize for Product {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Plans name products as strings; an unknown one is refused listing the known ones.
impl<'de> Deserialize<'de> for Product {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(|error: InvalidSpec| {
            serde::de::Error::custom(format!("{:?} {}", error.value, error.reason))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_parse_by_name_and_an_unknown_one_names_the_field() {
        for product in Product::ALL {
            assert_eq!(product.as_str().parse::<Product>().ok(), Some(product));
        }
        assert_eq!("HiveMQ-CE".parse::<Product>().ok(), Some(Product::HiveMq));
        let error = "mosquito".parse::<Product>().unwrap_err();
        assert_eq!(error.field, "kind.product");
        let text = error.to_string();
        assert!(text.starts_with("kind.product: \"mosquito\""), "{text}");
        assert!(text.contains("mosquitto, emqx, rabbitmq"), "{text}");
    }
}
