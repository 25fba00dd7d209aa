//! The request headers of MCP 2026-07-28 over HTTP: `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` and the custom `Mcp-Param-{Name}` headers a tool declares with `x-mcp-header`.
//!
//! Every one of them mirrors a value of the body; a missing, mismatched or undecodable header
//! is a [`Error::HeaderMismatch`] (HTTP 400, `-32020`). Values that are not header-safe come
//! as `=?base64?<base64 of UTF-8>?=` and are decoded before they are compared.

use crate::error::Error;
use crate::idempotency::{IDEMPOTENCY_KEY_META, IdempotencyKey};
use crate::jsonrpc::Request;
use crate::server::Server;
use axum::http::{HeaderMap, HeaderName};
use base64::Engine as _;
use serde_json::Value;

/// The header naming the protocol version of a request.
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// The header mirroring the body's `method`.
pub(crate) const METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// The header mirroring the body's name, URI or task id.
pub(crate) const NAME: HeaderName = HeaderName::from_static("mcp-name");
/// The prefix of the custom headers tools declare with `x-mcp-header`.
const PARAM_PREFIX: &str = "Mcp-Param-";

/// The header carrying a `tools/call`'s idempotency key (the IETF httpapi draft).
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Carries the `Idempotency-Key` header of a `tools/call` into its `_meta`
/// ([`IDEMPOTENCY_KEY_META`]), where both eras read it. The header is a structured-field
/// string (`"key"`); a bare value is taken as it is. A key that is not valid, or that
/// differs from one the `_meta` already holds, is `-32602`. Other methods ignore it.
pub(crate) fn carry_idempotency_key(
    headers: &HeaderMap,
    request: &mut Request,
) -> Result<(), Error> {
    if request.method != "tools/call" {
        return Ok(());
    }
    let Some(raw) = text(headers, &IDEMPOTENCY_KEY)? else {
        return Ok(());
    };
    let unquoted = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => raw.to_owned(),
    };
    let key = IdempotencyKey::new(unquoted)
        .map_err(|e| Error::InvalidParams(format!("the Idempotency-Key header: {e}")))?;
    let Some(Value::Object(params)) = request.params.as_mut() else {
        // Malformed params are refused where they are read.
        return Ok(());
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(meta) = meta else {
        return Ok(());
    };
    match meta.get(IDEMPOTENCY_KEY_META) {
        Some(Value::String(given)) if given != key.as_str() => Err(Error::InvalidParams(format!(
            "the Idempotency-Key header ({:?}) differs from `_meta[\"{IDEMPOTENCY_KEY_META}\"]` ({given:?})",
            key.as_str()
        ))),
        Some(_) => Ok(()),
        None => {
            meta.insert(
                IDEMPOTENCY_KEY_META.into(),
                Value::String(key.into_string()),
            );
            Ok(())
        }
    }
}

/// The W3C trace context headers, carried under the same names in `_meta`.
const TRACE_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("traceparent"),
    HeaderName::from_static("tracestate"),
    HeaderName::from_static("baggage"),
];

/// Carries the W3C trace context headers (`traceparent`, `tracestate`, `baggage`) of a
/// request into its `_meta`, where both eras read the trace context a task keeps and the
/// request's span finds its parent. A `_meta` that already holds a `traceparent` wins: the
/// headers are then left out. A value that is not text is left out too (an invalid trace
/// context is ignored, never refused).
pub(crate) fn carry_trace_context(headers: &HeaderMap, request: &mut Request) {
    if !headers.contains_key(&TRACE_HEADERS[0]) {
        return;
    }
    let params = request
        .params
        .get_or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(params) = params else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    if meta.contains_key(TRACE_HEADERS[0].as_str()) {
        return;
    }
    for name in &TRACE_HEADERS {
        if let Ok(Some(value)) = text(headers, name) {
            meta.insert(name.as_str().to_owned(), Value::String(value.to_owned()));
        }
    }
}

/// Reads a header as text with surrounding whitespace removed (RFC 9110 §5.5).
///
/// `Err` when the header is present but not visible ASCII.
pub(crate) fn text<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a str>, Error> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim_matches([' ', '\t'])))
            .map_err(|_| Error::HeaderMismatch(format!("the {name} header is not valid text"))),
    }
}

/// Decodes a header value: `=?base64?...?=` is Base64 of UTF-8, anything else is literal
/// (and borrowed, not copied).
pub(crate) fn decode(value: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(std::borrow::Cow::Borrowed(value));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .map_err(|e| format!("invalid Base64 ({e})"))?;
    String::from_utf8(bytes)
        .map(std::borrow::Cow::Owned)
        .map_err(|_| "Base64 value is not UTF-8".to_owned())
}

/// One argument a tool mirrors into a header (`x-mcp-header` in its input schema).
#[derive(Debug)]
struct ParamHeader {
    /// The argument's name.
    param: String,
    /// The header, as written in errors (`Mcp-Param-{Name}`).
    display: String,
    /// The header, as looked up; `None` when the declared name is no valid header name (so
    /// no request can carry it).
    name: Option<HeaderName>,
}

/// The mirrored arguments of every tool that has any, read from the schemas once when the
/// endpoint is built rather than on every call.
#[derive(Debug, Default)]
pub(crate) struct ParamHeaders(std::collections::HashMap<String, Vec<ParamHeader>>);

impl ParamHeaders {
    /// The mirrored arguments of the server's tools.
    pub(crate) fn of(server: &Server) -> Self {
        let mut tools = std::collections::HashMap::new();
        for tool in server.tools().iter() {
            let Some(Value::Object(properties)) = tool.input_schema.get("properties") else {
                continue;
            };
            let mirrored: Vec<ParamHeader> = properties
                .iter()
                .filter_map(|(param, schema)| {
                    let suffix = schema.get("x-mcp-header")?.as_str()?;
                    let display = format!("{PARAM_PREFIX}{suffix}");
                    Some(ParamHeader {
                        param: param.clone(),
                        name: HeaderName::from_bytes(display.as_bytes()).ok(),
                        display,
                    })
                })
                .collect();
            if !mirrored.is_empty() {
                tools.insert(tool.name.to_string(), mirrored);
            }
        }
        Self(tools)
    }
}

/// The body value `Mcp-Name` must mirror for a method, if the method has one.
fn name_in_body(request: &Request) -> Option<&str> {
    let field = match request.method.as_str() {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        m if is_task_method(m) => "taskId",
        _ => return None,
    };
    request.params.as_ref()?.get(field)?.as_str()
}

/// The methods whose `Mcp-Name` is the task id.
fn is_task_method(method: &str) -> bool {
    matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
}

/// Checks the mirrored headers of a stateless request against its body.
///
/// A missing `Mcp-Name` on `tasks/*` is accepted unless `strict_task_name` (the task id is in
/// the body, and some clients leave the header out); a mismatched one is always refused.
pub(crate) fn check_stateless(
    params: &ParamHeaders,
    headers: &HeaderMap,
    request: &Request,
    strict_task_name: bool,
) -> Result<(), Error> {
    let version = text(headers, &PROTOCOL_VERSION)?.ok_or_else(|| {
        Error::HeaderMismatch("the MCP-Protocol-Version header is required".into())
    })?;
    let meta_version = crate::wire::v2026_07_28::meta_version(request.params.as_ref());
    if let Some(meta_version) = meta_version
        && meta_version != version
    {
        return Err(Error::HeaderMismatch(format!(
            "MCP-Protocol-Version is {version:?} but the request's `_meta` says {meta_version:?}"
        )));
    }
    mirrored(headers, Some(&METHOD), "Mcp-Method", Some(&request.method))?;
    let name = name_in_body(request);
    if let Some(name) = name {
        if !strict_task_name && is_task_method(&request.method) && text(headers, &NAME)?.is_none() {
            tracing::debug!(method = %request.method, "no Mcp-Name header; the task id is in the body");
        } else {
            mirrored(headers, Some(&NAME), "Mcp-Name", Some(name))?;
        }
    }
    if request.method == "tools/call"
        && let Some(tool) = name
    {
        check_params(params, headers, request, tool)?;
    }
    Ok(())
}

/// Checks that a header is present and decodes to `expected`.
fn mirrored(
    headers: &HeaderMap,
    name: Option<&HeaderName>,
    display: &str,
    expected: Option<&str>,
) -> Result<(), Error> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let raw = name
        .map(|name| text(headers, name))
        .transpose()?
        .flatten()
        .ok_or_else(|| Error::HeaderMismatch(format!("the {display} header is required")))?;
    let value = decode(raw).map_err(|e| Error::HeaderMismatch(format!("{display}: {e}")))?;
    if value != expected {
        return Err(Error::HeaderMismatch(format!(
            "{display} is {value:?} but the body says {expected:?}"
        )));
    }
    Ok(())
}

/// Checks the `Mcp-Param-{Name}` headers of `tool`'s `x-mcp-header` arguments.
fn check_params(
    params: &ParamHeaders,
    headers: &HeaderMap,
    request: &Request,
    tool: &str,
) -> Result<(), Error> {
    let Some(mirrored) = params.0.get(tool) else {
        return Ok(());
    };
    let args = request
        .params
        .as_ref()
        .and_then(|p| p.get("arguments"))
        .and_then(Value::as_object);
    for ParamHeader {
        param,
        display,
        name,
    } in mirrored
    {
        let Some(arg) = args.and_then(|a| a.get(param)).filter(|v| !v.is_null()) else {
            continue;
        };
        let expected = match arg {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            // Objects and arrays cannot be mirrored; the schema should not allow them.
            _ => continue,
        };
        self::mirrored(headers, name.as_ref(), display, Some(&expected))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallToolResult, TaskSupport};
    use crate::tool::Tool;
    use serde_json::json;

    fn server() -> Server {
        Server::builder()
            .name("headers")
            .tool(
                Tool::new("regional", |_, _| async { Ok(CallToolResult::default()) })
                    .task_support(TaskSupport::Forbidden)
                    .input_schema(json!({
                        "type": "object",
                        "properties": {
                            "region": {"type": "string", "x-mcp-header": "Region"},
                            "count": {"type": "integer", "x-mcp-header": "Count"},
                            "note": {"type": "string"}
                        }
                    })),
            )
            .tool(Tool::new("plain", |_, _| async {
                Ok(CallToolResult::default())
            }))
            .build()
            .unwrap()
    }

    fn call(tool: &str, arguments: Value) -> Request {
        Request {
            id: 1.into(),
            method: "tools/call".into(),
            params: Some(json!({"name": tool, "arguments": arguments})),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(PROTOCOL_VERSION, "2026-07-28".parse().unwrap());
        map.insert(METHOD, "tools/call".parse().unwrap());
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn mirrored_arguments_are_read_once_and_checked_on_every_call() {
        let params = ParamHeaders::of(&server());
        assert_eq!(
            params.0.len(),
            1,
            "only the tool with mirrored arguments: {params:?}"
        );
        let check = |request: &Request, pairs: &[(&'static str, &str)]| {
            check_stateless(&params, &headers(pairs), request, true)
        };
        let both = [
            ("mcp-name", "regional"),
            ("mcp-param-region", "=?base64?ZXUtd2VzdA==?="),
            ("mcp-param-count", "3"),
        ];
        let request = call("regional", json!({"region": "eu-west", "count": 3}));
        assert!(check(&request, &both).is_ok());
        let err = check(&request, &both[..2]).unwrap_err();
        assert!(err.to_string().contains("Mcp-Param-Count"), "{err}");
        let wrong = [both[0], ("mcp-param-region", "us-east"), both[2]];
        let err = check(&request, &wrong).unwrap_err();
        assert!(matches!(err, Error::HeaderMismatch(_)), "{err}");
        assert!(err.to_string().contains("us-east"), "{err}");
        // An argument left out is not mirrored; a tool without mirrored arguments needs none.
        let some = call("regional", json!({"count": 3}));
        assert!(check(&some, &[both[0], both[2]]).is_ok());
        let plain = call("plain", json!({"region": "x"}));
        assert!(check(&plain, &[("mcp-name", "plain")]).is_ok());
    }

    #[test]
    fn decodes_base64_and_keeps_literals() {
        assert_eq!(decode("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert_eq!(decode("plain").unwrap(), "plain");
        assert_eq!(decode("=?base64?SGVsbG8=").unwrap(), "=?base64?SGVsbG8=");
        assert_eq!(decode("SGVsbG8=?=").unwrap(), "SGVsbG8=?=");
        assert!(decode("=?base64?SGVsbG8?=").is_err(), "padding is required");
        assert!(decode("=?base64?SGVs!!!bG8=?=").is_err());
        assert!(decode("=?base64?//79?=").is_err(), "not UTF-8");
    }

    #[test]
    fn the_idempotency_key_header_goes_into_the_meta_of_a_tool_call() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(IDEMPOTENCY_KEY, value.parse().unwrap());
            headers
        };
        let key_of = |request: &Request| {
            request.params.as_ref().unwrap()["_meta"][IDEMPOTENCY_KEY_META].clone()
        };
        // A structured-field string, or a bare value.
        let mut request = call("plain", json!({}));
        carry_idempotency_key(&with("\"order-7\""), &mut request).unwrap();
        assert_eq!(key_of(&request), json!("order-7"));
        let mut request = call("plain", json!({}));
        carry_idempotency_key(&with("order-8"), &mut request).unwrap();
        assert_eq!(key_of(&request), json!("order-8"));
        // The same key in both places is fine; different keys are refused.
        let mut request = call("plain", json!({}));
        request.params.as_mut().unwrap()["_meta"] =
            json!({IDEMPOTENCY_KEY_META: "k1", "progressToken": 1});
        carry_idempotency_key(&with("k1"), &mut request).unwrap();
        assert_eq!(
            request.params.as_ref().unwrap()["_meta"]["progressToken"],
            json!(1)
        );
        let error = carry_idempotency_key(&with("k2"), &mut request).unwrap_err();
        assert!(matches!(error, Error::InvalidParams(_)), "{error:?}");
        assert!(error.to_string().contains("differs"), "{error}");
        // A key that is too long, or empty, is refused.
        let long = format!(
            "\"{}\"",
            "k".repeat(crate::idempotency::MAX_IDEMPOTENCY_KEY + 1)
        );
        let error = carry_idempotency_key(&with(&long), &mut call("plain", json!({}))).unwrap_err();
        assert!(error.to_string().contains("at most 255"), "{error}");
        let error =
            carry_idempotency_key(&with("\"\""), &mut call("plain", json!({}))).unwrap_err();
        assert!(error.to_string().contains("empty"), "{error}");
        // Other methods ignore it.
        let mut list = Request {
            id: 2.into(),
            method: "tools/list".into(),
            params: None,
        };
        carry_idempotency_key(&with("k1"), &mut list).unwrap();
        assert_eq!(list.params, None);
    }

    #[test]
    fn the_trace_context_headers_go_into_the_meta_of_every_request() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", parent.parse().unwrap());
        headers.insert("tracestate", "a=1".parse().unwrap());
        let mut request = call("plain", json!({}));
        carry_trace_context(&headers, &mut request);
        let meta = &request.params.as_ref().unwrap()["_meta"];
        assert_eq!(meta["traceparent"], parent);
        assert_eq!(meta["tracestate"], "a=1");
        assert!(meta.get("baggage").is_none());
        // A trace context in the body wins over the headers.
        let mut request = call("plain", json!({}));
        request.params.as_mut().unwrap()["_meta"] = json!({"traceparent": "from-body"});
        carry_trace_context(&headers, &mut request);
        let meta = &request.params.as_ref().unwrap()["_meta"];
        assert_eq!(meta, &json!({"traceparent": "from-body"}));
        // Other methods carry it too, for their spans.
        let mut list = Request {
            id: 2.into(),
            method: "tools/list".into(),
            params: None,
        };
        carry_trace_context(&headers, &mut list);
        assert_eq!(list.params.unwrap()["_meta"]["traceparent"], parent);
        // Without the header nothing changes.
        let mut list = Request {
            id: 3.into(),
            method: "tools/list".into(),
            params: None,
        };
        carry_trace_context(&HeaderMap::new(), &mut list);
        assert_eq!(list.params, None);
    }
}
