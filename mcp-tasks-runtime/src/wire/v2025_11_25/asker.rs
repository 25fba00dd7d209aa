//! The delivery of a task's questions, status changes, progress and log lines to a client of
//! this era.

use super::{RELATED_TASK, task_json};
use crate::engine::{Delivery, Engine};
use crate::jsonrpc::RequestId;
use crate::model::LogLevel;
use crate::notify::{LogGate, Notifier, send_progress};
use crate::ops;
use crate::session::{Connection, RequestAborted, Sink};
use crate::sync::{Gate, LockExt, Opener};
use crate::task::TaskRecord;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a question of a new task waits, after the response that creates the task was
/// written, for the client to name the task (`tasks/get`, `tasks/result`) before it is
/// sent anyway.
const ACKNOWLEDGE_WAIT: Duration = Duration::from_secs(1);

/// How often a question sent on another session's stream looks whether the session that
/// created the task can now be asked instead: a bearer of the task's id that asked for the
/// result and stopped reading must not hold the question.
const REROUTE_CHECK: Duration = Duration::from_millis(500);

/// How a task's questions, status changes, progress and log lines reach a client of this
/// era: questions are server-to-client requests tagged with the task, each sent on exactly
/// one stream at a time — a waiting `tasks/result` stream when there is one, else the
/// session's own stream — and sent again only when the stream that carried it closed
/// without an answer. Answers are stored in the task, so the tool gets them whichever
/// process runs it.
pub(crate) struct Asker {
    me: std::sync::Weak<Asker>,
    /// The engine that stores the client's answers (not kept alive by the asker, which
    /// the engine holds).
    engine: Weak<Engine>,
    owner: Option<String>,
    /// The session that created or resumed the task.
    conn: Arc<Connection>,
    /// The progress token of the original request, for progress notifications.
    progress_token: Option<Value>,
    /// Opens once the response that created the task was written.
    announced: Gate,
    /// Opens once the client showed it knows the task (it named it in a request), or a
    /// moment ([`ACKNOWLEDGE_WAIT`]) after the announcement: questions wait for it.
    acknowledged: Gate,
    /// What opens `acknowledged`.
    acknowledge: Mutex<Option<Opener>>,
    state: Mutex<AskState>,
}

#[derive(Default)]
struct AskState {
    /// Waiting `tasks/result` requests that offered their streams, newest last.
    streams: Vec<Offered>,
    /// Question keys being asked right now.
    asking: HashSet<String>,
    /// Wakes questions waiting for a stream to be offered.
    offered: Arc<tokio::sync::Notify>,
    /// Until the task is announced, nothing is sent: the latest status and progress wait
    /// here, and go once it is (see [`Asker::announce`]).
    held: Option<Held>,
}

/// What waits for a task's announcement.
#[derive(Default)]
struct Held {
    /// The task's latest status notification.
    status: Option<Value>,
    /// The latest progress: progress, total, message.
    progress: Option<(f64, Option<f64>, Option<String>)>,
}

#[derive(Clone)]
struct Offered {
    conn: Arc<Connection>,
    sink: Sink,
    request: RequestId,
}

impl Asker {
    /// An asker for a task resumed by `conn` (a `tasks/result` from a session that did not
    /// create it, after a reconnect or a restart).
    pub(super) fn new(
        engine: &Arc<Engine>,
        owner: Option<String>,
        conn: &Arc<Connection>,
        progress_token: Option<Value>,
        announced: Gate,
    ) -> Arc<Self> {
        let (acknowledged, acknowledge) = if announced.is_open() {
            (Gate::open(), None)
        } else {
            let (gate, opener) = Gate::closed();
            (gate, Some(opener))
        };
        let asker = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            engine: Arc::downgrade(engine),
            owner,
            conn: Arc::clone(conn),
            progress_token,
            announced: announced.clone(),
            acknowledged,
            acknowledge: Mutex::new(acknowledge),
            state: Mutex::new(AskState {
                held: Some(Held::default()),
                ..AskState::default()
            }),
        });
        let me = Arc::downgrade(&asker);
        tokio::spawn(async move {
            announced.opened().await;
            match me.upgrade() {
                Some(asker) => asker.announce(),
                None => return,
            }
            tokio::time::sleep(ACKNOWLEDGE_WAIT).await;
            if let Some(asker) = me.upgrade() {
                asker.acknowledge();
            }
        });
        asker
    }

    /// The client knows the task: its questions may go.
    fn acknowledge(&self) {
        drop(self.acknowledge.locked().take());
    }

    /// The task was announced: what waited for that goes now, progress before status.
    fn announce(&self) {
        let Some(held) = self.lock().held.take() else {
            return;
        };
        if let (Some(token), Some((progress, total, message))) =
            (&self.progress_token, held.progress)
        {
            send_progress(&self.conn.sink, token, progress, total, message.as_deref());
        }
        if let Some(status) = held.status
            && !self.conn.is_closed()
        {
            let key = format!("task:{}", status["taskId"].as_str().unwrap_or_default());
            self.conn
                .sink
                .notify_latest(key, "notifications/tasks/status", status);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AskState> {
        self.state.locked()
    }

    /// The stream a question goes on now, and whether it belongs to the session that
    /// created the task. That session comes first: its newest open `tasks/result` stream,
    /// else its own stream while a client listens on it; only then the newest
    /// `tasks/result` stream of another session (a bearer of the task's id), so that a
    /// stranger who asked for the result and walked away does not hold the owner's
    /// question.
    fn path(&self) -> Option<(Arc<Connection>, Sink, bool)> {
        let mut state = self.lock();
        state.streams.retain(|o| !o.sink.is_closed());
        let mine = |o: &&Offered| Arc::ptr_eq(&o.conn, &self.conn);
        if let Some(o) = state.streams.iter().rev().find(mine) {
            return Some((Arc::clone(&o.conn), o.sink.clone(), true));
        }
        if !self.conn.is_closed() && self.conn.is_listening() {
            return Some((Arc::clone(&self.conn), self.conn.sink.clone(), true));
        }
        state
            .streams
            .last()
            .map(|o| (Arc::clone(&o.conn), o.sink.clone(), false))
    }

    /// Whether the session that created the task can be asked now.
    fn owner_reachable(&self) -> bool {
        matches!(self.path(), Some((_, _, true)))
    }

    /// Asks the client one question until it answers, the question goes away, or the task
    /// ends; the answer is stored in the task.
    async fn ask(
        self: Arc<Self>,
        mut question: ops::OpenQuestion,
        request: crate::model::InputRequest,
    ) {
        let key = question.key().to_owned();
        let mut params = request.params.clone();
        if let Value::Object(p) = &mut params {
            let meta = p
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(meta) = meta {
                meta.insert(RELATED_TASK.into(), json!({ "taskId": question.task() }));
            }
        }
        loop {
            if !question.is_open().await {
                break;
            }
            if !self.announced.is_open() || !self.acknowledged.is_open() {
                // The response that names the task is not written yet, or the client has
                // not shown that it read it: a client that reads the response and a
                // question at once may see the question first and not know its task.
                tokio::select! {
                    () = self.acknowledged.opened() => {}
                    () = question.changed() => {}
                }
                continue;
            }
            // What waited for the announcement goes before the question.
            self.announce();
            let Some((conn, sink, owners)) = self.path() else {
                // Nobody can be asked now: wait for a `tasks/result` or a change.
                let offered = Arc::clone(&self.lock().offered);
                tokio::select! {
                    () = offered.notified() => {}
                    () = question.changed() => {}
                }
                continue;
            };
            let stop = CancellationToken::new();
            let asked = conn.request(&sink, &request.method, params.clone(), &stop);
            tokio::pin!(asked);
            let mut reroute = tokio::time::interval(REROUTE_CHECK);
            reroute.tick().await;
            let answer = loop {
                tokio::select! {
                    answer = &mut asked => break Some(answer),
                    () = sink.closed() => {
                        // The stream closed unanswered: ask again on the next one.
                        stop.cancel();
                        break None;
                    }
                    _ = reroute.tick(), if !owners => {
                        if self.owner_reachable() {
                            // Another session holds the question while its owner can be
                            // asked: take it back (telling a stream that may not be read
                            // for a bounded time) and ask the owner.
                            stop.cancel();
                            let _ = tokio::time::timeout(REROUTE_CHECK, &mut asked).await;
                            break None;
                        }
                    }
                    () = question.changed() => {
                        if !question.is_open().await {
                            stop.cancel();
                            let _ = (&mut asked).await;
                            self.lock().asking.remove(&key);
                            return;
                        }
                    }
                }
            };
            match answer {
                None | Some(Err(RequestAborted::Closed)) => continue,
                Some(Err(RequestAborted::Cancelled)) => break,
                Some(Ok(Ok(value))) => question.answer(value).await,
                Some(Ok(Err(error))) => question.answer_error(&error.message).await,
            }
            break;
        }
        self.lock().asking.remove(&key);
    }
}

impl Delivery for Asker {
    fn changed(&self, record: &TaskRecord, status_changed: bool) {
        if record.status.is_terminal()
            && let Some(token) = &self.progress_token
        {
            // The task's progress held back for a slow client goes before its end, or never.
            self.conn.sink.settle(&crate::session::progress_key(token));
        }
        if status_changed && !self.conn.is_closed() {
            let held = {
                let mut state = self.lock();
                state.held.as_mut().map(|held| {
                    // Not announced yet: only the latest status goes, once it is.
                    if record.status.is_terminal() && held.progress.take().is_some() {
                        self.conn.sink.lost();
                    }
                    held.status = Some(task_json(record));
                })
            };
            if held.is_some() {
                return self.ask_new(record);
            }
            // A client behind on its stream needs only each task's latest status.
            self.conn.sink.notify_latest(
                format!("task:{}", record.id),
                "notifications/tasks/status",
                task_json(record),
            );
        }
        self.ask_new(record);
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            if let Some(held) = &mut self.lock().held {
                // Only the latest goes once the task is announced: an earlier one held
                // back is dropped.
                let newer = (progress, total, message.map(str::to_owned));
                if held.progress.replace(newer).is_some() {
                    self.conn.sink.lost();
                }
                return;
            }
            send_progress(&self.conn.sink, token, progress, total, message);
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        Notifier {
            sink: self.conn.sink.clone(),
            progress_token: None,
            log: LogGate::Connection(Arc::clone(&self.conn)),
        }
        .log(level, logger, data);
    }

    fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    fn named_by(&self, conn: &Arc<Connection>) {
        // Only the session the task was announced to can show that it read the
        // announcement.
        if Arc::ptr_eq(&self.conn, conn) {
            self.acknowledge();
        }
    }

    /// Offers the stream of a waiting `tasks/result` for the task's questions.
    fn offer_stream(&self, conn: &Arc<Connection>, sink: &Sink, request: &RequestId) {
        let notify = {
            let mut state = self.lock();
            state.streams.push(Offered {
                conn: Arc::clone(conn),
                sink: sink.clone(),
                request: request.clone(),
            });
            Arc::clone(&state.offered)
        };
        notify.notify_waiters();
    }

    fn withdraw_stream(&self, conn: &Arc<Connection>, request: &RequestId) {
        self.lock()
            .streams
            .retain(|o| !(&o.request == request && Arc::ptr_eq(&o.conn, conn)));
    }
}

impl Asker {
    /// Starts asking the questions of `record` not asked yet.
    fn ask_new(&self, record: &TaskRecord) {
        if record.status.is_terminal() {
            return;
        }
        let new: Vec<(String, crate::model::InputRequest)> = {
            let mut state = self.lock();
            record
                .input_requests
                .iter()
                .filter(|(key, _)| state.asking.insert((*key).clone()))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect()
        };
        if new.is_empty() {
            return;
        }
        let (Some(this), Some(engine)) = (self.me.upgrade(), self.engine.upgrade()) else {
            return;
        };
        for (key, request) in new {
            let engine = Arc::clone(&engine);
            let (this, id) = (Arc::clone(&this), record.id.clone());
            tokio::spawn(async move {
                let question = ops::OpenQuestion::new(engine, id, key, this.owner.clone());
                this.ask(question, request).await;
            });
        }
    }
}
