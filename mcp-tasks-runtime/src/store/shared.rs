//! A store behind an [`Arc`] is a store: several servers (or a server and a test) in one
//! process can use one store value, each holding a clone of the `Arc`.

use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore,
};
use crate::task::TaskRecord;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

impl<S: TaskStore> TaskStore for Arc<S> {
    fn create(&self, record: TaskRecord) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).create(record)
    }

    fn create_with_id(
        &self,
        record: TaskRecord,
        id: Arc<str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).create_with_id(record, id)
    }

    fn get(&self, id: &str) -> impl Future<Output = Result<Option<TaskRecord>, StoreError>> + Send {
        (**self).get(id)
    }

    fn get_shared(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Arc<TaskRecord>>, StoreError>> + Send {
        (**self).get_shared(id)
    }

    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected_version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).compare_and_set(record, expected_version)
    }

    fn delete(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).delete(id)
    }

    fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<TaskPage, StoreError>> + Send {
        (**self).list(owner, cursor, limit)
    }

    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        (**self).expire(now, limit)
    }

    fn unfinished(&self) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send {
        (**self).unfinished()
    }
}

impl<S: ScanTasks> ScanTasks for Arc<S> {
    fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<TaskPage, StoreError>> + Send {
        (**self).scan(filter, cursor, limit)
    }

    fn count(&self) -> impl Future<Output = Result<TaskCounts, StoreError>> + Send {
        (**self).count()
    }
}

impl<S: ClaimStore> ClaimStore for Arc<S> {
    fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send {
        (**self).claim(worker, until, limit, skip)
    }

    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TaskRecord>, StoreError>> + Send {
        (**self).lapsed(now, limit)
    }

    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Changes, StoreError>> + Send {
        (**self).changes(cursor, limit)
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        (**self).changed()
    }

    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }
}
