//! Plain calls of this era (a tool call, a prompt, a resource read): run while their request
//! waits, their questions sent to the client as server-to-client requests on the connection.

use super::shapes::{CallToolParams, TaskMetadata};
use super::tasks::start_task;
use super::{LATEST, wire_error};
use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::creation::CreationOff;
use crate::engine::KeyedCall;
use crate::error::{CallOutcome, Error, ToolError};
use crate::jsonrpc::{ErrorObject, Payload, Request, RequestId};
use crate::model::{InputRequest, LogLevel, TaskSupport};
use crate::notify::{LogGate, Notifier};
use crate::ops;
use crate::run::{outcome_of, run_tool};
use crate::server::Server;
use crate::session::{Connection, RequestAborted, Sink, StatefulState};
use crate::wire::params::{self, GetPromptParams, UriParams, decode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(super) async fn prompts_get(
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

pub(super) async fn resources_read(
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

pub(super) async fn tools_call(
    call: DirectCall<'_>,
    mut request: Request,
) -> Option<Result<Payload, ErrorObject>> {
    let (server, state) = (call.server, call.state);
    let parsed = (|| {
        let params: CallToolParams = decode(&mut request)?;
        let name = params.name.as_str();
        let tool = ops::tool(server, name)?;
        call.conn.check_scopes(tool)?;
        let args = params.arguments.unwrap_or_default();
        let token = params::progress_token(params.meta.as_ref());
        let key = params::idempotency_key(params.meta.as_ref())?;
        let trace = params::trace_context(params.meta.as_ref());
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
        Ok((tool, args, token, task, key, trace))
    })();
    let (tool, args, progress_token, task, key, trace) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(Err(wire_error(e))),
    };
    // The kill switch: an optional tool runs synchronously while task creation is paused
    // for it (the task metadata is ignored); a call that needs a task is refused
    // (retryable), as it is while the server drains.
    let task = match (task, server.creation().is_paused(&tool.name)) {
        (Some(_), Some(CreationOff::Paused)) if tool.task_support == TaskSupport::Optional => None,
        (Some(_), Some(off)) => {
            return Some(Err(wire_error(Error::CreationOff(
                off,
                tool.name.to_string(),
            ))));
        }
        (task, _) => task,
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
                key,
                trace,
            )
            .await,
        );
    }
    let name = Arc::clone(&tool.name);
    let owner = super::owner(call.conn);
    let server = call.server;
    let outcome = direct(call, name, progress_token, |cx, cancel| async move {
        // A call with a key runs once: a repeat gets the first call's outcome.
        let record = match &key {
            None => None,
            Some(key) => {
                match ops::keyed_call(server, tool, &args, Some(owner), key, &cancel).await {
                    Ok(KeyedCall::Run(record)) => Some(record),
                    Ok(KeyedCall::Done(outcome)) => return Some(outcome),
                    Err(e) => return Some(CallOutcome::Error(wire_error(e))),
                }
            }
        };
        let outcome = outcome_of(tool, run_tool(tool, cx, args, &cancel).await);
        if let (Some(record), Some(outcome)) = (record, &outcome)
            && !cancel.is_cancelled()
        {
            record.finish(outcome).await;
        }
        outcome
    })
    .await?;
    match outcome? {
        CallOutcome::Result(r) => Some(Ok(Payload::tool_result(&r))),
        CallOutcome::Error(e) => Some(Err(e)),
    }
}

/// The request a plain call (a tool call, a prompt, a resource read) of this era answers.
pub(super) struct DirectCall<'a> {
    pub(super) server: &'a Server,
    pub(super) conn: &'a Arc<Connection>,
    pub(super) state: &'a StatefulState,
    pub(super) id: RequestId,
    pub(super) sink: Sink,
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
        conn.caller(),
        backend,
        server.inner.state.clone(),
    )
}

/// 2025-11-25 plain call: questions are server-to-client requests on the same connection.
pub(crate) struct DirectBackend {
    pub(crate) conn: Arc<Connection>,
    pub(crate) notifier: Notifier,
    pub(crate) cancel: CancellationToken,
}

impl CallBackend for DirectBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            match self
                .conn
                .request(
                    &self.notifier.sink,
                    &request.method,
                    request.params.clone(),
                    &self.cancel,
                )
                .await
            {
                // The tool gets only an answer that fits its question.
                Ok(Ok(answer)) => match crate::schema::check_answer(&request, &answer) {
                    Ok(()) => Ok(answer),
                    Err(problem) => Err(ToolError::new(format!(
                        "the client's answer to {} does not fit: invalid params (-32602): {problem}",
                        request.method
                    ))),
                },
                Ok(Err(e)) => Err(ToolError::new(format!(
                    "the client answered {} with an error: {}",
                    request.method, e.message
                ))),
                Err(RequestAborted::Cancelled) => Err(ToolError::cancelled()),
                Err(RequestAborted::Closed) => Err(ToolError::new("the client went away")),
            }
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notifier.progress(progress, total, message);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.log(level, logger, data);
    }
}
