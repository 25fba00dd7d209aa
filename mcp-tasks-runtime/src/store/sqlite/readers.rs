//! The reader threads and their job queue.

use crate::sync::LockExt;
use rusqlite::Connection;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};

pub(super) type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// The most jobs a reader takes from the queue at once.
pub(super) const READ_BATCH: usize = 8;

/// The queue the reader threads serve. Pushing a job makes no system call unless a reader
/// is asleep, and a busy reader takes several jobs per lock.
#[derive(Default)]
pub(super) struct ReadQueue {
    state: Mutex<ReadState>,
    ready: Condvar,
}

#[derive(Default)]
pub(super) struct ReadState {
    jobs: VecDeque<ReadJob>,
    /// Readers waiting on `ready`.
    idle: usize,
    closed: bool,
}

impl ReadQueue {
    pub(super) fn lock(&self) -> MutexGuard<'_, ReadState> {
        self.state.locked()
    }

    /// Queues a job; `false` once the queue is closed.
    pub(super) fn push(&self, job: ReadJob) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        state.jobs.push_back(job);
        let wake = state.idle > 0;
        drop(state);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// Makes the readers exit once the queue is empty.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// A reader thread: runs jobs until the queue is closed and empty.
    pub(super) fn serve(&self, conn: &Connection) {
        let mut batch = Vec::with_capacity(READ_BATCH);
        loop {
            {
                let mut state = self.lock();
                while state.jobs.is_empty() {
                    if state.closed {
                        return;
                    }
                    state.idle += 1;
                    state = crate::sync::wait(&self.ready, state);
                    state.idle -= 1;
                }
                let take = state.jobs.len().min(READ_BATCH);
                batch.extend(state.jobs.drain(..take));
                if !state.jobs.is_empty() && state.idle > 0 {
                    self.ready.notify_one();
                }
            }
            for job in batch.drain(..) {
                // A panic drops the job's answer channel, which its caller sees as an
                // error; the thread keeps serving.
                let _ = catch_unwind(AssertUnwindSafe(|| job(conn)));
            }
        }
    }
}
