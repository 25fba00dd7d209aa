//! The stateful wire of MCP 2025-11-25 (and the older stateful revisions it can negotiate).
//!
//! The era is fixed at `initialize`; client capabilities come from there too. Server-to-client
//! requests (elicitation, sampling, roots) travel on the connection.

use crate::call::{DirectBackend, LogGate, Notifier, outcome_of, run_tool};
use crate::context::TaskContext;
use crate::engine::{Flavor, NewTask, RELATED_TASK, StatusHook};
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{ErrorObject, Request};
use crate::model::{JsonObject, LogLevel, TaskSupport};
use crate::router::{name_param, params_object};
use crate::server::{Server, tools_page};
use crate::session::{Connection, Era, Sink, StatefulState};
use crate::task::{TaskProtocol, TaskRecord, TaskStatus, rfc3339};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// How many tasks a `tasks/list` page holds.
const TASK_PAGE: usize = 100;

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
    if !inner.prompts.is_empty() {
        result["capabilities"]["prompts"] = json!({ "listChanged": false });
    }
    if crate::server::completes(inner) {
        result["capabilities"]["completions"] = json!({});
    }
    if crate::server::has_resources(inner) {
        result["capabilities"]["resources"] = json!({ "subscribe": true, "listChanged": false });
    }
    if version == LATEST {
        result["capabilities"]["tasks"] = json!({
            "list": {},
            "cancel": {},
            "requests": { "tools": { "call": {} } },
        });
    }
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
        "tools/list" => tools_list(server, &state, &request),
        "logging/setLevel" => set_level(conn, &request),
        "tools/call" => return tools_call(server, conn, &state, request, sink).await,
        "prompts/list" => prompts_list(server, &request),
        "completion/complete" => params_object(&request)
            .and_then(|p| crate::server::complete(&server.inner, &p))
            .map_err(Into::into),
        "prompts/get" => return prompts_get(server, conn, &state, request, sink).await,
        "resources/list" => resources_list(server, &request, crate::server::resources_list),
        "resources/templates/list" => {
            resources_list(server, &request, crate::server::resource_templates_list)
        }
        "resources/read" => return resources_read(server, conn, &state, request, sink).await,
        "resources/subscribe" | "resources/unsubscribe" => subscribe(conn, &request),
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" if state.version == LATEST => {
            return tasks(server, conn, request, sink).await;
        }
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result)
}

/// The owner of the tasks a connection creates: its principal, else the session itself.
fn owner(conn: &Connection) -> String {
    conn.task_owner(true).unwrap_or_default()
}

/// A task as this era shows it.
pub(crate) fn task_json(rec: &TaskRecord) -> Value {
    let mut task = json!({
        "taskId": rec.id,
        "status": rec.status.as_str(),
        "createdAt": rfc3339(rec.created_at),
        "lastUpdatedAt": rfc3339(rec.updated_at),
        "ttl": rec.ttl.map(|t| t.as_millis() as u64),
        "pollInterval": rec.poll_interval.as_millis() as u64,
    });
    if let Some(message) = &rec.status_message {
        task["statusMessage"] = message.clone().into();
    }
    task
}

fn task_id(request: &Request) -> Result<String, Error> {
    params_object(request)?
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Error::InvalidParams("`taskId` must be a string".into()))
}

async fn tasks(
    server: &Server,
    conn: &Arc<Connection>,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let engine = &server.inner.engine;
    let owner = owner(conn);
    let owner = Some(owner.as_str());
    let result = async {
        match request.method.as_str() {
            "tasks/get" => {
                let id = task_id(&request)?;
                let rec = engine.get(&id, owner).await?.ok_or(Error::TaskNotFound)?;
                Ok(task_json(&rec))
            }
            "tasks/cancel" => {
                let id = task_id(&request)?;
                let (rec, cancelled) = engine
                    .cancel(&id, owner)
                    .await?
                    .ok_or(Error::TaskNotFound)?;
                if !cancelled {
                    return Err(Error::TaskTerminal(rec.status.to_string()).into());
                }
                Ok(task_json(&rec))
            }
            "tasks/list" => {
                let params = params_object(&request)?;
                let cursor = match params.get("cursor") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(c)) => Some(c.clone()),
                    Some(_) => {
                        return Err(Error::InvalidParams("`cursor` must be a string".into()).into());
                    }
                };
                let page = engine.list(owner, cursor.as_deref(), TASK_PAGE).await?;
                let mut result =
                    json!({ "tasks": page.tasks.iter().map(task_json).collect::<Vec<_>>() });
                if let Some(next) = page.next_cursor {
                    result["nextCursor"] = next.into();
                }
                Ok(result)
            }
            _ => Err(ErrorObject::from(Error::MethodNotFound(
                request.method.clone(),
            ))),
        }
    };
    if request.method != "tasks/result" {
        return Some(result.await);
    }
    // `tasks/result` blocks until the task ends; `notifications/cancelled` may end the wait.
    let id = match task_id(&request) {
        Ok(id) => id,
        Err(e) => return Some(Err(e.into())),
    };
    let cancel = conn.track(&request.id);
    let waited = engine.wait_terminal(&id, owner, &sink, &cancel).await;
    conn.untrack(&request.id);
    if cancel.is_cancelled() {
        return None;
    }
    Some(match waited {
        Err(e) => Err(e.into()),
        Ok(None) => Err(Error::TaskNotFound.into()),
        Ok(Some(rec)) => task_payload(&rec),
    })
}

/// What `tasks/result` answers for a terminal task: exactly what the call would have.
fn task_payload(rec: &TaskRecord) -> Result<Value, ErrorObject> {
    let related = json!({ RELATED_TASK: { "taskId": rec.id } });
    match (&rec.outcome, rec.status) {
        (Some(CallOutcome::Result(r)), _) => {
            let mut value = serde_json::to_value(r).unwrap_or_default();
            value["_meta"] = related;
            Ok(value)
        }
        // Errors come back exactly as the call would have answered them.
        (Some(CallOutcome::Error(e)), _) => Err(e.clone()),
        (None, TaskStatus::Cancelled) => Err(Error::Cancelled.into()),
        (None, _) => Err(Error::Internal("the task ended without an outcome".into()).into()),
    }
}

fn prompts_list(server: &Server, request: &Request) -> Result<Value, ErrorObject> {
    Ok(crate::server::prompts_list(
        &server.inner,
        &params_object(request)?,
    )?)
}

async fn prompts_get(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let parsed = (|| {
        let params = params_object(&request)?;
        let name = name_param(&params)?;
        let prompt = server
            .inner
            .prompts
            .get(name)
            .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?;
        let args = prompt.check_arguments(&params)?;
        Ok::<_, Error>((prompt, args))
    })();
    let (prompt, args) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(ErrorObject::from(e))),
    };
    let cancel = conn.track(&request.id);
    let cx = direct_context(conn, state, Arc::clone(&prompt.name), sink, None, &cancel);
    let result = tokio::select! {
        r = crate::prompt::run(prompt, cx, args) => r,
        () = cancel.cancelled() => {
            conn.untrack(&request.id);
            return None;
        }
    };
    conn.untrack(&request.id);
    Some(match result {
        Err(e) => Err(e),
        Ok(Ok(r)) => Ok(serde_json::to_value(r).unwrap_or_default()),
        Ok(Err(e)) => Err(crate::prompt::prompt_error(e)),
    })
}

/// `resources/list` or `resources/templates/list`, by the listing function given.
fn resources_list(
    server: &Server,
    request: &Request,
    list: fn(&crate::server::ServerInner, &JsonObject) -> Result<Value, Error>,
) -> Result<Value, ErrorObject> {
    Ok(list(&server.inner, &params_object(request)?)?)
}

/// `resources/subscribe` and `resources/unsubscribe`: remembered per connection.
fn subscribe(conn: &Connection, request: &Request) -> Result<Value, ErrorObject> {
    let uri = crate::resource::uri_param(&params_object(request)?)?;
    let mut subscriptions = conn.subscriptions.lock().expect("subscriptions lock");
    if request.method == "resources/subscribe" {
        subscriptions.insert(uri);
    } else {
        subscriptions.remove(&uri);
    }
    Ok(json!({}))
}

async fn resources_read(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let parsed = (|| {
        let uri = crate::resource::uri_param(&params_object(&request)?)?;
        let target = crate::resource::find(&server.inner, &uri)
            .ok_or_else(|| Error::ResourceNotFoundStateful(uri.clone()))?;
        Ok::<_, Error>((uri, target))
    })();
    let (uri, target) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(ErrorObject::from(e))),
    };
    let cancel = conn.track(&request.id);
    let cx = direct_context(conn, state, Arc::from(uri.as_str()), sink, None, &cancel);
    let result = tokio::select! {
        r = crate::resource::run(&target, cx, &uri) => r,
        () = cancel.cancelled() => {
            conn.untrack(&request.id);
            return None;
        }
    };
    conn.untrack(&request.id);
    Some(match result {
        Err(e) => Err(e),
        Ok(Ok(contents)) => Ok(json!({ "contents": contents })),
        Ok(Err(e)) => Err(crate::prompt::prompt_error(e)),
    })
}

fn tools_list(
    server: &Server,
    state: &StatefulState,
    request: &Request,
) -> Result<Value, ErrorObject> {
    let params = params_object(request)?;
    let (page, next) = tools_page(&server.inner, &params)?;
    let tools: Vec<Value> = page
        .into_iter()
        .map(|t| {
            let mut tool = t.describe();
            if state.version == LATEST {
                tool.insert(
                    "execution".into(),
                    json!({ "taskSupport": t.task_support.as_str() }),
                );
            }
            Value::Object(tool)
        })
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
        let name = name_param(&params)?;
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
        let task = match params.get("task") {
            _ if state.version != LATEST => None,
            None | Some(Value::Null) => None,
            Some(Value::Object(t)) => Some(match t.get("ttl") {
                None | Some(Value::Null) => None,
                Some(v) => Some(Duration::from_millis(v.as_u64().ok_or_else(|| {
                    Error::InvalidParams("`task.ttl` must be a non-negative integer".into())
                })?)),
            }),
            Some(_) => return Err(Error::InvalidParams("`task` must be an object".into())),
        };
        // The tool-level rules of the Tasks utility (2025-11-25 only).
        if state.version == LATEST {
            match (tool.task_support, &task) {
                (TaskSupport::Forbidden, Some(_)) => {
                    return Err(Error::MethodNotFound(format!(
                        "tool {name:?} does not support task augmentation (taskSupport: 'forbidden')"
                    )));
                }
                (TaskSupport::Required, None) => {
                    return Err(Error::MethodNotFound(format!(
                        "tool {name:?} requires task augmentation (taskSupport: 'required')"
                    )));
                }
                _ => {}
            }
        }
        Ok((tool, args, token, task))
    })();
    let (tool, args, progress_token, task) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    if let Some(requested_ttl) = task {
        return Some(
            start_task(
                server,
                conn,
                state,
                tool,
                args,
                progress_token,
                requested_ttl,
            )
            .await,
        );
    }
    let cancel = conn.track(&request.id);
    let cx = direct_context(
        conn,
        state,
        Arc::clone(&tool.name),
        sink,
        progress_token,
        &cancel,
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

async fn start_task(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    tool: &crate::tool::Tool,
    args: JsonObject,
    progress_token: Option<Value>,
    requested_ttl: Option<Duration>,
) -> Result<Value, ErrorObject> {
    let sink = conn.sink.clone();
    let on_status: StatusHook = Arc::new(move |rec: &TaskRecord| {
        sink.notify("notifications/tasks/status", task_json(rec));
    });
    let rec = server
        .inner
        .engine
        .start(NewTask {
            tool: tool.clone(),
            args,
            owner: Some(owner(conn)),
            protocol: TaskProtocol::V2025,
            requested_ttl,
            client_capabilities: state.client_capabilities.clone(),
            principal: conn.principal.clone(),
            flavor: Flavor::V2025 {
                conn: Arc::clone(conn),
                progress_token,
            },
            on_status: Some(on_status),
        })
        .await?;
    Ok(json!({ "task": task_json(&rec) }))
}

/// The context of a plain call (or prompt, or resource read) in this era: questions go to
/// the client as server-to-client requests on `sink`.
fn direct_context(
    conn: &Arc<Connection>,
    state: &StatefulState,
    name: Arc<str>,
    sink: Sink,
    progress_token: Option<Value>,
    cancel: &tokio_util::sync::CancellationToken,
) -> TaskContext {
    let backend = Arc::new(DirectBackend {
        conn: Arc::clone(conn),
        notifier: Notifier {
            sink,
            progress_token,
            log: LogGate::Connection(Arc::clone(conn)),
        },
        cancel: cancel.clone(),
    });
    TaskContext::new(
        name,
        cancel.clone(),
        state.client_capabilities.clone(),
        conn.principal.clone(),
        backend,
    )
}
