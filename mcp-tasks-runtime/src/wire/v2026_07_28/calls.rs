//! Synchronous calls of this era (a tool call, possibly the prelude of a task, a prompt, a
//! resource read) and their MRTR rounds: a question suspends the call, and the client's retry
//! with `requestState` and `inputResponses` resumes it.

use super::mrtr::{self, StateError};
use super::shapes::{
    CallToolParams, GetPromptParams, ReadResourceParams, Rounds, create_task_result,
};
use super::{
    RequestMeta, cacheable, complete, complete_tool_result, declares_tasks,
    missing_tasks_capability,
};
use crate::context::TaskContext;
use crate::creation::CreationOff;
use crate::engine::{KeyedCall, NewTask};
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{ErrorObject, Payload, Request};
use crate::model::{InputRequest, JsonObject, TaskSupport};
use crate::notify::{LogGate, Notifier};
use crate::ops;
use crate::run::outcome_of;
use crate::server::Server;
use crate::session::{Connection, Sink};
use crate::suspended::{
    Caller, Ended, Produced, Resuming, Step, Suspended, Taken, WorkFuture, drive,
};
use crate::task::SettlePolicy;
use crate::tool::{ResumePolicy, Tool};
use crate::wire::params::from_object;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `resources/read`: unknown URIs are `-32602` with the URI in `data` (SEP-2164); the handler
/// may ask the client questions, which suspend it until the retry brings the answers.
pub(super) async fn resources_read(
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
        target: Arc::from(format!("resource:{uri}")),
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

pub(super) async fn prompts_get(
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
        target: Arc::from(format!("prompt:{}", prompt.name)),
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

pub(super) async fn tools_call(
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
        conn.check_scopes(tool)?;
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
    // The kill switch: an optional tool runs synchronously while task creation is paused for
    // it; a call that needs a task is refused (retryable), as it is while the server drains.
    let as_task = match server.creation().is_paused(&tool.name) {
        Some(off) if as_task => {
            if off == CreationOff::Paused && tool.task_support == TaskSupport::Optional {
                false
            } else {
                return Some(Err(Error::CreationOff(off, tool.name.to_string()).into()));
            }
        }
        _ => as_task,
    };
    if as_task && !tool.prelude {
        // A task takes no MRTR rounds; a stray state is still checked.
        let to = mrtr::Binding {
            target: &tool.name,
            args: &args,
            principal: conn
                .principal
                .as_deref()
                .map(crate::principal::Principal::owner_name),
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
    // A plain call with a key runs once: a repeat gets the first call's outcome. Only a
    // call's first round takes part (a round with a `requestState` resumes its call), and
    // a round that ends asking questions leaves no record.
    let record = match &meta.idempotency_key {
        Some(key) if !as_task && rounds.request_state.is_none() => {
            let cancel = conn.track(&request.id);
            let owner = conn.task_owner(false);
            let keyed = ops::keyed_call(server, tool, &args, owner, key, &cancel).await;
            if cancel.is_cancelled() {
                return None;
            }
            match keyed {
                Ok(KeyedCall::Run(record)) => Some(record),
                Ok(KeyedCall::Done(CallOutcome::Result(r))) => {
                    return Some(Ok(complete_tool_result(server, &r)));
                }
                Ok(KeyedCall::Done(CallOutcome::Error(e))) => return Some(Err(e)),
                Err(e) => return Some(Err(e.into())),
            }
        }
        _ => None,
    };
    let runner = tool.runner();
    let run_args = args.clone();
    // A call with a prelude may become a task, which takes the arguments again.
    let task_args = as_task.then(|| args.clone());
    let call = SyncCall {
        target: Arc::clone(&tool.name),
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
        Ok(Round::Ended(end)) => {
            let outcome = outcome_of(tool, end.into_run_end(tool));
            if let (Some(record), Some(outcome)) = (record, &outcome) {
                record.finish(outcome).await;
            }
            match outcome {
                Some(CallOutcome::Result(r)) => Ok(complete_tool_result(server, &r)),
                Some(CallOutcome::Error(e)) => Err(e),
                None => Err(Error::Internal("the tool ended without an outcome".into()).into()),
            }
        }
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
        owner: conn.task_owner(false).map(str::to_owned),
        principal: conn.task_principal(),
        requestor: conn.requestor(),
        // A tool result with `isError: true` ends a task of this era `completed`.
        settle: SettlePolicy::Complete,
        requested_ttl: None,
        client_capabilities: meta.client_capabilities,
        delivery: None,
        key: meta.idempotency_key,
        trace: meta.trace,
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
    target: Arc<str>,
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
        principal: conn
            .principal
            .as_deref()
            .map(crate::principal::Principal::owner_name),
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
                principal: conn.caller(),
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
            Taken::AlreadyUsed => {
                return Err(Error::InvalidParams(StateError::AlreadyUsed.to_string()));
            }
            Taken::InUse => return Err(Error::InvalidParams(StateError::InUse.to_string())),
            Taken::Gone => match call.policy {
                ResumePolicy::Rerun => Start::Fresh(answers),
                ResumePolicy::Fail => {
                    return Err(Error::InvalidParams(StateError::CallGone.to_string()));
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
