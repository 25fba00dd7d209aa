//! Where the questions of a synchronous call go: a question the client has not answered yet
//! suspends the call; and the backend of a call with a prelude, which becomes a task.

use crate::context::{BoxFuture, CallBackend, StepError};
use crate::error::{Error, ToolError};
use crate::model::{InputRequest, JsonObject, LogLevel, input_key};
use crate::notify::{LogGate, Notifier};
use crate::sync::LockExt;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Questions {
    /// Answers given before their question was asked (a rerun's earlier answers, or
    /// `inputResponses` on the first round).
    given: BTreeMap<String, Value>,
    /// Questions asked and not answered yet, with where their answer goes.
    open: BTreeMap<String, (InputRequest, oneshot::Sender<Value>)>,
    /// Every answer the call received, by key.
    used: BTreeMap<String, Value>,
}

impl Questions {
    /// Forgets questions nobody waits for any more (the tool stopped awaiting them).
    fn prune(&mut self) {
        self.open.retain(|_, (_, tx)| !tx.is_closed());
    }
}

/// 2026-07-28 plain call: a question the client has not answered yet suspends the call, and
/// the retry's `inputResponses` resume it. Keys are numbered in the order the tool asks, so a
/// rerun that asks the same questions in the same order finds the answers it was given.
pub(crate) struct MrtrBackend {
    questions: Mutex<Questions>,
    counter: AtomicUsize,
    notifier: Mutex<Notifier>,
    cancel: CancellationToken,
}

impl MrtrBackend {
    pub(crate) fn new(
        given: BTreeMap<String, Value>,
        notifier: Notifier,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            questions: Mutex::new(Questions {
                given,
                ..Questions::default()
            }),
            counter: AtomicUsize::new(0),
            notifier: Mutex::new(notifier),
            cancel,
        }
    }

    fn questions(&self) -> std::sync::MutexGuard<'_, Questions> {
        self.questions.locked()
    }

    /// Sends this round's progress and logs to this round's request.
    pub(crate) fn set_notifier(&self, notifier: Notifier) {
        *self.notifier.locked() = notifier;
    }

    /// This round's answer (its questions) is going out: the progress it held back for a
    /// slow client is settled, and what the call reports until the next round begins goes
    /// nowhere, since no request of the client's waits for it.
    pub(crate) fn end_round(&self) {
        let mut notifier = self.notifier.locked();
        let sink = notifier.sink.clone();
        *notifier = Notifier {
            sink,
            progress_token: None,
            log: LogGate::Request(None),
        };
    }

    /// Hands the retry's answers to the questions waiting for them; answers to keys that are
    /// not open (never asked, already answered) are ignored.
    pub(crate) fn answer(&self, responses: &JsonObject) {
        let mut q = self.questions();
        for (key, answer) in responses {
            if let Some((_, tx)) = q.open.remove(key)
                && tx.send(answer.clone()).is_ok()
            {
                q.used.insert(key.clone(), answer.clone());
            }
        }
    }

    /// Checks a retry's answers against the open questions they answer (see
    /// [`check_answer`](crate::schema::check_answer)); `Err` names the key and the field.
    pub(crate) fn check(&self, responses: &JsonObject) -> Result<(), Error> {
        let q = self.questions();
        for (key, answer) in responses {
            if let Some((question, _)) = q.open.get(key)
                && let Err(problem) = crate::schema::check_answer(question, answer)
            {
                return Err(Error::InvalidParams(format!(
                    "`inputResponses[{key:?}]`: {problem}"
                )));
            }
        }
        Ok(())
    }

    /// Every question still waiting for an answer.
    pub(crate) fn open_questions(&self) -> BTreeMap<String, InputRequest> {
        let mut q = self.questions();
        q.prune();
        q.open
            .iter()
            .map(|(k, (request, _))| (k.clone(), request.clone()))
            .collect()
    }

    /// `true` while a question waits for an answer.
    pub(super) fn has_open(&self) -> bool {
        let mut q = self.questions();
        q.prune();
        !q.open.is_empty()
    }

    /// Every answer the call received, to carry into a rerun.
    pub(crate) fn used_answers(&self) -> BTreeMap<String, Value> {
        self.questions().used.clone()
    }
}

impl CallBackend for MrtrBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let key = request
            .key
            .clone()
            .unwrap_or_else(|| input_key(&request.method, n));
        let mut q = self.questions();
        // An answer given ahead (a rerun's) that does not fit is not used: the question is
        // asked again.
        if let Some(answer) = q.given.remove(&key)
            && crate::schema::check_answer(&request, &answer).is_ok()
        {
            q.used.insert(key, answer.clone());
            return Box::pin(async move { Ok(answer) });
        }
        q.prune();
        if q.open.contains_key(&key) {
            return Box::pin(async move {
                Err(ToolError::new(format!(
                    "two open questions of one call share the key {key:?}"
                )))
            });
        }
        let (tx, rx) = oneshot::channel();
        q.open.insert(key, (request, tx));
        let cancel = self.cancel.clone();
        Box::pin(async move {
            tokio::select! {
                answer = rx => answer.map_err(|_| ToolError::cancelled()),
                () = cancel.cancelled() => Err(ToolError::cancelled()),
            }
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notifier.locked().progress(progress, total, message);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.locked().log(level, logger, data);
    }
}

/// The backend of a call with a prelude (2026-07-28): questions suspend it like a plain call
/// until it becomes a task; after that they go to the task.
pub(crate) struct Prelude {
    pub(crate) mrtr: Arc<MrtrBackend>,
    pub(crate) task: OnceLock<Arc<dyn CallBackend>>,
}

impl CallBackend for Prelude {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        match self.task.get() {
            Some(task) => task.input(request),
            None => self.mrtr.input(request),
        }
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        match self.task.get() {
            Some(task) => task.progress(progress, total, message),
            None => self.mrtr.progress(progress, total, message),
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        match self.task.get() {
            Some(task) => task.log(level, logger, data),
            None => self.mrtr.log(level, logger, data),
        }
    }

    fn step_output(&self, name: &str) -> Option<Value> {
        self.task.get()?.step_output(name)
    }

    fn store_step(&self, name: &str, output: Value) -> BoxFuture<'_, Result<(), StepError>> {
        match self.task.get() {
            Some(task) => task.store_step(name, output),
            None => self.mrtr.store_step(name, output),
        }
    }

    fn detach(&self) -> BoxFuture<'_, ()> {
        if self.task.get().is_some() {
            return Box::pin(async {});
        }
        // Not a task yet: give up one poll, which turns the call into one.
        let mut yielded = false;
        Box::pin(std::future::poll_fn(move |cx| {
            if yielded || self.task.get().is_some() {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }))
    }
}
