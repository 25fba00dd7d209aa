//! Records as PostgreSQL rows, and back.

use crate::store::StoreError;
use crate::store::codec::{Row, Stored};
use crate::task::TaskRecord;
use tokio_postgres::types::ToSql;

/// A batch of rows as one array per column, for `unnest`.
pub(super) struct Columns {
    pub(super) id: Vec<String>,
    pub(super) owner: Vec<Option<String>>,
    pub(super) tool: Vec<String>,
    pub(super) settle: Vec<&'static str>,
    pub(super) status: Vec<&'static str>,
    pub(super) status_message: Vec<Option<String>>,
    pub(super) created_at: Vec<i64>,
    pub(super) updated_at: Vec<i64>,
    pub(super) ttl_ms: Vec<Option<i64>>,
    pub(super) poll_interval_ms: Vec<i64>,
    pub(super) expires_at: Vec<Option<i64>>,
    pub(super) version: Vec<i64>,
    pub(super) input_seq: Vec<i64>,
    pub(super) arguments: Vec<String>,
    pub(super) input_requests: Vec<String>,
    pub(super) input_responses: Vec<String>,
    pub(super) outcome: Vec<Option<String>>,
    pub(super) client: Vec<String>,
    pub(super) lease_worker: Vec<Option<String>>,
    pub(super) lease_until: Vec<Option<i64>>,
    pub(super) epoch: Vec<i64>,
    pub(super) cancel_at: Vec<Option<i64>>,
    pub(super) cancel_by: Vec<Option<String>>,
    pub(super) steps: Vec<String>,
    pub(super) unique_key: Vec<Option<String>>,
    pub(super) synchronous: Vec<bool>,
    pub(super) journal: Vec<String>,
}

impl Columns {
    pub(super) fn of(rows: &[&Row]) -> Self {
        Self {
            id: rows.iter().map(|r| r.id.clone()).collect(),
            owner: rows.iter().map(|r| r.owner.clone()).collect(),
            tool: rows.iter().map(|r| r.tool.clone()).collect(),
            settle: rows.iter().map(|r| r.settle).collect(),
            status: rows.iter().map(|r| r.status).collect(),
            status_message: rows.iter().map(|r| r.status_message.clone()).collect(),
            created_at: rows.iter().map(|r| r.created_at).collect(),
            updated_at: rows.iter().map(|r| r.updated_at).collect(),
            ttl_ms: rows.iter().map(|r| r.ttl_ms).collect(),
            poll_interval_ms: rows.iter().map(|r| r.poll_interval_ms).collect(),
            expires_at: rows.iter().map(|r| r.expires_at).collect(),
            version: rows.iter().map(|r| r.version).collect(),
            input_seq: rows.iter().map(|r| r.input_seq).collect(),
            arguments: rows.iter().map(|r| r.arguments.clone()).collect(),
            input_requests: rows.iter().map(|r| r.input_requests.clone()).collect(),
            input_responses: rows.iter().map(|r| r.input_responses.clone()).collect(),
            outcome: rows.iter().map(|r| r.outcome.clone()).collect(),
            client: rows.iter().map(|r| r.client.clone()).collect(),
            lease_worker: rows.iter().map(|r| r.lease_worker.clone()).collect(),
            lease_until: rows.iter().map(|r| r.lease_until).collect(),
            epoch: rows.iter().map(|r| r.epoch).collect(),
            cancel_at: rows.iter().map(|r| r.cancel_at).collect(),
            cancel_by: rows.iter().map(|r| r.cancel_by.clone()).collect(),
            steps: rows.iter().map(|r| r.steps.clone()).collect(),
            unique_key: rows.iter().map(|r| r.unique_key.clone()).collect(),
            synchronous: rows.iter().map(|r| r.synchronous).collect(),
            journal: rows.iter().map(|r| r.journal.clone()).collect(),
        }
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 27] {
        [
            &self.id,
            &self.owner,
            &self.tool,
            &self.settle,
            &self.status,
            &self.status_message,
            &self.created_at,
            &self.updated_at,
            &self.ttl_ms,
            &self.poll_interval_ms,
            &self.expires_at,
            &self.version,
            &self.input_seq,
            &self.arguments,
            &self.input_requests,
            &self.input_responses,
            &self.outcome,
            &self.client,
            &self.lease_worker,
            &self.lease_until,
            &self.epoch,
            &self.cancel_at,
            &self.cancel_by,
            &self.steps,
            &self.unique_key,
            &self.synchronous,
            &self.journal,
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// Refuses a row PostgreSQL cannot store: text and `jsonb` hold no NUL character.
pub(super) fn check_storable(row: &Row) -> Result<(), StoreError> {
    let texts = [
        Some(row.id.as_str()),
        row.owner.as_deref(),
        Some(row.tool.as_str()),
        row.status_message.as_deref(),
        row.lease_worker.as_deref(),
        row.cancel_by.as_deref(),
        row.unique_key.as_deref(),
    ];
    let jsons = [
        Some(row.arguments.as_str()),
        Some(row.input_requests.as_str()),
        Some(row.input_responses.as_str()),
        row.outcome.as_deref(),
        Some(row.client.as_str()),
        Some(row.steps.as_str()),
        Some(row.journal.as_str()),
    ];
    let nul = texts.into_iter().flatten().any(|t| t.contains('\0'))
        || jsons.into_iter().flatten().any(json_has_nul);
    if nul {
        return Err(StoreError::backend(format!(
            "task {}: the PostgreSQL task store cannot store the NUL character (U+0000) in \
             text; it was not stored",
            row.id
        )));
    }
    Ok(())
}

/// Whether JSON text (as serde_json writes it) has an escaped NUL, `\u0000`, in a string.
pub(super) fn json_has_nul(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut from = 0;
    while let Some(at) = json[from..].find("\\u0000") {
        let at = from + at;
        // The escape counts if an even number of backslashes precede its own.
        let before = bytes[..at]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if before % 2 == 0 {
            return true;
        }
        from = at + 1;
    }
    false
}

pub(super) fn encode(record: TaskRecord, max_outcome_bytes: usize) -> Result<Row, StoreError> {
    let row = Row::encode(record, max_outcome_bytes)?;
    check_storable(&row)?;
    Ok(row)
}

/// Reads a record (and its creation sequence number) from a row selected with
/// [`COLUMNS`](super::queries::COLUMNS).
pub(super) fn decode(
    row: &tokio_postgres::Row,
) -> Result<(TaskRecord, i64), tokio_postgres::Error> {
    let columns = Stored {
        id: row.try_get(0)?,
        owner: row.try_get(1)?,
        tool: row.try_get(2)?,
        settle: row.try_get(3)?,
        status: row.try_get(4)?,
        status_message: row.try_get(5)?,
        created_at: row.try_get(6)?,
        updated_at: row.try_get(7)?,
        ttl_ms: row.try_get(8)?,
        poll_interval_ms: row.try_get(9)?,
        version: row.try_get(10)?,
        input_seq: row.try_get(11)?,
        arguments: row.try_get(12)?,
        input_requests: row.try_get(13)?,
        input_responses: row.try_get(14)?,
        outcome: row.try_get(15)?,
        client: row.try_get(17)?,
        lease_worker: row.try_get(18)?,
        lease_until: row.try_get(19)?,
        epoch: row.try_get(20)?,
        cancel_at: row.try_get(21)?,
        cancel_by: row.try_get(22)?,
        steps: row.try_get(23)?,
        unique_key: row.try_get(24)?,
        synchronous: row.try_get(25)?,
        journal: row.try_get(26)?,
    };
    let record = columns.decode_or_default();
    Ok((record, row.try_get(16)?))
}

/// The first `limit` of `rows` (selected with [`COLUMNS`](super::queries::COLUMNS), one
/// more than a page) as a page: the records, the sequence number of the last one (`start`
/// when there is none), and whether more follow.
pub(super) fn decode_page(
    rows: &[tokio_postgres::Row],
    limit: usize,
    start: i64,
) -> Result<(Vec<TaskRecord>, i64, bool), tokio_postgres::Error> {
    let mut tasks = Vec::with_capacity(rows.len().min(limit));
    let mut last = start;
    for row in rows.iter().take(limit) {
        let (record, seq) = decode(row)?;
        tasks.push(record);
        last = seq;
    }
    Ok((tasks, last, rows.len() > limit))
}

pub(super) fn decode_all(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<TaskRecord>, tokio_postgres::Error> {
    rows.iter().map(|row| decode(row).map(|(r, _)| r)).collect()
}
