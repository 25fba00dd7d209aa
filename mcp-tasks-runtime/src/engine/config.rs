//! The engine's limits and timings.

use std::time::Duration;

/// Limits and timings of the task engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Tasks running at once in this process, over all tools.
    pub max_running: usize,
    /// Tasks this process created that may wait for a free slot; past this, new tasks are
    /// refused as busy.
    pub max_queued: usize,
    /// The longest TTL a task gets, whatever the tool or the client asks; `None`: no cap.
    pub max_ttl: Option<Duration>,
    /// How long a cancelled task's tool may go on cleaning up before it is dropped.
    pub cancel_grace: Duration,
    /// How often expired tasks are deleted.
    pub sweep_interval: Duration,
    /// How long a result stays readable after the task ends, even past its TTL.
    pub min_retention: Duration,
    /// The least time between two progress writes of one task's status message.
    pub progress_write_interval: Duration,
    /// How long a lease lasts unless renewed. The runner renews it every third of this; a
    /// task whose runner stopped renewing is taken over about this long after.
    pub lease: Duration,
    /// How often the engine reads the store's change feed to learn what other processes
    /// did (shared stores only). It bounds the delay of cross-process signals; a store that
    /// wakes the engine when something changed ([`ClaimStore::changed`](crate::store::ClaimStore::changed)) is read sooner.
    pub signal_interval: Duration,
    /// Whether this process runs tools. `false` serves only: tasks wait for a worker.
    pub execute: bool,
    /// Keep anonymous tasks bound to the session that created them. Off by default: without
    /// an authenticated principal the task id (≥122 random bits) is a bearer handle that
    /// works from any session, so a client can resume a task after a reconnect or restart
    /// (`tasks/list` still shows a session only what it created).
    pub strict_session_binding: bool,
    /// How long the result of a synchronous call made with an idempotency key is kept, so
    /// that a repeat of the call gets it instead of a second run. A task made with a key
    /// keeps its key as long as the task itself is kept.
    pub idempotency_retention: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_running: 1024,
            max_queued: 100_000,
            max_ttl: Some(Duration::from_secs(7 * 24 * 60 * 60)),
            cancel_grace: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(5),
            min_retention: Duration::from_secs(60),
            progress_write_interval: Duration::from_millis(250),
            lease: Duration::from_secs(30),
            signal_interval: Duration::from_millis(50),
            execute: true,
            strict_session_binding: false,
            idempotency_retention: Duration::from_secs(24 * 60 * 60),
        }
    }
}

impl EngineConfig {
    /// How often a runner renews its leases.
    pub(super) fn renew_every(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(10))
    }

    /// How often the renewal loop looks for leases due for renewal: a lease is renewed at
    /// most this late.
    pub(super) fn renew_round(&self) -> Duration {
        (self.renew_every() / 8).max(Duration::from_millis(5))
    }

    /// How often lapsed leases are looked for.
    pub(super) fn lapse_scan_every(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(20), Duration::from_secs(5))
    }
}
