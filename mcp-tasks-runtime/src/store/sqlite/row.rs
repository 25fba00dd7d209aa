//! How a record maps to a row: the column lists, the write statements, decoding, cursors.

use super::sql_error;
use crate::model::{InputRequest, JsonObject};
use crate::store::StoreError;
use crate::store::codec::{StoredOutcome, from_millis};
use crate::task::{CancelRequest, Lease, SettlePolicy, TaskRecord, TaskStatus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The columns a record is read from, in the order [`decode`] expects.
pub(super) const COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, version, input_seq, arguments, input_requests, \
    input_responses, outcome, seq, client, lease_worker, lease_until, epoch, cancel_at, \
    cancel_by";

/// How many leading columns of [`COLUMNS`] count toward a cached record's size.
pub(super) const SIZED_COLUMNS: usize = 18;

pub(super) const INSERT: &str = "INSERT INTO tasks (id, seq, owner, tool, settle, status, \
    status_message, created_at, updated_at, ttl_ms, poll_interval_ms, expires_at, version, \
    input_seq, arguments, input_requests, input_responses, outcome, client, lease_worker, \
    lease_until, epoch, cancel_at, cancel_by, change_seq) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
    ?19, ?20, ?21, ?22, ?23, ?24, ?25) \
    ON CONFLICT (id) DO NOTHING";

pub(super) const UPDATE: &str = "UPDATE tasks SET owner = ?3, tool = ?4, settle = ?5, status = ?6, \
    status_message = ?7, created_at = ?8, updated_at = ?9, ttl_ms = ?10, \
    poll_interval_ms = ?11, expires_at = ?12, version = ?13, input_seq = ?14, \
    arguments = ?15, input_requests = ?16, input_responses = ?17, outcome = ?18, \
    client = ?19, lease_worker = ?20, lease_until = ?21, epoch = ?22, cancel_at = ?23, \
    cancel_by = ?24, change_seq = ?25 \
    WHERE id = ?1 AND version = ?2";

/// The states in which a task is unfinished, as SQL.
pub(super) const UNFINISHED: &str = "status IN ('working', 'input_required')";

/// The most rows one `expire` statement deletes; larger limits take several batches, so a
/// big sweep never holds the writer for long.
pub(super) const EXPIRE_BATCH: usize = 1000;

/// Reads a record (and its creation sequence number) from a row selected with [`COLUMNS`].
pub(super) fn decode(row: &rusqlite::Row<'_>) -> Result<(TaskRecord, i64), StoreError> {
    let sql = |e| sql_error("cannot read a task", e);
    let id: String = row.get(0).map_err(sql)?;
    let corrupt = |what: &str, error: &dyn fmt::Display| {
        StoreError::Backend(format!(
            "task {id}: the stored {what} is unreadable: {error}"
        ))
    };
    let text = |n: usize| -> Result<&str, StoreError> {
        row.get_ref(n)
            .map_err(sql)?
            .as_str()
            .map_err(|e| sql_error("cannot read a task", e.into()))
    };
    let settle: SettlePolicy = text(3)?
        .parse()
        .map_err(|e: String| corrupt("settle policy", &e))?;
    let status: TaskStatus = text(4)?
        .parse()
        .map_err(|e: String| corrupt("status", &e))?;
    let ttl_ms: Option<i64> = row.get(8).map_err(sql)?;
    let poll_interval_ms: i64 = row.get(9).map_err(sql)?;
    let version: i64 = row.get(10).map_err(sql)?;
    let input_seq: i64 = row.get(11).map_err(sql)?;
    let arguments: JsonObject =
        serde_json::from_str(text(12)?).map_err(|e| corrupt("arguments", &e))?;
    let input_requests: BTreeMap<String, InputRequest> =
        serde_json::from_str(text(13)?).map_err(|e| corrupt("input requests", &e))?;
    let input_responses: BTreeMap<String, Value> =
        serde_json::from_str(text(14)?).map_err(|e| corrupt("input responses", &e))?;
    let outcome = match row.get_ref(15).map_err(sql)? {
        rusqlite::types::ValueRef::Null => None,
        _ => Some(
            serde_json::from_str::<StoredOutcome>(text(15)?)
                .map_err(|e| corrupt("outcome", &e))?
                .into(),
        ),
    };
    let client_capabilities = crate::store::codec::CLIENT_CAPABILITIES.share_owned(
        serde_json::from_str(text(17)?).map_err(|e| corrupt("client capabilities", &e))?,
    );
    let lease_worker: Option<String> = row.get(18).map_err(sql)?;
    let lease_until: Option<i64> = row.get(19).map_err(sql)?;
    let epoch: i64 = row.get(20).map_err(sql)?;
    let cancel_at: Option<i64> = row.get(21).map_err(sql)?;
    let cancel_by: Option<String> = row.get(22).map_err(sql)?;
    let record = TaskRecord {
        owner: row.get(1).map_err(sql)?,
        tool: row.get(2).map_err(sql)?,
        arguments,
        settle,
        status,
        status_message: row.get(5).map_err(sql)?,
        created_at: from_millis(row.get(6).map_err(sql)?),
        updated_at: from_millis(row.get(7).map_err(sql)?),
        ttl: ttl_ms.map(|ms| Duration::from_millis(ms.max(0).unsigned_abs())),
        poll_interval: Duration::from_millis(poll_interval_ms.max(0).unsigned_abs()),
        outcome,
        input_requests,
        input_responses,
        input_seq: input_seq.max(0).unsigned_abs(),
        client_capabilities,
        lease: lease_worker.map(|worker| Lease {
            worker,
            until: from_millis(lease_until.unwrap_or(0)),
        }),
        epoch: epoch.max(0).unsigned_abs(),
        cancel_requested: cancel_at.map(|at| CancelRequest {
            at: from_millis(at),
            by: cancel_by,
        }),
        version: version.max(0).unsigned_abs(),
        id,
    };
    let seq = row.get(16).map_err(sql)?;
    Ok((record, seq))
}

pub(super) fn parse_cursor(cursor: &str) -> Option<i64> {
    let digits = cursor.strip_prefix('s')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(super) fn clamp_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
