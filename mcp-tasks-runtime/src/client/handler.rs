//! Answering the server's questions: elicitation, sampling and roots, whichever era asks.
//!
//! In 2025-11-25 a question is a server-to-client request tagged with its task; in
//! 2026-07-28 it is an entry of a task's `inputRequests` (answered with `tasks/update`) or of
//! an `InputRequiredResult` (answered by retrying the call). Either way the client turns it
//! into one [`Question`] and asks the registered [`InputHandler`].

use crate::sync::LockExt;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// One question from the server.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    /// The request's params (`message` and `requestedSchema` for a form elicitation, …).
    pub params: Value,
    /// The task that asks, when a task asks.
    pub task_id: Option<String>,
}

impl Question {
    /// The message to show, for an elicitation.
    pub fn message(&self) -> Option<&str> {
        self.params.get("message").and_then(Value::as_str)
    }

    /// The schema of the requested answer, for a form elicitation.
    pub fn requested_schema(&self) -> Option<&Value> {
        self.params.get("requestedSchema")
    }
}

/// A boxed future, as [`InputHandler::answer`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Answers the server's questions.
///
/// The answer is the result the equivalent standalone request would have had: an
/// `ElicitResult` (`{"action": "accept", "content": {…}}`), a `CreateMessageResult` or a
/// `ListRootsResult`. An `Err` is sent back to the server as a JSON-RPC error.
pub trait InputHandler: Send + Sync + 'static {
    /// Answers one question.
    fn answer<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<Value, String>>;

    /// The client capabilities to declare for the questions this handler answers.
    fn capabilities(&self) -> Value {
        json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}})
    }
}

/// An [`InputHandler`] made of a closure.
pub struct FnHandler<F>(pub F);

impl<F> std::fmt::Debug for FnHandler<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnHandler")
    }
}

impl<F, Fut> InputHandler for FnHandler<F>
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, String>> + Send + 'static,
{
    fn answer<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin((self.0)(question.clone()))
    }
}

/// Scripted answers, given in order, for tests: each question takes the next answer for its
/// method, and a question with no answer left is refused with an error naming it.
///
/// ```
/// use mcp_tasks_runtime::client::Scripted;
/// use serde_json::json;
///
/// let answers = Scripted::new()
///     .accept(json!({"confirm": true}))
///     .sample_text("four");
/// assert_eq!(answers.asked().len(), 0);
/// ```
#[derive(Debug, Default)]
pub struct Scripted {
    answers: Mutex<Vec<(String, VecDeque<Value>)>>,
    asked: Mutex<Vec<Question>>,
}

impl Scripted {
    /// No answers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an answer to the next question of `method`.
    pub fn answer(self, method: &str, result: Value) -> Self {
        {
            let mut answers = self.answers.locked();
            match answers.iter_mut().find(|(m, _)| m == method) {
                Some((_, queue)) => queue.push_back(result),
                None => answers.push((method.to_owned(), VecDeque::from([result]))),
            }
        }
        self
    }

    /// Accepts the next elicitation with `content`.
    pub fn accept(self, content: Value) -> Self {
        self.answer(
            "elicitation/create",
            json!({"action": "accept", "content": content}),
        )
    }

    /// Declines the next elicitation.
    pub fn decline(self) -> Self {
        self.answer("elicitation/create", json!({"action": "decline"}))
    }

    /// Answers the next sampling request with a text message.
    pub fn sample_text(self, text: &str) -> Self {
        self.answer(
            "sampling/createMessage",
            json!({"role": "assistant", "content": {"type": "text", "text": text},
                   "model": "scripted", "stopReason": "endTurn"}),
        )
    }

    /// Answers the next `roots/list` with these root URIs.
    pub fn roots(self, uris: &[&str]) -> Self {
        let roots: Vec<Value> = uris.iter().map(|u| json!({"uri": u})).collect();
        self.answer("roots/list", json!({ "roots": roots }))
    }

    /// Every question asked so far, in order.
    pub fn asked(&self) -> Vec<Question> {
        self.asked.locked().clone()
    }
}

impl InputHandler for Scripted {
    fn answer<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<Value, String>> {
        self.asked.locked().push(question.clone());
        let next = self
            .answers
            .locked()
            .iter_mut()
            .find(|(m, _)| *m == question.method)
            .and_then(|(_, queue)| queue.pop_front());
        let method = question.method.clone();
        Box::pin(async move { next.ok_or_else(|| format!("no scripted answer left for {method}")) })
    }
}
