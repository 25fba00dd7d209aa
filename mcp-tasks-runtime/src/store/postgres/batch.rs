//! Batched creates and reads: what arrives while every statement slot is busy shares the
//! next statement.

use super::connection::Shared;
use super::row::{Columns, decode, decode_all};
use crate::store::StoreError;
use crate::store::codec::Row;
use crate::task::TaskRecord;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::error::SqlState;

/// The most statements of batched `get`s in flight at once. Few, so that the `get`s that
/// arrive while they run gather into the next statement: one statement (one parse, one
/// plan, one round trip) for many reads, instead of one each.
pub(super) const GET_SLOTS: usize = 4;

/// The most ids one batched `get` statement reads.
pub(super) const MAX_GET_BATCH: usize = 256;

/// A create waiting for its batch.
pub(super) struct CreateOp {
    pub(super) row: Row,
    pub(super) reply: oneshot::Sender<Result<(), StoreError>>,
}

/// A `get` waiting for its batch.
pub(super) struct GetOp {
    pub(super) id: String,
    pub(super) reply: oneshot::Sender<Result<Option<TaskRecord>, StoreError>>,
}

// ---------------------------------------------------------------------------------------
// Batched creates

/// Runs batches of the operations in `queue`, with at most `slots` of them in flight: an
/// operation that finds a slot free goes at once, alone; the ones that arrive while every
/// slot is taken share the next batch, up to `max`. Each batch runs as a task of its own,
/// holding its slot until `run` drops it (so a batch may free its slot before it has
/// answered every caller).
pub(super) async fn batches<T, F, Fut>(
    shared: Arc<Shared>,
    mut queue: mpsc::UnboundedReceiver<T>,
    slots: usize,
    max: usize,
    run: F,
) where
    T: Send + 'static,
    F: Fn(Arc<Shared>, Vec<T>, tokio::sync::OwnedSemaphorePermit) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let count = slots.max(1);
    let free = Arc::new(Semaphore::new(count));
    loop {
        let Ok(slot) = Arc::clone(&free).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        let busy = free.available_permits() + 1 < count;
        gather(&mut queue, &mut batch, max.max(1), busy).await;
        tokio::spawn(run(Arc::clone(&shared), batch, slot));
    }
}

/// Takes what is waiting in `queue` into `batch`, up to `max`. When `busy` (other statements
/// are in flight, so callers are active), it first lets the tasks that are ready to run go
/// once or twice: the callers just answered by the last statement then queue their next
/// requests in time to join this one, instead of this statement leaving with the first of
/// them alone (a woken task tends to run next, before the others woken with it).
pub(super) async fn gather<T>(
    queue: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    max: usize,
    busy: bool,
) {
    let rounds = if busy { 3 } else { 1 };
    for round in 0..rounds {
        if round > 0 {
            tokio::task::yield_now().await;
        }
        while batch.len() < max {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
    }
}

/// How many times a batch's statement runs for rows still unsettled: rows whose unique key
/// was refused but whose holder finished before it could be named, and batches PostgreSQL
/// chose as a deadlock's victim.
const INSERT_ROUNDS: usize = 5;

/// What became of one row of a batched create.
enum Verdict {
    /// Stored, with this change sequence number.
    Inserted(i64),
    /// Refused: the id exists.
    Duplicate,
    /// Refused: an unfinished task, this one, holds the unique key.
    Taken(String),
    /// Still unsettled after every round.
    Contended,
}

/// Inserts `rows` with the batch statement, then sorts out each row it left out: a
/// duplicate when its id exists, else taken by the unfinished task holding its key. A row
/// whose holder finished in between is inserted again, as is a batch that lost a deadlock
/// (two batches waiting on each other's keys), up to [`INSERT_ROUNDS`] times in all.
async fn insert_rows(
    client: &deadpool_postgres::Object,
    shared: &Shared,
    rows: &[&Row],
) -> Result<Vec<Verdict>, tokio_postgres::Error> {
    let mut verdicts: Vec<Option<Verdict>> = rows.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..rows.len()).collect();
    let insert = client.prepare_cached(&shared.sql.insert).await?;
    for round in 1..=INSERT_ROUNDS {
        let batch: Vec<&Row> = pending.iter().map(|&n| rows[n]).collect();
        let columns = Columns::of(&batch);
        let inserted = match client.query(&insert, &columns.params()).await {
            Ok(inserted) => inserted,
            Err(error)
                if round < INSERT_ROUNDS
                    && error.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) =>
            {
                continue;
            }
            Err(error) => return Err(error),
        };
        let mut seqs: HashMap<String, i64> = HashMap::with_capacity(inserted.len());
        for row in &inserted {
            seqs.insert(row.try_get(0)?, row.try_get(1)?);
        }
        let mut left = Vec::new();
        for &n in &pending {
            // With one id twice in a batch, the first create wins.
            match seqs.remove(&rows[n].id) {
                Some(seq) => verdicts[n] = Some(Verdict::Inserted(seq)),
                None => left.push(n),
            }
        }
        if left.is_empty() {
            pending.clear();
            break;
        }
        let ids: Vec<&str> = left.iter().map(|&n| rows[n].id.as_str()).collect();
        let keys: Vec<&str> = left.iter().filter_map(|&n| rows[n].held_key()).collect();
        let existing = client.prepare_cached(&shared.sql.existing).await?;
        let existing: HashSet<String> = client
            .query(&existing, &[&ids])
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        let mut holders: HashMap<String, String> = HashMap::new();
        if !keys.is_empty() {
            let statement = client.prepare_cached(&shared.sql.holders).await?;
            for row in client.query(&statement, &[&keys]).await? {
                holders.insert(row.try_get(0)?, row.try_get(1)?);
            }
        }
        pending.clear();
        for n in left {
            let row = rows[n];
            if existing.contains(&row.id) {
                verdicts[n] = Some(Verdict::Duplicate);
            } else if let Some(holder) = row.held_key().and_then(|key| holders.get(key)) {
                verdicts[n] = Some(Verdict::Taken(holder.clone()));
            } else {
                // The holder finished (or the duplicate went) in between: try again.
                pending.push(n);
            }
        }
        if pending.is_empty() {
            break;
        }
    }
    Ok(verdicts
        .into_iter()
        .map(|verdict| verdict.unwrap_or(Verdict::Contended))
        .collect())
}

/// Inserts a batch in one statement and answers each caller once it committed and its
/// change notifications were sent. The statement slot is handed back as soon as the
/// statement is done, so the next batch is inserted while this one's notifications go out.
/// The rows go in id order (the first of one id in the batch wins), so concurrent batches
/// that share ids take their index locks in the same order; batches whose unique keys cross
/// may still deadlock, and the one PostgreSQL aborts runs again ([`insert_rows`]).
pub(super) async fn insert_batch(
    shared: Arc<Shared>,
    mut batch: Vec<CreateOp>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    // A caller that gave up waiting was told its task may not be stored: leave it out.
    batch.retain(|op| !op.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    let rows: Vec<&Row> = batch.iter().map(|op| &op.row).collect();
    let result = {
        let (shared, rows) = (&shared, &rows);
        shared
            .run("cannot create the task", |client| async move {
                insert_rows(&client, shared, rows).await
            })
            .await
    };
    drop(slot);
    match result {
        Ok(verdicts) => {
            let payloads = rows
                .iter()
                .zip(&verdicts)
                .filter_map(|(row, verdict)| match verdict {
                    Verdict::Inserted(seq) => {
                        Some(format!("{seq} created {} {}", row.status, row.id))
                    }
                    _ => None,
                })
                .collect();
            shared.announce(payloads).await;
            for (op, verdict) in batch.into_iter().zip(verdicts) {
                let answer = match verdict {
                    Verdict::Inserted(_) => Ok(()),
                    Verdict::Duplicate => Err(StoreError::Duplicate(op.row.id)),
                    Verdict::Taken(holder) => Err(StoreError::Taken(holder)),
                    Verdict::Contended => Err(shared.remote.unavailable(format!(
                        "cannot create the task {}: its unique key was held, then freed, \
                         {INSERT_ROUNDS} times in a row; nothing was stored",
                        op.row.id
                    ))),
                };
                let _ = op.reply.send(answer);
            }
        }
        Err(error) => {
            for op in batch {
                let _ = op.reply.send(Err(error.clone()));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Batched reads

/// Reads the tasks of a batch of `get`s and answers each caller.
pub(super) async fn read_batch(
    shared: Arc<Shared>,
    mut batch: Vec<GetOp>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    batch.retain(|op| !op.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    let result = if let [op] = batch.as_slice() {
        let sql = &shared.sql.get;
        let id = op.id.as_str();
        shared
            .read("cannot read a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let rows = client.query(&statement, &[&id]).await?;
                rows.first()
                    .map(decode)
                    .transpose()
                    .map(|found| found.map(|(record, _)| vec![record]).unwrap_or_default())
            })
            .await
    } else {
        let ids: Vec<&str> = batch.iter().map(|op| op.id.as_str()).collect();
        let ids = &ids;
        let sql = &shared.sql.get_many;
        shared
            .read("cannot read a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                decode_all(&client.query(&statement, &[ids]).await?)
            })
            .await
    };
    match result {
        Ok(records) => {
            let mut found: std::collections::HashMap<String, TaskRecord> = records
                .into_iter()
                .map(|record| (record.id.clone(), record))
                .collect();
            // The same id may be asked more than once in a batch: each caller gets it.
            let mut asked: std::collections::HashMap<String, usize> =
                std::collections::HashMap::new();
            for op in &batch {
                *asked.entry(op.id.clone()).or_default() += 1;
            }
            for op in batch {
                let left = asked.get_mut(&op.id).map_or(0, |n| {
                    *n -= 1;
                    *n
                });
                let record = if left > 0 {
                    found.get(&op.id).cloned()
                } else {
                    found.remove(&op.id)
                };
                let _ = op.reply.send(Ok(record));
            }
        }
        Err(error) => {
            for op in batch {
                let _ = op.reply.send(Err(error.clone()));
            }
        }
    }
}
