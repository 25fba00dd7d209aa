//! The request headers of MCP 2026-07-28 over HTTP: `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` and the custom `Mcp-Param-{Name}` headers a tool declares with `x-mcp-header`.
//!
//! Every one of them mirrors a value of the body; a missing, mismatched or undecodable header
//! is a [`Error::HeaderMismatch`] (HTTP 400, `-32020`). Values that are not header-safe come
//! as `=?base64?<base64 of UTF-8>?=` and are decoded before they are compared.

use crate::error::Error;
use crate::jsonrpc::Request;
use crate::server::Server;
use crate::wire::v2026_07_28::META_PROTOCOL_VERSION;
use axum::http::HeaderMap;
use base64::Engine as _;
use serde_json::Value;

/// The header naming the protocol version of a request.
pub(crate) const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// The header mirroring the body's `method`.
pub(crate) const METHOD: &str = "mcp-method";
/// The header mirroring the body's name, URI or task id.
pub(crate) const NAME: &str = "mcp-name";
/// The prefix of the custom headers tools declare with `x-mcp-header`.
const PARAM_PREFIX: &str = "Mcp-Param-";

/// Reads a header as text with surrounding whitespace removed (RFC 9110 §5.5).
///
/// `Err` when the header is present but not visible ASCII.
pub(crate) fn text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Error> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim_matches([' ', '\t'])))
            .map_err(|_| Error::HeaderMismatch(format!("the {name} header is not valid text"))),
    }
}

/// Decodes a header value: `=?base64?...?=` is Base64 of UTF-8, anything else is literal.
pub(crate) fn decode(value: &str) -> Result<String, String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .map_err(|e| format!("invalid Base64 ({e})"))?;
    String::from_utf8(bytes).map_err(|_| "Base64 value is not UTF-8".to_owned())
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
    server: &Server,
    headers: &HeaderMap,
    request: &Request,
    strict_task_name: bool,
) -> Result<(), Error> {
    let version = text(headers, PROTOCOL_VERSION)?.ok_or_else(|| {
        Error::HeaderMismatch("the MCP-Protocol-Version header is required".into())
    })?;
    let meta_version = request
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    if let Some(meta_version) = meta_version
        && meta_version != version
    {
        return Err(Error::HeaderMismatch(format!(
            "MCP-Protocol-Version is {version:?} but the request's `_meta` says {meta_version:?}"
        )));
    }
    mirrored(headers, METHOD, "Mcp-Method", Some(&request.method))?;
    if let Some(name) = name_in_body(request) {
        if !strict_task_name && is_task_method(&request.method) && text(headers, NAME)?.is_none() {
            tracing::debug!(method = %request.method, "no Mcp-Name header; the task id is in the body");
        } else {
            mirrored(headers, NAME, "Mcp-Name", Some(name))?;
        }
    }
    if request.method == "tools/call" {
        check_params(server, headers, request)?;
    }
    Ok(())
}

/// Checks that a header is present and decodes to `expected`.
fn mirrored(
    headers: &HeaderMap,
    name: &str,
    display: &str,
    expected: Option<&str>,
) -> Result<(), Error> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let raw = text(headers, name)?
        .ok_or_else(|| Error::HeaderMismatch(format!("the {display} header is required")))?;
    let value = decode(raw).map_err(|e| Error::HeaderMismatch(format!("{display}: {e}")))?;
    if value != expected {
        return Err(Error::HeaderMismatch(format!(
            "{display} is {value:?} but the body says {expected:?}"
        )));
    }
    Ok(())
}

/// Checks the `Mcp-Param-{Name}` headers of the tool's `x-mcp-header` arguments.
fn check_params(server: &Server, headers: &HeaderMap, request: &Request) -> Result<(), Error> {
    let Some(tool) = name_in_body(request).and_then(|n| server.tools().get(n)) else {
        return Ok(());
    };
    let Some(Value::Object(properties)) = tool.input_schema.get("properties") else {
        return Ok(());
    };
    let args = request
        .params
        .as_ref()
        .and_then(|p| p.get("arguments"))
        .and_then(Value::as_object);
    for (param, schema) in properties {
        let Some(suffix) = schema.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let header = format!("{PARAM_PREFIX}{suffix}");
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
        mirrored(
            headers,
            &header.to_ascii_lowercase(),
            &header,
            Some(&expected),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
