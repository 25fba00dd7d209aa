//! Progress and log notifications of a running call: who may see a log line, and where a
//! call's progress and logs go while its request runs.

use crate::model::LogLevel;
use crate::session::{Connection, Sink, progress_key};
use serde_json::{Value, json};
use std::sync::Arc;

/// Who decides whether a log line reaches the client.
#[derive(Clone, Debug)]
pub(crate) enum LogGate {
    /// The connection's level, set with `logging/setLevel` (2025-11-25).
    Connection(Arc<Connection>),
    /// The request's `_meta` log level; `None` sends nothing (2026-07-28).
    Request(Option<LogLevel>),
}

impl LogGate {
    fn allows(&self, level: LogLevel) -> bool {
        match self {
            Self::Connection(c) => c.wants_log(level),
            Self::Request(min) => min.is_some_and(|m| level >= m),
        }
    }
}

/// Where a plain (non-task) call sends its notifications, for as long as its request runs:
/// dropped, it settles the request's progress (what is held back for a slow client goes now
/// or never, so that none follows the response).
#[derive(Debug)]
pub(crate) struct Notifier {
    pub(crate) sink: Sink,
    pub(crate) progress_token: Option<Value>,
    pub(crate) log: LogGate,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(token) = &self.progress_token {
            self.sink.settle(&progress_key(token));
        }
    }
}

/// Sends a `notifications/progress` for `token` on `sink`.
pub(crate) fn send_progress(
    sink: &Sink,
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) {
    let mut params = json!({ "progressToken": token, "progress": progress });
    if let Some(total) = total {
        params["total"] = total.into();
    }
    if let Some(message) = message {
        params["message"] = message.into();
    }
    sink.notify_latest(progress_key(token), "notifications/progress", params);
}

impl Notifier {
    pub(crate) fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            send_progress(&self.sink, token, progress, total, message);
        }
    }

    pub(crate) fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if !self.log.allows(level) {
            return;
        }
        let mut params = json!({ "level": level, "data": data });
        if let Some(logger) = logger {
            params["logger"] = logger.into();
        }
        self.sink.notify_droppable("notifications/message", params);
    }
}
