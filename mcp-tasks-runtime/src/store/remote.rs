//! What the stores on a server (PostgreSQL, Redis) share: how they name themselves in
//! errors, the bound on every call to the server, the background listener's start,
//! backoff and shutdown, and reading a change feed to its end.

use super::StoreError;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// Runs `future` with a time limit.
pub(super) async fn within<F: Future>(limit: Duration, future: F) -> Result<F::Output, ()> {
    tokio::time::timeout(limit, future).await.map_err(|_| ())
}

/// A store on a server, as its messages name it: `the Redis task store LABEL: …`.
#[derive(Clone, Debug)]
pub(super) struct Remote {
    /// The server's kind: `PostgreSQL`, `Redis`.
    server: &'static str,
    /// Where the store is, without credentials.
    label: String,
}

/// How a call that got no answer in time fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Late {
    /// Nothing was applied: it never reached the server, or it was a read.
    Unavailable,
    /// A write was sent and may have been applied.
    Ambiguous,
}

impl Remote {
    /// The store on a `server` (its kind) at `label`.
    pub(super) fn new(server: &'static str, label: String) -> Self {
        Self { server, label }
    }

    /// Where the store is, without credentials.
    pub(super) fn label(&self) -> &str {
        &self.label
    }

    /// A call that got no answer within `limit`, in words.
    pub(super) fn timed_out(&self, limit: Duration) -> String {
        format!(
            "no answer from {} within {limit:?} (is the server up and reachable?)",
            self.server
        )
    }

    /// `problem`, a failure of the store (see [`StoreError::Backend`]).
    pub(super) fn error(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::backend(self.name(problem))
    }

    /// `problem`, a failure of the store that the server's error `source` caused.
    pub(super) fn error_from(
        &self,
        problem: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::backend_caused_by(self.name(problem), source)
    }

    /// `problem`: the server is out of reach (see [`StoreError::Unavailable`]).
    pub(super) fn unavailable(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Unavailable(self.name(problem))
    }

    /// `problem`: a write's answer was lost (see [`StoreError::Ambiguous`]).
    pub(super) fn ambiguous(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Ambiguous(self.name(problem))
    }

    /// `problem`, the reason the store cannot be opened.
    pub(super) fn cannot_open(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::backend(format!("cannot open {}", self.name(problem)))
    }

    /// [`cannot_open`](Self::cannot_open), caused by the server's error `source`.
    pub(super) fn cannot_open_from(
        &self,
        problem: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::backend_caused_by(format!("cannot open {}", self.name(problem)), source)
    }

    /// Runs the call `what` (`attempt`) within `limit`, so that a server that does not
    /// answer fails the call in bounded time instead of hanging it: as `late` says, once the
    /// time is up.
    pub(super) async fn bounded<T>(
        &self,
        what: &str,
        limit: Duration,
        attempt: impl Future<Output = Result<T, StoreError>>,
        late: impl FnOnce() -> Late,
    ) -> Result<T, StoreError> {
        match within(limit, attempt).await {
            Ok(result) => result,
            Err(()) => {
                let problem = format!("{what}: {}", self.timed_out(limit));
                Err(match late() {
                    Late::Unavailable => self.unavailable(problem),
                    Late::Ambiguous => self.ambiguous(problem),
                })
            }
        }
    }

    /// Runs `call` within `limit`; fails with its error in words (`describe`), or with the
    /// timeout.
    pub(super) async fn answer<T, E>(
        &self,
        limit: Duration,
        call: impl Future<Output = Result<T, E>>,
        describe: impl FnOnce(&E) -> String,
    ) -> Result<T, String> {
        within(limit, call)
            .await
            .map_err(|()| self.timed_out(limit))?
            .map_err(|e| describe(&e))
    }

    /// `the Redis task store LABEL: PROBLEM`.
    fn name(&self, problem: impl fmt::Display) -> String {
        format!("the {} task store {}: {problem}", self.server, self.label)
    }
}

/// The end of a store's background tasks: set once, when the store is dropped.
#[derive(Debug, Default)]
pub(super) struct Closing {
    closed: AtomicBool,
    notify: Notify,
}

impl Closing {
    /// Ends the background tasks: they see [`is_closed`](Self::is_closed), and the ones
    /// waiting in [`notified`](Self::notified) wake.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the store was closed.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Resolves when the store closes after this call.
    pub(super) async fn notified(&self) {
        self.notify.notified().await;
    }
}

/// The wait of a listener between two attempts to connect: 50 ms at first, doubled after
/// each wait, at most 2 s.
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MOST: Duration = Duration::from_secs(2);

    /// A backoff at its first, shortest wait.
    pub(super) fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// Back to the shortest wait, after a connection that came up.
    pub(super) fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    /// Waits for the next attempt, or until the store closes.
    pub(super) async fn wait(&mut self, closing: &Closing) {
        tokio::select! {
            () = tokio::time::sleep(self.next) => {}
            () = closing.notified() => {}
        }
        self.next = (self.next * 2).min(Self::MOST);
    }
}

/// A listener's report of its first connection, which [`start_listener`] waits for.
#[derive(Debug)]
pub(super) struct Ready(Option<oneshot::Sender<Result<(), String>>>);

impl Ready {
    /// Whether the first connection is still to come.
    pub(super) fn is_pending(&self) -> bool {
        self.0.is_some()
    }

    /// Reports the first connection up; `false` when it was reported before (this is a
    /// reconnection).
    pub(super) fn up(&mut self) -> bool {
        match self.0.take() {
            Some(ready) => {
                let _ = ready.send(Ok(()));
                true
            }
            None => false,
        }
    }

    /// Reports that the first connection failed: the store fails to open, and the
    /// listener is to end.
    pub(super) fn fail(&mut self, problem: String) {
        if let Some(ready) = self.0.take() {
            let _ = ready.send(Err(problem));
        }
    }
}

/// Spawns a store's listener (`listen`) and waits, within `limit`, until its first
/// connection is up, so that the store is handed out listening. Fails with the listener's
/// problem, or with the timeout.
pub(super) async fn start_listener<F>(
    remote: &Remote,
    limit: Duration,
    listen: impl FnOnce(Ready) -> F,
) -> Result<(), String>
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ready, up) = oneshot::channel();
    tokio::spawn(listen(Ready(Some(ready))));
    match within(limit, up).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(problem))) => Err(problem),
        _ => Err(remote.timed_out(limit)),
    }
}

/// Reads a change feed from `cursor` to its end, a page at a time, and hands each page to
/// `keep`. `read` returns the entries after a cursor (at most `page` of them) and the cursor
/// after them, or `None` when the feed no longer reaches back to that cursor; a page
/// shorter than `page` is the last. Returns how many entries were read, or `None` when the
/// feed did not reach back, or when more than `most` entries were read (writes outpace the
/// reading).
pub(super) async fn read_feed<C, T, E, F, Fut>(
    mut cursor: C,
    page: usize,
    most: usize,
    mut read: F,
    mut keep: impl FnMut(Vec<T>),
) -> Result<Option<usize>, E>
where
    F: FnMut(C) -> Fut,
    Fut: Future<Output = Result<Option<(Vec<T>, C)>, E>>,
{
    let mut total = 0;
    loop {
        let Some((entries, next)) = read(cursor).await? else {
            return Ok(None);
        };
        if total > most {
            return Ok(None);
        }
        let full = entries.len() >= page;
        total += entries.len();
        keep(entries);
        cursor = next;
        if !full {
            return Ok(Some(total));
        }
    }
}
