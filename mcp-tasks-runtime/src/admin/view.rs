//! How the console shows a task: a summary for lists and the feed, the detail for one task.

use crate::error::CallOutcome;
use crate::task::TaskRecord;
use serde_json::{Value, json};
use std::time::SystemTime;

/// A time as RFC 3339 with milliseconds, UTC.
pub(super) fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// The progress a status message reports, when it starts with `DONE/TOTAL` or `N%`: what
/// a tool's progress report writes there.
pub(super) fn progress(message: Option<&str>) -> Value {
    let Some(message) = message else {
        return Value::Null;
    };
    let head = message.split_whitespace().next().unwrap_or_default();
    if let Some(percent) = head.strip_suffix('%')
        && let Ok(p) = percent.parse::<f64>()
    {
        return json!({ "done": p, "total": 100.0 });
    }
    if let Some((done, total)) = head.split_once('/')
        && let (Ok(done), Ok(total)) = (done.parse::<f64>(), total.parse::<f64>())
        && total > 0.0
    {
        return json!({ "done": done, "total": total });
    }
    Value::Null
}

/// What lists and the feed show of a task.
pub(super) fn summary(rec: &TaskRecord) -> Value {
    json!({
        "taskId": rec.id,
        "status": rec.status.as_str(),
        "tool": rec.tool,
        "owner": rec.owner,
        "statusMessage": rec.status_message,
        "progress": progress(rec.status_message.as_deref()),
        "createdAt": time(rec.created_at),
        "updatedAt": time(rec.updated_at),
        "version": rec.version,
        "epoch": rec.epoch,
        "lease": rec.lease.as_ref().map(|l| json!({ "worker": l.worker, "until": time(l.until) })),
        "openQuestions": rec.input_requests.len(),
        "question": rec
            .input_requests
            .values()
            .find_map(|q| q.params.get("message").and_then(Value::as_str)),
        "error": error_text(rec),
    })
}

/// The error a failed task ended with, in words.
fn error_text(rec: &TaskRecord) -> Value {
    match rec.outcome.as_deref() {
        Some(CallOutcome::Error(e)) => Value::String(e.message.clone()),
        Some(CallOutcome::Result(r)) if r.is_error => {
            let text: Vec<String> = r
                .content
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_owned))
                .collect();
            Value::String(text.join("\n"))
        }
        _ => Value::Null,
    }
}

/// Everything the console shows of one task.
pub(super) fn detail(rec: &TaskRecord) -> Value {
    let mut value = summary(rec);
    let outcome = match rec.outcome.as_deref() {
        Some(CallOutcome::Result(r)) => json!({ "result": r }),
        Some(CallOutcome::Error(e)) => json!({ "error": e }),
        _ => Value::Null,
    };
    let questions: Vec<Value> = rec
        .input_requests
        .iter()
        .map(|(key, q)| json!({ "key": key, "method": q.method, "params": q.params }))
        .collect();
    // Created `working`, then each stored change; a task kept from before tasks kept their
    // history shows its creation alone.
    let history: Vec<Value> = std::iter::once(json!({
        "at": time(rec.created_at),
        "status": "working",
        "event": "created",
    }))
    .chain(rec.history.iter().map(|c| {
        json!({
            "at": time(c.at),
            "status": c.status.as_str(),
            "message": c.message,
            "epoch": c.epoch,
            "process": c.process,
        })
    }))
    .collect();
    let extra = json!({
        "arguments": rec.arguments,
        "outcome": outcome,
        "questions": questions,
        "answersNotYetTaken": rec.input_responses,
        "ttlMs": rec.ttl.map(|t| t.as_millis() as u64),
        "pollIntervalMs": rec.poll_interval.as_millis() as u64,
        "settle": rec.settle.as_str(),
        "steps": rec.steps.keys().collect::<Vec<_>>(),
        "uniqueKey": rec.unique_key,
        "cancelRequested": rec.cancel_requested.as_ref().map(|c| json!({ "at": time(c.at), "by": c.by })),
        "history": history,
        "trace": rec.trace.as_deref().map(|t| json!({
            "traceId": t.trace_id(),
            "traceparent": t.traceparent,
            "tracestate": t.tracestate,
        })),
    });
    if let (Value::Object(v), Value::Object(extra)) = (&mut value, extra) {
        v.extend(extra);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_from_a_status_message() {
        assert_eq!(
            progress(Some("3/10 s")),
            json!({ "done": 3.0, "total": 10.0 })
        );
        assert_eq!(
            progress(Some("40% copied")),
            json!({ "done": 40.0, "total": 100.0 })
        );
        assert_eq!(progress(Some("copying")), Value::Null);
        assert_eq!(progress(Some("1/0")), Value::Null);
        assert_eq!(progress(None), Value::Null);
    }
}
