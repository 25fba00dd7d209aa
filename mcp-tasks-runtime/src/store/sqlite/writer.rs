//! The writer thread: the only write connection, with group commit.

use super::cache::Cache;
use super::row::{COLUMNS, INSERT, UNFINISHED, UPDATE, decode};
use super::sql_error;
use crate::store::StoreError;
use crate::store::codec::Row;
use crate::task::TaskRecord;
use rusqlite::{Connection, OptionalExtension, params};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// A write waiting for its batch.
pub(super) enum WriteOp {
    Create {
        row: Row,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    CompareAndSet {
        row: Row,
        expected: i64,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Delete {
        id: String,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Expire {
        now: i64,
        limit: i64,
        reply: oneshot::Sender<Result<Vec<String>, StoreError>>,
    },
    Claim {
        worker: String,
        until: i64,
        limit: i64,
        /// The tools to leave out, as a JSON array.
        skip: String,
        reply: oneshot::Sender<Result<Vec<TaskRecord>, StoreError>>,
    },
}

/// What a write did, before its batch commits.
pub(super) enum Answer {
    Changed(bool),
    /// A create refused: an unfinished task, this one, holds the same unique key.
    Taken(String),
    Ids(Vec<String>),
    Records(Vec<TaskRecord>),
}

impl WriteOp {
    /// Answers the caller. Called once the batch is committed, or failed.
    pub(super) fn finish(self, answer: Result<Answer, StoreError>) {
        let mismatch = || StoreError::backend("internal error: mismatched write answer");
        match self {
            Self::Create { row, reply } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Changed(true)) => Ok(()),
                    Ok(Answer::Changed(false)) => Err(StoreError::Duplicate(row.id)),
                    Ok(Answer::Taken(holder)) => Err(StoreError::Taken(holder)),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::CompareAndSet { reply, .. } | Self::Delete { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Changed(changed)) => Ok(changed),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::Expire { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Ids(ids)) => Ok(ids),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::Claim { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Records(records)) => Ok(records),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
        }
    }
}

/// The longest quiet gap the writer waits for another write before it commits.
pub(super) const MAX_QUIET: Duration = Duration::from_micros(100);

/// The owner of the write connection.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// The last creation sequence number handed out; read from `meta` at the start of every
    /// transaction (another process may have written since) and saved with every batch
    /// that creates tasks, so numbers are never reused, even after the newest task is
    /// deleted.
    pub(super) last_seq: i64,
    /// The last change sequence number, kept the same way: every write of a task stamps it
    /// with the next one, which is what [`ClaimStore::changes`] reads.
    pub(super) change_seq: i64,
    /// Nudges the checkpointer after a commit.
    pub(super) checkpoints: mpsc::SyncSender<()>,
    /// Written tasks are dropped from it between the commit and the answer.
    pub(super) cache: Arc<Cache>,
}

impl Writer {
    pub(super) fn run(mut self, requests: &mpsc::Receiver<WriteOp>, max_batch: usize) {
        // A moving average of how long a commit takes.
        let mut commit_time = Duration::ZERO;
        while let Ok(first) = requests.recv() {
            let mut batch = vec![first];
            while batch.len() < max_batch {
                match requests.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            // While writes keep arriving, wait a little for more: the callers answered by
            // the last commit are coming back, and taking them now saves them waiting a
            // whole commit. A quiet gap of an eighth of a commit, or a wait of half a
            // commit, ends the gathering; a lone caller pays one quiet gap.
            let quiet = (commit_time / 8).min(MAX_QUIET);
            let gather_until = Instant::now() + commit_time / 2;
            while batch.len() < max_batch && !quiet.is_zero() {
                let left = gather_until.saturating_duration_since(Instant::now());
                match requests.recv_timeout(quiet.min(left)) {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
                while batch.len() < max_batch {
                    match requests.try_recv() {
                        Ok(op) => batch.push(op),
                        Err(_) => break,
                    }
                }
                if left.is_zero() {
                    break;
                }
            }
            let started = Instant::now();
            self.commit(batch);
            commit_time = (commit_time * 7 + started.elapsed()) / 8;
            // Never blocks: a nudge that is already pending is enough.
            let _ = self.checkpoints.try_send(());
        }
    }

    /// Applies `batch` in one transaction, commits it and answers every caller.
    pub(super) fn commit(&mut self, mut batch: Vec<WriteOp>) {
        let fail_all = |batch: Vec<WriteOp>, what: &str, error: rusqlite::Error| {
            let failure = sql_error(what, error);
            for op in batch {
                op.finish(Err(failure.clone()));
            }
        };
        while !batch.is_empty() {
            if let Err(error) = self.conn.execute_batch("BEGIN IMMEDIATE") {
                return fail_all(batch, "cannot start a write transaction", error);
            }
            // The write lock is held from here on: another process's numbers are final.
            if let Err(error) = self.load_seqs() {
                let _ = self.conn.execute_batch("ROLLBACK");
                return fail_all(batch, "cannot read the sequence numbers", error);
            }
            let first_seq = (self.last_seq, self.change_seq);
            let mut answers = Vec::with_capacity(batch.len());
            let mut aborted = None;
            // Tasks this transaction writes are kept out of the read cache from before its
            // commit becomes visible until after it: a reader never caches, nor is served,
            // a version older than one another reader may already have seen.
            let mut writing: Vec<String> = Vec::new();
            for (n, op) in batch.iter().enumerate() {
                match catch_unwind(AssertUnwindSafe(|| self.apply(op))) {
                    Ok(Ok(answer)) => {
                        match (op, &answer) {
                            (WriteOp::CompareAndSet { row, .. }, _) => writing.push(row.id.clone()),
                            (WriteOp::Delete { id, .. }, _) => writing.push(id.clone()),
                            (_, Answer::Ids(ids)) => writing.extend(ids.iter().cloned()),
                            (_, Answer::Records(records)) => {
                                writing.extend(records.iter().map(|r| r.id.clone()));
                            }
                            _ => {}
                        }
                        answers.push(Ok(answer));
                    }
                    Ok(Err(error)) if self.conn.is_autocommit() => {
                        // SQLite rolled the whole transaction back (I/O error, disk full):
                        // this write fails, the others run again in a new transaction.
                        aborted = Some((n, sql_error("the write failed", error)));
                        break;
                    }
                    Ok(Err(error)) => answers.push(Err(sql_error("the write failed", error))),
                    Err(_) => answers.push(Err(StoreError::backend(
                        "internal error: the write panicked",
                    ))),
                }
            }
            if let Some((n, error)) = aborted {
                batch.remove(n).finish(Err(error));
                continue;
            }
            // A create needs nothing: a missing task is never cached. A lost
            // compare-and-set is marked too: its caller read an older version (another
            // process wrote), so the next read goes to the database.
            for id in &writing {
                self.cache.begin_write(id);
            }
            let committed = self
                .save_seq(first_seq)
                .and_then(|()| self.conn.execute_batch("COMMIT"));
            if committed.is_err() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            for id in &writing {
                self.cache.end_write(id);
            }
            match committed {
                Ok(()) => {
                    for (op, answer) in batch.into_iter().zip(answers) {
                        op.finish(answer);
                    }
                }
                Err(error) => {
                    fail_all(batch, "the commit failed; nothing was written", error);
                }
            }
            return;
        }
    }

    pub(super) fn load_seqs(&mut self) -> rusqlite::Result<()> {
        let mut statement = self.conn.prepare_cached(
            "SELECT (SELECT value FROM meta WHERE key = 'last_seq'), \
                    (SELECT value FROM meta WHERE key = 'change_seq')",
        )?;
        let (last, change) = statement.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        self.last_seq = last;
        self.change_seq = change;
        Ok(())
    }

    pub(super) fn save_seq(&self, (last_seq, change_seq): (i64, i64)) -> rusqlite::Result<()> {
        if self.last_seq != last_seq {
            self.conn
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'last_seq'")?
                .execute([self.last_seq])?;
        }
        if self.change_seq != change_seq {
            self.conn
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'change_seq'")?
                .execute([self.change_seq])?;
        }
        Ok(())
    }

    /// What a create that failed with `error` gets: a constraint the id broke is a
    /// duplicate, one the unique key broke names the unfinished task that holds it.
    fn refused(&self, row: &Row, error: rusqlite::Error) -> rusqlite::Result<Answer> {
        if error.sqlite_error_code() != Some(rusqlite::ErrorCode::ConstraintViolation) {
            return Err(error);
        }
        let exists = self
            .conn
            .prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")?
            .exists([&row.id])?;
        if exists {
            return Ok(Answer::Changed(false));
        }
        let holder: Option<String> = self
            .conn
            .prepare_cached(&format!(
                "SELECT id FROM tasks INDEXED BY tasks_unique_key \
                 WHERE unique_key = ?1 AND unique_key IS NOT NULL AND {UNFINISHED}"
            ))?
            .query_row([&row.unique_key], |r| r.get(0))
            .optional()?;
        match holder {
            Some(holder) => Ok(Answer::Taken(holder)),
            None => Err(error),
        }
    }

    pub(super) fn apply(&mut self, op: &WriteOp) -> rusqlite::Result<Answer> {
        match op {
            WriteOp::Create { row, .. } => {
                let seq = self.last_seq + 1;
                let change = self.change_seq + 1;
                let inserted = self.conn.prepare_cached(INSERT)?.execute(params![
                    row.id,
                    seq,
                    row.owner,
                    row.tool,
                    row.settle,
                    row.status,
                    row.status_message,
                    row.created_at,
                    row.updated_at,
                    row.ttl_ms,
                    row.poll_interval_ms,
                    row.expires_at,
                    row.version,
                    row.input_seq,
                    row.arguments,
                    row.input_requests,
                    row.input_responses,
                    row.outcome,
                    row.client,
                    row.lease_worker,
                    row.lease_until,
                    row.epoch,
                    row.cancel_at,
                    row.cancel_by,
                    change,
                    row.steps,
                    row.unique_key,
                    row.synchronous,
                    row.journal,
                ]);
                let inserted = match inserted {
                    Ok(n) => n == 1,
                    Err(error) => return self.refused(row, error),
                };
                if inserted {
                    self.last_seq = seq;
                    self.change_seq = change;
                }
                Ok(Answer::Changed(inserted))
            }
            WriteOp::CompareAndSet { row, expected, .. } => {
                let change = self.change_seq + 1;
                let updated = self.conn.prepare_cached(UPDATE)?.execute(params![
                    row.id,
                    expected,
                    row.owner,
                    row.tool,
                    row.settle,
                    row.status,
                    row.status_message,
                    row.created_at,
                    row.updated_at,
                    row.ttl_ms,
                    row.poll_interval_ms,
                    row.expires_at,
                    expected.saturating_add(1),
                    row.input_seq,
                    row.arguments,
                    row.input_requests,
                    row.input_responses,
                    row.outcome,
                    row.client,
                    row.lease_worker,
                    row.lease_until,
                    row.epoch,
                    row.cancel_at,
                    row.cancel_by,
                    change,
                    row.steps,
                    row.unique_key,
                    row.synchronous,
                    row.journal,
                ])?;
                if updated == 1 {
                    self.change_seq = change;
                }
                Ok(Answer::Changed(updated == 1))
            }
            WriteOp::Claim {
                worker,
                until,
                limit,
                skip,
                ..
            } => {
                let change = self.change_seq + 1;
                let mut statement = self.conn.prepare_cached(&format!(
                    "UPDATE tasks SET lease_worker = ?1, lease_until = ?2, epoch = epoch + 1, \
                        version = version + 1, change_seq = ?3 \
                     WHERE rowid IN ( \
                        SELECT rowid FROM tasks INDEXED BY tasks_queued \
                        WHERE lease_worker IS NULL AND {UNFINISHED} \
                          AND tool NOT IN (SELECT value FROM json_each(?4)) \
                        ORDER BY seq LIMIT ?5 \
                     ) RETURNING {COLUMNS}"
                ))?;
                let mut rows = statement.query(params![worker, until, change, skip, limit])?;
                let mut claimed = Vec::new();
                while let Some(row) = rows.next()? {
                    match decode(row) {
                        Ok(decoded) => claimed.push(decoded),
                        Err(error) => {
                            tracing::error!(%error, "a claimed task is unreadable");
                        }
                    }
                }
                drop(rows);
                if !claimed.is_empty() {
                    self.change_seq = change;
                }
                claimed.sort_by_key(|(_, seq)| *seq);
                Ok(Answer::Records(
                    claimed.into_iter().map(|(r, _)| r).collect(),
                ))
            }
            WriteOp::Delete { id, .. } => {
                let deleted = self
                    .conn
                    .prepare_cached("DELETE FROM tasks WHERE id = ?1")?
                    .execute([id])?;
                Ok(Answer::Changed(deleted == 1))
            }
            WriteOp::Expire { now, limit, .. } => {
                let mut statement = self.conn.prepare_cached(
                    "DELETE FROM tasks WHERE rowid IN (
                        SELECT rowid FROM tasks INDEXED BY tasks_expires_at
                        WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2
                     ) RETURNING id",
                )?;
                let ids = statement
                    .query_map(params![now, limit], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                Ok(Answer::Ids(ids))
            }
        }
    }
}
