//! `tasks/get`, `tasks/cancel`, `tasks/list` and the blocking `tasks/result`, and starting a
//! task-augmented call.

use super::asker::Asker;
use super::shapes::{CreateTaskResult, ListTasksResult, Task};
use super::{RELATED_TASK, TASK_PAGE, owner};
use crate::engine::{Delivery, NewTask};
use crate::error::{CallOutcome, Error};
use crate::jsonrpc::{ErrorObject, Payload, Request, RequestId};
use crate::model::JsonObject;
use crate::ops;
use crate::ops::ListParams;
use crate::server::Server;
use crate::session::{Connection, Sink, StatefulState};
use crate::sync::Gate;
use crate::task::{SettlePolicy, TaskRecord, TaskStatus};
use crate::wire::params::{TaskIdParams, decode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn task_id(request: &mut Request) -> Result<String, Error> {
    Ok(decode::<TaskIdParams>(request)?.task_id)
}

pub(super) async fn tasks(
    server: &Server,
    conn: &Arc<Connection>,
    mut request: Request,
    sink: Sink,
) -> Option<Result<Payload, ErrorObject>> {
    let owner = owner(conn);
    let principal = conn.caller();
    let owner = ops::Caller {
        owner: Some(owner),
        principal: principal.as_deref(),
    };
    if let Some(id) = request
        .params
        .as_ref()
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        && let Some(delivery) = ops::delivery(server, id)
    {
        // The session names the task: it knows it now, and can be asked about it.
        delivery.named_by(conn);
    }
    if request.method != "tasks/result" {
        let method = std::mem::take(&mut request.method);
        let result = async {
            match method.as_str() {
                "tasks/get" => {
                    let id = task_id(&mut request)?;
                    let rec = ops::get_task_shared(server, &id, owner).await?;
                    Ok(Payload::typed(&Task::of(&rec)))
                }
                "tasks/cancel" => {
                    let id = task_id(&mut request)?;
                    let (rec, cancelled) = ops::cancel_task(server, &id, owner).await?;
                    if !cancelled {
                        return Err(Error::TaskTerminal(rec.status.to_string()).into());
                    }
                    Ok(Payload::typed(&Task::of(&rec)))
                }
                "tasks/list" => {
                    let params: ListParams = decode(&mut request)?;
                    let page = ops::list_tasks(server, owner, &params, TASK_PAGE).await?;
                    Ok(Payload::typed(&ListTasksResult {
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
        Asker::new(
            &server.inner.engine,
            rec.owner.clone(),
            conn,
            None,
            Gate::open(),
        )
    })
    .await;
    let delivery = match attached {
        Ok(attached) => attached,
        Err(e) => return Some(Err(e.into())),
    };
    if let Some(delivery) = &delivery {
        delivery.offer_stream(conn, &sink, &request.id);
    }
    let waited = ops::wait_task(server, &id, owner, &cancel).await;
    if let Some(delivery) = delivery {
        delivery.withdraw_stream(conn, &request.id);
    }
    if cancel.is_cancelled() {
        return None;
    }
    Some(match waited {
        Err(e) => Err(e.into()),
        Ok(None) => Err(Error::TaskNotFound.into()),
        Ok(Some(rec)) => task_payload(&rec).map(Payload::Value),
    })
}

/// What `tasks/result` answers for a terminal task: exactly what the call would have.
fn task_payload(rec: &TaskRecord) -> Result<Value, ErrorObject> {
    let related = json!({ RELATED_TASK: { "taskId": rec.id } });
    match (rec.outcome.as_deref(), rec.status) {
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

#[allow(clippy::too_many_arguments)]
pub(super) async fn start_task(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: &RequestId,
    tool: &crate::tool::Tool,
    args: JsonObject,
    progress_token: Option<Value>,
    requested_ttl: Option<Duration>,
    key: Option<crate::idempotency::IdempotencyKey>,
    trace: Option<Arc<crate::task::TraceContext>>,
) -> Result<Payload, ErrorObject> {
    let owner = owner(conn);
    // Nothing about the task (a question, its status, its progress) goes to the client
    // before the response that names it: a client cannot tell what it belongs to before.
    let (announced, opener) = Gate::closed();
    conn.after_reply(request, opener);
    let asker = Asker::new(
        &server.inner.engine,
        Some(owner.to_owned()),
        conn,
        progress_token,
        announced,
    );
    let rec = ops::start_task(
        server,
        NewTask {
            tool: tool.clone(),
            args,
            owner: Some(owner.to_owned()),
            principal: conn.task_principal(),
            requestor: conn.requestor(),
            // A tool result with `isError: true` ends a task of this era `failed`.
            settle: SettlePolicy::Fail,
            requested_ttl,
            client_capabilities: Arc::clone(&state.client_capabilities),
            delivery: Some(Arc::clone(&asker) as Arc<dyn Delivery>),
            key,
            trace,
        },
    )
    .await?;
    Ok(Payload::typed(&CreateTaskResult {
        task: Task::of(&rec),
    }))
}
