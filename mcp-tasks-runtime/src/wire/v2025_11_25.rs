//! The stateful wire of MCP 2025-11-25 (and the older stateful revisions it can negotiate).
//!
//! The era is fixed at `initialize`; client capabilities come from there too. Server-to-client
//! requests (elicitation, sampling, roots) travel on the connection.
//!
//! The older revisions (2025-06-18, 2025-03-26, 2024-11-05) are served without the Tasks
//! utility: no `tasks` capability, no `execution` on tools, no `params.task`, no `tasks/*`.
//! What else sets them apart is the transport's: 2024-11-05 had the HTTP+SSE transport,
//! which this server does not offer (a client of it that speaks Streamable HTTP or stdio is
//! served), and SSE priming events came with 2025-11-25 (`primes_streams`).

use crate::call::{DirectBackend, LogGate, Notifier, outcome_of, run_tool};
use crate::context::TaskContext;
use crate::engine::{Delivery, Engine, NewTask};
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{self, ErrorObject, Request, RequestId};
use crate::model::{JsonObject, LogLevel, TaskSupport};
use crate::ops;
use crate::server::Server;
use crate::session::RequestAborted;
use crate::session::{Connection, Era, Gate, Sink, StatefulState};
use crate::sync::LockExt;
use crate::task::{SettlePolicy, TaskRecord, TaskStatus, rfc3339};
use crate::wire::params::{
    self, GetPromptParams, ListParams, SetLevelParams, TaskIdParams, UriParams, decode,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `_meta` key that ties a message to a task.
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How many tasks a `tasks/list` page holds.
const TASK_PAGE: usize = 100;

/// The newest stateful revision.
pub const LATEST: &str = "2025-11-25";
/// Every stateful revision the server accepts, newest first.
pub const SUPPORTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// `true` when a session of `version` gets an SSE priming event (an id and empty data) at the
/// start of each stream: from 2025-11-25 on. Clients of the older revisions read the empty
/// data as a message and report a parse error, so the official SDK servers do not send it
/// to them either.
#[cfg(feature = "http")]
pub(crate) fn primes_streams(version: &str) -> bool {
    // Revisions are dates, so they order as text.
    version >= LATEST
}

/// The params of `initialize`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    /// The newest revision the client speaks.
    protocol_version: String,
    /// What the client can do; absent is nothing optional.
    capabilities: Option<JsonObject>,
}

/// The params of `tools/call` in this era.
#[derive(Debug, Deserialize)]
struct CallToolParams {
    name: String,
    arguments: Option<JsonObject>,
    /// Task augmentation; read only on 2025-11-25 (see [`TaskMetadata`]).
    task: Option<Value>,
    #[serde(rename = "_meta")]
    meta: Option<Value>,
}

/// The `task` of a task-augmented `tools/call`.
#[derive(Debug, Deserialize)]
struct TaskMetadata {
    /// The lifetime the client asks for, in milliseconds.
    ttl: Option<u64>,
}

/// A task as this era shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Task<'a> {
    task_id: &'a str,
    status: &'static str,
    created_at: String,
    last_updated_at: String,
    /// Always present: `null` for a task kept until it is deleted.
    ttl: Option<u64>,
    poll_interval: u64,
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
            ttl: rec.ttl.map(|t| t.as_millis() as u64),
            poll_interval: rec.poll_interval.as_millis() as u64,
            status_message: rec.status_message.as_deref(),
        }
    }
}

/// The answer to a task-augmented call: the task, nested.
#[derive(Debug, Serialize)]
struct CreateTaskResult<'a> {
    task: Task<'a>,
}

/// A page of `tasks/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ListTasksResult<'a> {
    tasks: Vec<Task<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// This era's JSON-RPC error for a server error: the neutral one, but for the conventional
/// `-32002` of an unknown resource.
fn wire_error(error: Error) -> ErrorObject {
    let unknown_resource = matches!(error, Error::ResourceNotFound(_));
    let mut object = ErrorObject::from(error);
    if unknown_resource {
        object.code = jsonrpc::RESOURCE_NOT_FOUND;
    }
    object
}

/// Serialises a result; these types always serialise.
fn to_value(result: impl Serialize) -> Value {
    serde_json::to_value(result).unwrap_or_default()
}

/// Answers `initialize` and fixes the connection's era.
pub(crate) fn initialize(
    server: &Server,
    conn: &Arc<Connection>,
    mut request: Request,
) -> Result<Value, ErrorObject> {
    let params: InitializeParams = decode(&mut request)?;
    let version = SUPPORTED
        .iter()
        .copied()
        .find(|v| *v == params.protocol_version)
        .unwrap_or(LATEST);
    let client_capabilities = Arc::new(Value::Object(params.capabilities.unwrap_or_default()));
    let decided = conn.decide(Era::Stateful(StatefulState {
        version,
        client_capabilities,
    }));
    if !decided {
        return Err(Error::InvalidRequest("the session is already initialized".into()).into());
    }
    let inner = &server.inner;
    let offers = ops::offers(server);
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": false },
            "logging": {},
        },
        "serverInfo": inner.info_value,
    });
    if offers.prompts {
        result["capabilities"]["prompts"] = json!({ "listChanged": false });
    }
    if offers.completions {
        result["capabilities"]["completions"] = json!({});
    }
    if offers.resources {
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
    state: &StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let mut request = request;
    let direct_call = |id, sink| DirectCall {
        server,
        conn,
        state,
        id,
        sink,
    };
    let result = match request.method.as_str() {
        "initialize" => {
            Err(Error::InvalidRequest("the session is already initialized".into()).into())
        }
        "ping" => Ok(json!({})),
        "tools/list" => tools_list(server, state, &mut request),
        "logging/setLevel" => set_level(conn, &mut request),
        "tools/call" => return tools_call(direct_call(request.id.clone(), sink), request).await,
        "prompts/list" => prompts_list(server, &mut request),
        "completion/complete" => decode(&mut request)
            .and_then(|p| ops::complete(server, &p))
            .map_err(Into::into),
        "prompts/get" => return prompts_get(direct_call(request.id.clone(), sink), request).await,
        "resources/list" => resources_list(server, &mut request, ops::list_resources),
        "resources/templates/list" => {
            resources_list(server, &mut request, ops::list_resource_templates)
        }
        "resources/read" => {
            return resources_read(direct_call(request.id.clone(), sink), request).await;
        }
        "resources/subscribe" | "resources/unsubscribe" => subscribe(conn, &mut request),
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
    to_value(Task::of(rec))
}

fn task_id(request: &mut Request) -> Result<String, Error> {
    Ok(decode::<TaskIdParams>(request)?.task_id)
}

async fn tasks(
    server: &Server,
    conn: &Arc<Connection>,
    mut request: Request,
    sink: Sink,
) -> Option<Result<Value, ErrorObject>> {
    let owner = owner(conn);
    let owner = Some(owner.as_str());
    if let Some(id) = request
        .params
        .as_ref()
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        && let Some(asker) =
            ops::delivery(server, id).and_then(|d| d.as_any().downcast::<Asker>().ok())
        && Arc::ptr_eq(&asker.conn, conn)
    {
        // The session names the task: it knows it now, and can be asked about it.
        asker.acknowledge();
    }
    if request.method != "tasks/result" {
        let method = std::mem::take(&mut request.method);
        let result = async {
            match method.as_str() {
                "tasks/get" => {
                    let id = task_id(&mut request)?;
                    Ok(task_json(&ops::get_task(server, &id, owner).await?))
                }
                "tasks/cancel" => {
                    let id = task_id(&mut request)?;
                    let (rec, cancelled) = ops::cancel_task(server, &id, owner).await?;
                    if !cancelled {
                        return Err(Error::TaskTerminal(rec.status.to_string()).into());
                    }
                    Ok(task_json(&rec))
                }
                "tasks/list" => {
                    let params: ListParams = decode(&mut request)?;
                    let page = ops::list_tasks(server, owner, &params, TASK_PAGE).await?;
                    Ok(to_value(ListTasksResult {
                        tasks: page.tasks.iter().map(Task::of).collect(),
                        next_cursor: page.next_cursor,
                    }))
                }
                _ => Err(ErrorObject::from(Error::MethodNotFound(method.clone()))),
            }
        };
        return Some(result.await);
    }
    // `tasks/result` blocks until the task ends; `notifications/cancelled` may end the wait.
    let id = match task_id(&mut request) {
        Ok(id) => id,
        Err(e) => return Some(Err(e.into())),
    };
    let cancel = conn.track(&request.id);
    // While this request waits, the task's questions come on its stream.
    let attached = ops::attach_delivery(server, &id, owner, |rec| {
        Asker::new(rec.owner.clone(), conn, None, Gate::open())
    })
    .await;
    let asker = match attached {
        Ok(attached) => attached
            .and_then(|a| a.as_any().downcast::<Asker>().ok())
            .map(|a| a.offer_stream(conn, &sink, &request.id)),
        Err(e) => return Some(Err(e.into())),
    };
    let waited = ops::wait_task(server, &id, owner, &cancel).await;
    if let Some(stream) = asker {
        stream.withdraw();
    }
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

fn prompts_list(server: &Server, request: &mut Request) -> Result<Value, ErrorObject> {
    Ok(ops::list_prompts(server, &decode(request)?)?)
}

async fn prompts_get(
    call: DirectCall<'_>,
    mut request: Request,
) -> Option<Result<Value, ErrorObject>> {
    let found = decode::<GetPromptParams>(&mut request)
        .and_then(|p| ops::prompt(call.server, &p.name, p.arguments));
    let (prompt, args) = match found {
        Ok(p) => p,
        Err(e) => return Some(Err(wire_error(e))),
    };
    let result = direct(
        call,
        Arc::clone(&prompt.name),
        None,
        |cx, cancel| async move {
            tokio::select! {
                r = crate::prompt::run(prompt, cx, args) => r,
                () = cancel.cancelled() => Err(Error::Cancelled.into()),
            }
        },
    )
    .await?;
    Some(match result {
        Err(e) => Err(e),
        Ok(Ok(r)) => Ok(serde_json::to_value(r).unwrap_or_default()),
        Ok(Err(e)) => Err(crate::prompt::prompt_error(e)),
    })
}

/// `resources/list` or `resources/templates/list`, by the listing function given.
fn resources_list(
    server: &Server,
    request: &mut Request,
    list: fn(&Server, &ListParams) -> Result<Value, Error>,
) -> Result<Value, ErrorObject> {
    Ok(list(server, &decode(request)?)?)
}

/// `resources/subscribe` and `resources/unsubscribe`: remembered per connection.
fn subscribe(conn: &Connection, request: &mut Request) -> Result<Value, ErrorObject> {
    let uri = decode::<UriParams>(request)?.uri;
    let mut subscriptions = conn.subscriptions.locked();
    if request.method == "resources/subscribe" {
        subscriptions.insert(uri);
    } else {
        subscriptions.remove(&uri);
    }
    Ok(json!({}))
}

async fn resources_read(
    call: DirectCall<'_>,
    mut request: Request,
) -> Option<Result<Value, ErrorObject>> {
    let found = decode::<UriParams>(&mut request).and_then(|p| {
        let target = ops::resource(call.server, &p.uri)?;
        Ok((p.uri, target))
    });
    let (uri, target) = match found {
        Ok(f) => f,
        Err(e) => return Some(Err(wire_error(e))),
    };
    let name = Arc::from(uri.as_str());
    let result = direct(call, name, None, |cx, cancel| async move {
        tokio::select! {
            r = crate::resource::run(&target, cx, &uri) => r,
            () = cancel.cancelled() => Err(Error::Cancelled.into()),
        }
    })
    .await?;
    Some(match result {
        Err(e) => Err(e),
        Ok(Ok(contents)) => Ok(json!({ "contents": contents })),
        Ok(Err(e)) => Err(crate::prompt::prompt_error(e)),
    })
}

fn tools_list(
    server: &Server,
    state: &StatefulState,
    request: &mut Request,
) -> Result<Value, ErrorObject> {
    let params: ListParams = decode(request)?;
    let (page, next) = ops::list_tools(server, &params)?;
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

fn set_level(conn: &Connection, request: &mut Request) -> Result<Value, ErrorObject> {
    let params: SetLevelParams = decode(request)?;
    conn.set_log_level(params.level);
    Ok(json!({}))
}

async fn tools_call(
    call: DirectCall<'_>,
    mut request: Request,
) -> Option<Result<Value, ErrorObject>> {
    let (server, state) = (call.server, call.state);
    let parsed = (|| {
        let params: CallToolParams = decode(&mut request)?;
        let name = params.name.as_str();
        let tool = ops::tool(server, name)?;
        let args = params.arguments.unwrap_or_default();
        let token = params::progress_token(params.meta.as_ref());
        let task = match params.task {
            Some(task) if state.version == LATEST => {
                let task: TaskMetadata = params::field(task, "task")?;
                Some(task.ttl.map(Duration::from_millis))
            }
            _ => None,
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
        Err(e) => return Some(Err(wire_error(e))),
    };
    if let Some(requested_ttl) = task {
        return Some(
            start_task(
                server,
                call.conn,
                state,
                &call.id,
                tool,
                args,
                progress_token,
                requested_ttl,
            )
            .await,
        );
    }
    let name = Arc::clone(&tool.name);
    let end = direct(call, name, progress_token, |cx, cancel| async move {
        run_tool(tool, cx, args, &cancel).await
    })
    .await?;
    match outcome_of(tool, end)? {
        CallOutcome::Result(r) => Some(Ok(serde_json::to_value(r).unwrap_or_default())),
        CallOutcome::Error(e) => Some(Err(e)),
    }
}

#[allow(clippy::too_many_arguments)]
async fn start_task(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: &RequestId,
    tool: &crate::tool::Tool,
    args: JsonObject,
    progress_token: Option<Value>,
    requested_ttl: Option<Duration>,
) -> Result<Value, ErrorObject> {
    let owner = owner(conn);
    // Nothing about the task (a question, its status, its progress) goes to the client
    // before the response that names it: a client cannot tell what it belongs to before.
    let (announced, opener) = Gate::closed();
    conn.after_reply(request, opener);
    let asker = Asker::new(Some(owner.clone()), conn, progress_token, announced);
    let rec = ops::start_task(
        server,
        NewTask {
            tool: tool.clone(),
            args,
            owner: Some(owner),
            requestor: conn.requestor(),
            // A tool result with `isError: true` ends a task of this era `failed`.
            settle: SettlePolicy::Fail,
            requested_ttl,
            client_capabilities: Arc::clone(&state.client_capabilities),
            delivery: Some(Arc::clone(&asker) as Arc<dyn Delivery>),
        },
    )
    .await?;
    Ok(to_value(CreateTaskResult {
        task: Task::of(&rec),
    }))
}

/// The request a plain call (a tool call, a prompt, a resource read) of this era answers.
struct DirectCall<'a> {
    server: &'a Server,
    conn: &'a Arc<Connection>,
    state: &'a StatefulState,
    id: RequestId,
    sink: Sink,
}

/// Runs a plain call: tracked so that `notifications/cancelled` reaches it, with a context
/// whose questions go to the client as server-to-client requests. `work` gets the context
/// and the request's cancellation token; `None` when the request was cancelled and must not
/// be answered.
async fn direct<Fut: std::future::Future>(
    call: DirectCall<'_>,
    name: Arc<str>,
    progress_token: Option<Value>,
    work: impl FnOnce(TaskContext, CancellationToken) -> Fut,
) -> Option<Fut::Output> {
    let cancel = call.conn.track(&call.id);
    let cx = direct_context(
        call.server,
        call.conn,
        call.state,
        name,
        call.sink,
        progress_token,
        &cancel,
    );
    let output = work(cx, CancellationToken::clone(&cancel)).await;
    (!cancel.is_cancelled()).then_some(output)
}

/// The context of a plain call (or prompt, or resource read) in this era: questions go to
/// the client as server-to-client requests on `sink`.
fn direct_context(
    server: &Server,
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
        Arc::clone(&state.client_capabilities),
        conn.principal.clone(),
        backend,
        server.inner.state.clone(),
    )
}

/// How long a question of a new task waits, after the response that creates the task was
/// written, for the client to name the task (`tasks/get`, `tasks/result`) before it is
/// sent anyway.
const ACKNOWLEDGE_WAIT: Duration = Duration::from_secs(1);

/// How a task's questions, status changes, progress and log lines reach a client of this
/// era: questions are server-to-client requests tagged with the task, each sent on exactly
/// one stream at a time — a waiting `tasks/result` stream when there is one, else the
/// session's own stream — and sent again only when the stream that carried it closed
/// without an answer. Answers are stored in the task, so the tool gets them whichever
/// process runs it.
pub(crate) struct Asker {
    me: std::sync::Weak<Asker>,
    owner: Option<String>,
    /// The session that created or resumed the task.
    conn: Arc<Connection>,
    /// The progress token of the original request, for progress notifications.
    progress_token: Option<Value>,
    /// Opens once the response that created the task was written.
    announced: Gate,
    /// Opens once the client showed it knows the task (it named it in a request), or a
    /// moment ([`ACKNOWLEDGE_WAIT`]) after the announcement: questions wait for it.
    acknowledged: Gate,
    /// What opens `acknowledged`.
    acknowledge: Mutex<Option<crate::session::Opener>>,
    state: Mutex<AskState>,
}

#[derive(Default)]
struct AskState {
    /// Waiting `tasks/result` requests that offered their streams, newest last.
    streams: Vec<Offered>,
    /// Question keys being asked right now.
    asking: HashSet<String>,
    /// Wakes questions waiting for a stream to be offered.
    offered: Arc<tokio::sync::Notify>,
    /// Until the task is announced, nothing is sent: the latest status and progress wait
    /// here, and go once it is (see [`Asker::announce`]).
    held: Option<Held>,
}

/// What waits for a task's announcement.
#[derive(Default)]
struct Held {
    /// The task's latest status notification.
    status: Option<Value>,
    /// The latest progress: progress, total, message.
    progress: Option<(f64, Option<f64>, Option<String>)>,
}

#[derive(Clone)]
struct Offered {
    conn: Arc<Connection>,
    sink: Sink,
    request: crate::jsonrpc::RequestId,
}

/// A `tasks/result` stream offered to an [`Asker`]; withdrawn when the request ends.
pub(crate) struct OfferedStream {
    asker: Arc<Asker>,
    request: crate::jsonrpc::RequestId,
    conn: Arc<Connection>,
}

impl OfferedStream {
    pub(crate) fn withdraw(self) {
        let mut state = self.asker.lock();
        state
            .streams
            .retain(|o| !(o.request == self.request && Arc::ptr_eq(&o.conn, &self.conn)));
    }
}

impl Asker {
    /// An asker for a task resumed by `conn` (a `tasks/result` from a session that did not
    /// create it, after a reconnect or a restart).
    fn new(
        owner: Option<String>,
        conn: &Arc<Connection>,
        progress_token: Option<Value>,
        announced: Gate,
    ) -> Arc<Self> {
        let (acknowledged, acknowledge) = if announced.is_open() {
            (Gate::open(), None)
        } else {
            let (gate, opener) = Gate::closed();
            (gate, Some(opener))
        };
        let asker = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            owner,
            conn: Arc::clone(conn),
            progress_token,
            announced: announced.clone(),
            acknowledged,
            acknowledge: Mutex::new(acknowledge),
            state: Mutex::new(AskState {
                held: Some(Held::default()),
                ..AskState::default()
            }),
        });
        let me = Arc::downgrade(&asker);
        tokio::spawn(async move {
            announced.opened().await;
            match me.upgrade() {
                Some(asker) => asker.announce(),
                None => return,
            }
            tokio::time::sleep(ACKNOWLEDGE_WAIT).await;
            if let Some(asker) = me.upgrade() {
                asker.acknowledge();
            }
        });
        asker
    }

    /// The client knows the task: its questions may go.
    fn acknowledge(&self) {
        drop(self.acknowledge.locked().take());
    }

    /// The task was announced: what waited for that goes now, progress before status.
    fn announce(&self) {
        let Some(held) = self.lock().held.take() else {
            return;
        };
        if let (Some(token), Some((progress, total, message))) =
            (&self.progress_token, held.progress)
        {
            crate::call::send_progress(&self.conn.sink, token, progress, total, message.as_deref());
        }
        if let Some(status) = held.status
            && !self.conn.is_closed()
        {
            let key = format!("task:{}", status["taskId"].as_str().unwrap_or_default());
            self.conn
                .sink
                .notify_latest(key, "notifications/tasks/status", status);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AskState> {
        self.state.locked()
    }

    /// Offers the stream of a waiting `tasks/result` for the task's questions.
    pub(crate) fn offer_stream(
        self: Arc<Self>,
        conn: &Arc<Connection>,
        sink: &Sink,
        request: &crate::jsonrpc::RequestId,
    ) -> OfferedStream {
        let notify = {
            let mut state = self.lock();
            state.streams.push(Offered {
                conn: Arc::clone(conn),
                sink: sink.clone(),
                request: request.clone(),
            });
            Arc::clone(&state.offered)
        };
        notify.notify_waiters();
        OfferedStream {
            asker: Arc::clone(&self),
            request: request.clone(),
            conn: Arc::clone(conn),
        }
    }

    /// The stream a question goes on now. The session that created the task comes first:
    /// its newest open `tasks/result` stream, else its own stream while a client listens
    /// on it; only then the newest `tasks/result` stream of another session (a bearer of
    /// the task's id), so that a stranger who asked for the result and walked away does
    /// not hold the owner's question.
    fn path(&self) -> Option<(Arc<Connection>, Sink)> {
        let mut state = self.lock();
        state.streams.retain(|o| !o.sink.is_closed());
        let mine = |o: &&Offered| Arc::ptr_eq(&o.conn, &self.conn);
        if let Some(o) = state.streams.iter().rev().find(mine) {
            return Some((Arc::clone(&o.conn), o.sink.clone()));
        }
        if !self.conn.is_closed() && self.conn.is_listening() {
            return Some((Arc::clone(&self.conn), self.conn.sink.clone()));
        }
        state
            .streams
            .last()
            .map(|o| (Arc::clone(&o.conn), o.sink.clone()))
    }

    /// Asks the client one question until it answers, the question goes away, or the task
    /// ends; the answer is stored in the task.
    async fn ask(
        self: Arc<Self>,
        mut question: ops::OpenQuestion,
        request: crate::model::InputRequest,
    ) {
        let key = question.key().to_owned();
        let mut params = request.params.clone();
        if let Value::Object(p) = &mut params {
            let meta = p
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(meta) = meta {
                meta.insert(RELATED_TASK.into(), json!({ "taskId": question.task() }));
            }
        }
        loop {
            if !question.is_open().await {
                break;
            }
            if !self.announced.is_open() || !self.acknowledged.is_open() {
                // The response that names the task is not written yet, or the client has
                // not shown that it read it: a client that reads the response and a
                // question at once may see the question first and not know its task.
                tokio::select! {
                    () = self.acknowledged.opened() => {}
                    () = question.changed() => {}
                }
                continue;
            }
            // What waited for the announcement goes before the question.
            self.announce();
            let Some((conn, sink)) = self.path() else {
                // Nobody can be asked now: wait for a `tasks/result` or a change.
                let offered = Arc::clone(&self.lock().offered);
                tokio::select! {
                    () = offered.notified() => {}
                    () = question.changed() => {}
                }
                continue;
            };
            let stop = CancellationToken::new();
            let asked = conn.request(&sink, &request.method, params.clone(), &stop);
            tokio::pin!(asked);
            let answer = loop {
                tokio::select! {
                    answer = &mut asked => break Some(answer),
                    () = sink.closed() => {
                        // The stream closed unanswered: ask again on the next one.
                        stop.cancel();
                        break None;
                    }
                    () = question.changed() => {
                        if !question.is_open().await {
                            stop.cancel();
                            let _ = (&mut asked).await;
                            self.lock().asking.remove(&key);
                            return;
                        }
                    }
                }
            };
            match answer {
                None | Some(Err(RequestAborted::Closed)) => continue,
                Some(Err(RequestAborted::Cancelled)) => break,
                Some(Ok(Ok(value))) => question.answer(value).await,
                Some(Ok(Err(error))) => question.answer_error(&error.message).await,
            }
            break;
        }
        self.lock().asking.remove(&key);
    }
}

impl Delivery for Asker {
    fn changed(&self, engine: &Arc<Engine>, record: &TaskRecord, status_changed: bool) {
        if record.status.is_terminal()
            && let Some(token) = &self.progress_token
        {
            // The task's progress held back for a slow client goes before its end, or never.
            self.conn.sink.settle(&crate::session::progress_key(token));
        }
        if status_changed && !self.conn.is_closed() {
            let held = {
                let mut state = self.lock();
                state.held.as_mut().map(|held| {
                    // Not announced yet: only the latest status goes, once it is.
                    if record.status.is_terminal() {
                        held.progress = None;
                    }
                    held.status = Some(task_json(record));
                })
            };
            if held.is_some() {
                return self.ask_new(engine, record);
            }
            // A client behind on its stream needs only each task's latest status.
            self.conn.sink.notify_latest(
                format!("task:{}", record.id),
                "notifications/tasks/status",
                task_json(record),
            );
        }
        self.ask_new(engine, record);
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            if let Some(held) = &mut self.lock().held {
                held.progress = Some((progress, total, message.map(str::to_owned)));
                return;
            }
            crate::call::send_progress(&self.conn.sink, token, progress, total, message);
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        Notifier {
            sink: self.conn.sink.clone(),
            progress_token: None,
            log: LogGate::Connection(Arc::clone(&self.conn)),
        }
        .log(level, logger, data);
    }

    fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl Asker {
    /// Starts asking the questions of `record` not asked yet.
    fn ask_new(&self, engine: &Arc<Engine>, record: &TaskRecord) {
        if record.status.is_terminal() {
            return;
        }
        let new: Vec<(String, crate::model::InputRequest)> = {
            let mut state = self.lock();
            record
                .input_requests
                .iter()
                .filter(|(key, _)| state.asking.insert((*key).clone()))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect()
        };
        if new.is_empty() {
            return;
        }
        let Some(this) = self.me.upgrade() else {
            return;
        };
        for (key, request) in new {
            let engine = Arc::clone(engine);
            let (this, id) = (Arc::clone(&this), record.id.clone());
            tokio::spawn(async move {
                let question = ops::OpenQuestion::new(engine, id, key, this.owner.clone());
                this.ask(question, request).await;
            });
        }
    }
}
