//! The stateful wire of MCP 2025-11-25 (and the older stateful revisions it can negotiate).
//!
//! The era is fixed at `initialize`; client capabilities come from there too. Server-to-client
//! requests (elicitation, sampling, roots) travel on the connection.

use crate::call::{DirectBackend, LogGate, Notifier, outcome_of, run_tool};
use crate::context::TaskContext;
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{ErrorObject, Request};
use crate::model::LogLevel;
use crate::router::params_object;
use crate::server::{Server, tools_page};
use crate::session::{Connection, Era, Sink, StatefulState};
use serde_json::{Value, json};
use std::sync::Arc;

/// The newest stateful revision.
pub const LATEST: &str = "2025-11-25";
/// Every stateful revision the server accepts, newest first.
pub const SUPPORTED: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// Answers `initialize` and fixes the connection's era.
pub(crate) fn initialize(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
) -> Result<Value, ErrorObject> {
    let params = params_object(request)?;
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidParams("`protocolVersion` must be a string".into()))?;
    let version = SUPPORTED
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(LATEST);
    let client_capabilities = match params.get("capabilities") {
        Some(Value::Object(c)) => Value::Object(c.clone()),
        None => json!({}),
        Some(_) => {
            return Err(Error::InvalidParams("`capabilities` must be an object".into()).into());
        }
    };
    {
        let mut era = conn.era.lock().expect("era lock");
        if *era != Era::Undecided {
            return Err(Error::InvalidRequest("the session is already initialized".into()).into());
        }
        *era = Era::Stateful(StatefulState {
            version,
            client_capabilities,
        });
    }
    let inner = &server.inner;
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": false },
            "logging": {},
        },
        "serverInfo": inner.info_value,
    });
    if let Some(instructions) = &inner.instructions {
        result["instructions"] = instructions.clone().into();
    }
    Ok(result)
}

pub(crate) async fn dispatch(
    server: &Server,
    conn: &Arc<Connection>,
    state: StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let result = match request.method.as_str() {
        "initialize" => {
            Err(Error::InvalidRequest("the session is already initialized".into()).into())
        }
        "ping" => Ok(json!({})),
        "tools/list" => tools_list(server, &request),
        "logging/setLevel" => set_level(conn, &request),
        "tools/call" => return tools_call(server, conn, &state, request, sink).await,
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result)
}

fn tools_list(server: &Server, request: &Request) -> Result<Value, ErrorObject> {
    let params = params_object(request)?;
    let (page, next) = tools_page(&server.inner, &params)?;
    let tools: Vec<Value> = page
        .into_iter()
        .map(|t| Value::Object(t.describe()))
        .collect();
    let mut result = json!({ "tools": tools });
    if let Some(next) = next {
        result["nextCursor"] = next.into();
    }
    Ok(result)
}

fn set_level(conn: &Connection, request: &Request) -> Result<Value, ErrorObject> {
    let params = params_object(request)?;
    let level: LogLevel = params
        .get("level")
        .cloned()
        .and_then(|l| serde_json::from_value(l).ok())
        .ok_or_else(|| {
            Error::InvalidParams(
                "`level` must be one of debug, info, notice, warning, error, critical, alert, emergency"
                    .into(),
            )
        })?;
    conn.set_log_level(level);
    Ok(json!({}))
}

async fn tools_call(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let parsed = (|| {
        let params = params_object(&request)?;
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
            None | Some(Value::Null) => Default::default(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Err(Error::InvalidParams("`arguments` must be an object".into())),
        };
        let token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        Ok((tool, args, token))
    })();
    let (tool, args, progress_token) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    let cancel = conn.track(&request.id);
    let backend = Arc::new(DirectBackend {
        conn: Arc::clone(conn),
        notifier: Notifier {
            sink,
            progress_token,
            log: LogGate::Connection(Arc::clone(conn)),
        },
        cancel: cancel.clone(),
    });
    let cx = TaskContext::new(
        Arc::clone(&tool.name),
        cancel.clone(),
        state.client_capabilities.clone(),
        conn.principal.clone(),
        backend,
    );
    let end = run_tool(tool, cx, args, &cancel).await;
    conn.untrack(&request.id);
    if cancel.is_cancelled() {
        return None;
    }
    match outcome_of(tool, end)? {
        CallOutcome::Result(r) => Some(Ok(serde_json::to_value(r).unwrap_or_default())),
        CallOutcome::Error(e) => Some(Err(e)),
    }
}
