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
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Response::error(
                None,
                ErrorObject::new(PARSE_ERROR, format!("parse error: {e}")),
            )
        })?;
        Self::from_value(value)
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
        let id_value = obj.remove("id");
        let id = match &id_value {
            None => None,
            Some(v) => match RequestId::from_value(v) {
                Some(id) => Some(id),
                None => {
                    return Err(invalid(None, "`id` must be a string or an integer"));
                }
            },
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
        }
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else {
                return Err(invalid(id, "`method` must be a string"));
            };
            let params = obj.remove("params");
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
        let outcome = match (obj.remove("result"), obj.remove("error")) {
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

    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Request(r) => r.to_value(),
            Self::Notification(n) => n.to_value(),
            Self::Response(r) => r.to_value(),
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
