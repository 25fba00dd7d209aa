//! One 2025-11-25 session over HTTP: its stream logs, its activity, and its place in the
//! session table (see [`super::sessions`]).

use super::sessions::Owner;
use super::sse::EventLog;
use super::{App, sessions};
use crate::principal::Principal;
use crate::router::Session;
use crate::sync::LockExt;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Finished request streams kept per session for resumption, beyond the live ones.
pub(super) const FINISHED_STREAMS_KEPT: usize = 32;

/// A 2025-11-25 session over HTTP.
pub(super) struct HttpSession {
    pub(super) session: Session,
    pub(super) version: &'static str,
    /// The priming event of its streams (their reconnection delay), if its version has one.
    pub(super) priming: Option<Duration>,
    pub(super) streams: Mutex<Streams>,
    /// Fires when the session ends; stops its GET stream and its outbound pump.
    pub(super) closed: CancellationToken,
    /// Requests running and streams open; a session with none is idle.
    pub(super) active: AtomicUsize,
    /// Milliseconds from `epoch` to the last use.
    pub(super) last_seen: AtomicU64,
    /// The value of [`SESSION_USES`] at the last use.
    pub(super) recency: AtomicU64,
    pub(super) epoch: Instant,
}

/// Counts the uses of every session, to order them exactly by their last use.
pub(super) static SESSION_USES: AtomicU64 = AtomicU64::new(0);

/// The stream logs of a session: number 0 is the GET stream, the others belong to POSTs.
pub(super) struct Streams {
    pub(super) next: u64,
    pub(super) logs: HashMap<u64, Arc<EventLog>>,
    pub(super) finished: VecDeque<u64>,
}

/// Counts one activity on a session for as long as it lives.
pub(super) struct Active(Arc<HttpSession>);

impl Active {
    pub(super) fn new(session: &Arc<HttpSession>) -> Self {
        session.active.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(session))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        sessions::Slot::touch(&*self.0, Instant::now());
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl sessions::Slot for HttpSession {
    fn busy(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    fn last_seen(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_seen.load(Ordering::Relaxed))
    }

    fn recency(&self) -> u64 {
        self.recency.load(Ordering::Relaxed)
    }

    fn touch(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis());
        self.last_seen
            .store(ms.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.recency.store(
            SESSION_USES.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    fn end(&self) {
        HttpSession::end(self);
    }
}

impl App {
    /// The session with this id, if it exists and belongs to `principal`; `used` when this
    /// is a request (not a notification or a response).
    pub(super) fn session(
        &self,
        id: &str,
        principal: Option<&Principal>,
        used: bool,
    ) -> Option<Arc<HttpSession>> {
        let owner = principal.map(|p| p.owner_name().to_owned());
        self.sessions.locked().get(id, &owner, used, Instant::now())
    }

    /// Registers a new session, making room as [`sessions`] says.
    pub(super) fn register(
        &self,
        session: Arc<HttpSession>,
        principal: Option<&Principal>,
        client: Option<std::net::IpAddr>,
    ) -> Result<String, sessions::Full> {
        let principal = principal.map(|p| p.owner_name().to_owned());
        let owner = Owner::of(principal.as_deref(), client);
        self.sessions
            .locked()
            .insert(session, principal, owner, Instant::now())
    }

    pub(super) fn remove(&self, id: &str) -> Option<Arc<HttpSession>> {
        self.sessions.locked().remove(id)
    }
}

impl HttpSession {
    pub(super) fn end(&self) {
        self.closed.cancel();
        self.session.close();
    }

    pub(super) fn log(&self, id: u64) -> Option<Arc<EventLog>> {
        self.streams.locked().logs.get(&id).cloned()
    }

    /// Opens the log of a new POST stream.
    pub(super) fn new_stream(&self, capacity: usize) -> Arc<EventLog> {
        let mut streams = self.streams.locked();
        let id = streams.next;
        streams.next += 1;
        let log = Arc::new(EventLog::new(id, capacity));
        streams.logs.insert(id, Arc::clone(&log));
        log
    }

    /// Keeps a finished POST stream for resumption, dropping the oldest finished ones.
    pub(super) fn stream_finished(&self, id: u64) {
        let mut streams = self.streams.locked();
        streams.finished.push_back(id);
        while streams.finished.len() > FINISHED_STREAMS_KEPT {
            if let Some(old) = streams.finished.pop_front() {
                streams.logs.remove(&old);
            }
        }
    }
}
