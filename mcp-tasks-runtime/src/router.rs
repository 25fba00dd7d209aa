//! Routing: a message arrives, its era is decided, and the era's wire adapter answers it.

use crate::error::Error;
use crate::jsonrpc::{
    ErrorObject, Message, Notification, Payload, Reply, Request, RequestId, Response,
};
use crate::server::Server;
use crate::session::{Connection, Era, Sink, outbound_channel};
use crate::wire::classify::{Facts, Kind, classify};
use crate::wire::{v2025_11_25, v2026_07_28};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A client's session with a server, driven one message at a time.
///
/// Transports own one per connection; tests can use it directly, with no transport at all.
/// Messages the server sends on its own (notifications, server-to-client requests) arrive on
/// the receiver returned by [`Server::session`], which holds at most
/// [`ServerBuilder::outbound_capacity`](crate::ServerBuilder::outbound_capacity) unread
/// messages ([`OUTBOUND_CAPACITY`](crate::OUTBOUND_CAPACITY) by default): read it, or the
/// session's log notifications are dropped, only the latest progress of each token and
/// status of each task is kept for when it reads (see [`Session::dropped_notifications`]),
/// and its server-to-client requests wait for room.
#[derive(Clone, Debug)]
pub struct Session {
    server: Server,
    conn: Arc<Connection>,
}

impl Server {
    /// Opens a session. The receiver yields every message the server sends outside of direct
    /// responses, one JSON text per message; it is bounded by the server's
    /// [`outbound_capacity`](crate::ServerBuilder::outbound_capacity).
    /// The session is anonymous, and a requestor of its own for the task quotas.
    pub fn session(&self) -> (Session, mpsc::Receiver<String>) {
        self.session_for(None)
    }

    /// Opens a session on behalf of an authenticated principal. Tasks created in it belong
    /// to that principal, and only that principal can read, answer or cancel them.
    pub fn session_for(&self, principal: Option<String>) -> (Session, mpsc::Receiver<String>) {
        self.session_as(principal.map(crate::principal::Principal::new))
    }

    /// Opens a session on behalf of `principal` with its scopes and facts: tasks created in
    /// it belong to it ([`Principal::owner_name`](crate::principal::Principal::owner_name)),
    /// and tools see it ([`TaskContext::principal`](crate::TaskContext::principal)).
    pub fn session_as(
        &self,
        principal: Option<crate::principal::Principal>,
    ) -> (Session, mpsc::Receiver<String>) {
        self.open_session(principal.map(Arc::new), None)
    }

    /// Opens a session whose era its first message decides. Without a principal, its tasks
    /// are charged to `requestor` (the transport's name for an anonymous client), or to the
    /// session itself when that is `None`.
    pub(crate) fn open_session(
        &self,
        principal: Option<Arc<crate::principal::Principal>>,
        requestor: Option<Arc<str>>,
    ) -> (Session, mpsc::Receiver<String>) {
        let (tx, rx) = outbound_channel(self.inner.outbound_capacity);
        let session = Session {
            server: self.clone(),
            conn: Connection::new(Sink::new(tx), principal, requestor),
        };
        (session, rx)
    }

    /// A session of the 2026-07-28 era for one request over HTTP. Its channel is that
    /// request's own stream: the receiver yields every message the request sends before its
    /// response, bounded like [`Server::session`]'s.
    #[cfg(feature = "http")]
    pub(crate) fn open_request_session(
        &self,
        principal: Option<Arc<crate::principal::Principal>>,
        requestor: Option<Arc<str>>,
    ) -> (Session, crate::session::RequestStream) {
        let stream = self.inner.spare_streams.take();
        let sink = Sink::new(stream.sender());
        let session = Session {
            server: self.clone(),
            conn: Connection::for_request(sink, principal, requestor),
        };
        (session, stream)
    }
}

impl Session {
    /// A stream of its own for one request of this session, bounded like the session's
    /// outbound channel: a spare one when there is one.
    #[cfg(feature = "http")]
    pub(crate) fn request_stream(&self) -> crate::session::RequestStream {
        self.server.inner.spare_streams.take()
    }

    /// Handles one message given as JSON text and returns the response text, if any.
    ///
    /// A request that runs a long tool keeps this future pending; transports run requests
    /// concurrently so that cancellations and answers to server requests get through.
    pub async fn handle_text(&self, text: &str) -> Option<String> {
        match Message::parse(text) {
            Ok(Message::Request(request)) => {
                self.reply_on(request, None).await.map(|r| r.to_json())
            }
            Ok(message) => self.handle(message).await.map(|r| r.to_json()),
            Err(error) => Some(error.to_json()),
        }
    }

    /// Handles one message and returns the response, if any.
    pub async fn handle(&self, message: Message) -> Option<Response> {
        match message {
            Message::Request(request) => self.handle_request(request).await,
            Message::Notification(n) => {
                self.handle_notification(n);
                None
            }
            Message::Response(r) => {
                self.conn.resolve(r);
                None
            }
        }
    }

    /// Handles a request; `None` when the request was cancelled and must not be answered.
    pub async fn handle_request(&self, request: Request) -> Option<Response> {
        self.handle_request_on(request, None).await
    }

    /// Handles a request whose notifications and server-to-client requests go to `stream`
    /// (an HTTP response stream, say) instead of the session's outbound channel.
    ///
    /// The stream is read like the session's own channel: messages that must not be lost wait
    /// for room in it (until its receiver is dropped or the session closes), droppable
    /// notifications are coalesced or dropped while it is full. A channel of
    /// [`OUTBOUND_CAPACITY`](crate::OUTBOUND_CAPACITY) messages is a good fit.
    pub async fn handle_request_on(
        &self,
        request: Request,
        stream: Option<mpsc::Sender<String>>,
    ) -> Option<Response> {
        self.reply_on(request, stream)
            .await
            .map(Reply::into_response)
    }

    /// [`handle_request_on`](Self::handle_request_on) for a transport: the reply as it is
    /// written, its result possibly JSON text already.
    pub(crate) async fn reply_on(
        &self,
        request: Request,
        stream: Option<mpsc::Sender<String>>,
    ) -> Option<Reply> {
        let id = request.id.clone();
        let version = match self.conn.era() {
            Some(Era::Stateful(s)) => Some(s.version),
            _ => v2026_07_28::meta_version(request.params.as_ref()),
        };
        let traced = crate::spans::request(&request, version, self.conn.wire());
        let span = traced.span.clone();
        // Claimed before anything runs, so the later of two requests with one id is refused.
        let Some(_in_flight) = self.conn.begin(&id) else {
            let error = Error::InvalidRequest(format!(
                "request id {id} is in use by a request still in flight on this connection; use a new id"
            ));
            span.in_scope(|| tracing::debug!(%id, "request id in use"));
            let outcome = Err(error.into());
            traced.end(Some(&outcome));
            // No gates: those under this id are the request in flight's.
            return Some(Reply {
                id,
                outcome,
                then: Vec::new(),
            });
        };
        let sink = stream.map_or_else(|| self.conn.sink.clone(), |tx| self.conn.sink.beside(tx));
        let outcome = tracing::Instrument::instrument(
            dispatch(&self.server, &self.conn, request, sink),
            span.clone(),
        )
        .await;
        // A cancelled request's held gates open here, as it goes unanswered.
        let then = self.conn.take_after_reply(&id);
        traced.end(outcome.as_ref());
        let outcome = outcome?;
        if let Err(e) = &outcome {
            span.in_scope(|| tracing::debug!(code = e.code, error = %e.message, "request failed"));
        }
        Some(Reply { id, outcome, then })
    }

    /// Handles a notification from the client.
    pub fn handle_notification(&self, n: Notification) {
        match n.method.as_str() {
            "notifications/cancelled" => {
                let id = n
                    .params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok());
                if let Some(id) = id {
                    self.conn.cancel(&id);
                }
            }
            "notifications/initialized" => {}
            other => tracing::debug!(method = other, "notification ignored"),
        }
    }

    /// Records what the transport tells about the session, for the spans of its requests.
    pub(crate) fn set_wire(&self, wire: crate::spans::Wire) {
        self.conn.set_wire(wire);
    }

    pub(crate) fn sink(&self) -> Sink {
        self.conn.sink.clone()
    }

    /// Counts a reader of the session's own stream in or out (see [`Connection::listen`]).
    #[cfg(feature = "http")]
    pub(crate) fn listen(&self, listening: bool) {
        self.conn.listen(listening);
    }

    /// How many notifications the session dropped so far because its client did not read
    /// them: log lines sent while its outbound channel (or the response stream they were
    /// meant for) was full, and the progress and task status notifications a later one of
    /// the same token or task replaced before there was room (or that were still held back
    /// when their request ended).
    pub fn dropped_notifications(&self) -> u64 {
        self.conn.sink.dropped()
    }

    /// Cancels one in-flight request, as `notifications/cancelled` would (an HTTP client
    /// closed its response stream, say). Unknown ids are ignored.
    pub fn cancel_request(&self, id: &RequestId) {
        self.conn.cancel(id);
    }

    /// `true` once `initialize` fixed this session to the stateful era.
    pub fn is_stateful(&self) -> bool {
        matches!(self.conn.era(), Some(Era::Stateful(_)))
    }

    /// The protocol version the session negotiated at `initialize`, if it is stateful.
    pub fn protocol_version(&self) -> Option<&'static str> {
        match self.conn.era() {
            Some(Era::Stateful(s)) => Some(s.version),
            _ => None,
        }
    }

    /// Cancels everything still running for this session (the client went away).
    pub fn close(&self) {
        self.conn.cancel_all();
    }
}

/// Answers a request: `Some(result or error)`, or `None` when it was cancelled.
pub(crate) async fn dispatch(
    server: &Server,
    conn: &Arc<Connection>,
    request: Request,
    sink: Sink,
) -> Option<Result<Payload, ErrorObject>> {
    let era = match conn.era() {
        Some(era) => era,
        None => match classify(&Facts::of(&request)) {
            Kind::Stateless => {
                // A concurrent first message may have decided first; its decision stands.
                conn.decide(Era::Stateless);
                conn.era().unwrap_or(&Era::Stateless)
            }
            Kind::Stateful => {
                return Some(
                    match request.method.as_str() {
                        "initialize" => v2025_11_25::initialize(server, conn, request),
                        "ping" => Ok(Value::Object(Default::default())),
                        _ => Err(Error::NotInitialized.into()),
                    }
                    .map(Payload::Value),
                );
            }
        },
    };
    match era {
        Era::Stateful(state) => v2025_11_25::dispatch(server, conn, state, request, sink).await,
        Era::Stateless => v2026_07_28::dispatch(server, conn, request, sink).await,
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{CallToolResult, Content, TaskSupport};
    use crate::{Server, Tool};
    use serde_json::{Value, json};
    use std::time::Duration;

    /// Until the reply that creates a task is written (here: held, as a slow transport
    /// would), nothing about the task reaches the client: not its question, not its status,
    /// not its progress. Once it is written they follow it.
    #[tokio::test(start_paused = true)]
    async fn nothing_about_a_task_goes_out_before_the_reply_that_creates_it() {
        let server = Server::builder()
            .tool(
                Tool::new("ask_now", |cx, _| async move {
                    cx.progress().report(1.0, None);
                    let answer = cx
                        .client()
                        .elicit("Go on?", json!({"type": "object", "properties": {}}))
                        .await?;
                    Ok(CallToolResult::success(vec![Content::text(format!(
                        "{:?}",
                        answer.action
                    ))]))
                })
                .task_support(TaskSupport::Required),
            )
            .build()
            .unwrap();
        let (session, mut outbound) = server.session();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}}});
        session.handle_text(&init.to_string()).await.unwrap();
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "ask_now", "task": {}, "_meta": {"progressToken": "p"}}});
        let crate::jsonrpc::Message::Request(call) =
            crate::jsonrpc::Message::parse(&call.to_string()).unwrap()
        else {
            unreachable!()
        };
        let reply = session.reply_on(call, None).await.unwrap();
        // The tool runs and asks while the reply waits to be written.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            outbound.try_recv().is_err(),
            "something about the task went out before the reply"
        );
        let id =
            serde_json::from_str::<Value>(&reply.to_json()).unwrap()["result"]["task"]["taskId"]
                .clone();
        drop(reply);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let m: Value = serde_json::from_str(&outbound.recv().await.unwrap()).unwrap();
            seen.push(m["method"].as_str().unwrap().to_owned());
            if m["method"] == "elicitation/create" {
                assert_eq!(
                    m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                    id
                );
            }
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                "elicitation/create",
                "notifications/progress",
                "notifications/tasks/status"
            ]
        );
    }
}
