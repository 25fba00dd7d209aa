//! The stateless wire of MCP 2026-07-28.
//!
//! Every request carries its protocol version and client capabilities in `_meta`; nothing is
//! remembered between requests. Every result has a `resultType`. A tool's questions to the
//! client become `InputRequiredResult` rounds (MRTR).

use crate::call::{LogGate, MrtrBackend, Notifier, outcome_of, run_tool};
use crate::context::TaskContext;
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{ErrorObject, Request};
use crate::model::{JsonObject, LogLevel};
use crate::mrtr;
use crate::router::{META_PROTOCOL_VERSION, params_object};
use crate::server::{Server, tools_page};
use crate::session::{Connection, Sink};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The stateless revision.
pub const VERSION: &str = "2026-07-28";
/// Every stateless revision the server accepts.
pub const SUPPORTED: [&str; 1] = [VERSION];

const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Methods this era defines.
const METHODS: [&str; 3] = ["server/discover", "tools/list", "tools/call"];

/// What a request's `_meta` says about the client.
#[derive(Debug)]
pub(crate) struct RequestMeta {
    pub(crate) client_capabilities: Value,
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) progress_token: Option<Value>,
}

/// Reads and checks the per-request `_meta`.
pub(crate) fn request_meta(params: &JsonObject) -> Result<RequestMeta, Error> {
    let meta = match params.get("_meta") {
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
    let client_capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
        Some(Value::Object(c)) => Value::Object(c.clone()),
        _ => {
            return Err(Error::InvalidParams(format!(
                "`_meta[\"{META_CLIENT_CAPABILITIES}\"]` must be an object"
            )));
        }
    };
    let log_level = meta
        .get(META_LOG_LEVEL)
        .and_then(|l| serde_json::from_value(l.clone()).ok());
    let progress_token = meta
        .get("progressToken")
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned();
    Ok(RequestMeta {
        client_capabilities,
        log_level,
        progress_token,
    })
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
) -> Option<Result<Value, ErrorObject>> {
    if !METHODS.contains(&request.method.as_str()) {
        return Some(Err(Error::MethodNotFound(request.method.clone()).into()));
    }
    let checked = params_object(&request).and_then(|p| request_meta(&p).map(|m| (p, m)));
    let (params, meta) = match checked {
        Ok(c) => c,
        Err(e) => return Some(Err(e.into())),
    };
    let result = match request.method.as_str() {
        "server/discover" => Ok(complete(server, discover(server), "complete")),
        "tools/list" => tools_list(server, &params).map(|v| complete(server, v, "complete")),
        "tools/call" => return tools_call(server, conn, &request, params, meta, sink).await,
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result)
}

fn discover(server: &Server) -> Value {
    let inner = &server.inner;
    let mut result = json!({
        "supportedVersions": SUPPORTED,
        "capabilities": {
            "tools": { "listChanged": false },
        },
        "ttlMs": inner.list_ttl.as_millis() as u64,
        "cacheScope": "public",
    });
    if let Some(instructions) = &inner.instructions {
        result["instructions"] = instructions.clone().into();
    }
    result
}

fn tools_list(server: &Server, params: &JsonObject) -> Result<Value, ErrorObject> {
    let (page, next) = tools_page(&server.inner, params)?;
    let tools: Vec<Value> = page
        .into_iter()
        .map(|t| Value::Object(t.describe()))
        .collect();
    let mut result = json!({
        "tools": tools,
        "ttlMs": server.inner.list_ttl.as_millis() as u64,
        "cacheScope": "public",
    });
    if let Some(next) = next {
        result["nextCursor"] = next.into();
    }
    Ok(result)
}

async fn tools_call(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: JsonObject,
    meta: RequestMeta,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let parsed = (|| {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::InvalidParams("`name` must be a string".into()))?;
        let tool = server
            .inner
            .registry
            .get(name)
            .ok_or_else(|| Error::UnknownTool(name.to_owned()))?;
        let args = match params.get("arguments") {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Err(Error::InvalidParams("`arguments` must be an object".into())),
        };
        let mut answers = match params.get("requestState") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::String(state)) => mrtr::open(
                &server.inner.state_key,
                state,
                name,
                &args,
                conn.principal.as_deref(),
            )
            .map_err(|e| Error::InvalidParams(e.to_string()))?,
            Some(_) => {
                return Err(Error::InvalidParams(
                    "`requestState` must be a string".into(),
                ));
            }
        };
        match params.get("inputResponses") {
            None | Some(Value::Null) => {}
            Some(Value::Object(responses)) => {
                answers.extend(responses.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(_) => {
                return Err(Error::InvalidParams(
                    "`inputResponses` must be an object".into(),
                ));
            }
        }
        Ok((tool, args, answers))
    })();
    let (tool, args, answers) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    let cancel = conn.track(&request.id);
    let backend = Arc::new(MrtrBackend::new(
        answers,
        Notifier {
            sink,
            progress_token: meta.progress_token,
            log: LogGate::Request(meta.log_level),
        },
    ));
    let cx = TaskContext::new(
        Arc::clone(&tool.name),
        cancel.clone(),
        meta.client_capabilities,
        conn.principal.clone(),
        Arc::clone(&backend) as _,
    );
    let end = run_tool(tool, cx, args.clone(), &cancel).await;
    conn.untrack(&request.id);
    if cancel.is_cancelled() {
        return None;
    }
    match outcome_of(tool, end) {
        Some(CallOutcome::Result(r)) => Some(Ok(complete(
            server,
            serde_json::to_value(r).unwrap_or_default(),
            "complete",
        ))),
        Some(CallOutcome::Error(e)) => Some(Err(e)),
        None => {
            let asked = backend.take_asked();
            let state = mrtr::seal(
                &server.inner.state_key,
                &tool.name,
                &args,
                conn.principal.as_deref(),
                server.inner.request_state_ttl,
                &backend.used_answers(),
            );
            let requests: JsonObject = asked
                .into_iter()
                .map(|(k, r)| (k, serde_json::to_value(r).unwrap_or_default()))
                .collect();
            Some(Ok(complete(
                server,
                json!({ "inputRequests": requests, "requestState": state }),
                "input_required",
            )))
        }
    }
}
