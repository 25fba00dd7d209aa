//! The stateless wire of MCP 2026-07-28.
//!
//! Every request carries its protocol version and client capabilities in `_meta`; nothing is
//! remembered between requests. Every result has a `resultType`. A tool's questions to the
//! client become `InputRequiredResult` rounds (MRTR): the call is suspended on its question
//! and the client's retry resumes it (see [`crate::mrtr`]).

use crate::call::{
    Caller, Ended, LogGate, Notifier, Produced, Step, Suspended, WorkFuture, drive, outcome_of,
};
use crate::context::TaskContext;
use crate::engine::NewTask;
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{self, ErrorObject, Payload, Request};
use crate::model::{InputRequest, JsonObject, LogLevel, TaskSupport};
use crate::mrtr::{self, Resuming, Taken};
use crate::ops;
use crate::server::Server;
use crate::session::{Connection, Sink};
use crate::task::{SettlePolicy, TaskRecord, TaskStatus, rfc3339};
use crate::tool::{ResumePolicy, Tool};
use crate::wire::params::{ListParams, TaskIdParams, from_object, take_object};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// `requestState` and `inputResponses`: what a retry of an `InputRequiredResult` brings.
#[derive(Debug, Default)]
struct Rounds {
    /// The signed state of the round being answered.
    request_state: Option<String>,
    /// The answers, by question key.
    input_responses: Option<JsonObject>,
}

/// The params of `tools/call` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallToolParams {
    name: String,
    arguments: Option<JsonObject>,
    request_state: Option<String>,
    input_responses: Option<JsonObject>,
}

/// The params of `prompts/get` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetPromptParams {
    name: String,
    arguments: Option<JsonObject>,
    request_state: Option<String>,
    input_responses: Option<JsonObject>,
}

/// The params of `resources/read` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadResourceParams {
    uri: String,
    request_state: Option<String>,
    input_responses: Option<JsonObject>,
}

/// The params of `tasks/update`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateTaskParams {
    task_id: String,
    input_responses: JsonObject,
}

/// The params of `subscriptions/listen`; task ids that are not strings are skipped.
#[derive(Debug, Deserialize)]
struct ListenParams {
    notifications: Option<Value>,
}

/// The fields every task of this era shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Task<'a> {
    task_id: &'a str,
    status: &'static str,
    created_at: String,
    last_updated_at: String,
    /// Always present: `null` for a task kept until it is deleted.
    ttl_ms: Option<u64>,
    poll_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
}

impl<'a> Task<'a> {
    fn of(rec: &'a TaskRecord) -> Self {
        Self {
            task_id: &rec.id,
            status: rec.status.as_str(),
            created_at: rfc3339(rec.created_at),
            last_updated_at: rfc3339(rec.updated_at),
            ttl_ms: rec.ttl.map(|t| t.as_millis() as u64),
            poll_interval_ms: (rec.poll_interval.as_millis() as u64).max(1),
            status_message: rec.status_message.as_deref(),
        }
    }
}

/// The `DetailedTask` of the extension: the task with its questions, result or error.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DetailedTask<'a> {
    #[serde(flatten)]
    task: Task<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_requests: Option<&'a BTreeMap<String, InputRequest>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a crate::model::CallToolResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<std::borrow::Cow<'a, ErrorObject>>,
}

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
    Ok(RequestMeta {
        client_capabilities,
        log_level,
        progress_token,
    })
}

/// A typed result with the fields every result of this era carries, written to JSON text
/// straight from its typed form. `result` must serialise as an object without `resultType`
/// or `_meta` members (a task, a `DetailedTask`, a `CallToolResult`).
fn complete_typed<T: Serialize>(server: &Server, result: &T, result_type: &str) -> Payload {
    #[derive(Serialize)]
    struct Complete<'a, T> {
        #[serde(flatten)]
        result: &'a T,
        #[serde(rename = "resultType")]
        result_type: &'a str,
        #[serde(rename = "_meta")]
        meta: ServerMeta<'a>,
    }
    #[derive(Serialize)]
    struct ServerMeta<'a> {
        #[serde(rename = "io.modelcontextprotocol/serverInfo")]
        server_info: &'a Value,
    }
    let typed = Complete {
        result,
        result_type,
        meta: ServerMeta {
            server_info: &server.inner.info_value,
        },
    };
    match serde_json::value::to_raw_value(&typed) {
        Ok(raw) => Payload::Json(raw),
        // These types always serialise; were one not to, the value path says why.
        Err(_) => Payload::Value(complete(server, to_value(result), result_type)),
    }
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
            .and_then(|p| tools_list(server, &p))
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
            return listen(server, conn, &request, params, &meta, sink)
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

/// A task as this era shows it: the `DetailedTask` of the extension.
pub(crate) fn detailed_task(rec: &TaskRecord) -> Value {
    to_value(DetailedTask::of(rec))
}

impl<'a> DetailedTask<'a> {
    fn of(rec: &'a TaskRecord) -> Self {
        use std::borrow::Cow;
        let mut detailed = DetailedTask {
            task: Task::of(rec),
            input_requests: None,
            result: None,
            error: None,
        };
        match (rec.status, &rec.outcome) {
            (TaskStatus::InputRequired, _) => detailed.input_requests = Some(&rec.input_requests),
            (TaskStatus::Completed, Some(CallOutcome::Result(r))) => detailed.result = Some(r),
            (TaskStatus::Failed, Some(CallOutcome::Error(e))) => {
                detailed.error = Some(Cow::Borrowed(e))
            }
            (TaskStatus::Failed, _) => {
                let message = rec.status_message.as_deref().unwrap_or("the task failed");
                let error = ErrorObject::new(jsonrpc::INTERNAL_ERROR, message);
                detailed.error = Some(Cow::Owned(error));
            }
            _ => {}
        }
        detailed
    }
}

/// The `CreateTaskResult` of the extension: flat, without result, error or input requests.
fn create_task_result(server: &Server, rec: &TaskRecord) -> Payload {
    complete_typed(server, &Task::of(rec), "task")
}

async fn tasks(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: JsonObject,
    meta: &RequestMeta,
) -> Result<Payload, ErrorObject> {
    // The capability gate comes before anything else, even an unknown id.
    if !declares_tasks(meta) {
        return Err(missing_tasks_capability().into());
    }
    let owner = conn.task_owner(false);
    let owner = owner.as_deref();
    match request.method.as_str() {
        "tasks/get" => {
            let id = from_object::<TaskIdParams>(params)?.task_id;
            let rec = ops::get_task(server, &id, owner).await?;
            Ok(complete_typed(server, &DetailedTask::of(&rec), "complete"))
        }
        "tasks/update" => {
            let params: UpdateTaskParams = from_object(params)?;
            ops::answer_task(server, &params.task_id, owner, &params.input_responses).await?;
            Ok(Payload::Value(complete(server, json!({}), "complete")))
        }
        _ => {
            let id = from_object::<TaskIdParams>(params)?.task_id;
            ops::cancel_task(server, &id, owner).await?;
            Ok(Payload::Value(complete(server, json!({}), "complete")))
        }
    }
}

/// `subscriptions/listen`: acknowledges, then streams `notifications/tasks` for the tasks
/// asked for until the client cancels the request.
async fn listen(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: JsonObject,
    meta: &RequestMeta,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let params: ListenParams = match from_object(params) {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    let wanted: Vec<String> = params
        .notifications
        .as_ref()
        .and_then(|n| n.get("taskIds"))
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if !wanted.is_empty() && !declares_tasks(meta) {
        return Some(Err(missing_tasks_capability().into()));
    }
    let owner = conn.task_owner(false);
    let owner = owner.as_deref();
    let honoured = match ops::visible_tasks(server, owner, wanted).await {
        Ok(ids) => ids,
        Err(e) => return Some(Err(e.into())),
    };
    let subscription = serde_json::to_value(&request.id).unwrap_or_default();
    let cancel = conn.track(&request.id);
    // Neither message may be lost: both wait for room on the stream, until the client
    // closes it (which cancels the request).
    let acknowledged = sink.notify(
        "notifications/subscriptions/acknowledged",
        json!({
            "notifications": { "taskIds": honoured },
            "_meta": { META_SUBSCRIPTION_ID: subscription },
        }),
    );
    tokio::select! {
        _ = acknowledged => {}
        () = cancel.cancelled() => return None,
    }
    let mut feed = ops::follow_tasks(server, owner, &honoured).await;
    loop {
        let rec = tokio::select! {
            rec = feed.next() => rec,
            () = cancel.cancelled() => break,
        };
        let Some(rec) = rec else {
            // Every task is settled and nothing more will change; wait for the client.
            cancel.cancelled().await;
            break;
        };
        let mut params = detailed_task(&rec);
        params["_meta"] = json!({ META_SUBSCRIPTION_ID: subscription });
        tokio::select! {
            _ = sink.notify("notifications/tasks", params) => {}
            () = cancel.cancelled() => break,
        }
    }
    None
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

/// `resources/read`: unknown URIs are `-32602` with the URI in `data` (SEP-2164); the handler
/// may ask the client questions, which suspend it until the retry brings the answers.
async fn resources_read(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: JsonObject,
    meta: RequestMeta,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let found = from_object::<ReadResourceParams>(params).and_then(|p| {
        let target = ops::resource(server, &p.uri)?;
        let rounds = Rounds {
            request_state: p.request_state,
            input_responses: p.input_responses,
        };
        Ok((p.uri, target, rounds))
    });
    let (uri, target, rounds) = match found {
        Ok(f) => f,
        Err(e) => return Some(Err(e.into())),
    };
    let handler = Arc::clone(target.handler);
    let (read_uri, vars) = (uri.clone(), target.vars.clone());
    let call = SyncCall {
        target: format!("resource:{uri}"),
        name: Arc::from(uri.as_str()),
        args: target.vars.clone(),
        policy: target.on_unresumable,
        prelude: false,
        work: Box::new(move |cx| {
            Box::pin(async move { handler(cx, read_uri, vars).await.map(Produced::Resource) })
        }),
    };
    let round = interact(server, conn, request, rounds, &meta, sink, call).await;
    Some(match round? {
        Err(e) => Err(e),
        Ok(Round::Asked(result)) => Ok(result),
        Ok(Round::Ended(Ended::Returned(Ok(Produced::Resource(contents))))) => Ok(complete(
            server,
            cacheable(server, json!({ "contents": contents })),
            "complete",
        )),
        Ok(Round::Ended(Ended::Returned(Err(e)))) => Err(crate::prompt::prompt_error(e)),
        Ok(Round::Ended(Ended::Panicked(panic))) => {
            tracing::error!(%uri, %panic, "resource handler panicked");
            Err(Error::Internal(format!("resource {uri:?} panicked")).into())
        }
        Ok(Round::Ended(Ended::Cancelled)) => Err(Error::Cancelled.into()),
        Ok(Round::Ended(Ended::Returned(Ok(_))) | Round::Detached(_)) => {
            Err(Error::Internal("a resource read ended unexpectedly".into()).into())
        }
    })
}

async fn prompts_get(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: JsonObject,
    meta: RequestMeta,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let found = from_object::<GetPromptParams>(params).and_then(|p| {
        let (prompt, args) = ops::prompt(server, &p.name, p.arguments)?;
        let rounds = Rounds {
            request_state: p.request_state,
            input_responses: p.input_responses,
        };
        Ok((prompt, args, rounds))
    });
    let (prompt, args, rounds) = match found {
        Ok(f) => f,
        Err(e) => return Some(Err(e.into())),
    };
    let handler = Arc::clone(&prompt.handler);
    let call = SyncCall {
        target: format!("prompt:{}", prompt.name),
        name: Arc::clone(&prompt.name),
        args: args.clone(),
        policy: prompt.on_unresumable,
        prelude: false,
        work: Box::new(move |cx| {
            Box::pin(async move { handler(cx, args).await.map(Produced::Prompt) })
        }),
    };
    let round = interact(server, conn, request, rounds, &meta, sink, call).await;
    Some(match round? {
        Err(e) => Err(e),
        Ok(Round::Asked(result)) => Ok(result),
        Ok(Round::Ended(Ended::Returned(Ok(Produced::Prompt(r))))) => Ok(complete(
            server,
            serde_json::to_value(r).unwrap_or_default(),
            "complete",
        )),
        Ok(Round::Ended(Ended::Returned(Err(e)))) => Err(crate::prompt::prompt_error(e)),
        Ok(Round::Ended(Ended::Panicked(panic))) => {
            tracing::error!(prompt = %prompt.name, %panic, "prompt panicked");
            Err(Error::Internal(format!("prompt {:?} panicked", &*prompt.name)).into())
        }
        Ok(Round::Ended(Ended::Cancelled)) => Err(Error::Cancelled.into()),
        Ok(Round::Ended(Ended::Returned(Ok(_))) | Round::Detached(_)) => {
            Err(Error::Internal("a prompt ended unexpectedly".into()).into())
        }
    })
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

fn tools_list(server: &Server, params: &ListParams) -> Result<Value, ErrorObject> {
    let (page, next) = ops::list_tools(server, params)?;
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
) -> Option<Result<Payload, ErrorObject>> {
    let parsed = (|| {
        let params: CallToolParams = from_object(params)?;
        let name = params.name.as_str();
        let tool = ops::tool(server, name)?;
        let rounds = Rounds {
            request_state: params.request_state,
            input_responses: params.input_responses,
        };
        Ok::<_, Error>((tool, params.arguments.unwrap_or_default(), rounds))
    })();
    let (tool, args, rounds) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    let as_task = match (tool.task_support, declares_tasks(&meta)) {
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => false,
        (TaskSupport::Optional | TaskSupport::Required, true) => true,
        (TaskSupport::Required, false) => return Some(Err(missing_tasks_capability().into())),
    };
    if as_task && !tool.prelude {
        // A task takes no MRTR rounds; a stray state is still checked.
        let to = mrtr::Binding {
            target: &tool.name,
            args: &args,
            principal: conn.principal.as_deref(),
        };
        if let Err(e) = request_state(server, rounds.request_state.as_deref(), to) {
            return Some(Err(e.into()));
        }
        let rec = match ops::start_task(server, new_task(conn, tool, args, meta)).await {
            Ok(rec) => rec,
            Err(e) => return Some(Err(e.into())),
        };
        return Some(Ok(create_task_result(server, &rec)));
    }
    let runner = tool.runner();
    let run_args = args.clone();
    // A call with a prelude may become a task, which takes the arguments again.
    let task_args = as_task.then(|| args.clone());
    let call = SyncCall {
        target: tool.name.to_string(),
        name: Arc::clone(&tool.name),
        args,
        policy: tool.on_unresumable,
        prelude: as_task,
        work: Box::new(move |cx| {
            Box::pin(async move { runner.call(cx, run_args).await.map(Produced::Tool) })
        }),
    };
    let round = interact(server, conn, request, rounds, &meta, sink, call).await?;
    Some(match round {
        Err(e) => Err(e),
        Ok(Round::Asked(result)) => Ok(Payload::Value(result)),
        Ok(Round::Ended(end)) => match outcome_of(tool, end.into_run_end(tool)) {
            Some(CallOutcome::Result(r)) => Ok(complete_typed(server, &r, "complete")),
            Some(CallOutcome::Error(e)) => Err(e),
            None => Err(Error::Internal("the tool ended without an outcome".into()).into()),
        },
        Ok(Round::Detached(call)) => {
            adopt(
                server,
                conn,
                tool,
                task_args.unwrap_or_default(),
                meta,
                call,
            )
            .await
        }
    })
}

fn new_task(conn: &Connection, tool: &Tool, args: JsonObject, meta: RequestMeta) -> NewTask {
    NewTask {
        tool: tool.clone(),
        args,
        owner: conn.task_owner(false),
        requestor: conn.requestor(),
        // A tool result with `isError: true` ends a task of this era `completed`.
        settle: SettlePolicy::Complete,
        requested_ttl: None,
        client_capabilities: meta.client_capabilities,
        delivery: None,
    }
}

/// Turns a call with a prelude into a task once it first waits on something that is not a
/// question (SEP-2663: finish MRTR rounds before going async).
async fn adopt(
    server: &Server,
    conn: &Connection,
    tool: &Tool,
    args: JsonObject,
    meta: RequestMeta,
    call: Suspended,
) -> Result<Payload, ErrorObject> {
    let cx = call.cx.clone();
    let prelude = call.prelude.clone();
    let cancel = call.cancel.clone();
    let rec = ops::adopt_task(
        server,
        new_task(conn, tool, args, meta),
        call.into_tool_future(),
        cancel,
        |id, backend| {
            cx.set_task_id(id);
            if let Some(prelude) = prelude {
                let _ = prelude.task.set(backend);
            }
        },
    )
    .await?;
    Ok(create_task_result(server, &rec))
}

/// A synchronous call of this era: a tool call (possibly the prelude of a task), a prompt or
/// a resource read.
struct SyncCall {
    /// What its `requestState` is bound to: the tool name, `prompt:<name>` or
    /// `resource:<uri>`.
    target: String,
    /// The name its context reports.
    name: Arc<str>,
    /// Its arguments (a resource template's variables).
    args: JsonObject,
    /// What a retry does when the suspended call is gone.
    policy: ResumePolicy,
    /// A tool call with a prelude, which becomes a task at its first real suspension.
    prelude: bool,
    /// Starts the call's future, when it starts (again) rather than resumes.
    work: Box<dyn FnOnce(TaskContext) -> WorkFuture + Send>,
}

/// Where one request's round of a synchronous call stopped.
enum Round {
    /// The call ended.
    Ended(Ended),
    /// The call waits for answers: the `InputRequiredResult` to send.
    Asked(Value),
    /// The prelude is over: the call goes on as a task.
    Detached(Suspended),
}

/// Reads and checks the `requestState` of a request, if it has one.
fn request_state(
    server: &Server,
    state: Option<&str>,
    to: mrtr::Binding<'_>,
) -> Result<Option<mrtr::State>, Error> {
    state
        .map(|state| mrtr::open(&server.inner.state_keys, state, to))
        .transpose()
        .map_err(|e| Error::InvalidParams(e.to_string()))
}

/// Runs one round of a synchronous call: resumes the parked call the request's
/// `requestState` names with its `inputResponses`, or starts the call (again), then drives it
/// until it ends or waits for answers, when it is parked. `None` when the request was
/// cancelled and must not be answered.
async fn interact(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    rounds: Rounds,
    meta: &RequestMeta,
    sink: Sink,
    call: SyncCall,
) -> Option<Result<Round, ErrorObject>> {
    let to = mrtr::Binding {
        target: &call.target,
        args: &call.args,
        principal: conn.principal.as_deref(),
    };
    let begun = begin(server, rounds, to, &call);
    let (start, responses) = match begun {
        Ok(b) => b,
        Err(e) => return Some(Err(e.into())),
    };
    let notifier = Notifier {
        sink,
        progress_token: meta.progress_token.clone(),
        log: LogGate::Request(meta.log_level),
    };
    let (suspended, resumed) = match start {
        Start::Resume(suspended, id) => {
            suspended.backend.set_notifier(notifier);
            suspended.backend.answer(&responses);
            (suspended, Some(id))
        }
        Start::Fresh(mut given) => {
            given.extend(responses);
            let caller = Caller {
                name: Arc::clone(&call.name),
                client_capabilities: Arc::clone(&meta.client_capabilities),
                principal: conn.principal.clone(),
                notifier,
                state: server.inner.state.clone(),
            };
            (
                Suspended::start(caller, given, call.prelude, call.work),
                None,
            )
        }
    };
    let cancel = conn.track(&request.id);
    let step = drive(suspended, &cancel).await;
    if cancel.is_cancelled() {
        if let Step::Asked(s) | Step::Detached(s) = step {
            s.abandon();
        }
        return None;
    }
    Some(Ok(match step {
        Step::Ended(end) => Round::Ended(end),
        Step::Detached(s) => Round::Detached(s),
        Step::Asked(s) => {
            s.backend.end_round();
            let questions = s.backend.open_questions();
            let answers = match call.policy {
                ResumePolicy::Rerun => s.backend.used_answers(),
                ResumePolicy::Fail => BTreeMap::new(),
            };
            let resumed_id = resumed.as_ref().map(Resuming::id);
            let parked = match server.inner.parking.park(resumed_id, &call.target, s) {
                Ok(parked) => Some(parked),
                Err(s) => {
                    s.abandon();
                    if call.policy == ResumePolicy::Fail {
                        let busy = "too many calls are waiting for answers to their questions";
                        return Some(Err(Error::Busy(busy.into()).into()));
                    }
                    None
                }
            };
            let state = mrtr::State {
                call: parked,
                answers,
            };
            Round::Asked(input_required(server, to, questions, &state))
        }
    }))
}

/// How a round begins.
enum Start<'a> {
    /// The parked call named by the state.
    Resume(Suspended, Resuming<'a>),
    /// A new run, with the answers it finds when it asks.
    Fresh(BTreeMap<String, Value>),
}

/// Decides how a round begins from its `requestState`; returns it with the request's
/// `inputResponses`.
fn begin<'a>(
    server: &'a Server,
    rounds: Rounds,
    to: mrtr::Binding<'_>,
    call: &SyncCall,
) -> Result<(Start<'a>, JsonObject), Error> {
    let responses = rounds.input_responses.unwrap_or_default();
    // Every input response (an elicitation, sampling or roots result) is an object. Checked
    // before the parked call is taken, so a malformed retry leaves it waiting.
    if let Some((key, _)) = responses.iter().find(|(_, r)| !r.is_object()) {
        return Err(Error::InvalidParams(format!(
            "`inputResponses[{key:?}]` must be an object: an elicitation, sampling or roots result"
        )));
    }
    let start = match request_state(server, rounds.request_state.as_deref(), to)? {
        None => Start::Fresh(BTreeMap::new()),
        Some(mrtr::State {
            call: None,
            answers,
        }) => Start::Fresh(answers),
        Some(mrtr::State {
            call: Some((id, round)),
            answers,
        }) => match take_checked(server, &id, round, &call.target, &responses)? {
            Taken::Resumed(suspended) => {
                Start::Resume(suspended, server.inner.parking.resuming(id))
            }
            Taken::Refused(e) => return Err(Error::InvalidParams(e.to_string())),
            Taken::Gone => match call.policy {
                ResumePolicy::Rerun => Start::Fresh(answers),
                ResumePolicy::Fail => {
                    return Err(Error::InvalidParams(mrtr::StateError::CallGone.to_string()));
                }
            },
        },
    };
    Ok((start, responses))
}

/// Takes the parked call a retry resumes, unless the retry's answers do not fit their
/// questions: then it is refused, and the call stays parked for a retry with better ones.
fn take_checked(
    server: &Server,
    id: &str,
    round: u32,
    target: &str,
    responses: &JsonObject,
) -> Result<Taken, Error> {
    let parking = &server.inner.parking;
    parking.check(id, |s| s.backend.check(responses))?;
    Ok(parking.take(id, round, target))
}

/// The `InputRequiredResult` for the questions a call waits on, with its signed state.
fn input_required(
    server: &Server,
    to: mrtr::Binding<'_>,
    questions: BTreeMap<String, InputRequest>,
    state: &mrtr::State,
) -> Value {
    let state = mrtr::seal(
        &server.inner.state_keys[0],
        to,
        server.inner.request_state_ttl,
        state,
    );
    let requests: JsonObject = questions
        .into_iter()
        .map(|(k, r)| (k, serde_json::to_value(r).unwrap_or_default()))
        .collect();
    complete(
        server,
        json!({ "inputRequests": requests, "requestState": state }),
        "input_required",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallToolResult, Content};
    use std::time::{Duration, SystemTime};

    fn record(status: TaskStatus, outcome: Option<CallOutcome>) -> TaskRecord {
        let mut input_requests = BTreeMap::new();
        if status == TaskStatus::InputRequired {
            input_requests.insert(
                "elicit-1".to_owned(),
                InputRequest {
                    method: "elicitation/create".into(),
                    params: json!({"message": "name?", "requestedSchema": {"type": "object"}}),
                    key: None,
                },
            );
        }
        let created = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        TaskRecord {
            arguments: JsonObject::new(),
            status,
            status_message: Some("halfway \"there\"".into()),
            updated_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_123),
            ttl: Some(Duration::from_secs(60)),
            poll_interval: Duration::from_millis(250),
            outcome,
            input_requests,
            version: 3,
            ..crate::store::testing::sample_record("t-1", None, created)
        }
    }

    #[test]
    fn typed_results_write_what_their_values_write() {
        let server = Server::builder()
            .name("typed")
            .version("1.2.3")
            .build()
            .unwrap();
        let same = |typed: Payload, value: Value| {
            assert_eq!(typed.into_value(), value);
        };
        let result = CallToolResult {
            content: vec![Content::text("ok ✓")],
            structured_content: Some(json!({"n": 1.5, "list": [null, true]})),
            is_error: false,
        };
        same(
            complete_typed(&server, &result, "complete"),
            complete(&server, to_value(&result), "complete"),
        );
        let records = [
            record(TaskStatus::Working, None),
            record(TaskStatus::InputRequired, None),
            record(
                TaskStatus::Completed,
                Some(CallOutcome::Result(result.clone())),
            ),
            record(
                TaskStatus::Failed,
                Some(CallOutcome::Error(ErrorObject::new(-32603, "boom"))),
            ),
            record(TaskStatus::Failed, None),
            record(TaskStatus::Cancelled, None),
        ];
        for rec in &records {
            same(
                complete_typed(&server, &DetailedTask::of(rec), "complete"),
                complete(&server, detailed_task(rec), "complete"),
            );
            same(
                create_task_result(&server, rec),
                complete(&server, to_value(Task::of(rec)), "task"),
            );
        }
    }
}
