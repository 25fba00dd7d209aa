//! `tasks/get`, `tasks/update`, `tasks/cancel` and `subscriptions/listen`.

use super::shapes::{DetailedTask, ListenParams, UpdateTaskParams, detailed_task};
use super::{
    META_SUBSCRIPTION_ID, RequestMeta, complete, complete_typed, declares_tasks,
    missing_tasks_capability,
};
use crate::jsonrpc::{ErrorObject, Payload, Request};
use crate::model::JsonObject;
use crate::ops;
use crate::server::Server;
use crate::session::{Connection, Sink};
use crate::wire::params::{TaskIdParams, from_object};
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) async fn tasks(
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
    let principal = conn.caller();
    let owner = ops::Caller {
        owner,
        principal: principal.as_deref(),
    };
    match request.method.as_str() {
        "tasks/get" => {
            let id = from_object::<TaskIdParams>(params)?.task_id;
            let rec = ops::get_task_shared(server, &id, owner).await?;
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
pub(super) async fn listen(
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
    let principal = conn.caller();
    let caller = ops::Caller {
        owner,
        principal: principal.as_deref(),
    };
    let honoured = match ops::visible_tasks(server, caller, wanted).await {
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
