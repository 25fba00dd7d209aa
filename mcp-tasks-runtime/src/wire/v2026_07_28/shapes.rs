//! The params and result shapes of this era: flat task shapes (`ttlMs`) and the
//! `DetailedTask` of the tasks extension.

use super::{complete_typed, to_value};
use crate::error::CallOutcome;
use crate::jsonrpc::{self, ErrorObject, Payload};
use crate::model::{InputRequest, JsonObject};
use crate::server::Server;
use crate::task::{Rfc3339, TaskRecord, TaskStatus};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `requestState` and `inputResponses`: what a retry of an `InputRequiredResult` brings.
#[derive(Debug, Default)]
pub(super) struct Rounds {
    /// The signed state of the round being answered.
    pub(super) request_state: Option<String>,
    /// The answers, by question key.
    pub(super) input_responses: Option<JsonObject>,
}

/// The params of `tools/call` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CallToolParams {
    pub(super) name: String,
    pub(super) arguments: Option<JsonObject>,
    pub(super) request_state: Option<String>,
    pub(super) input_responses: Option<JsonObject>,
}

/// The params of `prompts/get` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GetPromptParams {
    pub(super) name: String,
    pub(super) arguments: Option<JsonObject>,
    pub(super) request_state: Option<String>,
    pub(super) input_responses: Option<JsonObject>,
}

/// The params of `resources/read` in this era.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReadResourceParams {
    pub(super) uri: String,
    pub(super) request_state: Option<String>,
    pub(super) input_responses: Option<JsonObject>,
}

/// The params of `tasks/update`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpdateTaskParams {
    pub(super) task_id: String,
    pub(super) input_responses: JsonObject,
}

/// The params of `subscriptions/listen`; task ids that are not strings are skipped.
#[derive(Debug, Deserialize)]
pub(super) struct ListenParams {
    pub(super) notifications: Option<Value>,
}

/// The fields every task of this era shows.
#[derive(Debug)]
pub(super) struct Task<'a> {
    pub(super) task_id: &'a str,
    pub(super) status: &'static str,
    pub(super) created_at: Rfc3339,
    pub(super) last_updated_at: Rfc3339,
    /// Always present: `null` for a task kept until it is deleted.
    pub(super) ttl_ms: Option<u64>,
    pub(super) poll_interval_ms: u64,
    pub(super) status_message: Option<&'a str>,
}

impl Task<'_> {
    /// Writes the task's members into an object being written (the task's own, or a
    /// `DetailedTask`'s, which shows them first).
    fn write_members<S: SerializeMap>(&self, out: &mut S) -> Result<(), S::Error> {
        out.serialize_entry("taskId", self.task_id)?;
        out.serialize_entry("status", self.status)?;
        out.serialize_entry("createdAt", &self.created_at)?;
        out.serialize_entry("lastUpdatedAt", &self.last_updated_at)?;
        out.serialize_entry("ttlMs", &self.ttl_ms)?;
        out.serialize_entry("pollIntervalMs", &self.poll_interval_ms)?;
        if let Some(message) = self.status_message {
            out.serialize_entry("statusMessage", message)?;
        }
        Ok(())
    }
}

impl Serialize for Task<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        self.write_members(&mut out)?;
        out.end()
    }
}

impl<'a> Task<'a> {
    pub(super) fn of(rec: &'a TaskRecord) -> Self {
        Self {
            task_id: &rec.id,
            status: rec.status.as_str(),
            created_at: Rfc3339(rec.created_at),
            last_updated_at: Rfc3339(rec.updated_at),
            ttl_ms: rec.ttl.map(|t| t.as_millis() as u64),
            poll_interval_ms: (rec.poll_interval.as_millis() as u64).max(1),
            status_message: rec.status_message.as_deref(),
        }
    }
}

/// The `DetailedTask` of the extension: the task with its questions, result or error.
#[derive(Debug)]
pub(super) struct DetailedTask<'a> {
    pub(super) task: Task<'a>,
    pub(super) input_requests: Option<&'a BTreeMap<String, InputRequest>>,
    pub(super) result: Option<&'a crate::model::CallToolResult>,
    pub(super) error: Option<std::borrow::Cow<'a, ErrorObject>>,
}

impl Serialize for DetailedTask<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        self.task.write_members(&mut out)?;
        if let Some(requests) = self.input_requests {
            out.serialize_entry("inputRequests", requests)?;
        }
        if let Some(result) = self.result {
            out.serialize_entry("result", result)?;
        }
        if let Some(error) = &self.error {
            out.serialize_entry("error", error)?;
        }
        out.end()
    }
}

/// A task as this era shows it: the `DetailedTask` of the extension.
pub(crate) fn detailed_task(rec: &TaskRecord) -> Value {
    to_value(DetailedTask::of(rec))
}

impl<'a> DetailedTask<'a> {
    pub(super) fn of(rec: &'a TaskRecord) -> Self {
        use std::borrow::Cow;
        let mut detailed = DetailedTask {
            task: Task::of(rec),
            input_requests: None,
            result: None,
            error: None,
        };
        match (rec.status, rec.outcome.as_deref()) {
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
pub(super) fn create_task_result(server: &Server, rec: &TaskRecord) -> Payload {
    complete_typed(server, &Task::of(rec), "task")
}

#[cfg(test)]
mod tests {
    use super::super::complete;
    use super::*;
    use crate::model::{CallToolResult, Content};
    use serde_json::json;
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
            outcome: outcome.map(Box::new),
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
        // The members, by name, of a finished task's `DetailedTask`.
        let completed = detailed_task(&records[2]);
        assert_eq!(
            completed,
            json!({
                "taskId": "t-1",
                "status": "completed",
                "createdAt": "2027-01-15T08:00:00.000Z",
                "lastUpdatedAt": "2027-01-15T08:00:00.123Z",
                "ttlMs": 60000,
                "pollIntervalMs": 250,
                "statusMessage": "halfway \"there\"",
                "result": to_value(&result),
            })
        );
        let mut kept = records[5].clone();
        (kept.ttl, kept.status_message) = (None, None);
        let cancelled = detailed_task(&kept);
        assert_eq!(cancelled["ttlMs"], Value::Null);
        assert!(cancelled.get("statusMessage").is_none(), "{cancelled}");
        assert_eq!(
            detailed_task(&records[1])["inputRequests"]["elicit-1"]["method"],
            "elicitation/create"
        );
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
