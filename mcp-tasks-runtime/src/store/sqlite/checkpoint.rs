//! The checkpointer thread.

use rusqlite::Connection;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the checkpointer rests between checkpoints, so that while writes keep coming
/// the database file is synced a few times a second rather than after every commit.
pub(super) const CHECKPOINT_PAUSE: Duration = Duration::from_millis(100);

/// The checkpointer thread: after commits, copies the log into the database file
/// (`PRAGMA wal_checkpoint(PASSIVE)`, which never blocks the writer or the readers), at
/// most once per [`CHECKPOINT_PAUSE`]. Exits when the writer is gone.
pub(super) fn run_checkpointer(conn: &Connection, kicks: &mpsc::Receiver<()>) {
    let mut due = kicks.recv().is_ok();
    while due {
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "task store checkpoint failed");
        }
        // Rest, remembering whether more commits came meanwhile.
        let rested = Instant::now() + CHECKPOINT_PAUSE;
        due = false;
        loop {
            match kicks.recv_timeout(rested.saturating_duration_since(Instant::now())) {
                Ok(()) => due = true,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        if !due {
            due = kicks.recv().is_ok();
        }
    }
}
