//! [`InvalidSpec`]: a field of a request is wrong, named by its path with the value given;
//! apart from [`BrokerSpec`](crate::BrokerSpec) so that [`Product`](crate::Product) parses
//! into it too.

/// A field of a broker request is wrong; nothing was changed on the node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} {reason}")]
pub struct InvalidSpec {
    /// The spec field at fault, as a path (`name`, `port`, `kind.product`).
    pub field: &'static str,
    /// The offending value as given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidSpec {
    /// An error for `field`.
    pub fn new(field: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        InvalidSpec {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
