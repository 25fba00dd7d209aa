//! The era-neutral operations behind the methods: list the tools, find the tool, prompt or
//! resource a request names, complete an argument, start, adopt, get, cancel, answer and list
//! tasks; follow the changes of tasks (`subscriptions/listen`); attach a delivery to a
//! task, wait for it to end, and carry one of its questions to the client until answered
//! (the 2025-11-25 delivery of questions as server-to-client requests).
//!
//! A wire adapter decodes a request (with `wire::params`; the params an operation takes as
//! they are, such as [`ListParams`] and [`CompleteParams`], are defined here), calls one of
//! these and encodes what it returns in its era's shape; the errors are [`Error`]s, which each era maps
//! to its codes. Nothing here knows a wire name of one era only.

use crate::engine::{Access, Delivery, Engine, NewTask, TaskWatch};
use crate::error::Error;
use crate::model::JsonObject;
use crate::principal::Principal;
use crate::prompt::Prompt;
use crate::resource::Target;
use crate::server::Server;
use crate::store::TaskPage;
use crate::task::TaskRecord;
use crate::tool::Tool;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The params of every paginated list (`tools/list`, `prompts/list`, `resources/list`,
/// `resources/templates/list`, `tasks/list`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListParams {
    /// Where the page starts: a cursor from an earlier page.
    pub(crate) cursor: Option<String>,
}

/// The params of `completion/complete`.
#[derive(Debug, Deserialize)]
pub(crate) struct CompleteParams {
    /// What is being completed.
    #[serde(rename = "ref")]
    pub(crate) reference: CompleteReference,
    /// The argument being typed.
    pub(crate) argument: CompleteArgument,
}

/// The `ref` of `completion/complete`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub(crate) enum CompleteReference {
    /// A prompt's argument.
    #[serde(rename = "ref/prompt")]
    Prompt {
        /// The prompt.
        name: String,
    },
    /// A resource template's variable.
    #[serde(rename = "ref/resource")]
    Resource {
        /// The template.
        #[allow(dead_code)]
        uri: String,
    },
}

/// The `argument` of `completion/complete`.
#[derive(Debug, Deserialize)]
pub(crate) struct CompleteArgument {
    /// The argument's name.
    pub(crate) name: String,
    /// What the user typed so far.
    pub(crate) value: String,
}

/// What the server has beyond tools, which decides the capabilities it declares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offers {
    /// It has prompts.
    pub(crate) prompts: bool,
    /// It has resources or resource templates.
    pub(crate) resources: bool,
    /// It has something `completion/complete` can complete (prompts or templates).
    pub(crate) completions: bool,
}

/// What the server offers beyond tools.
pub(crate) fn offers(server: &Server) -> Offers {
    let inner = &server.inner;
    Offers {
        prompts: !inner.prompts.is_empty(),
        resources: !inner.resources.is_empty(),
        completions: !inner.prompts.is_empty() || inner.resources.has_templates(),
    }
}

/// One page of `tools/list`, plus the next cursor: every tool, or with
/// [`hide_tools_out_of_scope`](crate::ServerBuilder::hide_tools_out_of_scope) those
/// `principal` may call.
pub(crate) fn list_tools<'a>(
    server: &'a Server,
    params: &ListParams,
    principal: Option<&Principal>,
) -> Result<(Vec<&'a Tool>, Option<String>), Error> {
    let inner = &server.inner;
    if inner.hide_out_of_scope {
        let shown: Vec<&Tool> = inner
            .registry
            .iter()
            .filter(|t| t.permits(principal))
            .collect();
        let len = shown.len();
        return page_of(shown.into_iter(), len, inner.page_size, params);
    }
    page_of(
        inner.registry.iter(),
        inner.registry.len(),
        inner.page_size,
        params,
    )
}

/// One page of `prompts/list` (the same in both eras but for the cache hints the 2026-07-28
/// adapter adds).
pub(crate) fn list_prompts(server: &Server, params: &ListParams) -> Result<Value, Error> {
    let prompts = &server.inner.prompts;
    let (page, next) = page_of(
        prompts.iter(),
        prompts.len(),
        server.inner.page_size,
        params,
    )?;
    Ok(listed("prompts", page.iter().map(|p| p.describe()), next))
}

/// One page of `resources/list` (both eras; the 2026-07-28 adapter adds the cache hints).
pub(crate) fn list_resources(server: &Server, params: &ListParams) -> Result<Value, Error> {
    let (items, len) = server.inner.resources.fixed();
    let (page, next) = page_of(items, len, server.inner.page_size, params)?;
    Ok(listed("resources", page.iter().map(|r| r.describe()), next))
}

/// One page of `resources/templates/list`.
pub(crate) fn list_resource_templates(
    server: &Server,
    params: &ListParams,
) -> Result<Value, Error> {
    let (items, len) = server.inner.resources.templates();
    let (page, next) = page_of(items, len, server.inner.page_size, params)?;
    Ok(listed(
        "resourceTemplates",
        page.iter().map(|t| t.describe()),
        next,
    ))
}

/// The most values one `completion/complete` answer holds (the spec's limit).
const MAX_COMPLETIONS: usize = 100;

/// Answers `completion/complete` (the same in both eras but for `resultType`).
pub(crate) fn complete(server: &Server, params: &CompleteParams) -> Result<Value, Error> {
    let values = match &params.reference {
        CompleteReference::Prompt { name } => server
            .inner
            .prompts
            .get(name)
            .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?
            .suggestions(&params.argument.name, &params.argument.value),
        CompleteReference::Resource { .. } => Vec::new(),
    };
    let total = values.len();
    let shown: Vec<String> = values.into_iter().take(MAX_COMPLETIONS).collect();
    Ok(json!({
        "completion": { "values": shown, "total": total, "hasMore": total > MAX_COMPLETIONS }
    }))
}

/// The tool `tools/call` names.
pub(crate) fn tool<'a>(server: &'a Server, name: &str) -> Result<&'a Tool, Error> {
    server
        .inner
        .registry
        .get(name)
        .ok_or_else(|| Error::UnknownTool(name.to_owned()))
}

/// The prompt `prompts/get` names, with its checked arguments.
pub(crate) fn prompt<'a>(
    server: &'a Server,
    name: &str,
    arguments: Option<JsonObject>,
) -> Result<(&'a Prompt, JsonObject), Error> {
    let prompt = server
        .inner
        .prompts
        .get(name)
        .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?;
    Ok((prompt, prompt.check_arguments(arguments)?))
}

/// What serves the URI `resources/read` names.
pub(crate) fn resource<'a>(server: &'a Server, uri: &str) -> Result<Target<'a>, Error> {
    server
        .inner
        .resources
        .find(uri)
        .ok_or_else(|| Error::ResourceNotFound(uri.to_owned()))
}

/// Refuses a request about the task `rec` by `principal` when it lacks a scope the task's
/// tool needs now (a token that lost a scope can no longer read, answer or cancel the task).
fn check_task_scopes(
    server: &Server,
    rec: &TaskRecord,
    principal: Option<&Principal>,
) -> Result<(), Error> {
    match server.inner.registry.get(&rec.tool) {
        Some(tool) => tool.check_caller(principal),
        None => Ok(()),
    }
}

/// Whether some tool needs a scope: only then do task requests check them.
fn any_scoped(server: &Server) -> bool {
    server
        .inner
        .registry
        .iter()
        .any(|t| !t.required_scopes().is_empty())
}

/// The task `caller` may see.
pub(crate) async fn get_task(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
) -> Result<TaskRecord, Error> {
    get_task_shared(server, id, caller)
        .await
        .map(Arc::unwrap_or_clone)
}

/// [`get_task`], shared: the store's record without a copy, for answers that read it.
pub(crate) async fn get_task_shared(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
) -> Result<Arc<TaskRecord>, Error> {
    let rec = server
        .tasks()
        .get_shared_by(Access::Owner(caller.owner), id)
        .await?
        .ok_or(Error::TaskNotFound)?;
    check_task_scopes(server, &rec, caller.principal)?;
    Ok(rec)
}

/// Checks the scopes a request about task `id` needs before it changes anything.
async fn check_before(server: &Server, id: &str, caller: Caller<'_>) -> Result<(), Error> {
    if any_scoped(server) {
        get_task(server, id, caller).await?;
    }
    Ok(())
}

/// Cancels a task: the task as it is afterwards, and whether this call cancelled it (`false`
/// when it had already ended).
pub(crate) async fn cancel_task(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
) -> Result<(TaskRecord, bool), Error> {
    check_before(server, id, caller).await?;
    // Boxed, as the engine's futures below are (see `start_task`).
    Box::pin(server.tasks().cancel_by(Access::Owner(caller.owner), id))
        .await?
        .ok_or(Error::TaskNotFound)
}

/// Hands the client's answers to a task waiting for input.
pub(crate) async fn answer_task(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
    responses: &JsonObject,
) -> Result<TaskRecord, Error> {
    check_before(server, id, caller).await?;
    // Boxed, as `cancel_task`'s is.
    Box::pin(
        server
            .tasks()
            .answer_by(Access::Owner(caller.owner), id, responses),
    )
    .await?
    .ok_or(Error::TaskNotFound)
}

/// Who makes a request about a task: the owner key it sees tasks under, and its principal,
/// whose scopes are checked against the task's tool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller<'a> {
    pub(crate) owner: Option<&'a str>,
    pub(crate) principal: Option<&'a Principal>,
}

/// One page of the caller's tasks, leaving out those of tools whose scopes its principal
/// no longer holds (as `tasks/get` would refuse them). A page may then hold fewer than
/// `limit` tasks; its cursor still goes on after the last task read.
pub(crate) async fn list_tasks(
    server: &Server,
    caller: Caller<'_>,
    params: &ListParams,
    limit: usize,
) -> Result<TaskPage, Error> {
    let mut page = Box::pin(server.tasks().list_owned(
        caller.owner,
        params.cursor.as_deref(),
        limit,
    ))
    .await?;
    if any_scoped(server) {
        page.tasks
            .retain(|rec| check_task_scopes(server, rec, caller.principal).is_ok());
    }
    Ok(page)
}

/// Starts a task.
///
/// The engine's larger futures are boxed here, where the wire adapters reach the engine:
/// they are several kilobytes, and held inline they would make every request's future (a
/// synchronous call's too) as large, to be copied each time it moves.
pub(crate) async fn start_task(server: &Server, new: NewTask) -> Result<TaskRecord, Error> {
    Box::pin(server.inner.engine.start(new)).await
}

/// Begins a synchronous call with an idempotency key (see [`Engine::keyed_call`]).
pub(crate) async fn keyed_call(
    server: &Server,
    tool: &Tool,
    args: &JsonObject,
    owner: Option<&str>,
    key: &crate::idempotency::IdempotencyKey,
    cancel: &CancellationToken,
) -> Result<crate::engine::KeyedCall, Error> {
    Box::pin(
        server
            .inner
            .engine
            .keyed_call(tool, args, owner, key, cancel),
    )
    .await
}

/// Makes a task of a call already running (a 2026-07-28 call that outgrew its request):
/// `attach` gets the task's id and backend before the task is stored.
pub(crate) async fn adopt_task(
    server: &Server,
    new: NewTask,
    future: crate::tool::ToolFuture,
    cancel: CancellationToken,
    attach: impl FnOnce(&Arc<str>, Arc<dyn crate::context::CallBackend>),
) -> Result<TaskRecord, Error> {
    Box::pin(server.inner.engine.adopt(new, future, cancel, attach)).await
}

/// The tasks of `ids` the caller may see (its own, of tools whose scopes it holds), in
/// order; the others are left out.
pub(crate) async fn visible_tasks(
    server: &Server,
    caller: Caller<'_>,
    ids: Vec<String>,
) -> Result<Vec<String>, Error> {
    let tasks = server.tasks();
    let mut visible = Vec::new();
    for id in ids {
        if let Some(rec) = tasks.get_by(Access::Owner(caller.owner), &id).await?
            && check_task_scopes(server, &rec, caller.principal).is_ok()
        {
            visible.push(id);
        }
    }
    Ok(visible)
}

/// Follows the changes of `ids` (tasks the owner may see, see [`visible_tasks`]): each as it
/// is now, in order, then again after every change, until it ends. Each task is read once
/// per change, by its watcher, which hands the record to the feed.
pub(crate) async fn follow_tasks(server: &Server, owner: Option<&str>, ids: &[String]) -> TaskFeed {
    let engine = &server.inner.engine;
    // Room for every task's pending change: a watcher waits for room only while the feed's
    // reader is slow, and at most one change of its task waits.
    let (tx, rx) = mpsc::channel(ids.len().max(1));
    for id in ids {
        // Watched before it is read, so that no change after the read is missed.
        let mut changed = engine.watch(id);
        let Ok(Some(rec)) = engine.get_as(id, Access::Owner(owner)).await else {
            continue;
        };
        let mut poll = rec.poll_interval;
        let live = !rec.status.is_terminal();
        let _ = tx.try_send(rec);
        if !live {
            continue;
        }
        let tx = tx.clone();
        let id = id.clone();
        let engine = Arc::clone(engine);
        let owner = owner.map(str::to_owned);
        tokio::spawn(async move {
            loop {
                changed.changed(poll).await;
                let access = Access::Owner(owner.as_deref());
                let Ok(Some(rec)) = engine.get_as(&id, access).await else {
                    break;
                };
                poll = rec.poll_interval;
                let ended = rec.status.is_terminal();
                if tx.send(rec).await.is_err() || ended {
                    break;
                }
            }
        });
    }
    TaskFeed { changed: rx }
}

/// The changes of a set of tasks (see [`follow_tasks`]). Dropping it stops following them.
pub(crate) struct TaskFeed {
    changed: mpsc::Receiver<TaskRecord>,
}

impl TaskFeed {
    /// The next task that changed, as read after its change; `None` once every task ended
    /// and nothing more will change. Cancel-safe: a change not yet read stays for the next
    /// call.
    pub(crate) async fn next(&mut self) -> Option<TaskRecord> {
        self.changed.recv().await
    }
}

/// The delivery attached to a task in this process, if any.
pub(crate) fn delivery(server: &Server, id: &str) -> Option<Arc<dyn Delivery>> {
    server.inner.engine.delivery(id)
}

/// Attaches a delivery to a live task the owner may see, for its questions and progress to
/// reach this client: `make` builds it from the task as stored. The answer is the delivery
/// the task has now (the new one, or an earlier one that still serves its client); `None`
/// when the task is unknown, cannot be read or has ended.
pub(crate) async fn attach_delivery(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
    make: impl FnOnce(&TaskRecord) -> Arc<dyn Delivery>,
) -> Result<Option<Arc<dyn Delivery>>, Error> {
    let engine = &server.inner.engine;
    match engine.get_as(id, Access::Owner(caller.owner)).await {
        Ok(Some(rec)) if !rec.status.is_terminal() => {
            check_task_scopes(server, &rec, caller.principal)?;
            Ok(Some(engine.attach(id, make(&rec)).await?))
        }
        _ => Ok(None),
    }
}

/// Waits until the task ends (or `cancel` fires): the task as it is then.
pub(crate) async fn wait_task(
    server: &Server,
    id: &str,
    caller: Caller<'_>,
    cancel: &CancellationToken,
) -> Result<Option<TaskRecord>, Error> {
    check_before(server, id, caller).await?;
    let rec = Box::pin(server.inner.engine.wait_terminal(id, caller.owner, cancel)).await?;
    if let Some(rec) = &rec {
        check_task_scopes(server, rec, caller.principal)?;
    }
    Ok(rec)
}

/// How long a question waits for a change of its task before it looks again (a safety net
/// for a change feed that failed for a while).
const QUESTION_RECHECK: Duration = Duration::from_secs(5);

/// One question of a task, while a delivery carries it to the client: whether the task
/// still asks it, the task's changes, and where the client's answer goes.
pub(crate) struct OpenQuestion {
    engine: Arc<Engine>,
    task: String,
    key: String,
    owner: Option<String>,
    watch: TaskWatch,
}

impl OpenQuestion {
    /// The question `key` of task `task`, read as `owner`.
    pub(crate) fn new(
        engine: Arc<Engine>,
        task: String,
        key: String,
        owner: Option<String>,
    ) -> Self {
        let watch = engine.watch(&task);
        Self {
            engine,
            task,
            key,
            owner,
            watch,
        }
    }

    /// Who reads the task and stores the answer: the task's owner.
    fn access(&self) -> Access<'_> {
        Access::Owner(self.owner.as_deref())
    }

    /// The task that asks.
    pub(crate) fn task(&self) -> &str {
        &self.task
    }

    /// The question's key in the task's `input_requests`.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// `true` while the task is live and still asks the question.
    pub(crate) async fn is_open(&self) -> bool {
        match self.engine.get_as(&self.task, self.access()).await {
            Ok(rec) => rec.is_some_and(|r| {
                !r.status.is_terminal() && r.input_requests.contains_key(&self.key)
            }),
            // A read that failed says nothing of the question: it stays open, and is looked
            // at again at the next change or recheck (dropping it would leave it unasked
            // until the task changes again, after the client answered the others).
            Err(error) => {
                tracing::debug!(task = %self.task, %error, "could not read a question's task; it stays open");
                true
            }
        }
    }

    /// Waits for the task to change, or at most a few seconds.
    pub(crate) async fn changed(&mut self) {
        self.watch.changed(QUESTION_RECHECK).await;
    }

    /// Stores the client's answer in the task; a failure is logged, and the question is
    /// left to the task (which may ask again). An answer that does not fit the question
    /// reaches the tool as an error that says why (a client's answer to a server request
    /// cannot be refused on the wire).
    pub(crate) async fn answer(&self, value: Value) {
        let mut responses = JsonObject::new();
        responses.insert(self.key.clone(), value);
        match self
            .engine
            .answer_as(&self.task, self.access(), &responses)
            .await
        {
            Err(Error::InvalidParams(problem)) => {
                tracing::debug!(task = %self.task, %problem, "the client's answer does not fit its question");
                let mut responses = JsonObject::new();
                let message = format!("invalid params (-32602): {problem}");
                responses.insert(self.key.clone(), crate::model::error_answer(&message));
                if let Err(e) = self
                    .engine
                    .answer_as(&self.task, self.access(), &responses)
                    .await
                {
                    tracing::warn!(task = %crate::task::ShortId(&self.task), error = %e, "cannot store the client's answer");
                }
            }
            Err(e) => {
                tracing::warn!(task = %crate::task::ShortId(&self.task), error = %e, "cannot store the client's answer");
            }
            Ok(_) => {}
        }
    }

    /// Stores that the client answered with an error: the tool gets it as a failed answer.
    pub(crate) async fn answer_error(&self, message: &str) {
        self.answer(crate::model::error_answer(message)).await;
    }
}

/// A list result: `{ key: [items], nextCursor? }`.
fn listed(key: &str, items: impl Iterator<Item = Value>, next: Option<String>) -> Value {
    let mut result = JsonObject::new();
    result.insert(key.into(), Value::Array(items.collect()));
    if let Some(next) = next {
        result.insert("nextCursor".into(), next.into());
    }
    Value::Object(result)
}

/// A cursor for list pagination: the offset of the next page, opaque to clients.
pub(crate) fn encode_cursor(offset: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("o:{offset}"))
}

/// Reads a cursor made by [`encode_cursor`].
pub(crate) fn decode_cursor(cursor: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .strip_prefix("o:")?
        .parse()
        .ok()
}

fn page_of<'a, T: 'a>(
    items: impl Iterator<Item = &'a T>,
    len: usize,
    page_size: usize,
    params: &ListParams,
) -> Result<(Vec<&'a T>, Option<String>), Error> {
    let start = match &params.cursor {
        None => 0,
        Some(c) => decode_cursor(c)
            .filter(|o| *o <= len)
            .ok_or_else(|| Error::InvalidParams(format!("invalid cursor {c:?}")))?,
    };
    let page: Vec<_> = items.skip(start).take(page_size).collect();
    let end = start + page.len();
    let next = (end < len).then(|| encode_cursor(end));
    Ok((page, next))
}
