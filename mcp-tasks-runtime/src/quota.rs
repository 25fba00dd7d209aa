//! Per-requestor task quotas: how many tasks one requestor may have live, how many finished
//! ones may be kept for it, and how fast it may create new ones.
//!
//! The 2025-11-25 Tasks utility asks receivers to rate-limit task operations and to limit the
//! concurrent tasks of each requestor; without that one client can fill the store and starve
//! the others. [`Quotas`] is the bookkeeping, pure and synchronous, sharded by requestor. The
//! task engine calls it around each task's life:
//!
//! 1. [`Quotas::admit`] before it creates a task: a [`Ticket`] holding one live slot, or a
//!    [`QuotaError`] naming the limit and when to retry;
//! 2. [`Ticket::commit`] once the task is stored (dropping the ticket instead gives the slot
//!    back, for a creation that failed);
//! 3. [`Quotas::finished`] when the task reaches a terminal status (live → retained);
//! 4. [`Quotas::gone`] when the task is deleted (expired, or removed before it finished).
//!
//! [`Quotas::restore`] counts a task found in the store (after a restart) instead of admitted.
//! A requestor is any string the engine picks: the principal, or for an anonymous client the
//! name its transport gives it (its address over HTTP, its connection over stdio). One with nothing counted and a full creation bucket is forgotten, so memory
//! follows the number of requestors that have tasks.
//!
//! ```
//! use mcp_tasks_runtime::quota::{QuotaConfig, QuotaError, Quotas, Stage};
//! let quotas = Quotas::new(QuotaConfig { max_live: 1, ..QuotaConfig::default() });
//! let ticket = quotas.admit("alice").unwrap();
//! ticket.commit();
//! assert!(matches!(quotas.admit("alice"), Err(QuotaError::LiveTasks { .. })));
//! quotas.finished("alice");
//! quotas.admit("alice").unwrap().commit();
//! quotas.gone("alice", Stage::Retained);
//! assert_eq!(quotas.usage("alice").live, 1);
//! ```

use crate::sync::LockExt;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The limits of every requestor. The defaults suit a server shared by a few hundred clients.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaConfig {
    /// Tasks one requestor may have live (`working` or `input_required`) at once. Default 1000.
    pub max_live: usize,
    /// Finished tasks of one requestor kept for their results at once. Default 10 000.
    pub max_retained: usize,
    /// Task creations per second one requestor may sustain. Default 100; `None` for no limit
    /// (as is a rate that is not positive and finite).
    pub creation_rate: Option<f64>,
    /// Creations one requestor may make at once on top of the rate (the bucket). Default 1000.
    pub creation_burst: u32,
    /// The retry hint when a requestor has `max_live` tasks. Default 1 s.
    pub live_retry_after: Duration,
    /// The retry hint when a requestor has `max_retained` finished tasks. Default 60 s.
    pub retained_retry_after: Duration,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            max_live: 1000,
            max_retained: 10_000,
            creation_rate: Some(100.0),
            creation_burst: 1000,
            live_retry_after: Duration::from_secs(1),
            retained_retry_after: Duration::from_secs(60),
        }
    }
}

impl QuotaConfig {
    /// No limits at all (for a server behind a gateway that enforces its own).
    pub fn unlimited() -> Self {
        Self {
            max_live: usize::MAX,
            max_retained: usize::MAX,
            creation_rate: None,
            ..Self::default()
        }
    }

    fn rate(&self) -> Option<f64> {
        self.creation_rate.filter(|r| r.is_finite() && *r > 0.0)
    }
}

/// Why a requestor may not create a task now.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The requestor already has its limit of live tasks.
    #[error("too many live tasks: {limit} are already running for this requestor; retry after {}", secs(*retry_after))]
    LiveTasks {
        /// The limit.
        limit: usize,
        /// When trying again may succeed (a hint: it depends on when a task finishes).
        retry_after: Duration,
    },
    /// The requestor already has its limit of finished tasks kept for their results.
    #[error("too many retained tasks: {limit} finished tasks are kept for this requestor; retry after {}", secs(*retry_after))]
    RetainedTasks {
        /// The limit.
        limit: usize,
        /// When trying again may succeed (a hint: it depends on when a task expires).
        retry_after: Duration,
    },
    /// The requestor creates tasks faster than its rate.
    #[error("too many task creations: at most {per_second} per second; retry after {}", secs(*retry_after))]
    CreationRate {
        /// The sustained rate allowed.
        per_second: f64,
        /// When the next creation will be allowed.
        retry_after: Duration,
    },
}

impl QuotaError {
    /// When trying again may succeed.
    pub fn retry_after(&self) -> Duration {
        match self {
            Self::LiveTasks { retry_after, .. }
            | Self::RetainedTasks { retry_after, .. }
            | Self::CreationRate { retry_after, .. } => *retry_after,
        }
    }

    /// The limit's name as clients see it in the error's `data.limit`: `liveTasks`,
    /// `retainedTasks` or `creationRate`.
    pub fn limit_name(&self) -> &'static str {
        match self {
            Self::LiveTasks { .. } => "liveTasks",
            Self::RetainedTasks { .. } => "retainedTasks",
            Self::CreationRate { .. } => "creationRate",
        }
    }
}

/// A duration as seconds with millisecond precision, for messages.
fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Where a counted task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Not finished yet (`working` or `input_required`).
    Live,
    /// Finished, its result kept until it expires.
    Retained,
}

/// What one requestor has now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Live tasks, including those admitted but not yet committed.
    pub live: usize,
    /// Finished tasks still kept.
    pub retained: usize,
}

/// The quota bookkeeping of every requestor. Cheap to clone; clones share the counts.
#[derive(Clone, Debug)]
pub struct Quotas {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: QuotaConfig,
    hasher: std::collections::hash_map::RandomState,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Debug, Default)]
struct Shard {
    requestors: HashMap<Arc<str>, Account>,
    /// Admissions since the last sweep of forgettable requestors.
    since_sweep: usize,
}

#[derive(Debug)]
struct Account {
    /// The requestor, shared with the map's key and the tickets.
    key: Arc<str>,
    live: usize,
    retained: usize,
    /// Creation tokens at `refilled`.
    tokens: f64,
    refilled: Instant,
}

/// Shards of the requestor table: enough that cores rarely wait on each other.
const SHARDS: usize = 16;
/// Admissions in a shard between two sweeps, at least (more when the shard is larger).
const SWEEP_EVERY: usize = 256;

/// One live slot taken by [`Quotas::admit`]. [`Ticket::commit`] keeps it for the task;
/// dropping the ticket gives it back (the creation failed).
#[must_use = "a dropped ticket gives its live slot back; commit it once the task is stored"]
#[derive(Debug)]
pub struct Ticket {
    inner: Arc<Inner>,
    key: Arc<str>,
    committed: bool,
}

impl Ticket {
    /// The requestor this ticket counts against.
    pub fn requestor(&self) -> &str {
        &self.key
    }

    /// The requestor, as the string the quota table keys it by: holding it costs no copy.
    pub fn requestor_key(&self) -> Arc<str> {
        Arc::clone(&self.key)
    }

    /// Keeps the live slot for the task, which is now stored; from here on the engine reports
    /// the task's end with [`Quotas::finished`] and [`Quotas::gone`].
    pub fn commit(mut self) {
        self.committed = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.committed {
            self.inner
                .update(&self.key, |a| a.live = a.live.saturating_sub(1));
        }
    }
}

impl Quotas {
    /// Quotas with these limits.
    pub fn new(config: QuotaConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                hasher: std::collections::hash_map::RandomState::new(),
                shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            }),
        }
    }

    /// The limits.
    pub fn config(&self) -> &QuotaConfig {
        &self.inner.config
    }

    /// Admits one task creation for `requestor` now: takes a live slot and a creation token.
    pub fn admit(&self, requestor: &str) -> Result<Ticket, QuotaError> {
        self.admit_at(requestor, Instant::now())
    }

    /// [`Quotas::admit`] at a given time (`now` never goes backwards for one requestor).
    pub fn admit_at(&self, requestor: &str, now: Instant) -> Result<Ticket, QuotaError> {
        let config = &self.inner.config;
        let rate = config.rate();
        let burst = f64::from(config.creation_burst.max(1));
        let mut shard = self.inner.shard(requestor);
        shard.since_sweep += 1;
        if shard.since_sweep >= SWEEP_EVERY.max(shard.requestors.len()) {
            shard.since_sweep = 0;
            shard
                .requestors
                .retain(|_, a| !a.forgettable(now, rate, burst));
        }
        let account = match shard.requestors.get_mut(requestor) {
            Some(a) => a,
            None => {
                let key: Arc<str> = requestor.into();
                shard
                    .requestors
                    .entry(Arc::clone(&key))
                    .or_insert(Account::new(key, burst, now))
            }
        };
        if account.live >= config.max_live {
            return Err(QuotaError::LiveTasks {
                limit: config.max_live,
                retry_after: config.live_retry_after,
            });
        }
        if account.retained >= config.max_retained {
            return Err(QuotaError::RetainedTasks {
                limit: config.max_retained,
                retry_after: config.retained_retry_after,
            });
        }
        if let Some(rate) = rate {
            account.refill(now, rate, burst);
            if account.tokens < 1.0 {
                return Err(QuotaError::CreationRate {
                    per_second: rate,
                    retry_after: Duration::from_secs_f64((1.0 - account.tokens) / rate),
                });
            }
            account.tokens -= 1.0;
        }
        account.live += 1;
        Ok(Ticket {
            inner: Arc::clone(&self.inner),
            key: Arc::clone(&account.key),
            committed: false,
        })
    }

    /// A task of `requestor` reached a terminal status: it moves from live to retained.
    pub fn finished(&self, requestor: &str) {
        self.inner.update(requestor, |a| {
            a.live = a.live.saturating_sub(1);
            a.retained += 1;
        });
    }

    /// A task of `requestor` was deleted (it expired, or was removed before it finished).
    pub fn gone(&self, requestor: &str, stage: Stage) {
        self.inner.update(requestor, |a| match stage {
            Stage::Live => a.live = a.live.saturating_sub(1),
            Stage::Retained => a.retained = a.retained.saturating_sub(1),
        });
    }

    /// Counts a task of `requestor` that exists without having been admitted (found in the
    /// store after a restart). It takes no creation token and is counted even over a limit.
    pub fn restore(&self, requestor: &str, stage: Stage) {
        let burst = f64::from(self.inner.config.creation_burst.max(1));
        let mut shard = self.inner.shard(requestor);
        let account = match shard.requestors.get_mut(requestor) {
            Some(a) => a,
            None => {
                let key: Arc<str> = requestor.into();
                shard
                    .requestors
                    .entry(Arc::clone(&key))
                    .or_insert(Account::new(key, burst, Instant::now()))
            }
        };
        match stage {
            Stage::Live => account.live += 1,
            Stage::Retained => account.retained += 1,
        }
    }

    /// What `requestor` has now.
    pub fn usage(&self, requestor: &str) -> Usage {
        self.inner
            .shard(requestor)
            .requestors
            .get(requestor)
            .map(|a| Usage {
                live: a.live,
                retained: a.retained,
            })
            .unwrap_or_default()
    }

    /// How many requestors are remembered (those with tasks, or that created some recently).
    pub fn requestors(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.locked().requestors.len())
            .sum()
    }
}

impl Inner {
    fn shard(&self, requestor: &str) -> std::sync::MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(requestor) as usize) % self.shards.len();
        self.shards[index].locked()
    }

    /// Changes a requestor's counts; one that is not known has nothing to change.
    fn update(&self, requestor: &str, change: impl FnOnce(&mut Account)) {
        if let Some(account) = self.shard(requestor).requestors.get_mut(requestor) {
            change(account);
        }
    }
}

impl Account {
    fn new(key: Arc<str>, tokens: f64, now: Instant) -> Self {
        Self {
            key,
            live: 0,
            retained: 0,
            tokens,
            refilled: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.refilled = now;
    }

    /// Nothing counted and the bucket full again: forgetting changes nothing.
    fn forgettable(&self, now: Instant, rate: Option<f64>, burst: f64) -> bool {
        if self.live > 0 || self.retained > 0 {
            return false;
        }
        let Some(rate) = rate else { return true };
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens + elapsed * rate >= burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> QuotaConfig {
        QuotaConfig {
            max_live: 3,
            max_retained: 4,
            creation_rate: Some(2.0),
            creation_burst: 5,
            live_retry_after: Duration::from_secs(1),
            retained_retry_after: Duration::from_secs(60),
        }
    }

    #[test]
    fn live_tasks_are_capped_per_requestor_and_freed_when_they_finish() {
        let quotas = Quotas::new(config());
        let now = Instant::now();
        for _ in 0..3 {
            quotas.admit_at("alice", now).unwrap().commit();
        }
        let refused = quotas.admit_at("alice", now).unwrap_err();
        assert_eq!(
            refused,
            QuotaError::LiveTasks {
                limit: 3,
                retry_after: Duration::from_secs(1)
            }
        );
        assert_eq!(refused.limit_name(), "liveTasks");
        assert_eq!(
            refused.to_string(),
            "too many live tasks: 3 are already running for this requestor; retry after 1.000s"
        );
        quotas.admit_at("bob", now).unwrap().commit();
        quotas.finished("alice");
        assert_eq!(
            quotas.usage("alice"),
            Usage {
                live: 2,
                retained: 1
            }
        );
        quotas.admit_at("alice", now).unwrap().commit();
    }

    #[test]
    fn retained_tasks_are_capped_until_they_are_gone() {
        let quotas = Quotas::new(QuotaConfig {
            creation_rate: None,
            ..config()
        });
        let now = Instant::now();
        for _ in 0..4 {
            quotas.admit_at("alice", now).unwrap().commit();
            quotas.finished("alice");
        }
        let refused = quotas.admit_at("alice", now).unwrap_err();
        assert_eq!(refused.limit_name(), "retainedTasks");
        assert_eq!(refused.retry_after(), Duration::from_secs(60));
        quotas.gone("alice", Stage::Retained);
        quotas.admit_at("alice", now).unwrap().commit();
        quotas.gone("alice", Stage::Live);
        assert_eq!(
            quotas.usage("alice"),
            Usage {
                live: 0,
                retained: 3
            }
        );
    }

    #[test]
    fn creations_follow_a_token_bucket() {
        let quotas = Quotas::new(QuotaConfig {
            max_live: usize::MAX,
            ..config()
        });
        let start = Instant::now();
        for _ in 0..5 {
            quotas.admit_at("alice", start).unwrap().commit();
        }
        let refused = quotas.admit_at("alice", start).unwrap_err();
        assert_eq!(
            refused,
            QuotaError::CreationRate {
                per_second: 2.0,
                retry_after: Duration::from_millis(500)
            }
        );
        let refused = quotas
            .admit_at("alice", start + Duration::from_millis(300))
            .unwrap_err();
        assert_eq!(refused.retry_after(), Duration::from_millis(200));
        quotas
            .admit_at("alice", start + Duration::from_millis(500))
            .unwrap()
            .commit();
        // Two seconds refill four tokens, never more than the burst.
        let later = start + Duration::from_secs(100);
        for _ in 0..5 {
            quotas.admit_at("alice", later).unwrap().commit();
        }
        assert!(quotas.admit_at("alice", later).is_err());
        quotas.admit_at("bob", later).unwrap().commit();
    }

    #[test]
    fn a_dropped_ticket_gives_its_slot_back_but_not_its_token() {
        let quotas = Quotas::new(QuotaConfig {
            max_live: 1,
            creation_burst: 2,
            ..config()
        });
        let now = Instant::now();
        let ticket = quotas.admit_at("alice", now).unwrap();
        assert_eq!(ticket.requestor(), "alice");
        assert_eq!(quotas.usage("alice").live, 1);
        drop(ticket);
        assert_eq!(quotas.usage("alice").live, 0);
        quotas.admit_at("alice", now).unwrap().commit();
        quotas.gone("alice", Stage::Live);
        assert_eq!(
            quotas.admit_at("alice", now).unwrap_err().limit_name(),
            "creationRate"
        );
    }

    #[test]
    fn counts_never_go_below_zero_and_restored_tasks_count() {
        let quotas = Quotas::new(config());
        quotas.gone("nobody", Stage::Live);
        quotas.finished("nobody");
        assert_eq!(quotas.usage("nobody"), Usage::default());
        assert_eq!(quotas.requestors(), 0);
        for _ in 0..3 {
            quotas.restore("alice", Stage::Live);
        }
        quotas.restore("alice", Stage::Retained);
        let now = Instant::now();
        assert_eq!(
            quotas.admit_at("alice", now).unwrap_err().limit_name(),
            "liveTasks"
        );
        quotas.admit_at("alice", now).unwrap_err();
        quotas.gone("alice", Stage::Retained);
        quotas.gone("alice", Stage::Retained);
        assert_eq!(
            quotas.usage("alice"),
            Usage {
                live: 3,
                retained: 0
            }
        );
    }

    #[test]
    fn idle_requestors_are_forgotten() {
        let quotas = Quotas::new(QuotaConfig {
            creation_rate: Some(1000.0),
            creation_burst: 10,
            ..config()
        });
        let start = Instant::now();
        quotas.admit_at("keeper", start).unwrap().commit();
        // One creation a millisecond, each from a new requestor whose task is gone at once:
        // a millisecond later its bucket is full again and nothing is left to remember.
        let created = SHARDS * SWEEP_EVERY * 8;
        for i in 0..created {
            let key = format!("client-{i}");
            let now = start + Duration::from_millis(i as u64);
            quotas.admit_at(&key, now).unwrap().commit();
            quotas.finished(&key);
            quotas.gone(&key, Stage::Retained);
        }
        let remembered = quotas.requestors();
        assert!(
            remembered < 2 * SHARDS * SWEEP_EVERY,
            "{remembered} of {created} requestors remembered"
        );
        assert_eq!(
            quotas.usage("keeper").live,
            1,
            "a requestor with tasks stays"
        );
    }

    #[test]
    fn unlimited_admits_everything() {
        let quotas = Quotas::new(QuotaConfig::unlimited());
        let now = Instant::now();
        for _ in 0..10_000 {
            quotas.admit_at("alice", now).unwrap().commit();
        }
        assert_eq!(quotas.usage("alice").live, 10_000);
    }
}
