//! The feed of changes: one loop per console reads the tasks written since its last look
//! from the store (so it sees every process sharing it, a worker's as much as its own),
//! hands each new version to the pages that listen, and keeps the rates of finished tasks.

use super::Shared;
use super::view::{summary, time};
use crate::store::TaskFilter;
use crate::sync::LockExt;
use crate::task::TaskStatus;
use crate::tasks::Viewer;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// How far back each look starts before the newest write already seen: room for writes
/// that land out of order and for clocks of other hosts a little behind.
const SLACK: Duration = Duration::from_secs(2);
/// The width of one bucket of the rates.
pub(super) const BUCKET: Duration = Duration::from_secs(10);
/// How many buckets the rates keep (ten minutes).
pub(super) const BUCKETS: u64 = 60;
/// The most tasks one look reads.
const MAX_PER_LOOK: usize = 5000;
/// How often the pages that listen get the counts.
const STATS_EVERY: Duration = Duration::from_secs(2);
/// How often the feed looks while no page listens (for the rates).
const IDLE_POLL: Duration = Duration::from_secs(5);

/// One message of the feed: its SSE event name and its JSON.
pub(super) type Event = Arc<(&'static str, String)>;

pub(super) struct Feed {
    poll: Duration,
    started: AtomicBool,
    pub(super) tx: broadcast::Sender<Event>,
    /// Wakes the loop when a page starts listening.
    pub(super) wake: tokio::sync::Notify,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The newest write seen.
    high: Option<SystemTime>,
    /// The version and status last seen of each task written within the last look's reach.
    seen: HashMap<String, (u64, TaskStatus, SystemTime)>,
    /// Finished tasks by bucket (seconds since the epoch / bucket width), status and tool.
    buckets: BTreeMap<u64, BTreeMap<(TaskStatus, String), u64>>,
    /// When the feed started watching.
    since: Option<SystemTime>,
}

fn bucket_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / BUCKET.as_secs()
}

impl Feed {
    pub(super) fn new(poll: Duration) -> Self {
        Self {
            poll,
            started: AtomicBool::new(false),
            tx: broadcast::channel(4096).0,
            wake: tokio::sync::Notify::new(),
            state: Mutex::new(State::default()),
        }
    }

    /// Starts the loop, once, on the current Tokio runtime.
    pub(super) fn start(shared: &Arc<Shared>) {
        if shared.feed.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(shared);
        tokio::spawn(run(weak));
    }

    /// The rates of finished tasks: per minute by status and tool over the window, and
    /// the sparkline's buckets (finished and failed in each).
    pub(super) fn rates(&self) -> Value {
        let state = self.state.locked();
        let now = bucket_of(SystemTime::now());
        let first = now.saturating_sub(BUCKETS - 1);
        let mut by: BTreeMap<(TaskStatus, String), u64> = BTreeMap::new();
        let mut spark = Vec::with_capacity(BUCKETS as usize);
        for b in first..=now {
            let (mut done, mut failed) = (0, 0);
            if let Some(bucket) = state.buckets.get(&b) {
                for ((status, tool), n) in bucket {
                    *by.entry((*status, tool.clone())).or_default() += n;
                    done += n;
                    if *status == TaskStatus::Failed {
                        failed += n;
                    }
                }
            }
            spark.push(json!({
                "at": time(UNIX_EPOCH + BUCKET * (b as u32)),
                "finished": done,
                "failed": failed,
            }));
        }
        let minutes = (BUCKET * BUCKETS as u32).as_secs_f64() / 60.0;
        let by: Vec<Value> = by
            .into_iter()
            .map(|((status, tool), n)| {
                json!({ "status": status.as_str(), "tool": tool, "finished": n, "perMinute": n as f64 / minutes })
            })
            .collect();
        json!({
            "windowSeconds": (BUCKET * BUCKETS as u32).as_secs(),
            "bucketSeconds": BUCKET.as_secs(),
            "observedSince": state.since.map(time),
            "byStatusAndTool": by,
            "sparkline": spark,
        })
    }

    /// Takes in one look's tasks: the new versions, to send.
    fn take(&self, tasks: Vec<crate::task::TaskRecord>) -> Vec<Event> {
        let mut state = self.state.locked();
        let mut events = Vec::new();
        let window_start = bucket_of(SystemTime::now()).saturating_sub(BUCKETS);
        for rec in tasks {
            let before = state.seen.get(&rec.id).copied();
            if before.is_some_and(|(v, _, _)| v >= rec.version) {
                continue;
            }
            state.high = Some(state.high.map_or(rec.updated_at, |h| h.max(rec.updated_at)));
            let was = before.map(|(_, s, _)| s);
            if rec.status.is_terminal() && !was.is_some_and(TaskStatus::is_terminal) {
                let b = bucket_of(rec.updated_at);
                if b > window_start {
                    *state
                        .buckets
                        .entry(b)
                        .or_default()
                        .entry((rec.status, rec.tool.clone()))
                        .or_default() += 1;
                }
            }
            state
                .seen
                .insert(rec.id.clone(), (rec.version, rec.status, rec.updated_at));
            events.push(Arc::new(("task", summary(&rec).to_string())));
        }
        // What no later look can return again is forgotten.
        if let Some(high) = state.high {
            let horizon = high.checked_sub(SLACK * 2).unwrap_or(UNIX_EPOCH);
            state.seen.retain(|_, (_, _, at)| *at >= horizon);
        }
        state.buckets.retain(|b, _| *b > window_start);
        events
    }

    /// Where the next look starts.
    fn from(&self) -> SystemTime {
        let mut state = self.state.locked();
        let now = SystemTime::now();
        state.since.get_or_insert(now);
        match state.high {
            Some(high) => high.checked_sub(SLACK).unwrap_or(UNIX_EPOCH),
            None => now
                .checked_sub(BUCKET * BUCKETS as u32)
                .unwrap_or(UNIX_EPOCH),
        }
    }
}

/// The counts and rates, as `/api/stats` and the feed's `stats` events carry them.
pub(super) async fn stats(shared: &Shared, admin: &Viewer) -> Result<Value, crate::Error> {
    let counts = shared.tasks.count(admin).await?;
    let mut by_status: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_tool: BTreeMap<&str, u64> = BTreeMap::new();
    let mut pairs = Vec::new();
    for ((status, tool), n) in &counts.by_status_and_tool {
        *by_status.entry(status.as_str()).or_default() += n;
        *by_tool.entry(tool.as_str()).or_default() += n;
        pairs.push(json!({ "status": status.as_str(), "tool": tool, "count": n }));
    }
    Ok(json!({
        "total": counts.total(),
        "byStatus": by_status,
        "byTool": by_tool,
        "byStatusAndTool": pairs,
        "rates": shared.feed.rates(),
        "paused": shared.controls.as_ref().map(|c| c.paused_tools()),
        "draining": shared.controls.as_ref().map(|c| c.draining()),
    }))
}

async fn run(weak: Weak<Shared>) {
    let viewer = Viewer::admin("console feed");
    let mut last_stats: Option<tokio::time::Instant> = None;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let poll = shared.feed.poll;
        if let Err(e) = look(&shared, &viewer).await {
            tracing::debug!(error = %e, "the console's feed could not read the store");
        }
        let listening = shared.feed.tx.receiver_count() > 0;
        if listening && last_stats.is_none_or(|at| at.elapsed() >= STATS_EVERY) {
            last_stats = Some(tokio::time::Instant::now());
            if let Ok(stats) = stats(&shared, &viewer).await {
                let _ = shared.feed.tx.send(Arc::new(("stats", stats.to_string())));
            }
        }
        let wait = if listening { poll } else { poll.max(IDLE_POLL) };
        let wake = tokio::time::sleep(wait);
        tokio::select! {
            () = wake => {}
            () = shared.feed.wake.notified() => {}
        }
        drop(shared);
    }
}

/// One look at the store: the tasks written since the last.
async fn look(shared: &Shared, viewer: &Viewer) -> Result<(), crate::Error> {
    let filter = TaskFilter::new().updated_after(shared.feed.from());
    let mut cursor: Option<String> = None;
    let mut read = 0;
    let mut tasks = Vec::new();
    loop {
        let page = shared
            .tasks
            .list(viewer, &filter, cursor.as_deref(), 500)
            .await?;
        read += page.tasks.len();
        tasks.extend(page.tasks);
        match page.next_cursor {
            Some(next) if read < MAX_PER_LOOK => cursor = Some(next),
            Some(_) => {
                tracing::debug!(read, "the console's feed read its most tasks in one look");
                break;
            }
            None => break,
        }
    }
    // Oldest write first, so that the pages see changes in order.
    tasks.sort_by_key(|t| (t.updated_at, t.version));
    for event in shared.feed.take(tasks) {
        let _ = shared.feed.tx.send(event);
    }
    Ok(())
}
