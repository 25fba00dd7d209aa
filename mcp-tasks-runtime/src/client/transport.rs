//! The client's side of the connections: a spawned process over stdio (or any byte stream
//! pair), Streamable HTTP, and a [`Session`] of a [`Server`] in the same process.
//!
//! Each delivers whatever the server sends into one place, [`Wire::incoming`], which routes
//! responses to the request waiting for them, server-to-client requests to the client's
//! question handler and notifications to whoever listens.

use super::auth::{Auth, Challenge};
use super::{AuthError, ClientError};
use crate::jsonrpc::Message;
use crate::router::Session;
use crate::server::Server;
use crate::sync::LockExt;
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{broadcast, mpsc, oneshot};

/// The `_meta` key of a 2026-07-28 request's protocol version.
pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

type Pending = Mutex<HashMap<String, oneshot::Sender<Result<Value, ClientError>>>>;

/// One connection to a server, whatever carries it.
#[derive(Debug)]
pub(crate) struct Wire {
    kind: Kind,
    pending: Pending,
    next: AtomicU64,
    notifications: broadcast::Sender<Value>,
    requests: mpsc::Sender<Value>,
    /// The last lines a spawned server wrote to stderr, to explain why it went away.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Cancelled when the wire is dropped, to end the streams read in the background.
    dropped: tokio_util::sync::CancellationToken,
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.dropped.cancel();
    }
}

#[derive(Debug)]
enum Kind {
    Lines {
        out: Mutex<Option<mpsc::Sender<String>>>,
        child: Mutex<Option<tokio::process::Child>>,
    },
    Local {
        session: Session,
    },
    Http(Http),
}

#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    url: String,
    auth: Option<Auth>,
    session_id: Mutex<Option<String>>,
    version: Mutex<Option<&'static str>>,
}

/// Splits a command line like a POSIX shell would for simple cases: whitespace separates
/// words, single and double quotes group them, a backslash escapes the next character.
pub(crate) fn split_command(line: &str) -> Result<Vec<String>, ClientError> {
    let bad = || ClientError::BadCommand(line.to_owned());
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next().ok_or_else(bad)? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next().ok_or_else(bad)? {
                        '"' => break,
                        '\\' => word.push(chars.next().ok_or_else(bad)?),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next().ok_or_else(bad)?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(bad());
    }
    Ok(words)
}

impl Wire {
    fn new(kind: Kind, requests: mpsc::Sender<Value>) -> Self {
        Self {
            kind,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            notifications: broadcast::channel(1024).0,
            requests,
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            dropped: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Spawns `command` and speaks newline-delimited JSON-RPC over its stdin and stdout.
    pub(crate) fn stdio(
        command: &str,
        requests: mpsc::Sender<Value>,
    ) -> Result<Arc<Self>, ClientError> {
        let words = split_command(command)?;
        let mut command_line = tokio::process::Command::new(&words[0]);
        command_line
            .args(&words[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A process group of its own, so that the terminal's Ctrl-C reaches the client,
        // which decides what happens to the server's tasks; the server ends when its stdin
        // closes.
        #[cfg(unix)]
        command_line.process_group(0);
        let mut child = command_line.spawn().map_err(|source| ClientError::Spawn {
            command: command.to_owned(),
            source,
        })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let wire = Self::lines(stdout, stdin, Some(child), requests);
        let tail = wire.stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut tail = tail.locked();
                if tail.len() == 5 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(wire)
    }

    /// Speaks newline-delimited JSON-RPC over a byte stream pair; `child` is the process
    /// behind it, if any, kept for as long as the wire lives.
    pub(crate) fn lines<R, W>(
        reader: R,
        mut writer: W,
        child: Option<tokio::process::Child>,
        requests: mpsc::Sender<Value>,
    ) -> Arc<Self>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        // Bounded: a server that stops reading holds up the client's sends (backpressure),
        // which end once the writer fails on the closed pipe.
        let (out, mut rx) = mpsc::channel::<String>(crate::OUTBOUND_CAPACITY);
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if writer.write_all(line.as_bytes()).await.is_err()
                    || writer.write_all(b"\n").await.is_err()
                    || writer.flush().await.is_err()
                {
                    break;
                }
            }
        });
        let wire = Arc::new(Self::new(
            Kind::Lines {
                out: Mutex::new(Some(out)),
                child: Mutex::new(child),
            },
            requests,
        ));
        let weak = Arc::downgrade(&wire);
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(wire) = weak.upgrade() else { return };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => wire.incoming(v).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "the server wrote a line that is not JSON")
                    }
                }
            }
            if let Some(wire) = weak.upgrade() {
                wire.close_all();
            }
        });
        wire
    }

    /// Talks to `server` in this process through a [`Session`] of its own.
    pub(crate) fn local(server: &Server, requests: mpsc::Sender<Value>) -> Arc<Self> {
        let (session, mut outbound) = server.session();
        let wire = Arc::new(Self::new(Kind::Local { session }, requests));
        let weak = Arc::downgrade(&wire);
        tokio::spawn(async move {
            while let Some(text) = outbound.recv().await {
                let Some(wire) = weak.upgrade() else { return };
                if let Ok(v) = serde_json::from_str(&text) {
                    wire.incoming(v).await;
                }
            }
        });
        wire
    }

    /// Speaks Streamable HTTP to the endpoint `url`, authorizing requests with `auth`.
    pub(crate) fn http(url: &str, requests: mpsc::Sender<Value>, auth: Option<Auth>) -> Arc<Self> {
        Arc::new(Self::new(
            Kind::Http(Http {
                client: reqwest::Client::new(),
                url: url.to_owned(),
                auth,
                session_id: Mutex::new(None),
                version: Mutex::new(None),
            }),
            requests,
        ))
    }

    /// Ends the connection politely: a 2025-11-25 HTTP session is deleted; a spawned server
    /// sees its stdin close and gets `grace` to exit before it is killed.
    pub(crate) async fn close(&self, grace: std::time::Duration) {
        match &self.kind {
            Kind::Lines { out, child } => {
                out.locked().take();
                let child = child.locked().take();
                if let Some(mut child) = child
                    && tokio::time::timeout(grace, child.wait()).await.is_err()
                {
                    let _ = child.kill().await;
                }
            }
            Kind::Http(http) => {
                let id = http.session_id.locked().take();
                if let Some(id) = id {
                    let mut delete = self.http_headers(http.client.delete(&http.url), None);
                    if let Some(auth) = &http.auth
                        && let Ok(Some(token)) = auth.token().await
                    {
                        delete = delete.bearer_auth(token.expose());
                    }
                    let _ = tokio::time::timeout(grace, delete.header("mcp-session-id", id).send())
                        .await;
                }
            }
            Kind::Local { session } => session.close(),
        }
        self.close_all();
    }

    /// Whether a request can be sent again after its connection failed: each HTTP request
    /// makes its own, while a stream that closed stays closed.
    pub(crate) fn reconnects(&self) -> bool {
        matches!(self.kind, Kind::Http(_))
    }

    /// Subscribes to the server's notifications.
    pub(crate) fn notifications(&self) -> broadcast::Receiver<Value> {
        self.notifications.subscribe()
    }

    /// After a 2025-11-25 `initialize`: the version to send in HTTP headers, and the stream
    /// of server messages outside responses.
    pub(crate) fn stateful(self: &Arc<Self>, version: &'static str) {
        if let Kind::Http(http) = &self.kind {
            *http.version.locked() = Some(version);
            let weak = Arc::downgrade(self);
            let request = self.http_headers(
                http.client
                    .get(&http.url)
                    .header("accept", "text/event-stream"),
                None,
            );
            let dropped = self.dropped.clone();
            let auth = http.auth.clone();
            tokio::spawn(async move {
                let read = async {
                    let mut request = request;
                    if let Some(auth) = auth
                        && let Ok(Some(token)) = auth.token().await
                    {
                        request = request.bearer_auth(token.expose());
                    }
                    if let Ok(response) = request.send().await
                        && response.status().is_success()
                    {
                        read_sse(response, weak).await;
                    }
                };
                tokio::select! {
                    () = read => {}
                    () = dropped.cancelled() => {}
                }
            });
        }
    }

    /// Routes one message from the server. A server-to-client request waits for room in
    /// the bounded queue of the dispatcher, which takes each at once (it answers them in
    /// tasks of their own), so the wait is short and never on this wire's reader.
    async fn incoming(&self, message: Value) {
        let has_id = message.get("id").is_some_and(|id| !id.is_null());
        if message.get("method").is_some() {
            if has_id {
                let _ = self.requests.send(message).await;
            } else {
                let _ = self.notifications.send(message);
            }
            return;
        }
        let Some(id) = message.get("id").map(id_key) else {
            return;
        };
        let Some(tx) = self.pending.locked().remove(&id) else {
            return;
        };
        let _ = tx.send(Ok(message));
    }

    /// Fails every request still waiting: the connection is gone.
    fn close_all(&self) {
        let why = self.why_closed();
        for (_, tx) in self.pending.locked().drain() {
            let _ = tx.send(Err(ClientError::Closed(why.clone())));
        }
    }

    fn why_closed(&self) -> String {
        let tail = self.stderr.locked();
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; it last said: {}",
                tail.iter().cloned().collect::<Vec<_>>().join(" / ")
            )
        }
    }

    /// Sends a request and waits for its response message.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.request_as(self.next_id(), method, params).await
    }

    /// A fresh request id.
    pub(crate) fn next_id(&self) -> Value {
        json!(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// [`Wire::request`] with an id from [`Wire::next_id`], for requests cancelled later by id.
    pub(crate) async fn request_as(
        &self,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientError> {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id_key(&id), tx);
        let _unregister = Unregister(&self.pending, id_key(&id));
        self.send(message, Some(method)).await?;
        let response = rx
            .await
            .map_err(|_| ClientError::Closed(self.why_closed()))??;
        if let Some(error) = response.get("error") {
            return Err(ClientError::Rpc {
                method: method.to_owned(),
                code: error["code"].as_i64().unwrap_or(0) as i32,
                message: error["message"].as_str().unwrap_or_default().to_owned(),
                data: error.get("data").cloned(),
            });
        }
        response.get("result").cloned().ok_or_else(|| {
            ClientError::Protocol(format!("a response without a result: {response}"))
        })
    }

    /// Sends a notification.
    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<(), ClientError> {
        self.send(
            json!({"jsonrpc": "2.0", "method": method, "params": params}),
            None,
        )
        .await
    }

    /// Answers a server-to-client request.
    pub(crate) async fn respond(&self, id: Value, outcome: Result<Value, (i32, String)>) {
        let message = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        if let Err(e) = self.send(message, None).await {
            tracing::warn!(error = %e, "cannot answer the server's request");
        }
    }

    async fn send(&self, message: Value, method: Option<&str>) -> Result<(), ClientError> {
        match &self.kind {
            Kind::Lines { out, .. } => {
                // The sender is taken out of the lock before waiting for room in it.
                let out = out
                    .locked()
                    .clone()
                    .ok_or_else(|| ClientError::Closed(": the client closed it".into()))?;
                out.send(message.to_string())
                    .await
                    .map_err(|_| ClientError::Closed(self.why_closed()))
            }
            Kind::Local { session } => {
                let message = Message::from_value(message)
                    .map_err(|e| ClientError::Protocol(e.to_value().to_string()))?;
                if matches!(message, Message::Request(_)) {
                    let session = session.clone();
                    let id = message_id(&message);
                    let pending_key = id.as_ref().map(id_key);
                    // The response comes back through `incoming`, like on the other wires.
                    let wire_pending = self.pending_sender(pending_key);
                    tokio::spawn(async move {
                        if let Some(response) = session.handle(message).await
                            && let Some(tx) = wire_pending
                        {
                            let _ = tx.send(Ok(response.to_value()));
                        }
                    });
                } else {
                    let _ = session.handle(message).await;
                }
                Ok(())
            }
            Kind::Http(http) => self.post(http, message, method).await,
        }
    }

    /// Takes the waiting sender of a request out of the table (in-process answers go
    /// straight to it).
    fn pending_sender(
        &self,
        key: Option<String>,
    ) -> Option<oneshot::Sender<Result<Value, ClientError>>> {
        key.and_then(|k| self.pending.locked().remove(&k))
    }

    fn http_headers(
        &self,
        mut builder: reqwest::RequestBuilder,
        message: Option<&Value>,
    ) -> reqwest::RequestBuilder {
        let Kind::Http(http) = &self.kind else {
            return builder;
        };
        if let Some(id) = http.session_id.locked().clone() {
            builder = builder.header("mcp-session-id", id);
        }
        let stateless = message
            .and_then(|m| m["params"]["_meta"][META_VERSION].as_str())
            .map(str::to_owned);
        let version = stateless
            .clone()
            .or_else(|| http.version.locked().map(str::to_owned));
        if let Some(version) = version {
            builder = builder.header("mcp-protocol-version", version);
        }
        if let (Some(_), Some(message)) = (stateless, message) {
            let method = message["method"].as_str().unwrap_or_default();
            builder = builder.header("mcp-method", header_value(method));
            let params = &message["params"];
            let name = match method {
                "tools/call" | "prompts/get" => params["name"].as_str(),
                "resources/read" => params["uri"].as_str(),
                m if m.starts_with("tasks/") => params["taskId"].as_str(),
                _ => None,
            };
            if let Some(name) = name {
                builder = builder.header("mcp-name", header_value(name));
            }
        }
        builder
    }

    async fn post(
        &self,
        http: &Http,
        message: Value,
        method: Option<&str>,
    ) -> Result<(), ClientError> {
        let mut token = match &http.auth {
            Some(auth) => auth.token().await?,
            None => None,
        };
        let mut retried = false;
        let response = loop {
            let mut request = self.http_headers(
                http.client
                    .post(&http.url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(message.to_string()),
                Some(&message),
            );
            if let Some(token) = &token {
                request = request.bearer_auth(token.expose());
            }
            let response = request.send().await.map_err(|e| ClientError::Connect {
                url: http.url.clone(),
                reason: error_chain(&e),
            })?;
            match refusal(&response) {
                None => break response,
                Some(Refusal::Scope(scope)) => {
                    return Err(AuthError::InsufficientScope {
                        server: http.url.clone(),
                        scope,
                    }
                    .into());
                }
                Some(Refusal::Unauthorized(challenge)) => {
                    let Some(auth) = &http.auth else {
                        return Err(AuthError::LoginNeeded {
                            server: http.url.clone(),
                            reason: challenge.as_ref().and_then(Challenge::reason),
                        }
                        .into());
                    };
                    if retried {
                        return Err(AuthError::Rejected {
                            server: http.url.clone(),
                            reason: challenge.as_ref().and_then(Challenge::reason),
                        }
                        .into());
                    }
                    // One renewal (or sign-in) and one more send.
                    token = Some(
                        auth.refused(&http.url, token.as_ref(), challenge.as_ref())
                            .await?,
                    );
                    retried = true;
                }
            }
        };
        if method == Some("initialize")
            && let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            *http.session_id.locked() = Some(id.to_owned());
        }
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(std::time::Duration::from_secs);
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if is_sse {
            // The stream carries notifications, questions and, last, the response; it is
            // read here so that dropping the request closes it.
            read_sse_with(response, |v| async move {
                self.incoming(v).await;
                true
            })
            .await;
            return match (&method, message.get("id")) {
                (Some(m), Some(id)) if self.pending.locked().contains_key(&id_key(id)) => {
                    Err(ClientError::Closed(format!(
                        ": the response stream of `{m}` ended without an answer"
                    )))
                }
                _ => Ok(()),
            };
        }
        let body = response.bytes().await.map_err(|e| ClientError::Connect {
            url: http.url.clone(),
            reason: error_chain(&e),
        })?;
        if status.as_u16() == 202 || (body.is_empty() && status.is_success()) {
            return Ok(());
        }
        match serde_json::from_slice::<Value>(&body) {
            // An error for no id (a header the server refused, say) is this request's.
            Ok(v)
                if v.get("jsonrpc").is_some() && v["id"].is_null() && v.get("error").is_some() =>
            {
                match method {
                    Some(m) => Err(ClientError::Rpc {
                        method: m.to_owned(),
                        code: v["error"]["code"].as_i64().unwrap_or(0) as i32,
                        message: v["error"]["message"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        data: v["error"].get("data").cloned(),
                    }),
                    None => Ok(()),
                }
            }
            Ok(v) if v.get("jsonrpc").is_some() => {
                self.incoming(v).await;
                Ok(())
            }
            _ if method.is_some() => Err(ClientError::Http {
                url: http.url.clone(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).chars().take(200).collect(),
                retry_after,
            }),
            _ => Ok(()),
        }
    }
}

/// Why the server refused a request for its authorization.
enum Refusal {
    /// `401`: no token, or not a good one; the challenge, if it sent one.
    Unauthorized(Option<Challenge>),
    /// `403` with `insufficient_scope`: the scopes it needs.
    Scope(String),
}

/// The refusal a response is, if it is one.
fn refusal(response: &reqwest::Response) -> Option<Refusal> {
    let status = response.status().as_u16();
    if status != 401 && status != 403 {
        return None;
    }
    let challenge = response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(Challenge::parse);
    match (status, challenge) {
        (401, challenge) => Some(Refusal::Unauthorized(challenge)),
        (_, Some(c)) if c.error.as_deref() == Some("insufficient_scope") => {
            Some(Refusal::Scope(c.scope.unwrap_or_default()))
        }
        // A `403` of the transport (a bad origin, another principal's session) is its own.
        _ => None,
    }
}

/// Removes a request's entry from the pending table when its future ends or is dropped.
struct Unregister<'a>(&'a Pending, String);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.locked().remove(&self.1);
    }
}

fn message_id(message: &Message) -> Option<Value> {
    match message {
        Message::Request(r) => serde_json::to_value(&r.id).ok(),
        _ => None,
    }
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

/// A header value as the 2026-07-28 HTTP transport wants it: plain if it is safe, else
/// `=?base64?…?=`.
fn header_value(value: &str) -> String {
    let safe = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?");
    if safe {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

async fn read_sse(response: reqwest::Response, wire: std::sync::Weak<Wire>) {
    read_sse_with(response, |v| {
        let wire = wire.upgrade();
        async move {
            match wire {
                Some(wire) => {
                    wire.incoming(v).await;
                    true
                }
                None => false,
            }
        }
    })
    .await;
}

/// Reads Server-Sent Events and hands each event's JSON data to `each`, until the stream
/// ends or `each` says to stop.
async fn read_sse_with<F>(mut response: reqwest::Response, mut each: impl FnMut(Value) -> F)
where
    F: std::future::Future<Output = bool>,
{
    let mut buf = Vec::<u8>::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        buf.extend_from_slice(&chunk);
        while let Some((end, len)) = event_end(&buf) {
            let event = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + len);
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            if let Ok(v) = serde_json::from_str(&data.join("\n"))
                && !each(v).await
            {
                return;
            }
        }
    }
}

/// Where the first event in `buf` ends, and how long its blank-line terminator is.
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(
            split_command(r#"server --name 'a b' "c \"d\"" e\ f"#).unwrap(),
            ["server", "--name", "a b", "c \"d\"", "e f"]
        );
        assert!(split_command("  ").is_err());
        assert!(split_command("a 'b").is_err());
    }

    #[test]
    fn unsafe_header_values_are_base64() {
        assert_eq!(header_value("slow_compute"), "slow_compute");
        assert_eq!(header_value("née"), "=?base64?bsOpZQ==?=");
    }

    #[test]
    fn sse_events_split_on_blank_lines() {
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some((7, 2)));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some((7, 4)));
        assert_eq!(event_end(b"data: 1\n"), None);
    }
}
