//! How a record maps to a row: the column lists, the write statements, decoding, cursors.

use super::sql_error;
use crate::store::StoreError;
use crate::store::codec::{Stored, Unreadable};
use crate::task::TaskRecord;

/// The columns a record is read from, in the order [`decode`] expects.
pub(super) const COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, version, input_seq, arguments, input_requests, \
    input_responses, outcome, seq, client, lease_worker, lease_until, epoch, cancel_at, \
    cancel_by, steps, unique_key, synchronous, journal";

/// The column of [`COLUMNS`] that holds the steps, which count toward a cached record's
/// size too.
pub(super) const STEPS_COLUMN: usize = 23;

/// The column of [`COLUMNS`] that holds the journal (status history, trace context), which
/// counts toward a cached record's size too.
pub(super) const JOURNAL_COLUMN: usize = 26;

/// How many leading columns of [`COLUMNS`] count toward a cached record's size.
pub(super) const SIZED_COLUMNS: usize = 18;

pub(super) const INSERT: &str = "INSERT INTO tasks (id, seq, owner, tool, settle, status, \
    status_message, created_at, updated_at, ttl_ms, poll_interval_ms, expires_at, version, \
    input_seq, arguments, input_requests, input_responses, outcome, client, lease_worker, \
    lease_until, epoch, cancel_at, cancel_by, change_seq, steps, unique_key, synchronous, \
    journal) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
    ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29) \
    ON CONFLICT (id) DO NOTHING";

pub(super) const UPDATE: &str = "UPDATE tasks SET owner = ?3, tool = ?4, settle = ?5, status = ?6, \
    status_message = ?7, created_at = ?8, updated_at = ?9, ttl_ms = ?10, \
    poll_interval_ms = ?11, expires_at = ?12, version = ?13, input_seq = ?14, \
    arguments = ?15, input_requests = ?16, input_responses = ?17, outcome = ?18, \
    client = ?19, lease_worker = ?20, lease_until = ?21, epoch = ?22, cancel_at = ?23, \
    cancel_by = ?24, change_seq = ?25, steps = ?26, unique_key = ?27, synchronous = ?28, \
    journal = ?29 \
    WHERE id = ?1 AND version = ?2";

/// The states in which a task is unfinished, as SQL.
pub(super) const UNFINISHED: &str = "status IN ('working', 'input_required')";

/// Reads a record (and its creation sequence number) from a row selected with [`COLUMNS`].
pub(super) fn decode(row: &rusqlite::Row<'_>) -> Result<(TaskRecord, i64), StoreError> {
    let sql = |e| sql_error("cannot read a task", e);
    let text = |n: usize| -> Result<&str, StoreError> {
        row.get_ref(n)
            .map_err(sql)?
            .as_str()
            .map_err(|e| sql_error("cannot read a task", e.into()))
    };
    let outcome = match row.get_ref(15).map_err(sql)? {
        rusqlite::types::ValueRef::Null => None,
        _ => Some(text(15)?),
    };
    let record = Stored {
        id: row.get(0).map_err(sql)?,
        owner: row.get(1).map_err(sql)?,
        tool: row.get(2).map_err(sql)?,
        settle: text(3)?,
        status: text(4)?,
        status_message: row.get(5).map_err(sql)?,
        created_at: row.get(6).map_err(sql)?,
        updated_at: row.get(7).map_err(sql)?,
        ttl_ms: row.get(8).map_err(sql)?,
        poll_interval_ms: row.get(9).map_err(sql)?,
        version: row.get(10).map_err(sql)?,
        input_seq: row.get(11).map_err(sql)?,
        arguments: text(12)?,
        input_requests: text(13)?,
        input_responses: text(14)?,
        outcome,
        client: text(17)?,
        lease_worker: row.get(18).map_err(sql)?,
        lease_until: row.get(19).map_err(sql)?,
        epoch: row.get(20).map_err(sql)?,
        cancel_at: row.get(21).map_err(sql)?,
        cancel_by: row.get(22).map_err(sql)?,
        steps: text(23)?,
        unique_key: row.get(24).map_err(sql)?,
        synchronous: row.get(25).map_err(sql)?,
        journal: text(26)?,
    }
    .decode(Unreadable::Fail)?;
    let seq = row.get(16).map_err(sql)?;
    Ok((record, seq))
}
