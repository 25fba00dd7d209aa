//! The suite's own test: a correct store given one deliberate flaw fails exactly the checks
//! that should catch it.

use super::*;
use crate::error::CallOutcome;
use crate::store::{Changes, TaskCounts, TaskFilter, TaskPage, TimeRange};
use crate::task::Lease;

/// A deliberate bug, to show the suite catches it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flaw {
    CasIgnoresVersion,
    CasNotAtomic,
    LosesErrorData,
    TruncatesToSeconds,
    ExpireIgnoresLimit,
    ListIgnoresCursor,
    UnfinishedIncludesTerminal,
    ClaimIgnoresSkip,
    LapsedIgnoresTime,
    ClaimTwice,
    ScanIgnoresCursor,
    ScanIgnoresTimes,
    CountIgnoresDeletes,
    DropsSteps,
    TakenNamesNobody,
}

/// A correct store with one [`Flaw`].
struct Flawed<S> {
    inner: S,
    flaw: Flaw,
}

impl<S> Flawed<S> {
    fn damage(&self, mut record: TaskRecord) -> TaskRecord {
        if self.flaw == Flaw::LosesErrorData
            && let Some(CallOutcome::Error(error)) = record.outcome.as_deref_mut()
        {
            error.data = None;
        }
        if self.flaw == Flaw::DropsSteps {
            record.steps.clear();
        }
        if self.flaw == Flaw::TruncatesToSeconds {
            let secs = |t: SystemTime| {
                let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                UNIX_EPOCH + Duration::from_secs(since.as_secs())
            };
            record.created_at = secs(record.created_at);
            record.updated_at = secs(record.updated_at);
        }
        record
    }
}

impl<S: TaskStore> TaskStore for Flawed<S> {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        match self.inner.create(record).await {
            Err(StoreError::Taken(_)) if self.flaw == Flaw::TakenNamesNobody => {
                Err(StoreError::Taken(String::new()))
            }
            result => result,
        }
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.inner.get(id).await?.map(|r| self.damage(r)))
    }

    async fn compare_and_set(&self, record: TaskRecord, expected: u64) -> Result<bool, StoreError> {
        let Some(stored) = self.inner.get(&record.id).await? else {
            return Ok(false);
        };
        match self.flaw {
            Flaw::CasIgnoresVersion => self.inner.compare_and_set(record, stored.version).await,
            Flaw::CasNotAtomic => {
                if stored.version != expected {
                    return Ok(false);
                }
                tokio::task::yield_now().await;
                let now = self.inner.get(&record.id).await?.map_or(0, |r| r.version);
                self.inner.compare_and_set(record, now).await
            }
            _ => self.inner.compare_and_set(record, expected).await,
        }
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.delete(id).await
    }

    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let cursor = if self.flaw == Flaw::ListIgnoresCursor {
            None
        } else {
            cursor
        };
        self.inner.list(owner, cursor, limit).await
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = if self.flaw == Flaw::ExpireIgnoresLimit {
            usize::MAX
        } else {
            limit
        };
        self.inner.expire(now, limit).await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        if self.flaw != Flaw::UnfinishedIncludesTerminal {
            return self.inner.unfinished().await;
        }
        let mut all = Vec::new();
        for owner in [None, Some("alice")] {
            all.extend(self.inner.list(owner, None, usize::MAX).await?.tasks);
        }
        Ok(all)
    }
}

impl<S: ClaimStore> ClaimStore for Flawed<S> {
    async fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        match self.flaw {
            Flaw::ClaimIgnoresSkip => self.inner.claim(worker, until, limit, &[]).await,
            Flaw::ClaimTwice => {
                // Reads the queue, then claims what it read, without atomicity.
                let queued: Vec<TaskRecord> = self
                    .inner
                    .unfinished()
                    .await?
                    .into_iter()
                    .filter(|r| r.is_queued() && !skip.contains(&r.tool))
                    .take(limit)
                    .collect();
                tokio::task::yield_now().await;
                let mut claimed = Vec::new();
                for mut r in queued {
                    let version = self.inner.get(&r.id).await?.map_or(0, |s| s.version);
                    r.lease = Some(Lease {
                        worker: worker.into(),
                        until,
                    });
                    r.epoch += 1;
                    if self.inner.compare_and_set(r.clone(), version).await? {
                        r.version = version + 1;
                        claimed.push(r);
                    }
                }
                Ok(claimed)
            }
            _ => self.inner.claim(worker, until, limit, skip).await,
        }
    }

    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let now = if self.flaw == Flaw::LapsedIgnoresTime {
            now + Duration::from_secs(1_000_000)
        } else {
            now
        };
        self.inner.lapsed(now, limit).await
    }

    async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
        self.inner.changes(cursor, limit).await
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
}

impl<S: ScanTasks> ScanTasks for Flawed<S> {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        match self.flaw {
            Flaw::ScanIgnoresCursor => self.inner.scan(filter, None, limit).await,
            Flaw::ScanIgnoresTimes => {
                let mut wide = filter.clone();
                wide.created = TimeRange::default();
                wide.updated = TimeRange::default();
                self.inner.scan(&wide, cursor, limit).await
            }
            _ => self.inner.scan(filter, cursor, limit).await,
        }
    }

    async fn count(&self) -> Result<TaskCounts, StoreError> {
        let mut counts = self.inner.count().await?;
        if self.flaw == Flaw::CountIgnoresDeletes {
            counts.add(TaskStatus::Failed, "render", 1);
        }
        Ok(counts)
    }
}

/// Checks that the suite fails the store `correct` makes once it is given each of a list
/// of flaws, naming exactly the checks that should catch the flaw.
pub(crate) async fn check_catches_flaws<S, F>(correct: F)
where
    F: Fn() -> S + Copy + Send + Sync + 'static,
    S: TaskStore + ClaimStore + ScanTasks,
{
    let cases = [
        (
            Flaw::CasIgnoresVersion,
            &[
                "compare_and_set",
                "concurrent_compare_and_set",
                "fenced_writes",
            ][..],
        ),
        (Flaw::CasNotAtomic, &["concurrent_compare_and_set"][..]),
        (Flaw::LosesErrorData, &["fields_round_trip"][..]),
        (Flaw::TruncatesToSeconds, &["fields_round_trip"][..]),
        (Flaw::ExpireIgnoresLimit, &["expire"][..]),
        (
            Flaw::ListIgnoresCursor,
            &["list_pagination", "synchronous_records_are_not_listed"][..],
        ),
        (
            Flaw::UnfinishedIncludesTerminal,
            &["unfinished", "synchronous_records_are_not_listed"][..],
        ),
        (Flaw::ClaimIgnoresSkip, &["claims"][..]),
        (Flaw::LapsedIgnoresTime, &["lapsed_leases"][..]),
        (Flaw::ClaimTwice, &["claims", "concurrent_claims"][..]),
        (
            Flaw::ScanIgnoresCursor,
            &[
                "scan_filters_and_order",
                "synchronous_records_are_not_listed",
            ][..],
        ),
        (
            Flaw::ScanIgnoresTimes,
            &["scan_filters_and_order", "scan_sparse_matches"][..],
        ),
        (
            Flaw::CountIgnoresDeletes,
            &["counts", "synchronous_records_are_not_listed"][..],
        ),
        (Flaw::DropsSteps, &["durable_fields_round_trip"][..]),
        (Flaw::TakenNamesNobody, &["unique_keys"][..]),
    ];
    for (flaw, failing) in cases {
        let run = tokio::spawn(check_store(move || async move {
            Flawed {
                inner: correct(),
                flaw,
            }
        }));
        let Err(error) = run.await else {
            panic!("the suite passed a store with {flaw:?}");
        };
        let message = *error.into_panic().downcast::<String>().expect("a message");
        assert!(
            message.contains(&format!("failed {} of 21 checks", failing.len())),
            "{flaw:?}: {message}"
        );
        for check in failing {
            assert!(
                message.contains(&format!("`{check}`:")),
                "{flaw:?}: {message}"
            );
        }
    }
}
