//! JSON-RPC 2.0: the message envelope, request ids and the error codes MCP uses.
//!
//! Batches are not part of MCP since 2025-06-18, so an array is an invalid request.
//! Every error code the runtime sends is a named constant here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i32 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i32 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i32 = -32602;
/// Internal JSON-RPC error.
pub const INTERNAL_ERROR: i32 = -32603;
/// Implementation-defined: the server is too busy to take the request (task queue full).
pub const SERVER_BUSY: i32 = -32000;
/// 2025-11-25: the resource a `resources/read` named does not exist (retired in 2026-07-28,
/// which answers [`INVALID_PARAMS`]).
pub const RESOURCE_NOT_FOUND: i32 = -32002;
/// Implementation-defined: the caller's credentials lack a scope the request needs
/// (`data.requiredScopes`). Over HTTP the answer is also a `403` with
/// `WWW-Authenticate: Bearer error="insufficient_scope"`.
pub const INSUFFICIENT_SCOPE: i32 = -32003;
/// 2026-07-28: an HTTP header does not match the request body.
pub const HEADER_MISMATCH: i32 = -32020;
/// 2026-07-28: the request needs a client capability the request did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i32 = -32021;
/// 2026-07-28: the request names a protocol version the server does not support.
pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;

/// A request id: a string or an integer, kept exactly as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id, kept as the exact JSON number.
    Number(serde_json::Number),
    /// A string id.
    String(String),
}

impl RequestId {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(Self::String(s.clone())),
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(Self::Number(n.clone())),
            _ => None,
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n.into())
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// The error member of an error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of the codes in this module, or an implementation-defined code.
    pub code: i32,
    /// A short description.
    pub message: String,
    /// Extra data, defined by the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// A request: a method call that expects a response.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id the response must carry.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The parameters, always an object in MCP.
    pub params: Option<Value>,
}

/// A notification: a method call without an id, never answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The parameters.
    pub params: Option<Value>,
}

/// A response to a request: its result or its error.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The id of the request; `None` only when the request's id could not be read.
    pub id: Option<RequestId>,
    /// The result or the error.
    pub outcome: Result<Value, ErrorObject>,
}

/// Any JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response.
    Response(Response),
}

impl Response {
    /// A successful response.
    pub fn result(id: RequestId, result: Value) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result),
        }
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }

    /// The response as JSON text, written straight from the response (no copy of its result).
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// The response as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("jsonrpc".into(), "2.0".into());
        obj.insert(
            "id".into(),
            self.id.as_ref().map_or(Value::Null, |id| {
                serde_json::to_value(id).unwrap_or(Value::Null)
            }),
        );
        match &self.outcome {
            Ok(result) => obj.insert("result".into(), result.clone()),
            Err(error) => obj.insert(
                "error".into(),
                serde_json::to_value(error).unwrap_or(Value::Null),
            ),
        };
        Value::Object(obj)
    }
}

impl Request {
    /// The request as JSON text.
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// The request as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("jsonrpc".into(), "2.0".into());
        obj.insert(
            "id".into(),
            serde_json::to_value(&self.id).unwrap_or(Value::Null),
        );
        obj.insert("method".into(), self.method.clone().into());
        if let Some(params) = &self.params {
            obj.insert("params".into(), params.clone());
        }
        Value::Object(obj)
    }
}

impl Notification {
    /// A notification with the given params.
    pub fn new(method: impl Into<String>, params: Value) -> Self {
        Self {
            method: method.into(),
            params: Some(params),
        }
    }

    /// The notification as JSON text.
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// The notification as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("jsonrpc".into(), "2.0".into());
        obj.insert("method".into(), self.method.clone().into());
        if let Some(params) = &self.params {
            obj.insert("params".into(), params.clone());
        }
        Value::Object(obj)
    }
}

impl Message {
    /// Parses one message from text.
    ///
    /// On failure returns the error response to send back: `-32700` for text that is not JSON,
    /// `-32600` for JSON that is not a valid message (with the request's id when it could be read).
    pub fn parse(text: &str) -> Result<Self, Response> {
        // The envelope is read member by member straight from the text; only the members'
        // values become JSON values (no map of the envelope itself is built).
        let top: envelope::Top = serde_json::from_str(text).map_err(|e| {
            Response::error(
                None,
                ErrorObject::new(PARSE_ERROR, format!("parse error: {e}")),
            )
        })?;
        match top {
            envelope::Top::Object(members) => Self::from_members(members),
            envelope::Top::Array => Err(invalid(None, "batches are not supported")),
            envelope::Top::Other => Err(invalid(None, "a message must be a JSON object")),
        }
    }

    /// Reads a message from a parsed JSON value, with the same errors as [`Message::parse`].
    pub fn from_value(value: Value) -> Result<Self, Response> {
        let Value::Object(mut obj) = value else {
            let what = if value.is_array() {
                "batches are not supported"
            } else {
                "a message must be a JSON object"
            };
            return Err(invalid(None, what));
        };
        Self::from_members(envelope::Members {
            jsonrpc: obj.remove("jsonrpc"),
            id: obj.remove("id"),
            method: obj.remove("method"),
            params: obj.remove("params"),
            result: obj.remove("result"),
            error: obj.remove("error"),
        })
    }

    /// Reads a message from the members of its object.
    fn from_members(members: envelope::Members) -> Result<Self, Response> {
        let envelope::Members {
            jsonrpc,
            id: id_value,
            method,
            params,
            result,
            error,
        } = members;
        let id = match &id_value {
            None => None,
            Some(v) => match RequestId::from_value(v) {
                Some(id) => Some(id),
                None => {
                    return Err(invalid(None, "`id` must be a string or an integer"));
                }
            },
        };
        if jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
        }
        if let Some(method) = method {
            let Value::String(method) = method else {
                return Err(invalid(id, "`method` must be a string"));
            };
            if let Some(p) = &params
                && !(p.is_object() || p.is_array())
            {
                return Err(invalid(id, "`params` must be an object"));
            }
            return Ok(match id {
                Some(id) => Self::Request(Request { id, method, params }),
                None => Self::Notification(Notification { method, params }),
            });
        }
        let outcome = match (result, error) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => match serde_json::from_value::<ErrorObject>(error) {
                Ok(error) => Err(error),
                Err(_) => return Err(invalid(id, "`error` must have a `code` and a `message`")),
            },
            _ => {
                return Err(invalid(
                    id,
                    "a message needs a `method`, or exactly one of `result` and `error`",
                ));
            }
        };
        match id {
            Some(id) => Ok(Self::Response(Response {
                id: Some(id),
                outcome,
            })),
            None => Err(invalid(None, "a response needs an `id`")),
        }
    }

    /// The message as JSON text.
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Request(r) => r.to_value(),
            Self::Notification(n) => n.to_value(),
            Self::Response(r) => r.to_value(),
        }
    }
}

/// A result as a transport writes it: a JSON value, or JSON text already written straight
/// from the result's typed form (which spares building a value only to write it out).
#[derive(Debug)]
pub(crate) enum Payload {
    /// A JSON value.
    Value(Value),
    /// JSON text of an object, written by serde_json from a typed result (so valid JSON).
    Text {
        /// The text.
        json: String,
        /// `true` for a tool's result with `isError: true` (which the request's span records).
        tool_error: bool,
    },
}

impl Payload {
    /// A result written straight from its typed form into JSON text, not built as a value
    /// first; `null` should it not serialise (the model's types always do).
    pub(crate) fn typed(result: &impl Serialize) -> Self {
        let mut json = Vec::with_capacity(256);
        match serde_json::to_writer(&mut json, result) {
            Ok(()) => Self::text(json),
            Err(_) => Self::Value(Value::Null),
        }
    }

    /// A tool's result, written as [`Payload::typed`] writes it, marked when it is an error.
    pub(crate) fn tool_result(result: &crate::model::CallToolResult) -> Self {
        Self::typed(result).marked_tool_error(result.is_error)
    }

    /// JSON text serde_json wrote (so UTF-8, which is checked all the same).
    pub(crate) fn text(json: Vec<u8>) -> Self {
        match String::from_utf8(json) {
            Ok(json) => Self::Text {
                json,
                tool_error: false,
            },
            Err(_) => Self::Value(Value::Null),
        }
    }

    /// The same payload, marked as a tool's error result (`isError: true`) when `yes`.
    pub(crate) fn marked_tool_error(mut self, yes: bool) -> Self {
        if let Self::Text { tool_error, .. } = &mut self {
            *tool_error = yes;
        }
        self
    }

    /// `true` for a tool's result with `isError: true`.
    pub(crate) fn is_tool_error(&self) -> bool {
        match self {
            Self::Value(v) => v.get("isError").and_then(Value::as_bool) == Some(true),
            Self::Text { tool_error, .. } => *tool_error,
        }
    }

    /// The payload as a JSON value (JSON text is read back).
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Value(v) => v,
            Self::Text { json, .. } => serde_json::from_str(&json).unwrap_or_else(|e| {
                debug_assert!(false, "a written result failed to read back: {e}");
                Value::Null
            }),
        }
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Value(v) => v.serialize(serializer),
            // Replies are written by [`Reply::to_json_bytes`], which copies the text; a
            // serializer of another kind takes it as a raw value, read once more to check it.
            Self::Text { json, .. } => serde_json::from_str::<&serde_json::value::RawValue>(json)
                .map_err(serde::ser::Error::custom)?
                .serialize(serializer),
        }
    }
}

/// A response as the router hands it to a transport: [`Response`] with a [`Payload`].
#[derive(Debug)]
pub(crate) struct Reply {
    /// The id of the request.
    pub(crate) id: RequestId,
    /// The result or the error.
    pub(crate) outcome: Result<Payload, ErrorObject>,
    /// Gates that open when the reply is dropped, once the transport wrote it: what the
    /// reply announces (a new task) goes nowhere before it.
    pub(crate) then: Vec<crate::sync::Opener>,
}

impl Reply {
    /// The reply as JSON text.
    pub(crate) fn to_json(&self) -> String {
        String::from_utf8(self.to_json_bytes()).unwrap_or_else(|_| to_json(self))
    }

    /// The reply's JSON text as bytes: the members `jsonrpc`, `id`, then `result` or `error`.
    /// A result already written as text is copied as it is, into a buffer of its exact size
    /// when its id is short (as ids are), which a body takes over as it is.
    pub(crate) fn to_json_bytes(&self) -> Vec<u8> {
        if let Ok(Payload::Text { json, .. }) = &self.outcome
            && let Some(out) = self.text_json(json)
        {
            return out;
        }
        let mut out = Vec::with_capacity(256);
        if let Err(e) = serde_json::to_writer(&mut out, self) {
            debug_assert!(false, "a JSON-RPC reply failed to serialise: {e}");
            out.clear();
            out.extend_from_slice(b"null");
        }
        out
    }

    /// The reply around a result written as text, in a buffer of its exact size; `None` for
    /// an id longer than the stack buffer it is written to first.
    fn text_json(&self, json: &str) -> Option<Vec<u8>> {
        const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
        const RESULT: &[u8] = br#","result":"#;
        const ID_MAX: usize = 64;
        let mut id = [0u8; ID_MAX];
        let mut rest = &mut id[..];
        serde_json::to_writer(&mut rest, &self.id).ok()?;
        let id_len = ID_MAX - rest.len();
        let id = &id[..id_len];
        let mut out = Vec::with_capacity(HEAD.len() + id.len() + RESULT.len() + json.len() + 1);
        out.extend_from_slice(HEAD);
        out.extend_from_slice(id);
        out.extend_from_slice(RESULT);
        out.extend_from_slice(json.as_bytes());
        out.push(b'}');
        Some(out)
    }

    /// The reply as a public [`Response`].
    pub(crate) fn into_response(self) -> Response {
        let Self { id, outcome, then } = self;
        let response = Response {
            id: Some(id),
            outcome: outcome.map(Payload::into_value),
        };
        drop(then);
        response
    }
}

impl Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_answer(serializer, Some(&self.id), &self.outcome)
    }
}

/// Reading a message object member by member.
mod envelope {
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::Value;
    use std::fmt;

    /// The members of a message object that mean something to JSON-RPC: `Some` for each one
    /// present, even as `null`. A member given twice keeps its last value, as a JSON object
    /// read into a map does.
    #[derive(Default)]
    pub(super) struct Members {
        pub(super) jsonrpc: Option<Value>,
        pub(super) id: Option<Value>,
        pub(super) method: Option<Value>,
        pub(super) params: Option<Value>,
        pub(super) result: Option<Value>,
        pub(super) error: Option<Value>,
    }

    /// A message's text at the top level.
    pub(super) enum Top {
        /// An object, with its members.
        Object(Members),
        /// An array (a batch), read to its end and dropped.
        Array,
        /// Any other JSON value.
        Other,
    }

    /// A member name, matched without being copied.
    enum Key {
        Jsonrpc,
        Id,
        Method,
        Params,
        Result,
        Error,
        Other,
    }

    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl Visitor<'_> for KeyVisitor {
                type Value = Key;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a member name")
                }
                fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Key, E> {
                    Ok(match name {
                        "jsonrpc" => Key::Jsonrpc,
                        "id" => Key::Id,
                        "method" => Key::Method,
                        "params" => Key::Params,
                        "result" => Key::Result,
                        "error" => Key::Error,
                        _ => Key::Other,
                    })
                }
            }
            deserializer.deserialize_identifier(KeyVisitor)
        }
    }

    impl<'de> Deserialize<'de> for Top {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(TopVisitor)
        }
    }

    struct TopVisitor;

    impl<'de> Visitor<'de> for TopVisitor {
        type Value = Top;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
            let mut members = Members::default();
            while let Some(key) = map.next_key::<Key>()? {
                let slot = match key {
                    Key::Jsonrpc => &mut members.jsonrpc,
                    Key::Id => &mut members.id,
                    Key::Method => &mut members.method,
                    Key::Params => &mut members.params,
                    Key::Result => &mut members.result,
                    Key::Error => &mut members.error,
                    Key::Other => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                };
                *slot = Some(map.next_value()?);
            }
            Ok(Top::Object(members))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Top::Array)
        }

        fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
            Ok(Top::Other)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
            Ok(Top::Other)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
            Ok(Top::Other)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
            Ok(Top::Other)
        }

        fn visit_str<E>(self, _: &str) -> Result<Top, E> {
            Ok(Top::Other)
        }

        fn visit_unit<E>(self) -> Result<Top, E> {
            Ok(Top::Other)
        }
    }
}

/// Serialises a message. A message is strings, numbers and JSON values, none of which can
/// fail to serialise (map keys are strings), so an error here is a bug, reported as JSON null.
fn to_json(message: &impl Serialize) -> String {
    serde_json::to_string(message).unwrap_or_else(|e| {
        debug_assert!(false, "a JSON-RPC message failed to serialise: {e}");
        "null".to_owned()
    })
}

/// Writes a request (`id` given) or a notification: its members in the order the wire shows
/// them, `jsonrpc`, `id`, `method`, `params`.
fn serialize_call<S: serde::Serializer>(
    serializer: S,
    id: Option<&RequestId>,
    method: &str,
    params: Option<&Value>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("jsonrpc", "2.0")?;
    if let Some(id) = id {
        map.serialize_entry("id", id)?;
    }
    map.serialize_entry("method", method)?;
    if let Some(params) = params {
        map.serialize_entry("params", params)?;
    }
    map.end()
}

/// Writes a response: `jsonrpc`, `id`, then `result` or `error`.
fn serialize_answer<S: serde::Serializer, T: Serialize>(
    serializer: S,
    id: Option<&RequestId>,
    outcome: &Result<T, ErrorObject>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("jsonrpc", "2.0")?;
    map.serialize_entry("id", &id)?;
    match outcome {
        Ok(result) => map.serialize_entry("result", result)?,
        Err(error) => map.serialize_entry("error", error)?,
    }
    map.end()
}

impl Serialize for Request {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_call(
            serializer,
            Some(&self.id),
            &self.method,
            self.params.as_ref(),
        )
    }
}

impl Serialize for Notification {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_call(serializer, None, &self.method, self.params.as_ref())
    }
}

impl Serialize for Response {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_answer(serializer, self.id.as_ref(), &self.outcome)
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Request(r) => r.serialize(serializer),
            Self::Notification(n) => n.serialize(serializer),
            Self::Response(r) => r.serialize(serializer),
        }
    }
}

fn invalid(id: Option<RequestId>, message: &str) -> Response {
    Response::error(
        id,
        ErrorObject::new(INVALID_REQUEST, format!("invalid request: {message}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_string_and_number_ids_apart() {
        let Message::Request(a) =
            Message::parse(r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#).unwrap()
        else {
            panic!()
        };
        let Message::Request(b) =
            Message::parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap()
        else {
            panic!()
        };
        assert_ne!(a.id, b.id);
        assert_eq!(
            Response::result(a.id, json!({})).to_value()["id"],
            json!("1")
        );
        assert_eq!(Response::result(b.id, json!({})).to_value()["id"], json!(1));
    }

    #[test]
    fn json_text_is_the_json_value() {
        let messages = [
            Message::Request(Request {
                id: "a".into(),
                method: "tools/call".into(),
                params: Some(json!({"name": "x", "arguments": {"n": [1, 2.5, null]}})),
            }),
            Message::Request(Request {
                id: 7.into(),
                method: "ping".into(),
                params: None,
            }),
            Message::Notification(Notification::new("notifications/progress", json!({"p": 1}))),
            Message::Notification(Notification {
                method: "notifications/initialized".into(),
                params: None,
            }),
            Message::Response(Response::result(3.into(), json!({"content": []}))),
            Message::Response(Response::error(
                None,
                ErrorObject::new(PARSE_ERROR, "parse error").with_data(json!({"at": 1})),
            )),
            Message::Response(Response::error(
                Some("x".into()),
                ErrorObject::new(INVALID_PARAMS, "bad"),
            )),
        ];
        for message in messages {
            let text = message.to_json();
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value, message.to_value(), "{text}");
            assert!(text.starts_with(r#"{"jsonrpc":"2.0""#), "{text}");
            if !matches!(&message, Message::Response(Response { id: None, .. })) {
                assert_eq!(Message::parse(&text).unwrap(), message, "{text}");
            }
        }
    }

    #[test]
    fn a_reply_writes_what_its_response_writes() {
        let value =
            json!({"content": [{"type": "text", "text": "hi \"there\" ✓"}], "isError": false});
        let long = "a \"long\" id ".repeat(10);
        for id in [
            RequestId::from(4),
            RequestId::from("a \"quoted\" id"),
            RequestId::from(long.as_str()),
        ] {
            for (payload, expected) in [
                (Payload::Value(value.clone()), value.clone()),
                (Payload::typed(&value), value.clone()),
            ] {
                let reply = Reply {
                    id: id.clone(),
                    outcome: Ok(payload),
                    then: Vec::new(),
                };
                // Text with a short id is written into a buffer of its exact size.
                let bytes = reply.to_json_bytes();
                let short_id = !matches!(&id, RequestId::String(s) if s.len() > 64);
                if matches!(reply.outcome, Ok(Payload::Text { .. })) && short_id {
                    assert_eq!(bytes.len(), bytes.capacity(), "sized exactly");
                }
                let text = reply.to_json();
                // Any other serializer writes the same reply.
                let serialized = serde_json::to_value(&reply).unwrap();
                let response = reply.into_response();
                assert_eq!(response.outcome.as_ref().unwrap(), &expected);
                assert_eq!(response.id.as_ref(), Some(&id));
                assert_eq!(
                    serde_json::from_str::<Value>(&text).unwrap(),
                    response.to_value()
                );
                assert_eq!(serialized, response.to_value());
                assert!(text.starts_with(r#"{"jsonrpc":"2.0","id":"#), "{text}");
            }
        }
        let error = Reply {
            id: "e".into(),
            outcome: Err(ErrorObject::new(INVALID_PARAMS, "bad")),
            then: Vec::new(),
        };
        let text = error.to_json();
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            error.into_response().to_value()
        );
    }

    #[test]
    fn a_tool_error_is_known_in_both_forms() {
        use crate::model::CallToolResult;
        let failed = CallToolResult::error_text("no");
        let fine = CallToolResult::success(vec![]);
        assert!(Payload::tool_result(&failed).is_tool_error());
        assert!(!Payload::tool_result(&fine).is_tool_error());
        assert!(Payload::Value(serde_json::to_value(&failed).unwrap()).is_tool_error());
        assert!(!Payload::Value(serde_json::to_value(&fine).unwrap()).is_tool_error());
        // Text that merely says `isError` somewhere is not marked.
        assert!(!Payload::typed(&json!({"structuredContent": {"isError": true}})).is_tool_error());
        assert_eq!(
            Payload::tool_result(&failed).into_value(),
            serde_json::to_value(&failed).unwrap()
        );
    }

    #[test]
    fn text_and_value_read_the_same() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"},"extra":[1,{"a":2}]}"#,
            r#"{"id":1,"id":2,"jsonrpc":"2.0","method":"m","method":"n"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","met\u0068od":"ping","id":3}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}"#,
            r#"{"jsonrpc":2,"id":1,"method":"ping"}"#,
            r#"[]"#,
            r#"[1,[2],{"a":3}]"#,
            r#""text""#,
            r#"null"#,
            r#"true"#,
            r#"-1.5"#,
            r#"{}"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(Message::parse(text), Message::from_value(value), "{text}");
        }
    }

    #[test]
    fn unparsable_text_is_a_parse_error_without_id() {
        let err = Message::parse("{not json").unwrap_err();
        assert_eq!(err.id, None);
        assert_eq!(err.outcome.unwrap_err().code, PARSE_ERROR);
    }

    #[test]
    fn malformed_envelopes_are_invalid_requests() {
        for text in [
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":3}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"42"#,
        ] {
            let err = Message::parse(text).unwrap_err();
            assert_eq!(err.outcome.unwrap_err().code, INVALID_REQUEST, "{text}");
        }
    }

    #[test]
    fn invalid_request_keeps_the_id_it_could_read() {
        let err = Message::parse(r#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#).unwrap_err();
        assert_eq!(err.id, Some(RequestId::from("x")));
    }

    #[test]
    fn reads_notifications_and_responses() {
        assert!(matches!(
            Message::parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification(_))
        ));
        assert!(matches!(
            Message::parse(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Ok(Message::Response(Response { outcome: Ok(_), .. }))
        ));
        assert!(matches!(
            Message::parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#),
            Ok(Message::Response(Response {
                outcome: Err(_),
                ..
            }))
        ));
    }
}
