//! Which protocol era a message belongs to.
//!
//! Transports report what they know about a message ([`Facts`]: its method, its `_meta`, the
//! version a header named) and [`classify`] decides; nothing else in the crate reads those
//! facts to pick an era. A connection asks once, for its first message (stdio); HTTP asks for
//! every POST, since each 2026-07-28 request stands alone.

use crate::jsonrpc::Request;
use crate::model::JsonObject;
use crate::wire::v2025_11_25;
use serde_json::Value;

/// The two families of protocol revisions a server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// 2025-11-25 and the older revisions: a session opened by `initialize`.
    Stateful,
    /// 2026-07-28: every request carries its own version and capabilities.
    Stateless,
}

/// What a transport knows about one message when the era is decided.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Facts<'a> {
    /// The message's method.
    pub(crate) method: &'a str,
    /// The message's `params._meta`, when it is an object.
    pub(crate) meta: Option<&'a JsonObject>,
    /// The protocol version named outside the message (HTTP's `MCP-Protocol-Version`).
    pub(crate) version_header: Option<&'a str>,
}

impl<'a> Facts<'a> {
    /// The facts a request carries itself: its method and its `_meta`.
    pub(crate) fn of(request: &'a Request) -> Self {
        Self {
            method: &request.method,
            meta: request
                .params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(Value::as_object),
            version_header: None,
        }
    }

    /// Adds the protocol version a transport header named.
    #[cfg(feature = "http")]
    pub(crate) fn with_version_header(mut self, version: Option<&'a str>) -> Self {
        self.version_header = version;
        self
    }
}

/// Methods only the stateless era has; naming one is enough to be read as stateless.
const STATELESS_ONLY: [&str; 3] = ["server/discover", "tasks/update", "subscriptions/listen"];

/// The reserved `_meta` prefix of the protocol's own keys.
const RESERVED_PREFIX: &str = "io.modelcontextprotocol/";

/// Decides the era of a message.
///
/// Stateless when the `_meta` carries a key of the 2026-07-28 request metadata, when a header
/// names a version that no stateful revision has, or when the method exists only in the
/// stateless era; stateful otherwise (so `initialize`, `ping` and anything else sent before a
/// handshake are read as the stateful era's).
pub(crate) fn classify(facts: &Facts<'_>) -> Kind {
    let meta_2026 = facts.meta.is_some_and(|m| m.keys().any(|k| is_2026_key(k)));
    let version_2026 = facts
        .version_header
        .is_some_and(|v| !is_stateful_version(v));
    if meta_2026 || version_2026 || STATELESS_ONLY.contains(&facts.method) {
        Kind::Stateless
    } else {
        Kind::Stateful
    }
}

/// `true` for a version of the stateful family.
pub(crate) fn is_stateful_version(version: &str) -> bool {
    v2025_11_25::SUPPORTED.contains(&version)
}

/// `true` for a reserved `_meta` key of the 2026-07-28 request metadata. The stateful era's
/// own reserved key (`related-task`) does not count.
fn is_2026_key(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) && key != v2025_11_25::RELATED_TASK
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn every_case_of_the_old_classifiers() {
        use Kind::{Stateful, Stateless};
        let version = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        let caps_only = json!({"io.modelcontextprotocol/clientCapabilities": {}});
        let future_key = json!({"io.modelcontextprotocol/somethingNew": 1});
        let progress = json!({"progressToken": 7});
        let related = json!({"io.modelcontextprotocol/related-task": {"taskId": "t"}});
        let vendor = json!({"com.example/protocolVersion": "2026-07-28"});
        #[rustfmt::skip]
        let cases: [(&str, Option<&Value>, Option<&str>, Kind); 27] = [
            // The `_meta` decides, whatever the method (stdio's first message, any HTTP POST).
            ("tools/list", Some(&version), None, Stateless),
            ("initialize", Some(&version), None, Stateless),
            ("ping", Some(&version), None, Stateless),
            ("tools/call", Some(&caps_only), None, Stateless),
            ("tools/call", Some(&future_key), None, Stateless),
            ("tools/list", Some(&version), Some("2025-11-25"), Stateless),
            ("tools/list", Some(&version), Some("2026-07-28"), Stateless),
            // Keys that are not the 2026 request metadata do not.
            ("tools/list", Some(&progress), None, Stateful),
            ("tools/list", Some(&vendor), None, Stateful),
            ("tools/call", Some(&related), None, Stateful),
            ("tools/call", Some(&related), Some("2025-11-25"), Stateful),
            // Methods only the stateless era has.
            ("server/discover", None, None, Stateless),
            ("tasks/update", None, None, Stateless),
            ("subscriptions/listen", None, None, Stateless),
            ("server/discover", None, Some("2025-11-25"), Stateless),
            // A version header that no stateful revision has (HTTP).
            ("tools/list", None, Some("2026-07-28"), Stateless),
            ("tools/list", None, Some("v999"), Stateless),
            ("initialize", None, Some("2026-07-28"), Stateless),
            ("ping", None, Some("2026-07-28"), Stateless),
            // Stateful versions.
            ("tools/list", None, Some("2025-11-25"), Stateful),
            ("tools/list", None, Some("2025-06-18"), Stateful),
            ("tools/list", None, Some("2025-03-26"), Stateful),
            ("tools/list", None, Some("2024-11-05"), Stateful),
            // Nothing says stateless: the handshake and whatever comes before it.
            ("initialize", None, None, Stateful),
            ("ping", None, None, Stateful),
            ("tools/list", None, None, Stateful),
            ("tasks/get", None, None, Stateful),
        ];
        for (method, m, header, expected) in cases {
            let m = m.map(|v| meta(v.clone()));
            let facts = Facts {
                method,
                meta: m.as_ref(),
                version_header: header,
            };
            assert_eq!(classify(&facts), expected, "{method} {m:?} {header:?}");
        }
    }

    #[test]
    fn facts_read_the_meta_of_a_request() {
        let request = |params: Value| Request {
            id: 1.into(),
            method: "tools/list".into(),
            params: Some(params),
        };
        let with = request(json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "x"}}));
        assert_eq!(classify(&Facts::of(&with)), Kind::Stateless);
        let not_an_object = request(json!({"_meta": "io.modelcontextprotocol/protocolVersion"}));
        assert_eq!(classify(&Facts::of(&not_an_object)), Kind::Stateful);
        let none = Request {
            id: 1.into(),
            method: "tools/list".into(),
            params: None,
        };
        let facts = Facts {
            version_header: Some("2026-07-28"),
            ..Facts::of(&none)
        };
        assert_eq!(classify(&facts), Kind::Stateless);
    }
}
