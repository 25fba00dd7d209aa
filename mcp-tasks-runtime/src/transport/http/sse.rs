//! Server-sent events: framing, response bodies, and the bounded per-stream event logs that
//! let a 2025-11-25 client resume a dropped stream with `Last-Event-ID`.
//!
//! Every event is framed completely before it is handed to hyper as one data frame, so it
//! goes out in one write.

use crate::jsonrpc::{Reply, RequestId};
use crate::router::Session;
use crate::session::RequestStream;
use crate::sync::LockExt;
use axum::body::Bytes;
use http_body::Frame;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// One event: an optional id and one JSON-RPC message.
pub(crate) fn event(id: Option<&str>, data: &str) -> Bytes {
    let mut s = String::with_capacity(data.len() + 32);
    if let Some(id) = id {
        s.push_str("id: ");
        s.push_str(id);
        s.push('\n');
    }
    s.push_str("data: ");
    s.push_str(data);
    s.push_str("\n\n");
    Bytes::from(s)
}

/// The priming event: an id to resume from, the reconnection delay, and empty data.
pub(crate) fn priming(id: &str, retry: Duration) -> Bytes {
    Bytes::from(format!(
        "id: {id}\nretry: {}\ndata: \n\n",
        retry.as_millis()
    ))
}

/// A comment that keeps idle connections (and proxies) from timing out.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// What a running request produces: messages for its stream, then its response.
#[derive(Debug)]
pub(crate) enum Out {
    /// A notification or a server-to-client request for the request's stream.
    Message(String),
    /// The response; `None` when the request was cancelled and must not be answered.
    Done(Option<Reply>),
}

/// The future of one request: its response, `None` when it was cancelled.
type RequestFuture = Pin<Box<dyn Future<Output = Option<Reply>> + Send>>;

/// One request being answered.
///
/// The handler that took the request polls it in place until its first output, so a request
/// answered with plain JSON costs no task of its own and no hand-over between tasks. A
/// request whose first output is a message (its answer becomes a stream) moves into a task of
/// its own ([`Running::detach`]), so that a slow reader cannot stop it half-way; and one whose
/// handler is dropped before it ends (the connection went away) goes on in a task of its own
/// too, its output discarded, so that no request is stopped half-way by a dropped connection.
pub(crate) struct Running {
    /// The request, until it ends.
    call: Unfinished,
    /// Its messages for the stream, bounded by the server's
    /// [`outbound_capacity`](crate::ServerBuilder::outbound_capacity).
    notes: RequestStream,
    /// Its response, once it ended while messages were still waiting to be read.
    ended: Option<Option<Reply>>,
}

impl Running {
    /// Starts answering a 2026-07-28 `request` in a session of its own, made for it, whose
    /// messages all go to the request's stream; nothing runs until it is polled. Returns the
    /// session too, which cancels the request ([`Session::cancel_request`]).
    pub(crate) fn request(
        server: &crate::Server,
        principal: Option<std::sync::Arc<crate::principal::Principal>>,
        requestor: Option<std::sync::Arc<str>>,
        request: crate::jsonrpc::Request,
    ) -> (Session, Self) {
        let (session, notes) = server.open_request_session(principal, requestor);
        let on = session.clone();
        let call = Box::pin(async move { on.reply_on(request, None).await });
        (session, Self::of(call, notes))
    }

    /// Starts answering `request` in `session` (a 2025-11-25 session), as made by
    /// `principal`, which its checks see rather than the principal that opened the session;
    /// nothing runs until it is polled.
    pub(crate) fn start_as(
        session: Session,
        request: crate::jsonrpc::Request,
        principal: Option<std::sync::Arc<crate::principal::Principal>>,
    ) -> Self {
        let notes = session.request_stream();
        let note_tx = notes.sender();
        let call = Box::pin(crate::session::as_caller(principal, async move {
            session.reply_on(request, Some(note_tx)).await
        }));
        Self::of(call, notes)
    }

    /// A request's future, not polled yet, and the receiver of its messages.
    fn of(call: RequestFuture, notes: RequestStream) -> Self {
        Self {
            call: Unfinished(Some(call)),
            notes,
            ended: None,
        }
    }

    /// Runs the request until its first output: a message for its stream, or its response.
    pub(crate) async fn first(&mut self) -> Out {
        if let Some(call) = self.call.0.as_mut() {
            let response = tokio::select! {
                biased;
                Some(message) = self.notes.recv() => return Out::Message(message),
                response = call => response,
            };
            self.call.0 = None;
            self.ended = Some(response);
        }
        // Messages sent before the response go out before it.
        match self.notes.try_recv() {
            Ok(message) => Out::Message(message),
            Err(_) => Out::Done(self.ended.take().flatten()),
        }
    }

    /// The rest of the request's output, produced by a task of its own from now on.
    ///
    /// The returned receiver is bounded like the request's stream. While its reader is slow, a
    /// message waits for room, but the request goes on meanwhile: its next messages fill its
    /// own stream, where droppable notifications are dropped and the others wait for room in
    /// turn. A reader that is gone makes every send fail at once, so nothing waits for a
    /// client that left; the request still runs to its end.
    pub(crate) fn detach(self) -> mpsc::Receiver<Out> {
        let (out, rx) = mpsc::channel(self.notes.max_capacity());
        let Self {
            mut call,
            mut notes,
            ended,
        } = self;
        let call = call.0.take();
        tokio::spawn(async move {
            let response = match (call, ended) {
                (Some(mut call), _) => loop {
                    let message = tokio::select! {
                        biased;
                        Some(message) = notes.recv() => message,
                        response = &mut call => break response,
                    };
                    // The call is polled while its message waits for room.
                    let send = out.send(Out::Message(message));
                    tokio::pin!(send);
                    tokio::select! {
                        biased;
                        _ = &mut send => {}
                        response = &mut call => {
                            let _ = send.await;
                            break response;
                        }
                    }
                },
                (None, ended) => ended.flatten(),
            };
            // What the request sent before it answered goes first, then the response: neither
            // may be lost, so both wait for room.
            while let Ok(message) = notes.try_recv() {
                let _ = out.send(Out::Message(message)).await;
            }
            let _ = out.send(Out::Done(response)).await;
        });
        rx
    }
}

/// A request's future until it ends; dropped unfinished, it runs to its end in a task of its
/// own.
struct Unfinished(Option<RequestFuture>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            // Nobody waits for the answer any more; the request still runs to its end.
            tokio::spawn(async move {
                let _ = call.await;
            });
        }
    }
}

/// Cancels a request when dropped while armed: the client closed the response stream of a
/// 2026-07-28 request, which is how that revision cancels over HTTP.
#[derive(Debug)]
pub(crate) struct CancelOnDrop {
    session: Session,
    id: RequestId,
    armed: bool,
}

impl CancelOnDrop {
    pub(crate) fn new(session: Session, id: RequestId) -> Self {
        Self {
            session,
            id,
            armed: true,
        }
    }

    /// The request finished; dropping the guard no longer cancels it.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(id = %self.id, "response stream closed: request cancelled");
            self.session.cancel_request(&self.id);
        }
    }
}

/// The SSE body of a 2026-07-28 request: its messages, then its response. Dropping it before
/// the response cancels the request.
pub(crate) struct LiveSse {
    pending: Option<Bytes>,
    out: mpsc::Receiver<Out>,
    guard: CancelOnDrop,
    /// Ends the stream early at shutdown (for streams that never end on their own).
    stop: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
    /// Sends a comment when the request has been quiet this long: proxies keep the
    /// connection, and a client that went away is noticed on the write.
    keep_alive: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    done: bool,
}

impl LiveSse {
    pub(crate) fn new(
        first: String,
        out: mpsc::Receiver<Out>,
        guard: CancelOnDrop,
        stop: Option<CancellationToken>,
        keep_alive: Option<Duration>,
    ) -> Self {
        Self {
            pending: Some(event(None, &first)),
            out,
            guard,
            stop: stop.map(|s| Box::pin(s.cancelled_owned())),
            keep_alive: keep_alive.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
            done: false,
        }
    }
}

impl http_body::Body for LiveSse {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(bytes) = this.pending.take() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        match this.out.poll_recv(cx) {
            Poll::Ready(Some(Out::Message(m))) => {
                Poll::Ready(Some(Ok(Frame::data(event(None, &m)))))
            }
            Poll::Ready(Some(Out::Done(response))) => {
                this.guard.disarm();
                this.done = true;
                Poll::Ready(response.map(|r| Ok(Frame::data(event(None, &r.to_json())))))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(Poll::Ready(())) = this.stop.as_mut().map(|s| s.as_mut().poll(cx)) {
                    this.done = true;
                    return Poll::Ready(None);
                }
                if let Some((every, sleep)) = &mut this.keep_alive
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    let next = tokio::time::Instant::now() + *every;
                    sleep.as_mut().reset(next);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
                }
                Poll::Pending
            }
        }
    }
}

/// The SSE body of a stream read from an [`EventLog`] by a forwarding task.
pub(crate) struct ChannelSse {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelSse {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        Self { rx }
    }
}

impl http_body::Body for ChannelSse {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|b| b.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The bounded log of one SSE stream of a 2025-11-25 session.
///
/// Writers append; at most one reader (an open HTTP response) follows it at a time, and a new
/// reader supersedes the old one. Events stay in the log after they are sent, up to its
/// capacity, so a client that lost the connection can ask for them again.
#[derive(Debug)]
pub(crate) struct EventLog {
    /// The stream number: the part of every event id before the `-`.
    pub(crate) id: u64,
    state: Mutex<LogState>,
    changed: watch::Sender<u64>,
}

#[derive(Debug)]
struct LogState {
    events: VecDeque<(u64, Bytes)>,
    capacity: usize,
    next_seq: u64,
    /// The highest sequence number handed to a reader.
    delivered: u64,
    /// The generation of the current reader; a reader of another generation stops.
    reader: u64,
    done: bool,
}

impl EventLog {
    pub(crate) fn new(id: u64, capacity: usize) -> Self {
        Self {
            id,
            state: Mutex::new(LogState {
                events: VecDeque::new(),
                capacity: capacity.max(1),
                next_seq: 1,
                delivered: 0,
                reader: 0,
                done: false,
            }),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.locked()
    }

    /// Appends one message; the oldest events go when the log is full.
    pub(crate) fn push(&self, message: &str) {
        {
            let mut st = self.lock();
            let seq = st.next_seq;
            st.next_seq += 1;
            let bytes = event(Some(&format!("{}-{seq}", self.id)), message);
            st.events.push_back((seq, bytes));
            while st.events.len() > st.capacity {
                st.events.pop_front();
            }
        }
        self.changed.send_modify(|v| *v += 1);
    }

    /// Marks the stream complete: readers end once they have sent everything.
    pub(crate) fn finish(&self) {
        self.lock().done = true;
        self.changed.send_modify(|v| *v += 1);
    }

    /// `true` once the stream is complete.
    pub(crate) fn is_done(&self) -> bool {
        self.lock().done
    }

    /// `true` when `seq` is an event this log has issued or could still issue.
    pub(crate) fn knows(&self, seq: u64) -> bool {
        seq < self.lock().next_seq
    }

    /// The sequence number a new reader without `Last-Event-ID` starts at: the first event
    /// no reader has taken yet.
    pub(crate) fn undelivered(&self) -> u64 {
        self.lock().delivered + 1
    }

    /// Starts following the log from `from` (a sequence number) with a forwarding task,
    /// superseding the current reader. The body ends when the log is done and fully sent,
    /// when `stop` fires, or when a newer reader takes over. `priming` (the reconnection delay)
    /// starts the body with a priming event, for the sessions that get one.
    pub(crate) fn follow(
        self: &std::sync::Arc<Self>,
        from: u64,
        priming: Option<Duration>,
        keep_alive: Option<Duration>,
        stop: CancellationToken,
    ) -> ChannelSse {
        let generation = {
            let mut st = self.lock();
            st.reader += 1;
            st.reader
        };
        self.changed.send_modify(|v| *v += 1);
        let (tx, rx) = mpsc::channel(1);
        let log = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            log.forward(generation, from, priming, keep_alive, tx, stop)
                .await;
        });
        ChannelSse::new(rx)
    }

    async fn forward(
        &self,
        generation: u64,
        mut cursor: u64,
        priming: Option<Duration>,
        keep_alive: Option<Duration>,
        tx: mpsc::Sender<Bytes>,
        stop: CancellationToken,
    ) {
        if let Some(retry) = priming {
            let prime = self::priming(&format!("{}-{}", self.id, cursor.saturating_sub(1)), retry);
            if tx.send(prime).await.is_err() {
                return;
            }
        }
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            let (batch, finished) = {
                let st = self.lock();
                if st.reader != generation {
                    return;
                }
                let batch: Vec<(u64, Bytes)> = st
                    .events
                    .iter()
                    .filter(|(seq, _)| *seq >= cursor)
                    .cloned()
                    .collect();
                (batch, st.done)
            };
            let caught_up = batch.is_empty();
            for (seq, bytes) in batch {
                if tx.send(bytes).await.is_err() {
                    return;
                }
                cursor = seq + 1;
                let mut st = self.lock();
                st.delivered = st.delivered.max(seq);
            }
            if !caught_up {
                continue;
            }
            if finished {
                return;
            }
            let idle = async {
                match keep_alive {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
                () = stop.cancelled() => return,
                () = idle => {
                    if tx.send(Bytes::from_static(KEEP_ALIVE)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OUTBOUND_CAPACITY;
    use std::sync::Arc;

    /// A 2026-07-28 session whose `flood` tool reports `n` progress steps, then sets `done`;
    /// and a call of it. Its server's outbound channels hold `capacity` messages.
    fn flood(
        n: usize,
        done: Arc<std::sync::atomic::AtomicBool>,
        capacity: usize,
    ) -> (crate::Server, crate::jsonrpc::Request) {
        use crate::model::{CallToolResult, Content};
        let server = crate::Server::builder()
            .name("sse-test")
            .outbound_capacity(capacity)
            .version("0")
            .tool(crate::Tool::new("flood", move |cx, _| {
                let done = Arc::clone(&done);
                async move {
                    let p = cx.progress();
                    for step in 1..=n {
                        p.report(step as f64, None);
                        // A tool that takes its time: the forwarding runs between the reports.
                        tokio::task::yield_now().await;
                    }
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, crate::ToolError>(CallToolResult::success(vec![Content::text("done")]))
                }
            }))
            .build()
            .unwrap();
        let request = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "flood",
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "progressToken": "p",
        }}});
        let Ok(crate::jsonrpc::Message::Request(request)) =
            crate::jsonrpc::Message::parse(&request.to_string())
        else {
            panic!("not a request");
        };
        (server, request)
    }

    /// A request flooding a stream nobody reads for a while is bounded by `capacity`, ends
    /// anyway, and its reader still gets its response.
    async fn a_slow_reader_of(capacity: usize) {
        let steps = 4 * capacity;
        let done = Arc::default();
        let (server, request) = flood(steps, Arc::clone(&done), capacity);
        let (session, running) = Running::request(&server, None, None, request);
        let mut out = running.detach();
        // Nobody reads for a while: the stream and the request's own channel fill, the rest
        // of the progress is coalesced, and the request finishes anyway.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(out.len(), capacity);
        let mut messages = 0;
        let response = loop {
            match out.recv().await.expect("the stream ends with its response") {
                Out::Message(_) => messages += 1,
                Out::Done(response) => break response.expect("answered").into_response(),
            }
        };
        assert!(response.outcome.is_ok(), "{:?}", response.outcome);
        assert!(messages <= 2 * capacity + 1, "{messages}");
        // Every step was sent, or counted as dropped.
        assert_eq!(
            session.dropped_notifications() + messages as u64,
            steps as u64
        );
        assert!(out.recv().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_stream_reader_bounds_the_request_and_still_gets_its_response() {
        a_slow_reader_of(OUTBOUND_CAPACITY).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_server_s_outbound_capacity_bounds_its_streams() {
        a_slow_reader_of(8).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_whose_reader_left_never_holds_up_its_request() {
        let done = Arc::<std::sync::atomic::AtomicBool>::default();
        let (server, request) = flood(4 * OUTBOUND_CAPACITY, Arc::clone(&done), OUTBOUND_CAPACITY);
        drop(Running::request(&server, None, None, request).1.detach());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }

    async fn read_all(mut body: ChannelSse) -> String {
        let mut text = String::new();
        while let Some(b) = body.rx.recv().await {
            text.push_str(std::str::from_utf8(&b).unwrap());
        }
        text
    }

    mod running {
        use super::super::*;
        use crate::jsonrpc::Request;
        use crate::model::CallToolResult;
        use crate::server::Server;
        use crate::tool::Tool;
        use serde_json::json;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::sync::Notify;

        /// A server whose `gate` tool logs a line, waits for `open`, then sets `done`; and
        /// whose `quick` tool answers at once.
        fn server(open: Arc<Notify>, done: Arc<AtomicBool>) -> Server {
            Server::builder()
                .name("running")
                .tool(Tool::new("quick", |_, _| async {
                    Ok(CallToolResult::success(vec![crate::model::Content::text(
                        "at once",
                    )]))
                }))
                .tool(Tool::new("gate", move |cx, _| {
                    let (open, done) = (Arc::clone(&open), Arc::clone(&done));
                    async move {
                        cx.info("waiting at the gate");
                        open.notified().await;
                        done.store(true, Ordering::SeqCst);
                        Ok(CallToolResult::success(vec![crate::model::Content::text(
                            "through",
                        )]))
                    }
                }))
                .build()
                .unwrap()
        }

        fn call(server: &Server, tool: &str) -> Running {
            let request = Request {
                id: 1.into(),
                method: "tools/call".into(),
                params: Some(json!({
                    "name": tool,
                    "arguments": {},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/logLevel": "info",
                    },
                })),
            };
            Running::request(server, None, None, request).1
        }

        #[tokio::test]
        async fn a_plain_answer_is_the_first_output() {
            let server = server(Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
            let mut running = call(&server, "quick");
            let Out::Done(Some(response)) = running.first().await else {
                panic!("the answer should come first");
            };
            let response = response.into_response();
            assert_eq!(
                response.outcome.unwrap()["content"][0]["text"],
                json!("at once")
            );
        }

        #[tokio::test]
        async fn a_streamed_request_goes_on_in_a_task_with_its_messages_then_its_answer() {
            let open = Arc::new(Notify::new());
            let done = Arc::new(AtomicBool::new(false));
            let server = server(Arc::clone(&open), Arc::clone(&done));
            let mut running = call(&server, "gate");
            let Out::Message(first) = running.first().await else {
                panic!("the log line should come first");
            };
            assert!(first.contains("waiting at the gate"), "{first}");
            let mut out = running.detach();
            open.notify_one();
            let Some(Out::Done(Some(response))) = out.recv().await else {
                panic!("the answer should follow");
            };
            let response = response.into_response();
            assert!(done.load(Ordering::SeqCst));
            assert_eq!(
                response.outcome.unwrap()["content"][0]["text"],
                json!("through")
            );
            assert!(out.recv().await.is_none());
        }

        #[tokio::test]
        async fn a_request_dropped_before_its_end_runs_to_its_end() {
            let open = Arc::new(Notify::new());
            let done = Arc::new(AtomicBool::new(false));
            let server = server(Arc::clone(&open), Arc::clone(&done));
            let mut running = call(&server, "gate");
            // The handler is dropped while the tool waits, as when its connection goes away.
            assert!(matches!(running.first().await, Out::Message(_)));
            drop(running);
            open.notify_one();
            for _ in 0..1_000 {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                tokio::task::yield_now().await;
            }
            panic!("the dropped request did not run to its end");
        }
    }

    #[tokio::test]
    async fn a_reader_gets_the_priming_event_then_everything_then_the_end() {
        let log = Arc::new(EventLog::new(3, 8));
        log.push("{\"a\":1}");
        let body = log.follow(
            1,
            Some(Duration::from_millis(500)),
            None,
            CancellationToken::new(),
        );
        log.push("{\"b\":2}");
        log.finish();
        let text = read_all(body).await;
        assert_eq!(
            text,
            "id: 3-0\nretry: 500\ndata: \n\nid: 3-1\ndata: {\"a\":1}\n\nid: 3-2\ndata: {\"b\":2}\n\n"
        );
    }

    #[tokio::test]
    async fn resuming_replays_only_what_followed_the_last_event() {
        let log = Arc::new(EventLog::new(1, 8));
        for i in 0..4 {
            log.push(&i.to_string());
        }
        log.finish();
        let text =
            read_all(log.follow(3, Some(Duration::ZERO), None, CancellationToken::new())).await;
        assert!(text.starts_with("id: 1-2\n"), "{text}");
        assert!(text.contains("id: 1-3\ndata: 2\n") && text.contains("id: 1-4\ndata: 3\n"));
        assert!(!text.contains("data: 1\n"));
    }

    #[tokio::test]
    async fn a_new_reader_supersedes_the_old_one_and_the_log_stays_bounded() {
        let log = Arc::new(EventLog::new(0, 2));
        let first = log.follow(1, Some(Duration::ZERO), None, CancellationToken::new());
        let _second = log.follow(1, Some(Duration::ZERO), None, CancellationToken::new());
        // The first reader ends on its own (after at most its priming event).
        let text = read_all(first).await;
        assert!(!text.contains("data: x"));
        for m in ["x", "y", "z"] {
            log.push(m);
        }
        log.finish();
        let text =
            read_all(log.follow(1, Some(Duration::ZERO), None, CancellationToken::new())).await;
        assert!(
            !text.contains("data: x\n") && text.contains("data: z\n"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_reader_without_priming_gets_only_the_events() {
        let log = Arc::new(EventLog::new(2, 8));
        log.push("{\"a\":1}");
        log.finish();
        let text = read_all(log.follow(1, None, None, CancellationToken::new())).await;
        assert_eq!(text, "id: 2-1\ndata: {\"a\":1}\n\n");
    }
}
