//! The store behind the engine, object-safe.

use crate::context::BoxFuture;
use crate::error::Error;
use crate::store::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore,
};
use crate::task::TaskRecord;
use std::sync::Arc;
use std::time::SystemTime;

/// [`TaskStore`] and [`ClaimStore`] with boxed futures, so the engine can hold any backend.
pub(crate) trait DynStore: Send + Sync {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>>;
    fn create_with_id(
        &self,
        record: TaskRecord,
        id: Arc<str>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;
    fn get_shared<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<TaskRecord>>, StoreError>>;
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected: u64,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;
    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>>;
    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        until: SystemTime,
        limit: usize,
        skip: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>>;
    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>>;
    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Changes, StoreError>>;
    fn changed(&self) -> BoxFuture<'_, ()>;
    fn is_shared(&self) -> bool;
    fn scan<'a>(
        &'a self,
        filter: &'a TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>>;
    fn count(&self) -> BoxFuture<'_, Result<TaskCounts, StoreError>>;
}

impl<S: TaskStore + ClaimStore> DynStore for S {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(TaskStore::create(self, record))
    }
    fn create_with_id(
        &self,
        record: TaskRecord,
        id: Arc<str>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(TaskStore::create_with_id(self, record, id))
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(TaskStore::get(self, id))
    }
    fn get_shared<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<TaskRecord>>, StoreError>> {
        Box::pin(TaskStore::get_shared(self, id))
    }
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(TaskStore::delete(self, id))
    }
    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected: u64,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(TaskStore::compare_and_set(self, record, expected))
    }
    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>> {
        Box::pin(TaskStore::list(self, owner, cursor, limit))
    }
    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(TaskStore::expire(self, now, limit))
    }
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        until: SystemTime,
        limit: usize,
        skip: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(ClaimStore::claim(self, worker, until, limit, skip))
    }
    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(ClaimStore::lapsed(self, now, limit))
    }
    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Changes, StoreError>> {
        Box::pin(ClaimStore::changes(self, cursor, limit))
    }
    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(ClaimStore::changed(self))
    }
    fn is_shared(&self) -> bool {
        ClaimStore::is_shared(self)
    }
    fn scan<'a>(
        &'a self,
        filter: &'a TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>> {
        Box::pin(ScanTasks::scan(self, filter, cursor, limit))
    }
    fn count(&self) -> BoxFuture<'_, Result<TaskCounts, StoreError>> {
        Box::pin(ScanTasks::count(self))
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            // The store is out of reach, or its answer was lost: the server cannot answer
            // now, and may later.
            StoreError::Unavailable(cause) => Error::StoreUnavailable(cause),
            e @ StoreError::Ambiguous(_) => Error::StoreUnavailable(e.to_string()),
            other => Error::Internal(other.to_string()),
        }
    }
}
