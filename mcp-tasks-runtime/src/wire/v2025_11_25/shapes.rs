//! The params and result shapes of this era: nested task shapes (`ttl`, `pollInterval`).

use crate::model::JsonObject;
use crate::task::{Rfc3339, TaskRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The params of `initialize`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeParams {
    /// The newest revision the client speaks.
    pub(super) protocol_version: String,
    /// What the client can do; absent is nothing optional.
    pub(super) capabilities: Option<JsonObject>,
}

/// The params of `tools/call` in this era.
#[derive(Debug, Deserialize)]
pub(super) struct CallToolParams {
    pub(super) name: String,
    pub(super) arguments: Option<JsonObject>,
    /// Task augmentation; read only on 2025-11-25 (see [`TaskMetadata`]).
    pub(super) task: Option<Value>,
    #[serde(rename = "_meta")]
    pub(super) meta: Option<Value>,
}

/// The `task` of a task-augmented `tools/call`.
#[derive(Debug, Deserialize)]
pub(super) struct TaskMetadata {
    /// The lifetime the client asks for, in milliseconds.
    pub(super) ttl: Option<u64>,
}

/// A task as this era shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Task<'a> {
    pub(super) task_id: &'a str,
    pub(super) status: &'static str,
    pub(super) created_at: Rfc3339,
    pub(super) last_updated_at: Rfc3339,
    /// Always present: `null` for a task kept until it is deleted.
    pub(super) ttl: Option<u64>,
    pub(super) poll_interval: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status_message: Option<&'a str>,
}

impl<'a> Task<'a> {
    pub(super) fn of(rec: &'a TaskRecord) -> Self {
        Self {
            task_id: &rec.id,
            status: rec.status.as_str(),
            created_at: Rfc3339(rec.created_at),
            last_updated_at: Rfc3339(rec.updated_at),
            ttl: rec.ttl.map(|t| t.as_millis() as u64),
            poll_interval: rec.poll_interval.as_millis() as u64,
            status_message: rec.status_message.as_deref(),
        }
    }
}

/// The answer to a task-augmented call: the task, nested.
#[derive(Debug, Serialize)]
pub(super) struct CreateTaskResult<'a> {
    pub(super) task: Task<'a>,
}

/// A page of `tasks/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListTasksResult<'a> {
    pub(super) tasks: Vec<Task<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) next_cursor: Option<String>,
}
