//! A new task's tool, polled once before its create, where running the tool again does no
//! harm (it is declared idempotent, or made of durable steps: a create that fails is
//! answered with an error, and the call sent again runs the tool again). A tool that ends
//! in that poll (a quick tool does) is stored settled: its task costs the store one write,
//! where a create and then an outcome cost two. A tool that does not end goes on as a task
//! whose create was stored first, as any other.
//!
//! Until the create is stored, the store has nothing of the task: what the tool asks of it
//! in that poll (a question, a durable step) waits for the create ([`Engine::until_stored`]),
//! and its progress reaches the client but writes no status message. A create that fails
//! drops the tool's future, as a cancellation that does not wait would.

use super::outcome::{settle, stored_outcome};
use super::run::{Confirmed, Created, Started, ToolResult, ToolRun};
use super::{Engine, NewTask, Run};
use crate::error::Error;
use crate::quota::Ticket;
use crate::run::{CatchUnwind, RunEnd};
use crate::sync::LockExt;
use crate::task::{TaskRecord, TaskStatus};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio_util::sync::CancellationToken;

/// The run of a tool that began before its task was stored, and the span it goes in.
pub(super) struct Begun {
    run: Arc<Run>,
    span: tracing::Span,
}

/// A tool that began in its first poll and did not end, waiting for its task's create.
pub(super) struct Parked {
    begun: Begun,
    future: Mutex<Option<ToolRun>>,
}

impl Parked {
    /// The tool's future, once: whoever takes it runs or stops it.
    fn take(&self) -> Option<ToolRun> {
        self.future.locked().take()
    }
}

impl Engine {
    /// Starts a new task whose tool runs here: a slot is reserved for it, and `record` is
    /// under this process's lease. The tool is polled once before the create; the answer is
    /// the record a new task starts as, `working`, whatever that poll did (a tool that
    /// ended is stored settled, which the next read of the task tells).
    pub(super) async fn start_polled(
        &self,
        new: &NewTask,
        record: TaskRecord,
    ) -> Result<Started, Error> {
        // A call over its requestor's quota starts nothing.
        let ticket = match self.quotas.admit(&new.requestor) {
            Ok(ticket) => ticket,
            Err(e) => {
                self.unreserve(&new.tool.name);
                return Err(e.into());
            }
        };
        let (id, live) = self.live_entry_shared(&record.id, || record.id.as_str().into());
        // Progress in the first poll goes where the task's messages go.
        if let Some(delivery) = &new.delivery {
            live.now.locked().delivery = Some(Arc::clone(delivery));
        }
        drop(live);
        let run = self.begin_run(&new.tool, id, &record, CancellationToken::new());
        run.stored.store(false, Ordering::Release);
        let mut future: ToolRun = CatchUnwind::pinned(self.call_tool(&new.tool, &run, &record));
        let span = self.run_span(&run, &record);
        span.in_scope(|| Self::tool_starts(&run));
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(span.in_scope(|| Pin::new(&mut future).poll(cx)))
        })
        .await;
        let begun = Begun { run, span };
        match first {
            Poll::Ready(end) => self.create_settled(new, record, ticket, begun, end).await,
            Poll::Pending => {
                let parked = Arc::new(Parked {
                    begun,
                    future: Mutex::new(Some(future)),
                });
                self.create_running(new, record, ticket, parked).await
            }
        }
    }

    /// Stores the task of a tool that ended in its first poll, settled. When the store
    /// refuses that, or is out of reach, the task is stored as it started, and its outcome
    /// written after as any run's (which says why, when the store refuses it too).
    async fn create_settled(
        &self,
        new: &NewTask,
        record: TaskRecord,
        ticket: Ticket,
        begun: Begun,
        end: Result<ToolResult, String>,
    ) -> Result<Started, Error> {
        let Begun { run, span } = begun;
        let mut settled = record.clone();
        let outcome = span.in_scope(|| {
            // Nothing can have taken the lease of a task not stored yet.
            let end = self.ended(&run, end).unwrap_or(RunEnd::Cancelled);
            let outcome = stored_outcome(&new.tool, end);
            if settle(&mut settled, &outcome, self.config.min_retention) {
                self.stamp(&mut settled, TaskStatus::Working, true);
            }
            outcome
        });
        run.settling.store(true, Ordering::Release);
        let then = || Confirmed::Stop(new.tool.clone());
        let created = self
            .create_admitted(&settled, ticket, new.delivery.clone(), then(), false)
            .await;
        let created = match created {
            Ok(Created::Stored(_)) => {
                self.mark_stored(&run, true);
                let _in = span.enter();
                self.observe(&settled);
                self.concluded(&run, settled.status.as_str());
                return Ok(Started::Stored(Box::new(record)));
            }
            Err(e) if !matches!(e, Error::TaskOutcomeUnknown { .. }) => {
                tracing::debug!(task = %record.id, error = %e, "the settled task was not stored; storing it as it started");
                let requestor = &new.requestor;
                self.create(&record, requestor, new.delivery.clone(), then(), false)
                    .await
            }
            other => other,
        };
        let stored = matches!(created, Ok(Created::Stored(_)));
        self.mark_stored(&run, stored);
        if !stored {
            let _in = span.enter();
            return Err(self.not_created(&run, created));
        }
        let engine = self.arc();
        let started_from = Some(Box::new(record.clone()));
        super::run::spawn_in(span, async move {
            engine.conclude(&run, Some(outcome), started_from).await;
        });
        Ok(Started::Stored(Box::new(record)))
    }

    /// Stores the task of a tool that goes on after its first poll, then runs it on. When
    /// the create's outcome is unknown, the tool waits, parked, for the create's resolution.
    async fn create_running(
        &self,
        new: &NewTask,
        record: TaskRecord,
        ticket: Ticket,
        parked: Arc<Parked>,
    ) -> Result<Started, Error> {
        let then = Confirmed::Resume(Arc::clone(&parked));
        let created = self
            .create_admitted(&record, ticket, new.delivery.clone(), then, false)
            .await;
        match created {
            Ok(Created::Stored(_)) => {
                self.resume(&parked, record.clone());
                Ok(Started::Stored(Box::new(record)))
            }
            Err(e @ Error::TaskOutcomeUnknown { .. }) => Err(e),
            other => {
                // The tool stops here: its task was not stored.
                drop(parked.take());
                let Begun { run, span } = &parked.begun;
                self.mark_stored(run, false);
                let _in = span.enter();
                Err(self.not_created(run, other))
            }
        }
    }

    /// Runs on the parked tool of a task now stored as `record`.
    pub(super) fn resume(&self, parked: &Parked, record: TaskRecord) {
        let Some(future) = parked.take() else { return };
        let Begun { run, span } = &parked.begun;
        self.mark_stored(run, true);
        self.spawn_run_in(span.clone(), Arc::clone(run), record, future, true);
    }

    /// Stops the parked tool of a task that was not stored, or not under this process's
    /// lease: its run ends and its slot is freed.
    pub(super) fn abandon(&self, parked: &Parked) {
        let Some(future) = parked.take() else { return };
        drop(future);
        let Begun { run, span } = &parked.begun;
        self.mark_stored(run, false);
        let _in = span.enter();
        self.concluded(run, "not stored");
    }

    /// Ends the run of a task whose create did not store it, and says why: the slot is
    /// freed, but for a create whose outcome is unknown, whose resolution takes it over.
    fn not_created(&self, run: &Run, created: Result<Created, Error>) -> Error {
        let error = match created {
            Err(e) => e,
            // A random id and no unique key: nothing can be in the way.
            Ok(_) => Error::Internal("a new task's random id is taken".into()),
        };
        if matches!(error, Error::TaskOutcomeUnknown { .. }) {
            self.closed(run, "not known to be stored");
        } else {
            self.concluded(run, "not stored");
        }
        error
    }

    /// Says whether a run's task was stored (else its run is lost), and wakes what its tool
    /// asked of the store meanwhile.
    fn mark_stored(&self, run: &Run, stored: bool) {
        if stored {
            run.stored.store(true, Ordering::Release);
        } else {
            run.lost.store(true, Ordering::Release);
        }
        self.stored_wake.notify_waiters();
    }

    /// Waits until the task of `run` is stored, or will not be (its run is lost): what a
    /// tool asks of the store in its first poll goes after the create.
    pub(super) async fn until_stored(&self, run: &Run) {
        let ready = || run.stored.load(Ordering::Acquire) || run.lost.load(Ordering::Acquire);
        while !ready() {
            let notified = self.stored_wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if ready() {
                return;
            }
            notified.await;
        }
    }
}
