//! Task stores: where task records live.
//!
//! [`TaskStore`] is the small core every backend implements: create, get, compare-and-set,
//! delete, owner-scoped listing, expiry and the unfinished scan. [`ClaimStore`] adds what
//! several processes sharing one store need: claims of queued tasks, the scan for lapsed
//! leases and a feed of changed tasks. The in-memory store is the reference backend;
//! durable backends live behind cargo features. Every backend must pass the shared suite in
//! [`testing::check_store`] unchanged.

use crate::task::TaskRecord;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod codec;
mod memory;
mod paging;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod remote;
mod scan;
mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(all(feature = "redis", any(test, feature = "testing")))]
pub use self::redis::testing::{RedisServer, TestRedis};
#[cfg(feature = "redis")]
pub use self::redis::{RedisDurability, RedisOptions, RedisTaskStore};
pub use memory::MemoryTaskStore;
#[cfg(all(feature = "postgres", any(test, feature = "testing")))]
pub use postgres::testing::TestDatabase;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresTaskStore};
pub use scan::{ALL_STATUSES, ScanTasks, TaskCounts, TaskFilter, TimeRange};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteTaskStore, Synchronous};

/// Why a store operation failed.
///
/// Two errors are equal when they are of the same kind and say the same thing, down to the
/// message of a [`Backend`](Self::Backend) failure's source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// `create` was given an id that already exists.
    #[error("task {0} already exists")]
    Duplicate(String),
    /// `create` was given a record with a [`unique_key`](TaskRecord::unique_key) that an
    /// unfinished task already holds: nothing was stored. Holds the id of that task.
    #[error("an unfinished task ({0}) holds the same unique key")]
    Taken(String),
    /// A listing cursor the store did not make.
    #[error("invalid cursor {0:?}")]
    InvalidCursor(String),
    /// The backend answered with a failure, or the request cannot be stored (a constraint,
    /// a value the backend refuses): nothing was changed, and the same request fails again.
    #[error("task store failed: {message}")]
    Backend {
        /// What failed, in words that name the problem (the source's words included).
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<BackendSource>,
    },
    /// The store could not be reached, or did not answer, and nothing was changed: the
    /// connection is down and being re-established, no connection could be had in time, or
    /// a read got no answer. Trying again later may succeed.
    #[error("task store unavailable: {0}")]
    Unavailable(String),
    /// A write was sent, then its answer was lost (a timeout, or the connection dropped
    /// before the commit was confirmed): it may or may not have been applied. A create
    /// of the same id settles which: it either succeeds now or finds the first one.
    #[error("task store write of unknown outcome (it may or may not have been applied): {0}")]
    Ambiguous(String),
}

impl StoreError {
    /// A [`Backend`](Self::Backend) failure with no underlying error.
    pub fn backend(message: impl Into<String>) -> Self {
        Self::Backend {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Backend`](Self::Backend) failure caused by the backend's error `source`.
    pub fn backend_caused_by(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            message: message.into(),
            source: Some(BackendSource(Arc::from(source.into()))),
        }
    }

    /// `true` when trying again later may succeed: the store was out of reach
    /// ([`Unavailable`](Self::Unavailable)) or its answer was lost
    /// ([`Ambiguous`](Self::Ambiguous)).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Ambiguous(_))
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Duplicate(a), Self::Duplicate(b))
            | (Self::Taken(a), Self::Taken(b))
            | (Self::InvalidCursor(a), Self::InvalidCursor(b))
            | (Self::Unavailable(a), Self::Unavailable(b))
            | (Self::Ambiguous(a), Self::Ambiguous(b)) => a == b,
            (
                Self::Backend { message, source },
                Self::Backend {
                    message: other_message,
                    source: other_source,
                },
            ) => {
                message == other_message
                    && source.as_deref().map(ToString::to_string)
                        == other_source.as_deref().map(ToString::to_string)
            }
            _ => false,
        }
    }
}

impl Eq for StoreError {}

/// The backend's own error behind a [`StoreError::Backend`], shared by the error's clones.
/// It derefs to the error itself, and the chain of [`std::error::Error::source`] leads
/// from the [`StoreError`] straight to it, so it can be downcast to the backend's type.
#[derive(Clone)]
pub struct BackendSource(Arc<dyn std::error::Error + Send + Sync>);

impl std::ops::Deref for BackendSource {
    type Target = dyn std::error::Error + Send + Sync;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for BackendSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// One page of an owner's tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskPage {
    /// The tasks, oldest first.
    pub tasks: Vec<TaskRecord>,
    /// The cursor of the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A place to keep tasks.
///
/// Every method is safe to call concurrently. A write is visible to every later `get`
/// (read-your-writes), from this process and from any other process sharing the store.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task. When this returns `Ok`, `get` finds it. The record's `version`
    /// is kept as given.
    fn create(&self, record: TaskRecord) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`create`](Self::create), with the record's id as the caller shares it (`id` equals
    /// `record.id`): a store that keeps ids in memory may keep this one rather than a copy
    /// of its own (the memory store does, so that a task's id is kept once for the engine
    /// and the store). The default calls `create`.
    fn create_with_id(
        &self,
        record: TaskRecord,
        id: Arc<str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        drop(id);
        self.create(record)
    }

    /// The task with this id, or `None`. Expired tasks may still be returned until the
    /// sweeper removes them; callers check `expires_at` themselves.
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<TaskRecord>, StoreError>> + Send;

    /// [`get`](Self::get), shared: a store that keeps its records behind an [`Arc`] hands
    /// out a reference count instead of a copy (the memory store does). The default wraps
    /// what `get` returns.
    fn get_shared(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Arc<TaskRecord>>, StoreError>> + Send {
        let get = self.get(id);
        async move { Ok(get.await?.map(Arc::new)) }
    }

    /// Replaces the stored task with `record` if the stored version is `expected_version`.
    /// The stored copy gets version `expected_version + 1` whatever `record.version` says.
    /// Returns `Ok(false)`, and changes nothing, when the version differs or the task is gone.
    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected_version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes a task. Returns whether it existed.
    fn delete(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The tasks whose owner equals `owner`, oldest first, at most `limit` per page,
    /// starting after `cursor` (a `next_cursor` this store returned).
    fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<TaskPage, StoreError>> + Send;

    /// Deletes up to `limit` tasks whose [`TaskRecord::expires_at`] is at or before `now` and
    /// returns their ids. Tasks that are still running have no expiry and are never deleted.
    /// Must not scan tasks that have not expired.
    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Every task that is not terminal (`working` or `input_required`).
    fn unfinished(&self) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send;
}

/// Ids of tasks written since a cursor, from [`ClaimStore::changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The tasks written (created or updated) after the cursor, by any process; a task may
    /// appear more than once. Deleted tasks need not appear.
    pub ids: Vec<String>,
    /// The cursor to pass next time.
    pub cursor: u64,
}

/// What the engine needs from a store that several processes may share: claims with leases,
/// the scan for leases that lapsed, and a feed of changes made by other processes.
///
/// Leases and fencing are fields of the [`TaskRecord`] ([`TaskRecord::lease`],
/// [`TaskRecord::epoch`]); renewals and fenced writes are compare-and-set writes whose
/// change checks the lease first, so they need nothing more from the store. What a backend
/// adds here are the atomic claim and the two scans, each served by an index.
///
/// Every such store also lists and counts across owners ([`ScanTasks`]), for operators and
/// [`Server::tasks`](crate::Server::tasks).
pub trait ClaimStore: TaskStore + ScanTasks {
    /// Claims up to `limit` queued tasks ([`TaskRecord::is_queued`]), oldest first, leaving
    /// out tasks of the tools in `skip`. Each claimed task gets the lease
    /// `Lease { worker, until }`, its `epoch` and its `version` bumped by one, and is
    /// returned as stored. Two claims, in any processes, never return the same task.
    fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send;

    /// Up to `limit` unfinished tasks whose lease ended at or before `now`, earliest end
    /// first. Must not scan tasks whose lease is still running.
    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send;

    /// The ids of up to `limit` tasks written after `cursor` by any process sharing the
    /// store, and the next cursor. `None` asks for no ids, only the current cursor. A store
    /// only one process can use returns no ids: that process sees its own writes.
    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Changes, StoreError>> + Send;

    /// Resolves when [`changes`](Self::changes) may have news, so the engine can read it
    /// before its next poll. Only a hint: it may resolve when there is nothing new, and
    /// the engine polls anyway. The default never resolves.
    fn changed(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// `true` when other processes may share this store, so the engine must watch
    /// [`changes`](Self::changes) to learn what they did.
    fn is_shared(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use std::error::Error as _;

    #[test]
    fn a_backend_failure_keeps_its_source_and_its_words() {
        let io = std::io::Error::other("disk on fire");
        let error = StoreError::backend_caused_by("cannot write: disk on fire", io);
        assert_eq!(
            error.to_string(),
            "task store failed: cannot write: disk on fire"
        );
        let source = error.source().expect("a source");
        assert!(
            source.downcast_ref::<std::io::Error>().is_some(),
            "{source:?}"
        );
        let copy = error.clone();
        assert!(copy.source().is_some());
        assert_eq!(copy, error);
        assert_ne!(error, StoreError::backend("cannot write: disk on fire"));
        assert_eq!(StoreError::backend("x"), StoreError::backend("x"));
        assert!(StoreError::backend("x").source().is_none());
        assert_ne!(
            StoreError::backend("x"),
            StoreError::Unavailable("x".into())
        );
    }
}
