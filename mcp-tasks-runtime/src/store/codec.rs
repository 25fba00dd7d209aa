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
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The client capabilities of decoded records, kept once per distinct value.
pub(super) static CLIENT_CAPABILITIES: crate::task::SharedValues = crate::task::SharedValues::new();

/// The `client` columns decoded lately, by their text.
static CLIENT_COLUMNS: ClientColumns = ClientColumns::new();

/// A few `client` columns decoded lately, each with what it decoded to. The tasks of one
/// client (and one principal) hold the same text, so a read of one of them takes the
/// capabilities and the principal decoded before instead of reading the JSON again.
struct ClientColumns {
    recent: crate::sync::Recent<Arc<ClientColumn>, CLIENT_COLUMNS_KEPT>,
}

/// A decoded `client` column.
struct ClientColumn {
    text: Box<str>,
    decoded: DecodedClient,
}

/// What a `client` column holds: the capabilities and the principal that created the task.
type DecodedClient = (Arc<Value>, Option<Arc<crate::principal::Principal>>);

/// How many `client` columns [`ClientColumns`] keeps.
const CLIENT_COLUMNS_KEPT: usize = 8;

/// The longest `client` column [`ClientColumns`] keeps.
const CLIENT_COLUMN_MAX: usize = 4096;

impl ClientColumns {
    const fn new() -> Self {
        Self {
            recent: crate::sync::Recent::new(),
        }
    }

    /// Reads a `client` column: the capabilities (shared with equal ones decoded before)
    /// and the principal. A column read lately is not parsed again; one that cannot be read
    /// is `Err` with the parse error, and is not kept.
    fn decode(&self, text: &str) -> Result<DecodedClient, serde_json::Error> {
        if let Some(kept) = self.recent.find(|kept| *kept.text == *text) {
            return Ok(kept.decoded.clone());
        }
        let (client, principal) = without_principal(serde_json::from_str(text)?);
        let decoded = (CLIENT_CAPABILITIES.share_owned(client), principal);
        self.keep(text, &decoded);
        Ok(decoded)
    }

    /// Keeps what `text` decoded to as the most recent, unless it is too long to keep.
    fn keep(&self, text: &str, decoded: &DecodedClient) {
        if text.len() > CLIENT_COLUMN_MAX {
            return;
        }
        let column = ClientColumn {
            text: text.into(),
            decoded: decoded.clone(),
        };
        self.recent.keep(Arc::new(column), |a, b| a.text == b.text);
    }
}

/// Reads a `client` column with [`CLIENT_COLUMNS`].
fn decode_client(text: &str) -> Result<DecodedClient, serde_json::Error> {
    CLIENT_COLUMNS.decode(text)
}

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
        Ok(()) => String::from_utf8(out.bytes).map_err(|e| {
            StoreError::backend_caused_by(format!("task {id}: outcome is not UTF-8: {e}"), e)
        }),
        Err(error) if error.is_io() => Err(StoreError::backend(format!(
            "the outcome of task {id} is larger than this task store's limit of {max} bytes \
             of JSON (its `max_outcome_bytes` option); it was not stored"
        ))),
        Err(error) => Err(StoreError::backend_caused_by(
            format!("task {id}: cannot encode the outcome: {error}"),
            error,
        )),
    }
}

pub(super) fn to_json<T: Serialize + ?Sized>(
    id: &str,
    what: &str,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| {
        StoreError::backend_caused_by(format!("task {id}: cannot encode {what}: {e}"), e)
    })
}

pub(super) fn to_i64(id: &str, what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| {
        StoreError::backend(format!(
            "task {id}: {what} {n} is too large for the task store"
        ))
    })
}

/// The key of the `client` column that keeps the principal that created the task, beside
/// the client's capabilities (no capability starts with `$`).
const PRINCIPAL: &str = "$principal";
/// The key that keeps capabilities that are not an object, when a principal is kept too.
const CAPABILITIES: &str = "$capabilities";

/// What the `client` column keeps: the capabilities, with the principal when there is one.
fn with_principal<'a>(
    capabilities: &'a Value,
    principal: Option<&crate::principal::Principal>,
) -> std::borrow::Cow<'a, Value> {
    let Some(principal) = principal else {
        return std::borrow::Cow::Borrowed(capabilities);
    };
    let mut kept = match capabilities {
        Value::Object(map) => map.clone(),
        other => serde_json::Map::from_iter([(CAPABILITIES.to_owned(), other.clone())]),
    };
    kept.insert(PRINCIPAL.to_owned(), principal.to_stored());
    std::borrow::Cow::Owned(Value::Object(kept))
}

/// The capabilities and the principal a `client` column keeps.
fn without_principal(
    mut client: Value,
) -> (Value, Option<std::sync::Arc<crate::principal::Principal>>) {
    let Some(map) = client.as_object_mut() else {
        return (client, None);
    };
    let Some(principal) = map.remove(PRINCIPAL) else {
        return (client, None);
    };
    let principal = crate::principal::Principal::from_stored(principal).map(std::sync::Arc::new);
    match map.remove(CAPABILITIES) {
        Some(other) => (other, principal),
        None => (client, principal),
    }
}

/// What the `journal` column keeps: the task's status history and the trace context of the
/// request that created it. A task written before tasks kept them reads as `{}`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Journal {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<StoredChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<crate::task::TraceContext>,
}

/// A [`StatusChange`](crate::task::StatusChange) as the journal keeps it: the time in
/// milliseconds since the epoch.
#[derive(Debug, Serialize, Deserialize)]
struct StoredChange {
    status: crate::task::TaskStatus,
    at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default)]
    epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<String>,
}

impl Journal {
    fn of(record: &mut TaskRecord) -> Self {
        Self {
            history: std::mem::take(&mut record.history)
                .into_iter()
                .map(|c| StoredChange {
                    status: c.status,
                    at: millis(c.at),
                    message: c.message,
                    epoch: c.epoch,
                    process: c.process,
                })
                .collect(),
            trace: record.trace.take().map(Arc::unwrap_or_clone),
        }
    }

    fn history(
        self,
    ) -> (
        Vec<crate::task::StatusChange>,
        Option<Arc<crate::task::TraceContext>>,
    ) {
        let history = self
            .history
            .into_iter()
            .map(|c| {
                let mut change = crate::task::StatusChange::new(c.status, from_millis(c.at));
                change.message = c.message;
                change.epoch = c.epoch;
                change.process = c.process;
                change
            })
            .collect();
        (history, self.trace.map(Arc::new))
    }
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
    /// The durable steps' outputs, as a JSON object.
    pub(super) steps: String,
    pub(super) unique_key: Option<String>,
    pub(super) synchronous: bool,
    /// The status history and the creating request's trace context, as a JSON object.
    pub(super) journal: String,
}

impl Row {
    /// The unique key this record holds: its key while it is unfinished, else none.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) fn held_key(&self) -> Option<&str> {
        match self.status {
            "working" | "input_required" => self.unique_key.as_deref(),
            _ => None,
        }
    }

    pub(super) fn encode(
        mut record: TaskRecord,
        max_outcome_bytes: usize,
    ) -> Result<Self, StoreError> {
        let journal = Journal::of(&mut record);
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
            client: to_json(
                &id,
                "the client capabilities",
                &with_principal(&record.client_capabilities, record.principal.as_deref()),
            )?,
            lease_until: record.lease.as_ref().map(|l| millis(l.until)),
            lease_worker: record.lease.map(|l| l.worker),
            epoch: to_i64(&id, "epoch", record.epoch)?,
            cancel_at: record.cancel_requested.as_ref().map(|c| millis(c.at)),
            cancel_by: record.cancel_requested.and_then(|c| c.by),
            steps: to_json(&id, "the steps", &record.steps)?,
            unique_key: record.unique_key,
            synchronous: record.synchronous,
            journal: to_json(&id, "the journal", &journal)?,
            id,
        })
    }
}

/// How a decoder treats a stored field it cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// The read fails with an error naming the task and the field.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Fail,
    #[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
    /// The field is logged and read as its default (a status as `failed`, an outcome as
    /// none), so one damaged task does not hide the others from a scan.
    Default,
}

/// A stored record as a backend's row holds it: the columns of [`Row`], read back, with the
/// JSON columns borrowed from the row.
#[derive(Debug)]
pub(super) struct Stored<'a> {
    pub(super) id: String,
    pub(super) owner: Option<String>,
    pub(super) tool: String,
    pub(super) settle: &'a str,
    pub(super) status: &'a str,
    pub(super) status_message: Option<String>,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    pub(super) ttl_ms: Option<i64>,
    pub(super) poll_interval_ms: i64,
    pub(super) version: i64,
    pub(super) input_seq: i64,
    pub(super) arguments: &'a str,
    pub(super) input_requests: &'a str,
    pub(super) input_responses: &'a str,
    pub(super) outcome: Option<&'a str>,
    pub(super) client: &'a str,
    pub(super) lease_worker: Option<String>,
    pub(super) lease_until: Option<i64>,
    pub(super) epoch: i64,
    pub(super) cancel_at: Option<i64>,
    pub(super) cancel_by: Option<String>,
    /// The durable steps' outputs, as a JSON object.
    pub(super) steps: &'a str,
    pub(super) unique_key: Option<String>,
    pub(super) synchronous: bool,
    /// The status history and the trace context, as a JSON object.
    pub(super) journal: &'a str,
}

impl Stored<'_> {
    /// [`decode`](Self::decode) with [`Unreadable::Default`], which cannot fail.
    #[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
    pub(super) fn decode_or_default(self) -> TaskRecord {
        self.decode(Unreadable::Default)
            .expect("a decode that defaults unreadable fields does not fail")
    }

    /// The record these columns hold. Negative counters read as zero; the client
    /// capabilities are shared with equal ones decoded before ([`CLIENT_CAPABILITIES`]).
    pub(super) fn decode(self, unreadable: Unreadable) -> Result<TaskRecord, StoreError> {
        let id = self.id;
        let field = |what: &str, error: &dyn std::fmt::Display| match unreadable {
            Unreadable::Fail => Err(StoreError::backend(format!(
                "task {id}: the stored {what} is unreadable: {error}"
            ))),
            Unreadable::Default => {
                tracing::error!(task = %crate::task::ShortId(&id), what, %error, "a stored task is unreadable");
                Ok(())
            }
        };
        fn json<T: serde::de::DeserializeOwned + Default>(
            text: &str,
            what: &str,
            field: &dyn Fn(&str, &dyn std::fmt::Display) -> Result<(), StoreError>,
        ) -> Result<T, StoreError> {
            match serde_json::from_str(text) {
                Ok(value) => Ok(value),
                Err(e) => field(what, &e).map(|()| T::default()),
            }
        }
        let settle = match self.settle.parse::<crate::task::SettlePolicy>() {
            Ok(settle) => settle,
            Err(e) => field("settle policy", &e).map(|()| Default::default())?,
        };
        let status = match self.status.parse::<crate::task::TaskStatus>() {
            Ok(status) => status,
            Err(e) => field("status", &e).map(|()| crate::task::TaskStatus::Failed)?,
        };
        let outcome = match self.outcome {
            None => None,
            Some(text) => match serde_json::from_str::<StoredOutcome>(text) {
                Ok(outcome) => Some(Box::new(outcome.into())),
                Err(e) => field("outcome", &e).map(|()| None)?,
            },
        };
        let unsigned = |n: i64| n.max(0).unsigned_abs();
        let (history, trace) = json::<Journal>(self.journal, "journal", &field)?.history();
        let (client_capabilities, principal) = match decode_client(self.client) {
            Ok(decoded) => decoded,
            Err(e) => field("client capabilities", &e)
                .map(|()| (CLIENT_CAPABILITIES.share_owned(Value::default()), None))?,
        };
        let record = TaskRecord {
            owner: self.owner,
            principal,
            tool: self.tool,
            arguments: json(self.arguments, "arguments", &field)?,
            settle,
            status,
            status_message: self.status_message,
            created_at: from_millis(self.created_at),
            updated_at: from_millis(self.updated_at),
            ttl: self.ttl_ms.map(|ms| Duration::from_millis(unsigned(ms))),
            poll_interval: Duration::from_millis(unsigned(self.poll_interval_ms)),
            outcome,
            input_requests: json(self.input_requests, "input requests", &field)?,
            input_responses: json(self.input_responses, "input responses", &field)?,
            input_seq: unsigned(self.input_seq),
            client_capabilities,
            lease: self.lease_worker.map(|worker| crate::task::Lease {
                worker,
                until: from_millis(self.lease_until.unwrap_or(0)),
            }),
            epoch: unsigned(self.epoch),
            cancel_requested: self.cancel_at.map(|at| {
                Box::new(crate::task::CancelRequest {
                    at: from_millis(at),
                    by: self.cancel_by,
                })
            }),
            version: unsigned(self.version),
            id: String::new(),
            steps: json(self.steps, "steps", &field)?,
            unique_key: self.unique_key,
            synchronous: self.synchronous,
            history,
            trace,
        };
        Ok(TaskRecord { id, ..record })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::sample_record;
    use crate::task::TaskStatus;

    /// The stored form of `record`, read back through [`Stored`] with `damage` applied.
    fn round_trip(
        record: TaskRecord,
        unreadable: Unreadable,
        damage: impl FnOnce(&mut Stored<'_>),
    ) -> Result<TaskRecord, StoreError> {
        let row = Row::encode(record, usize::MAX).unwrap();
        let mut stored = Stored {
            id: row.id.clone(),
            owner: row.owner.clone(),
            tool: row.tool.clone(),
            settle: row.settle,
            status: row.status,
            status_message: row.status_message.clone(),
            created_at: row.created_at,
            updated_at: row.updated_at,
            ttl_ms: row.ttl_ms,
            poll_interval_ms: row.poll_interval_ms,
            version: row.version,
            input_seq: row.input_seq,
            arguments: &row.arguments,
            input_requests: &row.input_requests,
            input_responses: &row.input_responses,
            outcome: row.outcome.as_deref(),
            client: &row.client,
            lease_worker: row.lease_worker.clone(),
            lease_until: row.lease_until,
            epoch: row.epoch,
            cancel_at: row.cancel_at,
            cancel_by: row.cancel_by.clone(),
            steps: &row.steps,
            journal: &row.journal,
            unique_key: row.unique_key.clone(),
            synchronous: row.synchronous,
        };
        damage(&mut stored);
        stored.decode(unreadable)
    }

    #[test]
    fn the_principal_is_kept_beside_the_capabilities_and_nothing_more() {
        use crate::principal::Principal;
        let mut record = sample_record("t1", Some("principal:ann"), SystemTime::now());
        let mut who = Principal::new("ann")
            .with_scopes(["a", "b"])
            .with_issuer("https://id.example");
        who.claims.insert("email".into(), serde_json::json!("x"));
        record.principal = Some(std::sync::Arc::new(who.for_record()));
        for capabilities in [
            serde_json::json!({"elicitation": {}}),
            serde_json::Value::Null,
        ] {
            record.client_capabilities = std::sync::Arc::new(capabilities);
            let row = Row::encode(record.clone(), usize::MAX).unwrap();
            assert!(!row.client.contains("email"), "{}", row.client);
            let read = round_trip(record.clone(), Unreadable::Fail, |_| {}).unwrap();
            assert_eq!(read.principal, record.principal);
            assert_eq!(read.client_capabilities, record.client_capabilities);
        }
        // A record without one keeps its capabilities as they are.
        record.principal = None;
        record.client_capabilities = std::sync::Arc::new(serde_json::json!({"roots": {}}));
        let row = Row::encode(record, usize::MAX).unwrap();
        assert_eq!(row.client, r#"{"roots":{}}"#);
    }

    #[test]
    fn a_client_column_read_lately_is_not_parsed_again() {
        let columns = ClientColumns::new();
        let principal = crate::principal::Principal::new("ann").with_scopes(["a"]);
        let text = to_json(
            "t",
            "client",
            &with_principal(&serde_json::json!({"roots": {}}), Some(&principal)),
        )
        .unwrap();
        let first = columns.decode(&text).unwrap();
        let again = columns.decode(&text).unwrap();
        assert_eq!(*first.0, serde_json::json!({"roots": {}}));
        assert_eq!(first.1.as_deref().map(|p| p.subject.as_str()), Some("ann"));
        assert!(Arc::ptr_eq(&first.0, &again.0));
        assert!(Arc::ptr_eq(
            first.1.as_ref().unwrap(),
            again.1.as_ref().unwrap()
        ));
        // Another principal's column is another entry.
        let other = to_json(
            "t",
            "client",
            &with_principal(
                &serde_json::json!({"roots": {}}),
                Some(&crate::principal::Principal::new("bob")),
            ),
        )
        .unwrap();
        let bob = columns.decode(&other).unwrap();
        assert_eq!(bob.1.as_deref().map(|p| p.subject.as_str()), Some("bob"));
        assert_eq!(bob.0, first.0);
        // A column kept again (two readers missed it at once) is kept once.
        columns.keep(&text, &first);
        assert_eq!(columns.recent.kept().len(), 2);
        // An unreadable column is an error every time and is never kept.
        assert!(columns.decode("{").is_err());
        assert!(columns.decode("{").is_err());
        assert_eq!(columns.recent.kept().len(), 2);
        // So is a long one, though it reads.
        let long = format!(r#"{{"x": "{}"}}"#, "y".repeat(CLIENT_COLUMN_MAX));
        assert_eq!(
            columns.decode(&long).unwrap().0["x"]
                .as_str()
                .unwrap()
                .len(),
            CLIENT_COLUMN_MAX
        );
        assert_eq!(columns.recent.kept().len(), 2);
        // At most a few are kept, the least recently read going first.
        for n in 0..CLIENT_COLUMNS_KEPT {
            columns.decode(&format!(r#"{{"n": {n}}}"#)).unwrap();
        }
        let recent = columns.recent.kept();
        assert_eq!(recent.len(), CLIENT_COLUMNS_KEPT);
        assert!(
            recent
                .iter()
                .all(|kept| *kept.text != *text && *kept.text != *other)
        );
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let mut record = sample_record("t1", Some("alice"), SystemTime::now());
        record.steps.insert(
            "fetch".into(),
            serde_json::json!({"rows": [1, {"a": null}]}),
        );
        record.unique_key = Some("report:7".into());
        record.synchronous = true;
        let read = round_trip(record.clone(), Unreadable::Fail, |_| {}).unwrap();
        // Times are kept in whole milliseconds.
        assert_eq!(millis(read.created_at), millis(record.created_at));
        assert_eq!(
            TaskRecord {
                created_at: record.created_at,
                updated_at: record.updated_at,
                ..read
            },
            record
        );
    }

    #[test]
    fn an_unreadable_field_fails_or_reads_as_its_default() {
        let record = sample_record("t2", None, SystemTime::now());
        let err = round_trip(record.clone(), Unreadable::Fail, |s| s.status = "sleeping")
            .unwrap_err()
            .to_string();
        assert!(err.contains("task t2") && err.contains("status"), "{err}");
        let err = round_trip(record.clone(), Unreadable::Fail, |s| s.arguments = "{")
            .unwrap_err()
            .to_string();
        assert!(err.contains("arguments"), "{err}");
        let read = round_trip(record.clone(), Unreadable::Default, |s| {
            s.status = "sleeping";
            s.arguments = "[1]";
        })
        .unwrap();
        assert_eq!(read.status, TaskStatus::Failed);
        assert!(read.arguments.is_empty());
        assert_eq!(read.tool, record.tool);
    }
}
