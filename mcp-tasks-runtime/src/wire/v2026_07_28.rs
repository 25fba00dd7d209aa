//! The stateless wire of MCP 2026-07-28.
//!
//! Every request carries its protocol version and client capabilities in `_meta`; nothing is
//! remembered between requests. Every result has a `resultType`. A tool's questions to the
//! client become `InputRequiredResult` rounds (MRTR).

use crate::call::{LogGate, MrtrBackend, Notifier, RunEnd, outcome_of, run_tool};
use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::engine::NewTask;
use crate::error::{CallOutcome, Error, ToolError};
use crate::jsonrpc::{self, ErrorObject, Request};
use crate::model::{InputRequest, JsonObject, LogLevel, TaskSupport};
use crate::mrtr;
use crate::router::{META_PROTOCOL_VERSION, name_param, params_object};
use crate::server::{Server, tools_page};
use crate::session::{Connection, Sink};
use crate::task::{SettlePolicy, TaskRecord, TaskStatus, rfc3339};
use crate::tool::Tool;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use tokio_util::sync::CancellationToken;

/// The stateless revision.
pub const VERSION: &str = "2026-07-28";
/// Every stateless revision the server accepts.
pub const SUPPORTED: [&str; 1] = [VERSION];

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
        "prompts/list" => prompts_list(server, &params).map(|v| complete(server, v, "complete")),
        "completion/complete" => crate::server::complete(&server.inner, &params)
            .map(|v| complete(server, v, "complete"))
            .map_err(Into::into),
        "prompts/get" => prompts_get(server, conn, params, meta, sink).await,
        "resources/list" => crate::server::resources_list(&server.inner, &params)
            .map(|v| complete(server, cacheable(server, v), "complete"))
            .map_err(Into::into),
        "resources/templates/list" => {
            crate::server::resource_templates_list(&server.inner, &params)
                .map(|v| complete(server, cacheable(server, v), "complete"))
                .map_err(Into::into)
        }
        "resources/read" => resources_read(server, conn, params, meta, sink).await,
        "subscriptions/listen" => {
            return listen(server, conn, &request, &params, &meta, sink).await;
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            tasks(server, conn, &request, &params, &meta)
                .await
                .map(|v| complete(server, v, "complete"))
        }
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result)
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
    let mut task = json!({
        "taskId": rec.id,
        "status": rec.status.as_str(),
        "createdAt": rfc3339(rec.created_at),
        "lastUpdatedAt": rfc3339(rec.updated_at),
        "ttlMs": rec.ttl.map(|t| t.as_millis() as u64),
        "pollIntervalMs": (rec.poll_interval.as_millis() as u64).max(1),
    });
    if let Some(message) = &rec.status_message {
        task["statusMessage"] = message.clone().into();
    }
    match (rec.status, &rec.outcome) {
        (TaskStatus::InputRequired, _) => {
            task["inputRequests"] = serde_json::to_value(&rec.input_requests).unwrap_or_default();
        }
        (TaskStatus::Completed, Some(CallOutcome::Result(r))) => {
            task["result"] = serde_json::to_value(r).unwrap_or_default();
        }
        (TaskStatus::Failed, Some(CallOutcome::Error(e))) => {
            task["error"] = serde_json::to_value(e).unwrap_or_default();
        }
        (TaskStatus::Failed, _) => {
            let message = rec
                .status_message
                .clone()
                .unwrap_or_else(|| "the task failed".into());
            task["error"] = json!({ "code": jsonrpc::INTERNAL_ERROR, "message": message });
        }
        _ => {}
    }
    task
}

/// The `CreateTaskResult` of the extension: flat, without result, error or input requests.
fn create_task_result(server: &Server, rec: &TaskRecord) -> Value {
    let mut task = detailed_task(rec);
    if let Value::Object(t) = &mut task {
        for key in ["result", "error", "inputRequests"] {
            t.remove(key);
        }
    }
    complete(server, task, "task")
}

async fn tasks(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: &JsonObject,
    meta: &RequestMeta,
) -> Result<Value, ErrorObject> {
    // The capability gate comes before anything else, even an unknown id.
    if !declares_tasks(meta) {
        return Err(missing_tasks_capability().into());
    }
    let id = params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidParams("`taskId` must be a string".into()))?;
    let engine = &server.inner.engine;
    let owner = conn.task_owner(false);
    let owner = owner.as_deref();
    match request.method.as_str() {
        "tasks/get" => {
            let rec = engine.get(id, owner).await?.ok_or(Error::TaskNotFound)?;
            Ok(detailed_task(&rec))
        }
        "tasks/update" => {
            let responses = match params.get("inputResponses") {
                Some(Value::Object(r)) => r,
                _ => {
                    return Err(
                        Error::InvalidParams("`inputResponses` must be an object".into()).into(),
                    );
                }
            };
            engine
                .answer(id, owner, responses)
                .await?
                .ok_or(Error::TaskNotFound)?;
            Ok(json!({}))
        }
        _ => {
            engine.cancel(id, owner).await?.ok_or(Error::TaskNotFound)?;
            Ok(json!({}))
        }
    }
}

/// `subscriptions/listen`: acknowledges, then streams `notifications/tasks` for the tasks
/// asked for until the client cancels the request.
async fn listen(
    server: &Server,
    conn: &Arc<Connection>,
    request: &Request,
    params: &JsonObject,
    meta: &RequestMeta,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let wanted: Vec<String> = params
        .get("notifications")
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
    let engine = &server.inner.engine;
    let owner = conn.task_owner(false);
    let owner = owner.as_deref();
    let mut honoured = Vec::new();
    for id in wanted {
        match engine.get(&id, owner).await {
            Ok(Some(_)) => honoured.push(id),
            Ok(None) => {}
            Err(e) => return Some(Err(e.into())),
        }
    }
    let subscription = serde_json::to_value(&request.id).unwrap_or_default();
    let cancel = conn.track(&request.id);
    sink.notify(
        "notifications/subscriptions/acknowledged",
        json!({
            "notifications": { "taskIds": honoured },
            "_meta": { META_SUBSCRIPTION_ID: subscription },
        }),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for id in &honoured {
        let _ = tx.send(id.clone());
        let mut changed = engine.watch(id);
        let tx = tx.clone();
        let id = id.clone();
        let engine = Arc::clone(engine);
        let owner = owner.map(str::to_owned);
        tokio::spawn(async move {
            loop {
                let rec = engine.get(&id, owner.as_deref()).await.ok().flatten();
                let Some(rec) = rec.filter(|r| !r.status.is_terminal()) else {
                    break;
                };
                changed.changed(rec.poll_interval).await;
                if tx.send(id.clone()).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    loop {
        let id = tokio::select! {
            id = rx.recv() => id,
            () = cancel.cancelled() => break,
        };
        let Some(id) = id else {
            // Every task is settled and nothing more will change; wait for the client.
            cancel.cancelled().await;
            break;
        };
        if let Ok(Some(rec)) = engine.get(&id, owner).await {
            let mut params = detailed_task(&rec);
            params["_meta"] = json!({ META_SUBSCRIPTION_ID: subscription });
            sink.notify("notifications/tasks", params);
        }
    }
    conn.untrack(&request.id);
    None
}

fn prompts_list(server: &Server, params: &JsonObject) -> Result<Value, ErrorObject> {
    Ok(cacheable(
        server,
        crate::server::prompts_list(&server.inner, params)?,
    ))
}

/// Adds the cache hints (`ttlMs`, `cacheScope`) a `CacheableResult` requires.
fn cacheable(server: &Server, mut result: Value) -> Value {
    result["ttlMs"] = (server.inner.list_ttl.as_millis() as u64).into();
    result["cacheScope"] = "public".into();
    result
}

/// `resources/read`: unknown URIs are `-32602` with the URI in `data` (SEP-2164); the handler
/// may ask the client questions in `InputRequiredResult` rounds.
async fn resources_read(
    server: &Server,
    conn: &Arc<Connection>,
    params: JsonObject,
    meta: RequestMeta,
    sink: Sink,
) -> Result<Value, ErrorObject> {
    let uri = crate::resource::uri_param(&params)?;
    let target = crate::resource::find(&server.inner, &uri)
        .ok_or_else(|| Error::ResourceNotFound(uri.clone()))?;
    let bound_to = format!("resource:{uri}");
    let args = target.vars.clone();
    let answers = answers(server, conn, &params, &bound_to, &args)?;
    let (cx, backend) = mrtr_context(
        conn,
        Arc::from(uri.as_str()),
        answers,
        meta,
        sink,
        CancellationToken::new(),
    );
    match crate::resource::run(&target, cx, &uri).await? {
        Ok(contents) => Ok(complete(
            server,
            cacheable(server, json!({ "contents": contents })),
            "complete",
        )),
        Err(e) => match crate::prompt::prompt_error(e) {
            Some(e) => Err(e),
            None => Ok(input_required(server, conn, &bound_to, &args, &backend)),
        },
    }
}

/// MRTR answers carried by a retried request: the signed `requestState`, then
/// `inputResponses`. `bound_to` names what the state was made for.
fn answers(
    server: &Server,
    conn: &Connection,
    params: &JsonObject,
    bound_to: &str,
    args: &JsonObject,
) -> Result<BTreeMap<String, Value>, Error> {
    let mut answers = match params.get("requestState") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::String(state)) => mrtr::open(
            &server.inner.state_key,
            state,
            bound_to,
            args,
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
    Ok(answers)
}

async fn prompts_get(
    server: &Server,
    conn: &Arc<Connection>,
    params: JsonObject,
    meta: RequestMeta,
    sink: Sink,
) -> Result<Value, ErrorObject> {
    let name = name_param(&params)?;
    let prompt = server
        .inner
        .prompts
        .get(name)
        .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?;
    let args = prompt.check_arguments(&params)?;
    let bound_to = format!("prompt:{name}");
    let answers = answers(server, conn, &params, &bound_to, &args)?;
    let (cx, backend) = mrtr_context(
        conn,
        Arc::clone(&prompt.name),
        answers,
        meta,
        sink,
        CancellationToken::new(),
    );
    match crate::prompt::run(prompt, cx, args.clone()).await? {
        Ok(r) => Ok(complete(
            server,
            serde_json::to_value(r).unwrap_or_default(),
            "complete",
        )),
        Err(e) => match crate::prompt::prompt_error(e) {
            Some(e) => Err(e),
            None => Ok(input_required(server, conn, &bound_to, &args, &backend)),
        },
    }
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
    if !inner.prompts.is_empty() {
        result["capabilities"]["prompts"] = json!({ "listChanged": false });
    }
    if crate::server::completes(inner) {
        result["capabilities"]["completions"] = json!({});
    }
    if crate::server::has_resources(inner) {
        result["capabilities"]["resources"] = json!({ "listChanged": false });
    }
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
        let name = name_param(&params)?;
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
        let answers = answers(server, conn, &params, name, &args)?;
        Ok((tool, args, answers))
    })();
    let (tool, args, answers) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(e.into())),
    };
    let as_task = match (tool.task_support, declares_tasks(&meta)) {
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => false,
        (TaskSupport::Optional | TaskSupport::Required, true) => true,
        (TaskSupport::Required, false) => return Some(Err(missing_tasks_capability().into())),
    };
    if as_task {
        let notifier = Notifier {
            sink,
            progress_token: meta.progress_token.clone(),
            log: LogGate::Request(meta.log_level),
        };
        return Some(start_task(server, conn, tool, args, answers, meta, notifier).await);
    }
    let cancel = conn.track(&request.id);
    let (cx, backend) = mrtr_context(
        conn,
        Arc::clone(&tool.name),
        answers,
        meta,
        sink,
        cancel.clone(),
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
        None => Some(Ok(input_required(
            server, conn, &tool.name, &args, &backend,
        ))),
    }
}

fn new_task(conn: &Connection, tool: &Tool, args: JsonObject, meta: RequestMeta) -> NewTask {
    NewTask {
        tool: tool.clone(),
        args,
        owner: conn.task_owner(false),
        // A tool result with `isError: true` ends a task of this era `completed`.
        settle: SettlePolicy::Complete,
        requested_ttl: None,
        client_capabilities: meta.client_capabilities,
        delivery: None,
    }
}

/// Runs a call as a task. A tool with a prelude runs inline first: questions it asks before
/// its first real suspension are answered in `InputRequiredResult` rounds, and only then is
/// the task created (SEP-2663: finish MRTR rounds before going async).
async fn start_task(
    server: &Server,
    conn: &Arc<Connection>,
    tool: &Tool,
    args: JsonObject,
    answers: BTreeMap<String, Value>,
    meta: RequestMeta,
    notifier: Notifier,
) -> Result<Value, ErrorObject> {
    let engine = &server.inner.engine;
    if !tool.prelude {
        let rec = engine.start(new_task(conn, tool, args, meta)).await?;
        return Ok(create_task_result(server, &rec));
    }
    let prelude = Arc::new(Prelude {
        mrtr: MrtrBackend::new(answers, notifier),
        task: OnceLock::new(),
    });
    let cancel = CancellationToken::new();
    let cx = TaskContext::new(
        Arc::clone(&tool.name),
        cancel.clone(),
        meta.client_capabilities.clone(),
        conn.principal.clone(),
        Arc::clone(&prelude) as _,
    );
    if let Err(e) = tool.check_arguments(&args) {
        return finish_inline(
            server,
            conn,
            tool,
            &args,
            &prelude,
            RunEnd::Returned(Err(e)),
        );
    }
    let mut future = Some((tool.handler)(cx.clone(), args.clone()));
    // One poll: the prelude runs until the tool first waits on something real.
    let polled = std::future::poll_fn(|task_cx| {
        let f = future.as_mut().expect("polled once");
        Poll::Ready(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || f.as_mut().poll(task_cx),
        )))
    })
    .await;
    match polled {
        Err(_) => finish_inline(server, conn, tool, &args, &prelude, RunEnd::Panicked),
        Ok(Poll::Ready(result)) => finish_inline(
            server,
            conn,
            tool,
            &args,
            &prelude,
            RunEnd::Returned(result),
        ),
        Ok(Poll::Pending) => {
            let future = future.take().expect("polled once");
            let rec = engine
                .adopt(
                    new_task(conn, tool, args, meta),
                    future,
                    cancel,
                    |id, backend| {
                        cx.set_task_id(id);
                        let _ = prelude.task.set(backend);
                    },
                )
                .await?;
            Ok(create_task_result(server, &rec))
        }
    }
}

/// Answers a prelude call that ended without becoming a task.
fn finish_inline(
    server: &Server,
    conn: &Connection,
    tool: &Tool,
    args: &JsonObject,
    prelude: &Prelude,
    end: RunEnd,
) -> Result<Value, ErrorObject> {
    match outcome_of(tool, end) {
        Some(CallOutcome::Result(r)) => Ok(complete(
            server,
            serde_json::to_value(r).unwrap_or_default(),
            "complete",
        )),
        Some(CallOutcome::Error(e)) => Err(e),
        None => Ok(input_required(
            server,
            conn,
            &tool.name,
            args,
            &prelude.mrtr,
        )),
    }
}

/// The `InputRequiredResult` for the questions a call asked, with its signed state.
fn input_required(
    server: &Server,
    conn: &Connection,
    bound_to: &str,
    args: &JsonObject,
    mrtr: &MrtrBackend,
) -> Value {
    let asked = mrtr.take_asked();
    let state = mrtr::seal(
        &server.inner.state_key,
        bound_to,
        args,
        conn.principal.as_deref(),
        server.inner.request_state_ttl,
        &mrtr.used_answers(),
    );
    let requests: JsonObject = asked
        .into_iter()
        .map(|(k, r)| (k, serde_json::to_value(r).unwrap_or_default()))
        .collect();
    complete(
        server,
        json!({ "inputRequests": requests, "requestState": state }),
        "input_required",
    )
}

/// The backend of a prelude call: MRTR rounds until the task exists, the task after.
struct Prelude {
    mrtr: MrtrBackend,
    task: OnceLock<Arc<dyn CallBackend>>,
}

impl CallBackend for Prelude {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        match self.task.get() {
            Some(task) => task.input(request),
            None => self.mrtr.input(request),
        }
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        match self.task.get() {
            Some(task) => task.progress(progress, total, message),
            None => self.mrtr.progress(progress, total, message),
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        match self.task.get() {
            Some(task) => task.log(level, logger, data),
            None => self.mrtr.log(level, logger, data),
        }
    }

    fn detach(&self) -> BoxFuture<'_, ()> {
        if self.task.get().is_some() {
            return Box::pin(async {});
        }
        // Not a task yet: give up the first poll, which turns the call into one.
        let mut yielded = false;
        Box::pin(std::future::poll_fn(move |cx| {
            if yielded || self.task.get().is_some() {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }))
    }
}

/// The context of a plain call (or prompt, or resource read) in this era: questions stop it
/// and come back as `inputRequests`; `answers` are those the client already gave.
fn mrtr_context(
    conn: &Connection,
    name: Arc<str>,
    answers: BTreeMap<String, Value>,
    meta: RequestMeta,
    sink: Sink,
    cancel: CancellationToken,
) -> (TaskContext, Arc<MrtrBackend>) {
    let backend = Arc::new(MrtrBackend::new(
        answers,
        Notifier {
            sink,
            progress_token: meta.progress_token,
            log: LogGate::Request(meta.log_level),
        },
    ));
    let cx = TaskContext::new(
        name,
        cancel,
        meta.client_capabilities,
        conn.principal.clone(),
        Arc::clone(&backend) as _,
    );
    (cx, backend)
}
