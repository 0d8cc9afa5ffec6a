//! The broker's answers by reason code, named as the run's error counts name them: one count
//! per code (`connack_refused_not_authorized`, `suback_refused_shared_subscriptions_not_supported`,
//! `puback_refused_quota_exceeded`, `broker_disconnect_server_shutting_down`, ...), so a refusal reads
//! as the broker's answer in the result, `summary.csv` and the report.

use rumqttc::mqttbytes::v4;
use rumqttc::v5::mqttbytes::v5;

/// A 3.1.1 CONNACK's refusal (`None`: accepted).
pub(crate) fn connack_v4(code: v4::ConnectReturnCode) -> Option<&'static str> {
    use v4::ConnectReturnCode as C;
    Some(match code {
        C::Success => return None,
        C::RefusedProtocolVersion => "connack_refused_protocol_version",
        C::BadClientId => "connack_refused_bad_client_id",
        C::ServiceUnavailable => "connack_refused_service_unavailable",
        C::BadUserNamePassword => "connack_refused_bad_user_name_password",
        C::NotAuthorized => "connack_refused_not_authorized",
    })
}

/// An MQTT 5 CONNACK's refusal (`None`: accepted).
pub(crate) fn connack_v5(code: v5::ConnectReturnCode) -> Option<&'static str> {
    use v5::ConnectReturnCode as C;
    Some(match code {
        C::Success => return None,
        C::RefusedProtocolVersion => "connack_refused_protocol_version",
        C::BadClientId => "connack_refused_bad_client_id",
        C::ServiceUnavailable => "connack_refused_service_unavailable",
        C::UnspecifiedError => "connack_refused_unspecified_error",
        C::MalformedPacket => "connack_refused_malformed_packet",
        C::ProtocolError => "connack_refused_protocol_error",
        C::ImplementationSpecificError => "connack_refused_implementation_specific_error",
        C::UnsupportedProtocolVersion => "connack_refused_unsupported_protocol_version",
        C::ClientIdentifierNotValid => "connack_refused_client_identifier_not_valid",
        C::BadUserNamePassword => "connack_refused_bad_user_name_password",
        C::NotAuthorized => "connack_refused_not_authorized",
        C::ServerUnavailable => "connack_refused_server_unavailable",
        C::ServerBusy => "connack_refused_server_busy",
        C::Banned => "connack_refused_banned",
        C::BadAuthenticationMethod => "connack_refused_bad_authentication_method",
        C::TopicNameInvalid => "connack_refused_topic_name_invalid",
        C::PacketTooLarge => "connack_refused_packet_too_large",
        C::QuotaExceeded => "connack_refused_quota_exceeded",
        C::PayloadFormatInvalid => "connack_refused_payload_format_invalid",
        C::RetainNotSupported => "connack_refused_retain_not_supported",
        C::QoSNotSupported => "connack_refused_qos_not_supported",
        C::UseAnotherServer => "connack_refused_use_another_server",
        C::ServerMoved => "connack_refused_server_moved",
        C::ConnectionRateExceeded => "connack_refused_connection_rate_exceeded",
    })
}

/// A 3.1.1 SUBACK's answer for one filter: the QoS granted, or the refusal (3.1.1 has one).
pub(crate) fn suback_v4(code: &v4::SubscribeReasonCode) -> Result<u8, &'static str> {
    match code {
        v4::SubscribeReasonCode::Success(qos) => Ok(*qos as u8),
        v4::SubscribeReasonCode::Failure => Err("suback_refused_failure"),
    }
}

/// An MQTT 5 SUBACK's answer for one filter: the QoS granted, or the refusal by its code.
pub(crate) fn suback_v5(code: &v5::SubscribeReasonCode) -> Result<u8, &'static str> {
    use v5::SubscribeReasonCode as R;
    Err(match code {
        R::Success(qos) => return Ok(*qos as u8),
        R::Failure | R::Unspecified => "suback_refused_unspecified_error",
        R::ImplementationSpecific => "suback_refused_implementation_specific_error",
        R::NotAuthorized => "suback_refused_not_authorized",
        R::TopicFilterInvalid => "suback_refused_topic_filter_invalid",
        R::PkidInUse => "suback_refused_packet_identifier_in_use",
        R::QuotaExceeded => "suback_refused_quota_exceeded",
        R::SharedSubscriptionsNotSupported => "suback_refused_shared_subscriptions_not_supported",
        R::SubscriptionIdNotSupported => "suback_refused_subscription_identifiers_not_supported",
        R::WildcardSubscriptionsNotSupported => {
            "suback_refused_wildcard_subscriptions_not_supported"
        }
    })
}

/// A PUBACK's refusal, named; `None` for success and for 0x10 "no matching subscribers" (the
/// broker took the message; nobody wanted it).
pub(crate) fn puback_refusal(reason: &v5::PubAckReason) -> Option<&'static str> {
    use v5::PubAckReason as R;
    match reason {
        R::Success | R::NoMatchingSubscribers => None,
        R::UnspecifiedError => Some("puback_refused_unspecified_error"),
        R::ImplementationSpecificError => Some("puback_refused_implementation_specific_error"),
        R::NotAuthorized => Some("puback_refused_not_authorized"),
        R::TopicNameInvalid => Some("puback_refused_topic_name_invalid"),
        R::PacketIdentifierInUse => Some("puback_refused_packet_identifier_in_use"),
        R::QuotaExceeded => Some("puback_refused_quota_exceeded"),
        R::PayloadFormatInvalid => Some("puback_refused_payload_format_invalid"),
    }
}

/// A PUBREC's refusal, named as [`puback_refusal`] names a PUBACK's.
pub(crate) fn pubrec_refusal(reason: &v5::PubRecReason) -> Option<&'static str> {
    use v5::PubRecReason as R;
    match reason {
        R::Success | R::NoMatchingSubscribers => None,
        R::UnspecifiedError => Some("pubrec_refused_unspecified_error"),
        R::ImplementationSpecificError => Some("pubrec_refused_implementation_specific_error"),
        R::NotAuthorized => Some("pubrec_refused_not_authorized"),
        R::TopicNameInvalid => Some("pubrec_refused_topic_name_invalid"),
        R::PacketIdentifierInUse => Some("pubrec_refused_packet_identifier_in_use"),
        R::QuotaExceeded => Some("pubrec_refused_quota_exceeded"),
        R::PayloadFormatInvalid => Some("pubrec_refused_payload_format_invalid"),
    }
}

/// Why an MQTT 5 broker ended a connection, by the reason code of its DISCONNECT.
pub(crate) fn disconnect_v5(code: v5::DisconnectReasonCode) -> &'static str {
    use v5::DisconnectReasonCode as D;
    match code {
        D::NormalDisconnection => "broker_disconnect_normal",
        D::DisconnectWithWillMessage => "broker_disconnect_with_will_message",
        D::UnspecifiedError => "broker_disconnect_unspecified_error",
        D::MalformedPacket => "broker_disconnect_malformed_packet",
        D::ProtocolError => "broker_disconnect_protocol_error",
        D::ImplementationSpecificError => "broker_disconnect_implementation_specific_error",
        D::NotAuthorized => "broker_disconnect_not_authorized",
        D::ServerBusy => "broker_disconnect_server_busy",
        D::ServerShuttingDown => "broker_disconnect_server_shutting_down",
        D::KeepAliveTimeout => "broker_disconnect_keep_alive_timeout",
        D::SessionTakenOver => "broker_disconnect_session_taken_over",
        D::TopicFilterInvalid => "broker_disconnect_topic_filter_invalid",
        D::TopicNameInvalid => "broker_disconnect_topic_name_invalid",
        D::ReceiveMaximumExceeded => "broker_disconnect_receive_maximum_exceeded",
        D::TopicAliasInvalid => "broker_disconnect_topic_alias_invalid",
        D::PacketTooLarge => "broker_disconnect_packet_too_large",
        D::MessageRateTooHigh => "broker_disconnect_message_rate_too_high",
        D::QuotaExceeded => "broker_disconnect_quota_exceeded",
        D::AdministrativeAction => "broker_disconnect_administrative_action",
        D::PayloadFormatInvalid => "broker_disconnect_payload_format_invalid",
        D::RetainNotSupported => "broker_disconnect_retain_not_supported",
        D::QoSNotSupported => "broker_disconnect_qos_not_supported",
        D::UseAnotherServer => "broker_disconnect_use_another_server",
        D::ServerMoved => "broker_disconnect_server_moved",
        D::SharedSubscriptionNotSupported => "broker_disconnect_shared_subscriptions_not_supported",
        D::ConnectionRateExceeded => "broker_disconnect_connection_rate_exceeded",
        D::MaximumConnectTime => "broker_disconnect_maximum_connect_time",
        D::SubscriptionIdentifiersNotSupported => {
            "broker_disconnect_subscription_identifiers_not_supported"
        }
        D::WildcardSubscriptionsNotSupported => {
            "broker_disconnect_wildcard_subscriptions_not_supported"
        }
    }
}

/// A DISCONNECT whose reason code MQTT 5 does not define.
pub(crate) const DISCONNECT_UNKNOWN: &str = "broker_disconnect_unknown_reason";

/// The count a 3.1.1 broker's closing of the connection gets: 3.1.1 has no DISCONNECT from the
/// server, so one arriving is itself the answer.
pub(crate) const DISCONNECT_V4: &str = "broker_disconnect_without_reason";
