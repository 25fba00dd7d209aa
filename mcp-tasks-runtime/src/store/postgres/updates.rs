//! Batched compare-and-sets: the writes that arrive while every statement slot is busy share
//! the next statement and its commit, like the creates in [`batch`](super::batch).

use super::connection::{Shared, connection_ended};
use super::row::Columns;
use crate::store::StoreError;
use crate::store::codec::Row;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::oneshot;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// A compare-and-set waiting for its batch.
pub(super) struct UpdateOp {
    pub(super) row: Row,
    pub(super) expected: i64,
    pub(super) reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// Writes a batch of compare-and-sets and answers each caller once its write committed and
/// its change notification was sent. One statement writes at most one version of a task:
/// a second write of the same task in the batch goes in the next statement, in the order
/// the writes arrived, so each is checked against the version the one before it left.
/// When a statement fails for a reason of its own rows (a row PostgreSQL refuses, a
/// deadlock with another batch), its writes run again one statement each, so each caller
/// gets the answer its own write would have had alone.
pub(super) async fn update_batch(
    shared: Arc<Shared>,
    mut batch: Vec<UpdateOp>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    // A caller that gave up waiting was told its write may not be stored: leave it out.
    batch.retain(|op| !op.reply.is_closed());
    let mut answers: Vec<Option<Result<Option<i64>, StoreError>>> =
        batch.iter().map(|_| None).collect();
    let mut left: Vec<usize> = (0..batch.len()).collect();
    while !left.is_empty() {
        // The first write of each task still unanswered; the others wait a round.
        let mut seen = HashSet::new();
        let (round, later): (Vec<usize>, Vec<usize>) = left
            .iter()
            .partition(|&&n| seen.insert(batch[n].row.id.as_str()));
        left = later;
        let ops: Vec<&UpdateOp> = round.iter().map(|&n| &batch[n]).collect();
        let results = match update_rows(&shared, &ops).await {
            Ok(seqs) => ops
                .iter()
                .map(|op| Ok(seqs.get(op.row.id.as_str()).copied()))
                .collect(),
            Err(Failure::Rows(_)) if ops.len() > 1 => {
                let mut results = Vec::with_capacity(ops.len());
                for op in &ops {
                    results.push(match update_rows(&shared, &[op]).await {
                        Ok(seqs) => Ok(seqs.get(op.row.id.as_str()).copied()),
                        Err(Failure::Rows(e) | Failure::Store(e)) => Err(e),
                    });
                }
                results
            }
            Err(Failure::Rows(e) | Failure::Store(e)) => vec![Err(e); ops.len()],
        };
        for (n, result) in round.into_iter().zip(results) {
            answers[n] = Some(result);
        }
    }
    drop(slot);
    let payloads = batch
        .iter()
        .zip(&answers)
        .filter_map(|(op, answer)| match answer {
            Some(Ok(Some(seq))) => Some(format!("{seq} updated {} {}", op.row.status, op.row.id)),
            _ => None,
        })
        .collect();
    shared.announce(payloads).await;
    for (op, answer) in batch.into_iter().zip(answers) {
        let answer = answer.unwrap_or_else(|| {
            Err(StoreError::backend(
                "internal error: a write was left unanswered",
            ))
        });
        let _ = op.reply.send(answer.map(|seq| seq.is_some()));
    }
}

/// Why a batch statement failed.
enum Failure {
    /// PostgreSQL refused the statement for its rows (or chose it as a deadlock's victim):
    /// nothing was written.
    Rows(StoreError),
    /// The store could not run it: out of reach, timed out, or the answer was lost.
    Store(StoreError),
}

/// Writes `ops` (at most one per task) in one statement; returns the change sequence
/// number of each task written, by id.
async fn update_rows(shared: &Shared, ops: &[&UpdateOp]) -> Result<HashMap<String, i64>, Failure> {
    let mut ops = ops.to_vec();
    // The rows go in id order, so that concurrent batches lock their tasks in one order.
    ops.sort_by(|a, b| a.row.id.cmp(&b.row.id));
    let rows: Vec<&Row> = ops.iter().map(|op| &op.row).collect();
    let mut columns = Columns::of(&rows);
    // The version column carries the version each write expects.
    columns.version = ops.iter().map(|op| op.expected).collect();
    let refused = AtomicBool::new(false);
    let (columns, sql, flag) = (&columns, &shared.sql.update_many, &refused);
    let written = shared
        .run("cannot write a task", |client| async move {
            let statement = client.prepare_cached(sql).await?;
            let params: [&(dyn ToSql + Sync); 27] = columns.params();
            let rows = client.query(&statement, &params).await.inspect_err(|e| {
                if !connection_ended(e) && e.code() != Some(&SqlState::QUERY_CANCELED) {
                    flag.store(true, Ordering::Relaxed);
                }
            })?;
            rows.iter()
                .map(|row| Ok((row.try_get::<_, String>(0)?, row.try_get::<_, i64>(1)?)))
                .collect::<Result<HashMap<_, _>, tokio_postgres::Error>>()
        })
        .await;
    written.map_err(|e| {
        if refused.load(Ordering::Relaxed) {
            Failure::Rows(e)
        } else {
            Failure::Store(e)
        }
    })
}
