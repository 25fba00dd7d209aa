//! The encoding the durable backends share: times as milliseconds, outcomes as JSON, and a
//! record flattened to the columns a task table keeps.

use super::StoreError;
use crate::error::CallOutcome;
use crate::jsonrpc::ErrorObject;
use crate::model::{CallToolResult, Content};
use crate::task::TaskRecord;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The client capabilities of decoded records, kept once per distinct value.
pub(super) static CLIENT_CAPABILITIES: crate::task::SharedValues = crate::task::SharedValues::new();

/// Milliseconds since the Unix epoch, rounded down.
pub(super) fn millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let ms = i64::try_from(before.as_millis()).unwrap_or(i64::MAX);
            if before > Duration::from_millis(ms.unsigned_abs()) {
                -ms - 1
            } else {
                -ms
            }
        }
    }
}

/// Milliseconds since the Unix epoch, rounded up: a task never expires early.
pub(super) fn millis_ceil(time: SystemTime) -> i64 {
    let down = millis(time);
    if from_millis(down) < time {
        down.saturating_add(1)
    } else {
        down
    }
}

pub(super) fn from_millis(ms: i64) -> SystemTime {
    let span = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        UNIX_EPOCH.checked_add(span)
    } else {
        UNIX_EPOCH.checked_sub(span)
    }
    .unwrap_or(UNIX_EPOCH)
}

pub(super) fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// How an outcome is stored. `structured` and `data` are written only when present, and a
/// present JSON `null` reads back as `Some(Value::Null)`.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum OutcomeRef<'a> {
    Result {
        content: &'a [Content],
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        structured: Option<&'a Value>,
    },
    Error {
        code: i32,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a Value>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StoredOutcome {
    Result {
        content: Vec<Content>,
        is_error: bool,
        #[serde(default, deserialize_with = "present")]
        structured: Option<Value>,
    },
    Error {
        code: i32,
        message: String,
        #[serde(default, deserialize_with = "present")]
        data: Option<Value>,
    },
}

/// A field that is there is `Some`, even when it is `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl From<StoredOutcome> for CallOutcome {
    fn from(stored: StoredOutcome) -> Self {
        match stored {
            StoredOutcome::Result {
                content,
                is_error,
                structured,
            } => Self::Result(CallToolResult {
                content,
                structured_content: structured,
                is_error,
            }),
            StoredOutcome::Error {
                code,
                message,
                data,
            } => Self::Error(ErrorObject {
                code,
                message,
                data,
            }),
        }
    }
}

/// A writer that refuses to grow past a limit, so an oversized outcome is refused without
/// first being serialized whole.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.max {
            return Err(io::Error::other("too big"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(super) fn encode_outcome(
    id: &str,
    outcome: &CallOutcome,
    max: usize,
) -> Result<String, StoreError> {
    let stored = match outcome {
        CallOutcome::Result(result) => OutcomeRef::Result {
            content: &result.content,
            is_error: result.is_error,
            structured: result.structured_content.as_ref(),
        },
        CallOutcome::Error(error) => OutcomeRef::Error {
            code: error.code,
            message: &error.message,
            data: error.data.as_ref(),
        },
    };
    let mut out = Capped {
        bytes: Vec::new(),
        max,
    };
    match serde_json::to_writer(&mut out, &stored) {
        Ok(()) => String::from_utf8(out.bytes)
            .map_err(|e| StoreError::Backend(format!("task {id}: outcome is not UTF-8: {e}"))),
        Err(error) if error.is_io() => Err(StoreError::Backend(format!(
            "the outcome of task {id} is larger than this task store's limit of {max} bytes \
             of JSON (its `max_outcome_bytes` option); it was not stored"
        ))),
        Err(error) => Err(StoreError::Backend(format!(
            "task {id}: cannot encode the outcome: {error}"
        ))),
    }
}

pub(super) fn to_json<T: Serialize + ?Sized>(
    id: &str,
    what: &str,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Backend(format!("task {id}: cannot encode {what}: {e}")))
}

pub(super) fn to_i64(id: &str, what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| {
        StoreError::Backend(format!(
            "task {id}: {what} {n} is too large for the task store"
        ))
    })
}

/// A record ready to be written: the indexed columns plus JSON text for the rest.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) id: String,
    pub(super) owner: Option<String>,
    pub(super) tool: String,
    pub(super) settle: &'static str,
    pub(super) status: &'static str,
    pub(super) status_message: Option<String>,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    pub(super) ttl_ms: Option<i64>,
    pub(super) poll_interval_ms: i64,
    pub(super) expires_at: Option<i64>,
    pub(super) version: i64,
    pub(super) input_seq: i64,
    pub(super) arguments: String,
    pub(super) input_requests: String,
    pub(super) input_responses: String,
    pub(super) outcome: Option<String>,
    pub(super) client: String,
    pub(super) lease_worker: Option<String>,
    pub(super) lease_until: Option<i64>,
    pub(super) epoch: i64,
    pub(super) cancel_at: Option<i64>,
    pub(super) cancel_by: Option<String>,
}

impl Row {
    pub(super) fn encode(record: TaskRecord, max_outcome_bytes: usize) -> Result<Self, StoreError> {
        let id = record.id;
        // Computed here rather than with `TaskRecord::expires_at`, which panics when
        // `created_at + ttl` overflows; such a task never expires.
        let expires_at = match record.ttl {
            Some(ttl) if record.status.is_terminal() => {
                record.created_at.checked_add(ttl).map(millis_ceil)
            }
            _ => None,
        };
        let outcome = match &record.outcome {
            Some(outcome) => Some(encode_outcome(&id, outcome, max_outcome_bytes)?),
            None => None,
        };
        Ok(Self {
            owner: record.owner,
            tool: record.tool,
            settle: record.settle.as_str(),
            status: record.status.as_str(),
            status_message: record.status_message,
            created_at: millis(record.created_at),
            updated_at: millis(record.updated_at),
            ttl_ms: record.ttl.map(duration_millis),
            poll_interval_ms: duration_millis(record.poll_interval),
            expires_at,
            version: to_i64(&id, "version", record.version)?,
            input_seq: to_i64(&id, "input_seq", record.input_seq)?,
            arguments: to_json(&id, "the arguments", &record.arguments)?,
            input_requests: to_json(&id, "the input requests", &record.input_requests)?,
            input_responses: to_json(&id, "the input responses", &record.input_responses)?,
            outcome,
            client: to_json(&id, "the client capabilities", &*record.client_capabilities)?,
            lease_until: record.lease.as_ref().map(|l| millis(l.until)),
            lease_worker: record.lease.map(|l| l.worker),
            epoch: to_i64(&id, "epoch", record.epoch)?,
            cancel_at: record.cancel_requested.as_ref().map(|c| millis(c.at)),
            cancel_by: record.cancel_requested.and_then(|c| c.by),
            id,
        })
    }
}
