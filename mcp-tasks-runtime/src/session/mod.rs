//! One client connection: its protocol era, its outbound messages, its in-flight requests
//! and the server-to-client requests waiting for an answer.

use crate::jsonrpc::{ErrorObject, Notification, Request, RequestId, Response};
use crate::model::LogLevel;
use crate::sync::{LockExt, Opener};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How many outbound messages one connection (or one response stream of it) holds for a
/// client that has not read them yet, unless the server sets another number with
/// [`ServerBuilder::outbound_capacity`](crate::ServerBuilder::outbound_capacity): 1024.
///
/// Past it the server applies backpressure instead of growing without bound. Messages that
/// must not be lost (responses, server-to-client requests such as elicitation or sampling,
/// subscription acknowledgements and the task notifications of `subscriptions/listen`) wait
/// for room, or for the peer to go away. Messages a client can do without, because the
/// spec's semantics let it catch up, do not wait:
///
/// - progress notifications and the `notifications/tasks/status` a client can re-read with
///   `tasks/get` are coalesced while the channel is full: the latest of each progress token
///   and of each task is held back and sent as soon as there is room, the ones it replaced
///   are dropped. So a client that catches up sees every token's and every task's latest
///   state, never a stale one, and in order. A request's held progress goes before its
///   response or, where the channel is still full then, is dropped: no progress follows its
///   request's response.
/// - log messages are dropped while the channel is full.
///
/// [`Session::dropped_notifications`](crate::Session::dropped_notifications) counts what was
/// dropped, and the first time the channel is full in each burst is logged.
pub const OUTBOUND_CAPACITY: usize = 1024;

/// The outbound channel of one connection (or of one response stream), bounded by
/// `capacity` (the server's, [`OUTBOUND_CAPACITY`] by default).
pub(crate) fn outbound_channel(capacity: usize) -> (mpsc::Sender<String>, mpsc::Receiver<String>) {
    mpsc::channel(capacity.max(1))
}

/// The most spare request streams a server keeps ([`SpareStreams`]).
#[cfg(feature = "http")]
const MAX_SPARE_STREAMS: usize = 64;

/// Request streams kept for the next request. Over HTTP every request has a stream of its
/// own for the messages it sends before its response, and most send none: a stream that
/// ended empty, with no sender left but the one kept beside its receiver, can carry nothing
/// of the request before, and making a channel is a fair part of a short request's cost.
#[cfg(feature = "http")]
#[derive(Debug)]
pub(crate) struct SpareStreams {
    /// The capacity of every stream ([`outbound_channel`]).
    capacity: usize,
    idle: Mutex<Vec<(mpsc::Sender<String>, mpsc::Receiver<String>)>>,
}

#[cfg(feature = "http")]
impl SpareStreams {
    /// No spare streams yet; each made will hold `capacity` messages.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A stream for one request: a spare one, else a new one.
    pub(crate) fn take(self: &Arc<Self>) -> RequestStream {
        let spare = self.idle.locked().pop();
        RequestStream {
            channel: Some(spare.unwrap_or_else(|| outbound_channel(self.capacity))),
            spares: Arc::clone(self),
        }
    }
}

/// The receiving end of one request's stream. Dropped, the stream becomes a spare if it is
/// as good as new: empty, and no sender left but the one kept here.
#[cfg(feature = "http")]
#[derive(Debug)]
pub(crate) struct RequestStream {
    /// The receiver, and a sender kept so that the channel stays open for the next request
    /// (it never sends); taken only when the stream is dropped.
    channel: Option<(mpsc::Sender<String>, mpsc::Receiver<String>)>,
    spares: Arc<SpareStreams>,
}

#[cfg(feature = "http")]
impl RequestStream {
    fn channel(&self) -> &(mpsc::Sender<String>, mpsc::Receiver<String>) {
        self.channel.as_ref().expect("taken only when dropped")
    }

    fn channel_mut(&mut self) -> &mut (mpsc::Sender<String>, mpsc::Receiver<String>) {
        self.channel.as_mut().expect("taken only when dropped")
    }

    /// A sender on this stream, for the request.
    pub(crate) fn sender(&self) -> mpsc::Sender<String> {
        self.channel().0.clone()
    }
}

#[cfg(feature = "http")]
impl std::ops::Deref for RequestStream {
    type Target = mpsc::Receiver<String>;

    fn deref(&self) -> &mpsc::Receiver<String> {
        &self.channel().1
    }
}

#[cfg(feature = "http")]
impl std::ops::DerefMut for RequestStream {
    fn deref_mut(&mut self) -> &mut mpsc::Receiver<String> {
        &mut self.channel_mut().1
    }
}

#[cfg(feature = "http")]
impl Drop for RequestStream {
    fn drop(&mut self) {
        let Some((kept, rx)) = self.channel.take() else {
            return;
        };
        // With no other sender, none can be made: nothing of this request can reach the
        // next one.
        if kept.strong_count() != 1 || !rx.is_empty() || rx.is_closed() {
            return;
        }
        let mut idle = self.spares.idle.locked();
        if idle.len() < MAX_SPARE_STREAMS {
            idle.push((kept, rx));
        }
    }
}

/// Where outbound messages for one request (or one connection) are written.
///
/// Every sink of a connection shares the connection's `closed` token, which bounds every
/// wait for room, and its count of dropped notifications.
#[derive(Clone, Debug)]
pub(crate) struct Sink {
    tx: mpsc::Sender<String>,
    closed: CancellationToken,
    dropped: Arc<Dropped>,
    /// The coalesced notifications held back for this channel.
    held: Arc<Mutex<Held>>,
}

/// The latest coalesced notification of each key (a progress token, a task) that did not
/// fit in the channel yet.
#[derive(Debug, Default)]
struct Held {
    /// Key and message text, in the order their keys were first held.
    latest: VecDeque<(String, String)>,
    /// `true` while a task sends them as room appears.
    flushing: bool,
}

/// The coalescing key ([`Sink::notify_latest`]) of a progress token's notifications.
pub(crate) fn progress_key(token: &Value) -> String {
    format!("progress:{token}")
}

/// The notifications a connection dropped because its client did not read them.
#[derive(Debug, Default)]
struct Dropped {
    /// Every drop since the connection opened.
    total: AtomicU64,
    /// `true` while the channel is full: the first time in a burst was logged, the rest
    /// are not.
    in_burst: AtomicBool,
}

impl Sink {
    /// A sink of its own (a connection's), with a fresh `closed` token and drop count.
    pub(crate) fn new(tx: mpsc::Sender<String>) -> Self {
        Self {
            tx,
            closed: CancellationToken::new(),
            dropped: Arc::default(),
            held: Arc::default(),
        }
    }

    /// A sink on another channel (a response stream) of the same connection: it shares
    /// this sink's `closed` token and drop count.
    pub(crate) fn beside(&self, tx: mpsc::Sender<String>) -> Self {
        Self {
            tx,
            closed: self.closed.clone(),
            dropped: Arc::clone(&self.dropped),
            held: Arc::default(),
        }
    }

    /// Sends a message that must not be lost, waiting for room while the client is slow to
    /// read. `false` when the message could not be sent: the channel's reader is gone, or
    /// the connection closed while waiting (no wait outlives the peer).
    pub(crate) async fn send_text(&self, text: String) -> bool {
        tokio::select! {
            // Room (or a closed channel) wins over a closed connection: what can still be
            // queued is queued, as before the connection closed.
            biased;
            sent = self.tx.send(text) => sent.is_ok(),
            () = self.closed.cancelled() => false,
        }
    }

    /// [`Sink::send_text`] of a JSON message.
    pub(crate) async fn send(&self, message: &Value) -> bool {
        self.send_text(message.to_string()).await
    }

    /// Sends a notification that must not be lost (see [`Sink::send_text`]).
    pub(crate) async fn notify(&self, method: &str, params: Value) -> bool {
        self.send_text(Notification::new(method, params).to_json())
            .await
    }

    /// Sends a notification the client can do without (a log line), never waiting: while
    /// the channel is full it is dropped and counted, and the first time in a burst is
    /// logged; see [`OUTBOUND_CAPACITY`]. `true` when it was queued.
    pub(crate) fn notify_droppable(&self, method: &str, params: Value) -> bool {
        match self
            .tx
            .try_send(Notification::new(method, params).to_json())
        {
            Ok(()) => {
                self.caught_up();
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.full(method);
                self.lost();
                false
            }
            // The client went away; there is nobody left to tell.
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Sends a notification whose latest of each `key` is all the client needs (progress of
    /// a token, the status of a task), never waiting: while the channel is full the latest
    /// of each key is held back, replacing the one before, and goes as soon as there is
    /// room, oldest key first; see [`OUTBOUND_CAPACITY`]. `true` when it was queued or held.
    pub(crate) fn notify_latest(&self, key: String, method: &str, params: Value) -> bool {
        let text = Notification::new(method, params).to_json();
        let mut held = self.held.locked();
        if !held.flushing {
            // Held back where no runtime could send them later: they go first, if they fit.
            while let Some((waiting, text)) = held.latest.pop_front() {
                match self.tx.try_send(text) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(text)) => {
                        held.latest.push_front((waiting, text));
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => held.latest.clear(),
                }
            }
        }
        // Held back already: the newer one takes its place (and keeps its order).
        if let Some((_, waiting)) = held.latest.iter_mut().find(|(k, _)| *k == key) {
            *waiting = text;
            drop(held);
            self.lost();
            return true;
        }
        match self.tx.try_send(text) {
            Ok(()) => {
                if held.latest.is_empty() {
                    drop(held);
                    self.caught_up();
                }
                true
            }
            Err(mpsc::error::TrySendError::Full(text)) => {
                self.full(method);
                // Bounded like a channel of the default capacity, whatever the clients send.
                if held.latest.len() >= OUTBOUND_CAPACITY {
                    drop(held);
                    self.lost();
                    return false;
                }
                held.latest.push_back((key, text));
                if !held.flushing
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    held.flushing = true;
                    runtime.spawn(self.clone().flush_held());
                }
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Sends what is held back, oldest key first, as room appears; ends once nothing is
    /// held, the reader is gone or the connection closed.
    async fn flush_held(self) {
        loop {
            let permit = tokio::select! {
                biased;
                permit = self.tx.reserve() => permit.ok(),
                () = self.closed.cancelled() => None,
            };
            let mut held = self.held.locked();
            let Some(permit) = permit else {
                // Nobody is left to read them.
                held.latest.clear();
                held.flushing = false;
                return;
            };
            // Sent under the lock, so that a request settling its progress finds it either
            // held or already queued, never on its way.
            if let Some((_, text)) = held.latest.pop_front() {
                permit.send(text);
            }
            if held.latest.is_empty() {
                held.flushing = false;
                drop(held);
                self.caught_up();
                return;
            }
        }
    }

    /// The last word of `key` (a request's progress token, as its request ends): what is
    /// held back for it goes now if there is room, and is dropped if not, so that nothing of
    /// it follows.
    pub(crate) fn settle(&self, key: &str) {
        let mut held = self.held.locked();
        let Some(at) = held.latest.iter().position(|(k, _)| k == key) else {
            return;
        };
        let Some((_, text)) = held.latest.remove(at) else {
            return;
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(text) {
            drop(held);
            self.lost();
        }
    }

    /// The channel had room for a droppable notification: a burst of full channel is over.
    fn caught_up(&self) {
        if self.dropped.in_burst.swap(false, Ordering::AcqRel) {
            tracing::debug!(
                dropped = self.dropped.total.load(Ordering::Relaxed),
                "the client reads its notifications again"
            );
        }
    }

    /// The channel is full: the first time in a burst, say so.
    fn full(&self, method: &str) {
        if !self.dropped.in_burst.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                method,
                capacity = self.tx.max_capacity(),
                dropped = self.dropped.total.load(Ordering::Relaxed),
                "the client is not reading its messages: until it catches up, only the latest \
                 progress of each token and status of each task is kept for it, and log \
                 messages are dropped"
            );
        }
    }

    /// A droppable notification will never be sent (a newer one took its place, or the
    /// channel was full).
    pub(crate) fn lost(&self) {
        self.dropped.total.fetch_add(1, Ordering::Relaxed);
    }

    /// `true` once the channel's reader is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves once the channel's reader is gone.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// How many notifications the connection dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.total.load(Ordering::Relaxed)
    }
}

/// The protocol era of a connection, once a message decided it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Era {
    /// 2025-11-25 (or an older stateful revision), fixed at `initialize`.
    Stateful(StatefulState),
    /// 2026-07-28: every request carries its own version and capabilities.
    Stateless,
}

/// What `initialize` fixed for a stateful connection.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StatefulState {
    pub(crate) version: &'static str,
    pub(crate) client_capabilities: Arc<Value>,
}

/// A client connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The connection's id, which owns its tasks when it has no principal (stateful era);
    /// drawn when first needed, so a stateless request never pays for it.
    id: OnceLock<String>,
    /// The owner of the tasks it creates (see [`Connection::task_owner`]), written once.
    owner: OnceLock<String>,
    /// The authenticated principal of every request on this connection, if any.
    pub(crate) principal: Option<Arc<crate::principal::Principal>>,
    /// Who the tasks of an anonymous connection are charged to, as its transport named the
    /// client (over HTTP, its address); `None` charges them to the connection itself.
    requestor: Option<Arc<str>>,
    /// Written once, by the message that decides it; read lock-free by every later one.
    era: OnceLock<Era>,
    pub(crate) sink: Sink,
    log_level: AtomicU8,
    next_out_id: AtomicU64,
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>>,
    inflight: Mutex<InFlight>,
    /// Fires when the connection closes; every request token is a child of it (or, on a
    /// connection made for one request, is it).
    closed: CancellationToken,
    /// Made for one request (a 2026-07-28 request over HTTP): that request's cancellation is
    /// the connection's.
    one_request: bool,
    /// The resource URIs this (2025-11-25) connection subscribed to.
    pub(crate) subscriptions: Mutex<std::collections::BTreeSet<String>>,
    /// How many clients read the connection's own stream now: always one on a
    /// single-stream transport (stdio); over HTTP the open GET streams.
    listeners: std::sync::atomic::AtomicUsize,
    /// Gates that open once the reply to a request is written (see [`Connection::after_reply`]).
    after_reply: Mutex<HashMap<RequestId, Vec<Opener>>>,
    /// What its transport tells about it, for the spans of its requests.
    wire: OnceLock<crate::spans::Wire>,
}

const LOG_OFF: u8 = u8::MAX;

tokio::task_local! {
    /// The principal a transport authenticated for the request being handled.
    static REQUEST_PRINCIPAL: Option<Arc<crate::principal::Principal>>;
}

/// Runs `future` (the handling of one request) as made by `principal`: see
/// [`Connection::caller`].
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn as_caller<F: std::future::Future>(
    principal: Option<Arc<crate::principal::Principal>>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    REQUEST_PRINCIPAL.scope(principal, future)
}

fn level_code(level: LogLevel) -> u8 {
    level as u8
}

impl Connection {
    /// A connection whose era its first message decides.
    pub(crate) fn new(
        sink: Sink,
        principal: Option<Arc<crate::principal::Principal>>,
        requestor: Option<Arc<str>>,
    ) -> Arc<Self> {
        Arc::new(Self::build(sink, principal, requestor, false))
    }

    /// A 2026-07-28 connection made for one request, whose messages all go to `sink` (the
    /// request's own stream): the request's cancellation token is the connection's own, so
    /// it costs no token and no entry of its own.
    #[cfg(feature = "http")]
    pub(crate) fn for_request(
        sink: Sink,
        principal: Option<Arc<crate::principal::Principal>>,
        requestor: Option<Arc<str>>,
    ) -> Arc<Self> {
        Arc::new(Self::build(sink, principal, requestor, true))
    }

    /// A connection; one made for one request is of the 2026-07-28 era from the start.
    fn build(
        sink: Sink,
        principal: Option<Arc<crate::principal::Principal>>,
        requestor: Option<Arc<str>>,
        one_request: bool,
    ) -> Self {
        Self {
            id: OnceLock::new(),
            owner: OnceLock::new(),
            principal,
            requestor,
            closed: sink.closed.clone(),
            sink,
            era: if one_request {
                OnceLock::from(Era::Stateless)
            } else {
                OnceLock::new()
            },
            log_level: AtomicU8::new(level_code(LogLevel::Info)),
            next_out_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            inflight: Mutex::new(InFlight::default()),
            one_request,
            subscriptions: Mutex::new(Default::default()),
            listeners: std::sync::atomic::AtomicUsize::new(1),
            after_reply: Mutex::new(HashMap::new()),
            wire: OnceLock::new(),
        }
    }

    /// A cancellation token for a new request: a child of the connection's, or the
    /// connection's own on a connection made for one request.
    fn request_token(&self) -> CancellationToken {
        if self.one_request {
            self.closed.clone()
        } else {
            self.closed.child_token()
        }
    }

    /// Holds `opener` until the reply to request `id` is written (or the request ends
    /// unanswered), so that its gate opens only then.
    pub(crate) fn after_reply(&self, id: &RequestId, opener: Opener) {
        self.after_reply
            .locked()
            .entry(id.clone())
            .or_default()
            .push(opener);
    }

    /// The openers held for the reply to request `id` (see [`Connection::after_reply`]).
    pub(crate) fn take_after_reply(&self, id: &RequestId) -> Vec<Opener> {
        let mut held = self.after_reply.locked();
        // Most requests hold none: no id to hash then.
        if held.is_empty() {
            return Vec::new();
        }
        held.remove(id).unwrap_or_default()
    }

    /// `true` once the connection closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Whether a client reads the connection's own stream now.
    pub(crate) fn is_listening(&self) -> bool {
        self.listeners.load(Ordering::Acquire) > 0
    }

    /// Counts a reader of the connection's own stream in (`true`) or out (`false`). A
    /// transport whose own stream is read only some of the time (HTTP's GET stream) starts
    /// by counting the default reader out.
    #[cfg(feature = "http")]
    pub(crate) fn listen(&self, listening: bool) {
        if listening {
            self.listeners.fetch_add(1, Ordering::AcqRel);
        } else {
            let _ = self
                .listeners
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
    }

    /// Who owns the tasks this connection creates: its principal in either era; else, in the
    /// stateful era, the session itself; else nobody (the task id is a bearer handle).
    pub(crate) fn task_owner(&self, stateful: bool) -> Option<&str> {
        // The principal is the connection's for its whole life, so whichever of the first
        // two arms comes first names the owner for good.
        let owner = match (&self.principal, stateful) {
            (Some(p), _) => self
                .owner
                .get_or_init(|| format!("principal:{}", p.owner_name())),
            (None, true) => self
                .owner
                .get_or_init(|| format!("session:{}", self.id.get_or_init(session_key))),
            (None, false) => return None,
        };
        Some(owner)
    }

    /// Who the tasks this connection creates are charged to, for the per-requestor quotas:
    /// its principal; else the anonymous client its transport named; else the connection
    /// itself (a stdio client).
    pub(crate) fn requestor(&self) -> String {
        match (&self.principal, &self.requestor) {
            (Some(p), _) => format!("principal:{}", p.owner_name()),
            (None, Some(r)) => format!("anonymous:{r}"),
            (None, None) => format!("connection:{}", self.id.get_or_init(session_key)),
        }
    }

    /// What a task this connection creates keeps of its principal.
    pub(crate) fn task_principal(&self) -> Option<Arc<crate::principal::Principal>> {
        self.caller().as_deref().map(|p| Arc::new(p.for_record()))
    }

    /// Refuses a call of `tool` when the connection's principal lacks a scope it needs.
    pub(crate) fn check_scopes(&self, tool: &crate::tool::Tool) -> Result<(), crate::error::Error> {
        tool.check_caller(self.caller().as_deref())
    }

    /// The principal of the request being handled: the one its transport authenticated for
    /// this request ([`as_caller`]), else the connection's. A 2025-11-25 session keeps the
    /// principal of its `initialize`, but each later request is checked with its own
    /// credentials (same owner, maybe fewer scopes).
    pub(crate) fn caller(&self) -> Option<Arc<crate::principal::Principal>> {
        REQUEST_PRINCIPAL
            .try_with(Clone::clone)
            .ok()
            .flatten()
            .or_else(|| self.principal.clone())
    }

    /// What the connection's transport told about it, if anything.
    pub(crate) fn wire(&self) -> Option<&crate::spans::Wire> {
        self.wire.get()
    }

    /// Records what the transport tells about the connection (once; later calls are
    /// ignored).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn set_wire(&self, wire: crate::spans::Wire) {
        let _ = self.wire.set(wire);
    }

    /// The connection's era; `None` until a message decides it.
    pub(crate) fn era(&self) -> Option<&Era> {
        self.era.get()
    }

    /// Fixes the connection's era; `false` when a message already did.
    pub(crate) fn decide(&self, era: Era) -> bool {
        self.era.set(era).is_ok()
    }

    pub(crate) fn set_log_level(&self, level: LogLevel) {
        self.log_level.store(level_code(level), Ordering::Relaxed);
    }

    /// `true` when a log line of this level should reach the client (stateful era).
    pub(crate) fn wants_log(&self, level: LogLevel) -> bool {
        let min = self.log_level.load(Ordering::Relaxed);
        min != LOG_OFF && level_code(level) >= min
    }

    /// Registers a request as in flight under its id until the returned guard is dropped, so
    /// that `notifications/cancelled` can reach it; `None` when a request with the same id is
    /// still in flight on this connection (a reused id would leave the older request out of
    /// reach of its cancellation).
    pub(crate) fn begin(&self, id: &RequestId) -> Option<Tracked<'_>> {
        let (token, new) = self.inflight.locked().register(id, || self.request_token());
        if !new {
            return None;
        }
        Some(Tracked {
            conn: self,
            id: id.clone(),
            token,
            owned: true,
        })
    }

    /// The cancellation token of an in-flight request: the one [`Connection::begin`]
    /// registered, or (for a request handled without it) one registered until the returned
    /// guard is dropped.
    pub(crate) fn track(&self, id: &RequestId) -> Tracked<'_> {
        let (token, owned) = self.inflight.locked().register(id, || self.request_token());
        Tracked {
            conn: self,
            id: id.clone(),
            token,
            owned,
        }
    }

    /// Cancels an in-flight request; unknown ids are ignored, as the spec allows.
    pub(crate) fn cancel(&self, id: &RequestId) {
        if let Some(token) = self.inflight.locked().get(id) {
            token.cancel();
        }
    }

    /// Cancels every in-flight request (the connection is closing).
    pub(crate) fn cancel_all(&self) {
        self.closed.cancel();
        self.pending.locked().clear();
    }

    /// Sends a server-to-client request on `sink` and waits for the client's response.
    ///
    /// The request must not be lost, so it waits for room on `sink` first; `cancel` ends
    /// that wait as it ends the wait for the answer ([`RequestAborted::Cancelled`]), and a
    /// sink whose reader is gone, or a connection that closed, fails it at once
    /// ([`RequestAborted::Closed`]).
    pub(crate) async fn request(
        &self,
        sink: &Sink,
        method: &str,
        params: Value,
        cancel: &CancellationToken,
    ) -> Result<Result<Value, ErrorObject>, RequestAborted> {
        self.request_observed(sink, method, params, cancel, |_| {})
            .await
    }

    /// [`Connection::request`], handing the request message to `observe` as it is sent.
    pub(crate) async fn request_observed(
        &self,
        sink: &Sink,
        method: &str,
        params: Value,
        cancel: &CancellationToken,
        observe: impl FnOnce(&Value),
    ) -> Result<Result<Value, ErrorObject>, RequestAborted> {
        let id = RequestId::String(format!(
            "srv-{}",
            self.next_out_id.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id.clone(), tx);
        let message = Request {
            id: id.clone(),
            method: method.into(),
            params: Some(params),
        }
        .to_value();
        observe(&message);
        // Waiting for room is bounded by the call's cancellation and the connection closing.
        let sent = tokio::select! {
            sent = sink.send(&message) => sent,
            () = cancel.cancelled() => {
                self.pending.locked().remove(&id);
                return Err(RequestAborted::Cancelled);
            }
        };
        if !sent {
            self.pending.locked().remove(&id);
            return Err(RequestAborted::Closed);
        }
        tokio::select! {
            answer = rx => answer.map_err(|_| RequestAborted::Closed),
            () = cancel.cancelled() => {
                self.pending.locked().remove(&id);
                sink.notify(
                    "notifications/cancelled",
                    serde_json::json!({ "requestId": id, "reason": "the tool call was cancelled" }),
                )
                .await;
                Err(RequestAborted::Cancelled)
            }
        }
    }

    /// Routes a response from the client to the request that waits for it.
    pub(crate) fn resolve(&self, response: Response) {
        let Some(id) = response.id else { return };
        let waiter = self.pending.locked().remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(response.outcome);
            }
            None => tracing::debug!(%id, "response to an unknown or finished request ignored"),
        }
    }
}

/// The requests in flight on a connection, by id: the first one inline, since most
/// connections have one request in flight at a time (and one made for one request never has
/// more), the others in a map.
#[derive(Debug, Default)]
struct InFlight {
    first: Option<(RequestId, CancellationToken)>,
    more: HashMap<RequestId, CancellationToken>,
}

impl InFlight {
    fn get(&self, id: &RequestId) -> Option<&CancellationToken> {
        match &self.first {
            Some((first, token)) if first == id => Some(token),
            _ if self.more.is_empty() => None,
            _ => self.more.get(id),
        }
    }

    /// The token of the request in flight under `id` (and `false`), or a new one from
    /// `token`, registered under it (and `true`); the id is hashed once.
    fn register(
        &mut self,
        id: &RequestId,
        token: impl FnOnce() -> CancellationToken,
    ) -> (CancellationToken, bool) {
        use std::collections::hash_map::Entry;
        match &self.first {
            None => {
                let token = token();
                self.first = Some((id.clone(), token.clone()));
                (token, true)
            }
            Some((first, held)) if first == id => (held.clone(), false),
            Some(_) => match self.more.entry(id.clone()) {
                Entry::Occupied(held) => (held.get().clone(), false),
                Entry::Vacant(slot) => (slot.insert(token()).clone(), true),
            },
        }
    }

    fn remove(&mut self, id: &RequestId) {
        match &self.first {
            Some((first, _)) if first == id => self.first = None,
            _ if self.more.is_empty() => {}
            _ => {
                self.more.remove(id);
            }
        }
    }
}

/// An in-flight request: its cancellation token, registered on its connection for as long as
/// the guard lives.
pub(crate) struct Tracked<'a> {
    conn: &'a Connection,
    id: RequestId,
    token: CancellationToken,
    /// The guard registered the request and removes it when dropped.
    owned: bool,
}

impl std::ops::Deref for Tracked<'_> {
    type Target = CancellationToken;

    fn deref(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        if self.owned {
            self.conn.inflight.locked().remove(&self.id);
        }
    }
}

/// Why a server-to-client request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestAborted {
    /// The connection closed.
    Closed,
    /// The call that asked was cancelled.
    Cancelled,
}

/// A key for a session's tasks, unique in this process: random, or (should the OS have no
/// random bytes to give) a counter. Never shown to a client: the tasks' own ids are the
/// handles, and a task cannot be made without random bytes.
fn session_key() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    crate::task::random_id().unwrap_or_else(|_| {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("local-{}-{n}", std::process::id())
    })
}

#[cfg(test)]
mod tests;
