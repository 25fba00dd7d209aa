//! The stateless wire of MCP 2026-07-28.
//!
//! Every request carries its protocol version and client capabilities in `_meta`; nothing is
//! remembered between requests. Every result has a `resultType`. A tool's questions to the
//! client become `InputRequiredResult` rounds (MRTR): the call is suspended on its question
//! and the client's retry resumes it (see [`mrtr`]).

mod calls;
pub mod mrtr;
mod shapes;
mod tasks;

use crate::error::Error;
use crate::jsonrpc::{ErrorObject, Payload, Request};
use crate::model::{JsonObject, LogLevel};
use crate::ops;
use crate::ops::ListParams;
use crate::server::Server;
use crate::session::{Connection, Sink};
use crate::wire::params::{from_object, take_object};
use calls::{prompts_get, resources_read, tools_call};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use tasks::{listen, tasks};

/// The stateless revision.
pub const VERSION: &str = "2026-07-28";
/// Every stateless revision the server accepts.
pub const SUPPORTED: [&str; 1] = [VERSION];

/// The `_meta` key naming a request's protocol version.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The id of the tasks extension (SEP-2663).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Methods this era defines.
const METHODS: [&str; 13] = [
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
];

/// Serialises a result; these types always serialise.
fn to_value(result: impl Serialize) -> Value {
    serde_json::to_value(result).unwrap_or_default()
}

/// What a request's `_meta` says about the client.
#[derive(Debug)]
pub(crate) struct RequestMeta {
    pub(crate) client_capabilities: Arc<Value>,
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) progress_token: Option<Value>,
    /// The idempotency key of a `tools/call`.
    pub(crate) idempotency_key: Option<crate::idempotency::IdempotencyKey>,
    /// The W3C trace context it carried.
    pub(crate) trace: Option<std::sync::Arc<crate::task::TraceContext>>,
}

/// The protocol version a request's `_meta` names, unchecked (for its span, and to compare
/// with the HTTP header); [`request_meta`] checks it.
pub(crate) fn meta_version(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get(META_PROTOCOL_VERSION)?.as_str()
}

/// Reads and checks the per-request `_meta`, taking it out of the params.
pub(crate) fn request_meta(params: &mut JsonObject) -> Result<RequestMeta, Error> {
    let mut meta = match params.remove("_meta") {
        Some(Value::Object(m)) => m,
        _ => {
            return Err(Error::InvalidParams(format!(
                "`_meta[\"{META_PROTOCOL_VERSION}\"]` is required"
            )));
        }
    };
    let version = meta
        .get(META_PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Error::InvalidParams(format!(
                "`_meta[\"{META_PROTOCOL_VERSION}\"]` must be a string"
            ))
        })?;
    if !SUPPORTED.contains(&version) {
        return Err(Error::UnsupportedVersion {
            requested: version.to_owned(),
            supported: SUPPORTED.iter().map(|v| (*v).to_owned()).collect(),
        });
    }
    let client_capabilities = match meta.remove(META_CLIENT_CAPABILITIES) {
        Some(c @ Value::Object(_)) => Arc::new(c),
        _ => {
            return Err(Error::InvalidParams(format!(
                "`_meta[\"{META_CLIENT_CAPABILITIES}\"]` must be an object"
            )));
        }
    };
    let log_level = meta
        .get(META_LOG_LEVEL)
        .and_then(|l| LogLevel::deserialize(l).ok());
    let progress_token = meta
        .remove("progressToken")
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64());
    let meta = Value::Object(meta);
    let idempotency_key = crate::wire::params::idempotency_key(Some(&meta))?;
    let trace = crate::wire::params::trace_context(Some(&meta));
    Ok(RequestMeta {
        client_capabilities,
        log_level,
        progress_token,
        idempotency_key,
        trace,
    })
}

/// A typed result with the fields every result of this era carries, written to JSON text
/// straight from its typed form. `result` must serialise as an object without `resultType`
/// or `_meta` members (a task, a `DetailedTask`, a `CallToolResult`).
fn complete_typed<T: Serialize>(server: &Server, result: &T, result_type: &str) -> Payload {
    let mut out = Vec::with_capacity(512);
    if serde_json::to_writer(&mut out, result).is_ok() && out.last() == Some(&b'}') {
        // The object's closing brace gives way to the members every result carries.
        out.pop();
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(br#""resultType":"#);
        if serde_json::to_writer(&mut out, result_type).is_ok() {
            out.extend_from_slice(br#","_meta":{""#);
            out.extend_from_slice(META_SERVER_INFO.as_bytes());
            out.extend_from_slice(br#"":"#);
            out.extend_from_slice(server.inner.info_json.get().as_bytes());
            out.extend_from_slice(b"}}");
            return Payload::text(out);
        }
    }
    // These types always serialise as objects; were one not to, the value path says why.
    Payload::Value(complete(server, to_value(result), result_type))
}

/// A tool's result, completed as [`complete_typed`] does, marked when it is an error.
fn complete_tool_result(server: &Server, result: &crate::model::CallToolResult) -> Payload {
    complete_typed(server, result, "complete").marked_tool_error(result.is_error)
}

/// Adds the fields every result of this era carries.
fn complete(server: &Server, mut result: Value, result_type: &str) -> Value {
    if let Value::Object(obj) = &mut result {
        obj.insert("resultType".into(), result_type.into());
        let meta = obj
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), server.inner.info_value.clone());
        }
    }
    result
}

pub(crate) async fn dispatch(
    server: &Server,
    conn: &Arc<Connection>,
    request: Request,
    sink: Sink,
) -> Option<Result<Payload, ErrorObject>> {
    if !METHODS.contains(&request.method.as_str()) {
        return Some(Err(Error::MethodNotFound(request.method.clone()).into()));
    }
    let mut request = request;
    let checked = take_object(&mut request).and_then(|mut p| request_meta(&mut p).map(|m| (p, m)));
    let (params, meta) = match checked {
        Ok(c) => c,
        Err(e) => return Some(Err(e.into())),
    };
    let result = match request.method.as_str() {
        "server/discover" => Ok(complete(server, discover(server), "complete")),
        "tools/list" => from_object(params)
            .map_err(Into::into)
            .and_then(|p| tools_list(server, conn, &p))
            .map(|v| complete(server, v, "complete")),
        "tools/call" => return tools_call(server, conn, &request, params, meta, sink).await,
        "prompts/list" => from_object(params)
            .map_err(Into::into)
            .and_then(|p| prompts_list(server, &p))
            .map(|v| complete(server, v, "complete")),
        "completion/complete" => from_object(params)
            .and_then(|p| ops::complete(server, &p))
            .map(|v| complete(server, v, "complete"))
            .map_err(Into::into),
        "prompts/get" => {
            return prompts_get(server, conn, &request, params, meta, sink)
                .await
                .map(|r| r.map(Payload::Value));
        }
        "resources/list" => from_object(params)
            .and_then(|p| ops::list_resources(server, &p))
            .map(|v| complete(server, cacheable(server, v), "complete"))
            .map_err(Into::into),
        "resources/templates/list" => from_object(params)
            .and_then(|p| ops::list_resource_templates(server, &p))
            .map(|v| complete(server, cacheable(server, v), "complete"))
            .map_err(Into::into),
        "resources/read" => {
            return resources_read(server, conn, &request, params, meta, sink)
                .await
                .map(|r| r.map(Payload::Value));
        }
        "subscriptions/listen" => {
            // Boxed: a subscription lasts, and its future is larger than a call's.
            return Box::pin(listen(server, conn, &request, params, &meta, sink))
                .await
                .map(|r| r.map(Payload::Value));
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            return Some(tasks(server, conn, &request, params, &meta).await);
        }
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result.map(Payload::Value))
}

/// `true` when this request's client capabilities declare the tasks extension.
fn declares_tasks(meta: &RequestMeta) -> bool {
    meta.client_capabilities
        .get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some_and(|v| !v.is_null())
}

fn missing_tasks_capability() -> Error {
    Error::MissingCapability {
        required: json!({ "extensions": { TASKS_EXTENSION: {} } }),
    }
}

fn prompts_list(server: &Server, params: &ListParams) -> Result<Value, ErrorObject> {
    Ok(cacheable(server, ops::list_prompts(server, params)?))
}

/// Adds the cache hints (`ttlMs`, `cacheScope`) a `CacheableResult` requires.
fn cacheable(server: &Server, mut result: Value) -> Value {
    result["ttlMs"] = (server.inner.list_ttl.as_millis() as u64).into();
    result["cacheScope"] = "public".into();
    result
}

fn discover(server: &Server) -> Value {
    let inner = &server.inner;
    let mut result = json!({
        "supportedVersions": SUPPORTED,
        "capabilities": {
            "tools": { "listChanged": false },
            "extensions": { TASKS_EXTENSION: {} },
        },
        "ttlMs": inner.list_ttl.as_millis() as u64,
        "cacheScope": "public",
    });
    let offers = ops::offers(server);
    if offers.prompts {
        result["capabilities"]["prompts"] = json!({ "listChanged": false });
    }
    if offers.completions {
        result["capabilities"]["completions"] = json!({});
    }
    if offers.resources {
        result["capabilities"]["resources"] = json!({ "listChanged": false });
    }
    if let Some(instructions) = &inner.instructions {
        result["instructions"] = instructions.clone().into();
    }
    result
}

fn tools_list(
    server: &Server,
    conn: &Connection,
    params: &ListParams,
) -> Result<Value, ErrorObject> {
    let (page, next) = ops::list_tools(server, params, conn.caller().as_deref())?;
    let tools: Vec<Value> = page
        .into_iter()
        .map(|t| Value::Object(t.describe()))
        .collect();
    let mut result = json!({
        "tools": tools,
        "ttlMs": server.inner.list_ttl.as_millis() as u64,
        "cacheScope": if server.inner.hide_out_of_scope { "private" } else { "public" },
    });
    if let Some(next) = next {
        result["nextCursor"] = next.into();
    }
    Ok(result)
}
