//! The kill switch of task creation, per process: for the whole server or for one tool.
//!
//! While creation is off for a tool, this process creates no task of it and starts none
//! from the queue: a new call of a tool whose mode allows it (`optional`) runs
//! synchronously, any other is refused with [`Error::CreationOff`](crate::Error::CreationOff)
//! (`-32000` with `data.retryAfterMs`; on the 2026-07-28 HTTP wire a 503 with
//! `Retry-After`). Tasks that exist keep being served: read, listed, answered, cancelled,
//! watched, and those running here run on.
//!
//! Three ways to turn it off and on, which add up (creation is off when any of them says so):
//! - in code, with the [`TaskCreation`] handle of [`Server::creation`](crate::Server::creation)
//!   or [`Worker::creation`](crate::Worker::creation);
//! - with a signal, in processes that serve with the stock signal handling
//!   ([`Server::serve_stdio`](crate::Server::serve_stdio), `HttpHandle::run_until_signal`,
//!   [`Worker::run`](crate::Worker::run)): `SIGUSR1` pauses every tool, `SIGUSR2` resumes;
//! - with a file ([`ServerBuilder::pause_file`](crate::ServerBuilder::pause_file)), read every
//!   [`ServerBuilder::pause_file_interval`](crate::ServerBuilder::pause_file_interval): while
//!   it exists, creation is off for the tools it lists (one name a line, `#` starts a
//!   comment), or for every tool when it lists none.
//!
//! A process that is shutting down drains: creation is off for every tool and calls are
//! refused, not run synchronously, since the process is going away.

use crate::sync::LockExt;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Why a process creates no task of a tool right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CreationOff {
    /// The kill switch is on for the tool (or for the whole process): a call runs
    /// synchronously where the tool's mode allows.
    Paused,
    /// The process is draining (shutting down, or [`TaskCreation::drain`]): every call that
    /// would make a task is refused, so that the client goes to another process.
    Draining,
}

impl CreationOff {
    /// The name of the reason in errors (`data.creation`): `paused` or `draining`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Draining => "draining",
        }
    }
}

#[derive(Default)]
struct Switches {
    /// Paused from code or a signal: every tool.
    all: AtomicBool,
    /// Draining: no task is created, no call falls back to running synchronously.
    draining: AtomicBool,
    /// Paused from code: these tools.
    tools: Mutex<BTreeSet<String>>,
    /// What the pause file says: `None` when it is absent; an empty set pauses every tool.
    file: Mutex<Option<BTreeSet<String>>>,
}

/// The kill switch of task creation in one process. Cheap to clone; every clone switches
/// the same process. See the [module docs](self).
///
/// ```
/// # use mcp_tasks_runtime::{Server, creation::CreationOff};
/// let server = Server::builder().build().unwrap();
/// let creation = server.creation();
/// creation.pause_tool("reindex");
/// assert_eq!(creation.is_paused("reindex"), Some(CreationOff::Paused));
/// assert_eq!(creation.is_paused("other"), None);
/// creation.resume_tool("reindex");
/// creation.pause();
/// assert_eq!(creation.is_paused("other"), Some(CreationOff::Paused));
/// creation.resume();
/// assert_eq!(creation.is_paused("other"), None);
/// ```
#[derive(Clone, Default)]
pub struct TaskCreation {
    switches: Arc<Switches>,
}

impl std::fmt::Debug for TaskCreation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCreation")
            .field("paused", &self.switches.all.load(Ordering::Relaxed))
            .field("draining", &self.is_draining())
            .field("tools", &*self.switches.tools.locked())
            .field("file", &*self.switches.file.locked())
            .finish()
    }
}

impl TaskCreation {
    /// Turns task creation off for every tool (the kill switch).
    pub fn pause(&self) {
        if !self.switches.all.swap(true, Ordering::AcqRel) {
            tracing::warn!("task creation paused for every tool");
        }
    }

    /// Turns task creation back on for every tool paused with [`pause`](Self::pause) (the
    /// tools paused one by one stay paused, and so does what the pause file says).
    pub fn resume(&self) {
        if self.switches.all.swap(false, Ordering::AcqRel) {
            tracing::info!("task creation resumed");
        }
    }

    /// Turns task creation off for the tool `name`.
    pub fn pause_tool(&self, name: &str) {
        if self.switches.tools.locked().insert(name.to_owned()) {
            tracing::warn!(tool = name, "task creation paused for the tool");
        }
    }

    /// Turns task creation back on for the tool `name`.
    pub fn resume_tool(&self, name: &str) {
        if self.switches.tools.locked().remove(name) {
            tracing::info!(tool = name, "task creation resumed for the tool");
        }
    }

    /// The tools paused one by one from code.
    pub fn paused_tools(&self) -> Vec<String> {
        self.switches.tools.locked().iter().cloned().collect()
    }

    /// Stops creating tasks as a shutdown does, without exiting: calls that would make a
    /// task are refused (retryable), tasks that exist are served, and this process claims
    /// no queued task. A load balancer sends the callers to another process.
    pub fn drain(&self) {
        if !self.switches.draining.swap(true, Ordering::AcqRel) {
            tracing::info!("draining: no new task is created or started here");
        }
    }

    /// Ends a [`drain`](Self::drain).
    pub fn undrain(&self) {
        if self.switches.draining.swap(false, Ordering::AcqRel) {
            tracing::info!("no longer draining");
        }
    }

    /// Whether the process is draining.
    pub fn is_draining(&self) -> bool {
        self.switches.draining.load(Ordering::Acquire)
    }

    /// Whether task creation is off for the tool `name`, and why; `None` when it is on.
    pub fn is_paused(&self, name: &str) -> Option<CreationOff> {
        if self.is_draining() {
            return Some(CreationOff::Draining);
        }
        let paused = self.switches.all.load(Ordering::Acquire)
            || self.switches.tools.locked().contains(name)
            || self
                .switches
                .file
                .locked()
                .as_ref()
                .is_some_and(|tools| tools.is_empty() || tools.contains(name));
        paused.then_some(CreationOff::Paused)
    }

    /// Whether creation is off for every tool; otherwise the tools it is off for, which a
    /// claim leaves in the queue.
    pub(crate) fn paused_set(&self) -> Result<BTreeSet<String>, ()> {
        if self.is_draining() || self.switches.all.load(Ordering::Acquire) {
            return Err(());
        }
        let mut tools = self.switches.tools.locked().clone();
        if let Some(file) = &*self.switches.file.locked() {
            if file.is_empty() {
                return Err(());
            }
            tools.extend(file.iter().cloned());
        }
        Ok(tools)
    }

    /// Takes in what the pause file says now: `None` when there is no file.
    pub(crate) fn set_file(&self, tools: Option<BTreeSet<String>>) {
        let mut file = self.switches.file.locked();
        if *file != tools {
            match &tools {
                None => tracing::info!("the pause file is gone: task creation follows the code"),
                Some(t) if t.is_empty() => {
                    tracing::warn!("the pause file pauses task creation for every tool");
                }
                Some(t) => tracing::warn!(tools = ?t, "the pause file pauses task creation"),
            }
            *file = tools;
        }
    }
}

/// What a pause file says: the tools it names (empty: every tool).
pub(crate) fn parse_pause_file(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Reads the pause file: `None` when it does not exist; a file that cannot be read pauses
/// every tool (which is logged).
pub(crate) async fn read_pause_file(path: &std::path::Path) -> Option<BTreeSet<String>> {
    let file = path.to_owned();
    tokio::task::spawn_blocking(move || read_pause_file_now(&file))
        .await
        .unwrap_or_else(|_| Some(BTreeSet::new()))
}

/// [`read_pause_file`], on this thread.
pub(crate) fn read_pause_file_now(path: &std::path::Path) -> Option<BTreeSet<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(parse_pause_file(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the pause file; task creation is paused while it cannot be read");
            Some(BTreeSet::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switches_add_up() {
        let c = TaskCreation::default();
        assert_eq!(c.is_paused("a"), None);
        assert_eq!(c.paused_set(), Ok(BTreeSet::new()));
        c.pause_tool("a");
        assert_eq!(c.is_paused("a"), Some(CreationOff::Paused));
        assert_eq!(c.is_paused("b"), None);
        c.set_file(Some(parse_pause_file("# off\nb  # the bad one\n\n")));
        assert_eq!(c.is_paused("b"), Some(CreationOff::Paused));
        assert_eq!(
            c.paused_set(),
            Ok(["a".to_owned(), "b".to_owned()].into_iter().collect())
        );
        c.set_file(Some(parse_pause_file("# every tool\n")));
        assert_eq!(c.is_paused("z"), Some(CreationOff::Paused));
        assert_eq!(c.paused_set(), Err(()));
        c.set_file(None);
        c.resume_tool("a");
        assert_eq!(c.is_paused("a"), None);
        c.pause();
        assert_eq!(c.paused_set(), Err(()));
        c.drain();
        assert_eq!(c.is_paused("a"), Some(CreationOff::Draining));
        c.resume();
        c.undrain();
        assert_eq!(c.is_paused("a"), None);
    }
}
