//! Records as the field/value pairs of a Redis hash, and back.

use crate::store::StoreError;
use crate::store::codec::{Row, Stored};
use crate::task::TaskRecord;
use std::collections::HashMap;

/// A record as the field/value pairs of its hash. Absent optional columns are left out.
pub(super) fn encode(
    record: TaskRecord,
    max_outcome_bytes: usize,
) -> Result<(Row, Vec<String>), StoreError> {
    let row = Row::encode(record, max_outcome_bytes)?;
    let mut pairs: Vec<String> = Vec::with_capacity(48);
    let mut put = |field: &str, value: String| {
        pairs.push(field.to_owned());
        pairs.push(value);
    };
    put("id", row.id.clone());
    if let Some(owner) = &row.owner {
        put("owner", owner.clone());
    }
    put("tool", row.tool.clone());
    put("settle", row.settle.to_owned());
    put("status", row.status.to_owned());
    if let Some(message) = &row.status_message {
        put("status_message", message.clone());
    }
    put("created_at", row.created_at.to_string());
    put("updated_at", row.updated_at.to_string());
    if let Some(ttl) = row.ttl_ms {
        put("ttl_ms", ttl.to_string());
    }
    put("poll_interval_ms", row.poll_interval_ms.to_string());
    if let Some(expires) = row.expires_at {
        put("expires", expires.to_string());
    }
    put("version", row.version.to_string());
    put("input_seq", row.input_seq.to_string());
    put("arguments", row.arguments.clone());
    put("input_requests", row.input_requests.clone());
    put("input_responses", row.input_responses.clone());
    if let Some(outcome) = &row.outcome {
        put("outcome", outcome.clone());
    }
    put("client", row.client.clone());
    if let (Some(worker), Some(until)) = (&row.lease_worker, row.lease_until) {
        put("lease_worker", worker.clone());
        put("lease_until", until.to_string());
    }
    put("epoch", row.epoch.to_string());
    if let Some(at) = row.cancel_at {
        put("cancel_at", at.to_string());
    }
    if let Some(by) = &row.cancel_by {
        put("cancel_by", by.clone());
    }
    put("steps", row.steps.clone());
    put("journal", row.journal.clone());
    if let Some(key) = &row.unique_key {
        put("unique_key", key.clone());
    }
    if row.synchronous {
        put("synchronous", "1".to_owned());
    }
    Ok((row, pairs))
}

/// Sets the `version` pair to `version`.
pub(super) fn set_version(pairs: &mut [String], version: u64) {
    if let Some(at) = pairs.iter().step_by(2).position(|f| f == "version") {
        pairs[at * 2 + 1] = version.to_string();
    }
}

/// A record read back from the flat field/value list of `HGETALL`, and its creation number.
pub(super) fn decode(flat: Vec<String>) -> (TaskRecord, u64) {
    let mut fields: HashMap<String, String> = HashMap::with_capacity(flat.len() / 2);
    let mut iter = flat.into_iter();
    while let (Some(field), Some(value)) = (iter.next(), iter.next()) {
        fields.insert(field, value);
    }
    let mut take = |name: &str| fields.remove(name);
    let int = |value: Option<String>| value.and_then(|v| v.parse::<i64>().ok());
    let (settle, status) = (take("settle"), take("status"));
    let (arguments, input_requests) = (take("arguments"), take("input_requests"));
    let (input_responses, outcome, client) =
        (take("input_responses"), take("outcome"), take("client"));
    let (steps, journal) = (take("steps"), take("journal"));
    // A missing JSON field reads as `null`, which the decoder takes as unreadable (logged,
    // then its default), except for the capabilities, where `null` is a value.
    fn text(value: &Option<String>) -> &str {
        value.as_deref().unwrap_or("null")
    }
    let columns = Stored {
        id: take("id").unwrap_or_default(),
        owner: take("owner"),
        tool: take("tool").unwrap_or_default(),
        settle: settle.as_deref().unwrap_or_default(),
        status: status.as_deref().unwrap_or_default(),
        status_message: take("status_message"),
        created_at: int(take("created_at")).unwrap_or(0),
        updated_at: int(take("updated_at")).unwrap_or(0),
        ttl_ms: int(take("ttl_ms")),
        poll_interval_ms: int(take("poll_interval_ms")).unwrap_or(0),
        version: int(take("version")).unwrap_or(0),
        input_seq: int(take("input_seq")).unwrap_or(0),
        arguments: text(&arguments),
        input_requests: text(&input_requests),
        input_responses: text(&input_responses),
        outcome: outcome.as_deref(),
        client: text(&client),
        lease_worker: take("lease_worker"),
        lease_until: int(take("lease_until")),
        epoch: int(take("epoch")).unwrap_or(0),
        cancel_at: int(take("cancel_at")),
        cancel_by: take("cancel_by"),
        // Written before tasks kept steps: none.
        steps: steps.as_deref().unwrap_or("{}"),
        unique_key: take("unique_key"),
        synchronous: take("synchronous").is_some_and(|s| s == "1"),
        // Written before tasks kept a journal: no history, no trace.
        journal: journal.as_deref().unwrap_or("{}"),
    };
    let seq = int(take("seq")).unwrap_or(0).max(0).unsigned_abs();
    let record = columns.decode_or_default();
    (record, seq)
}
