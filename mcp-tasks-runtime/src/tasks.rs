//! The task face: everything outside the protocol that reads or manages tasks — an
//! operator console, an admin command, an authorization check, a user's own code — goes
//! through [`Tasks`], and each operation exists once.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_tasks_runtime::store::TaskFilter;
//! use mcp_tasks_runtime::task::TaskStatus;
//! use mcp_tasks_runtime::tasks::Viewer;
//! use mcp_tasks_runtime::Server;
//!
//! let server = Server::builder().build()?;
//! let tasks = server.tasks();
//! let admin = Viewer::admin("ops-oncall");
//!
//! // Cancel every running task of one tenant.
//! let filter = TaskFilter::new()
//!     .owner("principal:tenant-42")
//!     .statuses([TaskStatus::Working, TaskStatus::InputRequired]);
//! let mut cursor = None;
//! loop {
//!     let page = tasks.list(&admin, &filter, cursor.as_deref(), 100).await?;
//!     for task in &page.tasks {
//!         tasks.cancel(&admin, &task.id).await?;
//!     }
//!     match page.next_cursor {
//!         Some(next) => cursor = Some(next),
//!         None => break,
//!     }
//! }
//! # Ok(()) }
//! ```

use crate::engine::{Access, DynStore, Engine, TaskWatch, is_expired, listing_error, unexpired};
use crate::error::Error;
use crate::model::JsonObject;
use crate::store::{ClaimStore, TaskCounts, TaskFilter, TaskPage};
use crate::task::TaskRecord;
use std::fmt;
use std::sync::Arc;

mod open;
pub use open::OpenStoreError;

/// Who looks at tasks through [`Tasks`], which decides what is visible.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Viewer {
    /// The owner of tasks, by owner key ([`TaskRecord::owner`]: `principal:SUBJECT` for an
    /// authenticated client, `session:ID` for an anonymous session): exactly what the MCP
    /// methods show that owner — its own tasks, and anonymous tasks by their id.
    Owner(String),
    /// An operator, named for the record of who cancelled or answered: every task.
    Admin(String),
}

impl Viewer {
    /// The owner an authenticated `subject` is.
    pub fn principal(subject: &str) -> Self {
        Self::Owner(format!("principal:{subject}"))
    }

    /// An operator named `name`.
    pub fn admin(name: impl Into<String>) -> Self {
        Self::Admin(name.into())
    }

    fn access(&self) -> Access<'_> {
        match self {
            Self::Owner(owner) => Access::Owner(Some(owner)),
            Self::Admin(name) => Access::Admin(name),
        }
    }
}

/// The public door to a server's tasks: get, list across owners with a filter, count,
/// cancel, answer a question, rerun, and follow a task's changes. From
/// [`Server::tasks`](crate::Server::tasks) or [`Worker::tasks`](crate::Worker::tasks), or
/// read-only over a store alone with [`Tasks::read_only`].
///
/// What is visible depends on the [`Viewer`]. Tasks that expired are never returned.
#[derive(Clone)]
pub struct Tasks {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Engine(Arc<Engine>),
    Store(Arc<dyn DynStore>),
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.inner {
            Inner::Engine(_) => "engine",
            Inner::Store(_) => "read-only store",
        };
        f.debug_struct("Tasks").field("over", &kind).finish()
    }
}

fn read_only() -> Error {
    Error::InvalidRequest("this task face is read-only: it has a store but no engine".into())
}

impl Tasks {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Self {
            inner: Inner::Engine(engine),
        }
    }

    /// A face that only reads, straight from `store`, for a process that serves no MCP and
    /// runs no tools (an admin command on the same database). Every viewer sees what an
    /// admin sees; cancel, answer, rerun and follow answer an error.
    pub fn read_only(store: impl ClaimStore) -> Self {
        Self {
            inner: Inner::Store(Arc::new(store)),
        }
    }

    /// The task, if it exists, has not expired and `viewer` may see it.
    pub async fn get(&self, viewer: &Viewer, id: &str) -> Result<Option<TaskRecord>, Error> {
        self.get_by(viewer.access(), id).await
    }

    /// [`Tasks::get`] as `access` (the MCP methods' caller, who may be anonymous).
    pub(crate) async fn get_by(
        &self,
        access: Access<'_>,
        id: &str,
    ) -> Result<Option<TaskRecord>, Error> {
        Ok(self
            .get_shared_by(access, id)
            .await?
            .map(Arc::unwrap_or_clone))
    }

    /// [`Tasks::get_by`], shared: no copy of the record where the store keeps it behind
    /// an `Arc`.
    pub(crate) async fn get_shared_by(
        &self,
        access: Access<'_>,
        id: &str,
    ) -> Result<Option<Arc<TaskRecord>>, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.get_shared_as(id, access).await,
            Inner::Store(store) => Ok(store
                .get(id)
                .await?
                .filter(|r| !is_expired(r))
                .map(Arc::new)),
        }
    }

    /// One page of the tasks that match `filter` and `viewer` may list, newest first, at
    /// most `limit`; pass the page's `next_cursor` for the next one. An owner lists only
    /// its own tasks. A page may be shorter than `limit` (even empty) while `next_cursor`
    /// is set: see [`ScanTasks`](crate::store::ScanTasks).
    pub async fn list(
        &self,
        viewer: &Viewer,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.scan(viewer.access(), filter, cursor, limit).await,
            Inner::Store(store) => unexpired(
                store
                    .scan(filter, cursor, limit)
                    .await
                    .map_err(listing_error)?,
            ),
        }
    }

    /// How many tasks `viewer` may list, by status and tool.
    pub async fn count(&self, viewer: &Viewer) -> Result<TaskCounts, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.count(viewer.access()).await,
            Inner::Store(store) => Ok(store.count().await?),
        }
    }

    /// Cancels a task: the task afterwards and whether this call cancelled it (`false` when
    /// it had already ended); `None` when `viewer` may not see it. Whichever process runs
    /// the tool stops it.
    pub async fn cancel(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        self.cancel_by(viewer.access(), id).await
    }

    /// [`Tasks::cancel`] as `access`.
    pub(crate) async fn cancel_by(
        &self,
        access: Access<'_>,
        id: &str,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.cancel_as(id, access).await,
            Inner::Store(_) => Err(read_only()),
        }
    }

    /// Answers a task's open questions (`responses` by question key, each the content the
    /// client would send); keys that are not open are ignored. `None` when `viewer` may not
    /// see the task. An admin's answer is logged with the admin's name.
    pub async fn answer(
        &self,
        viewer: &Viewer,
        id: &str,
        responses: &JsonObject,
    ) -> Result<Option<TaskRecord>, Error> {
        self.answer_by(viewer.access(), id, responses).await
    }

    /// [`Tasks::answer`] as `access`.
    pub(crate) async fn answer_by(
        &self,
        access: Access<'_>,
        id: &str,
        responses: &JsonObject,
    ) -> Result<Option<TaskRecord>, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.answer_as(id, access, responses).await,
            Inner::Store(_) => Err(read_only()),
        }
    }

    /// One page of the tasks whose owner is `owner` (`None`: the tasks without one), oldest
    /// first, at most `limit`, after `cursor`: the listing of the MCP `tasks/list`.
    pub(crate) async fn list_owned(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.list(owner, cursor, limit).await,
            Inner::Store(store) => unexpired(
                store
                    .list(owner, cursor, limit)
                    .await
                    .map_err(listing_error)?,
            ),
        }
    }

    /// Runs a finished task's tool again with the same arguments, as a new task of the same
    /// owner, and returns it; only for tools that rerun after a restart (`on_restart =
    /// "rerun"`, declared idempotent or made of durable steps). `None` when `viewer` may not
    /// see the task.
    pub async fn rerun(&self, viewer: &Viewer, id: &str) -> Result<Option<TaskRecord>, Error> {
        match &self.inner {
            Inner::Engine(engine) => engine.rerun(id, viewer.access()).await,
            Inner::Store(_) => Err(read_only()),
        }
    }

    /// Follows a task: [`TaskFollower::next`] yields the task as it is now, then each later
    /// version this process learns of (its own writes, and other processes' through the
    /// store), until it ends.
    pub fn follow(&self, viewer: &Viewer, id: &str) -> Result<TaskFollower, Error> {
        match &self.inner {
            Inner::Engine(engine) => Ok(TaskFollower {
                engine: Arc::clone(engine),
                viewer: viewer.clone(),
                id: id.to_owned(),
                watch: engine.watch(id),
                last: None,
                ended: false,
            }),
            Inner::Store(_) => Err(read_only()),
        }
    }
}

/// The versions of one task, from [`Tasks::follow`].
pub struct TaskFollower {
    engine: Arc<Engine>,
    viewer: Viewer,
    id: String,
    watch: TaskWatch,
    last: Option<u64>,
    ended: bool,
}

impl fmt::Debug for TaskFollower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskFollower")
            .field("id", &self.id)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl TaskFollower {
    /// The next version of the task; `None` after its terminal version, or when it is gone
    /// or not visible to the viewer.
    pub async fn next(&mut self) -> Option<Result<TaskRecord, Error>> {
        if self.ended {
            return None;
        }
        loop {
            let record = match self.engine.get_as(&self.id, self.viewer.access()).await {
                Ok(Some(record)) => record,
                Ok(None) => {
                    self.ended = true;
                    return None;
                }
                Err(e) => return Some(Err(e)),
            };
            if self.last != Some(record.version) {
                self.last = Some(record.version);
                self.ended = record.status.is_terminal();
                return Some(Ok(record));
            }
            self.watch.changed(record.poll_interval).await;
        }
    }
}
