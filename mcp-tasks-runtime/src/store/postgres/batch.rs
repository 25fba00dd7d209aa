//! Batched creates and reads: what arrives while every statement slot is busy shares the
//! next statement.

use super::connection::Shared;
use super::row::{Columns, decode, decode_all};
use crate::store::StoreError;
use crate::store::codec::Row;
use crate::task::TaskRecord;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};

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

/// Inserts a batch in one statement and answers each caller once it committed and its
/// change notifications were sent. The statement slot is handed back as soon as the
/// statement is done, so the next batch is inserted while this one's notifications go out.
/// The rows go in id order (the first of one id in the batch wins), so concurrent batches
/// that share ids take their index locks in the same order and cannot deadlock.
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
        let columns = Columns::of(&rows);
        let sql = &shared.sql.insert;
        shared
            .run("cannot create the task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let params = columns.params();
                let inserted = client.query(&statement, &params).await?;
                inserted
                    .iter()
                    .map(|row| Ok((row.try_get::<_, String>(0)?, row.try_get::<_, i64>(1)?)))
                    .collect::<Result<Vec<(String, i64)>, tokio_postgres::Error>>()
            })
            .await
    };
    drop(slot);
    match result {
        Ok(inserted) => {
            let status: std::collections::HashMap<&str, &str> = rows
                .iter()
                .map(|row| (row.id.as_str(), row.status))
                .collect();
            let payloads = inserted
                .iter()
                .map(|(id, seq)| {
                    let status = status.get(id.as_str()).copied().unwrap_or("working");
                    format!("{seq} created {status} {id}")
                })
                .collect();
            shared.announce(payloads).await;
            let mut inserted: std::collections::HashSet<String> =
                inserted.into_iter().map(|(id, _)| id).collect();
            for op in batch {
                // With one id twice in a batch, the first create wins.
                let answer = if inserted.remove(&op.row.id) {
                    Ok(())
                } else {
                    Err(StoreError::Duplicate(op.row.id))
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
