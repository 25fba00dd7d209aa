//! The era-neutral task model: ids, the status machine and the stored record.
//!
//! One status machine serves both task protocols (the stateful era's Tasks utility and the
//! stateless era's `io.modelcontextprotocol/tasks` extension): `working ↔ input_required →
//! completed | failed | cancelled`, and a terminal status never changes.

use crate::error::CallOutcome;
use crate::model::{InputRequest, JsonObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use crate::error::RandomError;
pub use crate::trace_context::TraceContext;

/// The first characters of a task id, as logs show it at `info` and `warn`.
///
/// A task without a principal is reached by its id alone (a bearer handle), so a whole id in a
/// log would hand the task to whoever reads the log. Eight hex digits tell tasks apart in a
/// log without being usable; the whole id is logged only at `debug`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShortId<'a>(pub(crate) &'a str);

impl std::fmt::Display for ShortId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = self
            .0
            .char_indices()
            .nth(8)
            .map_or(self.0.len(), |(at, _)| at);
        f.write_str(&self.0[..end])
    }
}

/// A fresh random id: 128 bits from a cryptographically secure generator seeded from the
/// OS (122 of them random in the UUID v4 layout), written as a lowercase UUID. Fails only
/// when the operating system cannot give random bytes; the request that needed the id then
/// gets an internal error.
///
/// Each thread keeps a ChaCha20 generator seeded with 256 bits from the OS and seeded again
/// from the OS after every 1,024 ids, so an id costs under a thousand instructions rather
/// than a system call and a `format!` per byte, and ids stay unpredictable to anyone who
/// has seen others. A
/// process that forks without `exec` (this crate never does) must not make ids in the
/// child, which would repeat the parent's.
pub fn random_id() -> Result<String, RandomError> {
    let mut b = random_bytes()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    std::str::from_utf8(&text)
        .map(str::to_owned)
        .map_err(|e| RandomError::new(e.to_string()))
}

/// How many ids a thread's generator makes before it is seeded again from the OS.
const RESEED_AFTER: u32 = 1024;

/// 16 bytes from this thread's generator ([`random_id`]).
fn random_bytes() -> Result<[u8; 16], RandomError> {
    use rand_chacha::ChaCha20Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use std::cell::RefCell;
    thread_local! {
        static GENERATOR: RefCell<Option<(ChaCha20Rng, u32)>> = const { RefCell::new(None) };
    }
    GENERATOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(_, made)| *made >= RESEED_AFTER) {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| RandomError::new(e.to_string()))?;
            *slot = Some((ChaCha20Rng::from_seed(seed), 0));
        }
        let (rng, made) = slot.as_mut().expect("seeded above");
        *made += 1;
        let mut b = [0u8; 16];
        rng.fill_bytes(&mut b);
        Ok(b)
    })
}

/// A time as RFC 3339 in UTC with milliseconds, e.g. `2030-11-29T15:30:30.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// A time that serialises as [`rfc3339`] text, written straight into the output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rfc3339(pub(crate) SystemTime);

impl Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use std::io::Write as _;
        let text = humantime::format_rfc3339_millis(self.0);
        // The text (24 bytes) is put together on the stack and handed over whole, which costs
        // a serializer less than taking it piece by piece as it is formatted.
        let mut buf = [0u8; 32];
        let mut rest = &mut buf[..];
        let written = write!(rest, "{text}").map(|()| 32 - rest.len());
        match written
            .ok()
            .and_then(|len| std::str::from_utf8(&buf[..len]).ok())
        {
            Some(whole) => serializer.serialize_str(whole),
            None => serializer.collect_str(&text),
        }
    }
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for the client to answer one or more input requests.
    InputRequired,
    /// Finished with a result (also one with `isError: true` under [`SettlePolicy::Complete`]).
    Completed,
    /// Finished with a JSON-RPC error (or an `isError: true` result under
    /// [`SettlePolicy::Fail`]).
    Failed,
    /// Cancelled by the client.
    Cancelled,
}

impl TaskStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// `true` for `completed`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The one transition table: may a task go from `self` to `to`?
    pub fn can_move_to(self, to: Self) -> bool {
        use TaskStatus::*;
        match (self, to) {
            (Working, InputRequired | Completed | Failed | Cancelled) => true,
            (InputRequired, Working | Completed | Failed | Cancelled) => true,
            (Working, Working) | (InputRequired, InputRequired) => false,
            (Completed | Failed | Cancelled, _) => false,
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(format!("unknown task status {other:?}")),
        })
    }
}

/// How a tool result with `isError: true` settles a task. The wire adapter that creates the
/// task chooses it; the engine only applies it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SettlePolicy {
    /// The task ends `failed`, with the result kept as its outcome.
    Fail,
    /// The task ends `completed`, with the result as its outcome.
    #[default]
    Complete,
}

impl SettlePolicy {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Complete => "complete",
        }
    }
}

impl std::str::FromStr for SettlePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(Self::Fail),
            "complete" => Ok(Self::Complete),
            other => Err(format!("unknown settle policy {other:?}")),
        }
    }
}

/// The claim a process holds on a task while it runs the task's tool.
///
/// A lease ends at `until` unless its holder renews it. A task whose lease ended is taken
/// over by whichever process notices first and settled by its tool's restart policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The process (worker id) that holds it.
    pub worker: String,
    /// When it ends unless renewed.
    pub until: SystemTime,
}

/// A client's request to cancel a task, kept with the task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// When it was asked for.
    pub at: SystemTime,
    /// Who asked (the requestor's owner key), when known.
    pub by: Option<String>,
}

/// One change of a task's status, as the task keeps it in [`TaskRecord::history`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusChange {
    /// The status it moved to (`working` again for a task put back in the queue to run
    /// again).
    pub status: TaskStatus,
    /// When.
    pub at: SystemTime,
    /// The status message it had from then on.
    pub message: Option<String>,
    /// The lease epoch at the time: which claim of the task made the change.
    pub epoch: u64,
    /// The process (worker id) that wrote the change.
    pub process: Option<String>,
}

impl StatusChange {
    /// A change to `status` at `at`, with no message, at epoch 0, by no named process.
    pub fn new(status: TaskStatus, at: SystemTime) -> Self {
        Self {
            status,
            at,
            message: None,
            epoch: 0,
            process: None,
        }
    }
}

/// A stored task. Everything a `tasks/get` in either era needs, and what a restart needs
/// to settle or rerun it.
///
/// Stores keep it whole; code outside this crate makes one with [`TaskRecord::new`] and sets
/// the public fields it needs (more may come).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TaskRecord {
    /// The id (≥122 random bits).
    pub id: String,
    /// The principal or session that owns it; `None` makes the id a bearer handle.
    pub owner: Option<String>,
    /// The authenticated principal that created it, as a task keeps it
    /// ([`Principal::for_record`](crate::principal::Principal::for_record): subject, scopes,
    /// client and issuer, never a credential), for the tool's context in whichever process
    /// runs it. `None` for an anonymous call.
    pub principal: Option<Arc<crate::principal::Principal>>,
    /// The tool it runs.
    pub tool: String,
    /// The arguments it was called with.
    pub arguments: JsonObject,
    /// How a tool result with `isError: true` settles it.
    pub settle: SettlePolicy,
    /// Its status.
    pub status: TaskStatus,
    /// A human-readable status line (progress, failure reason).
    pub status_message: Option<String>,
    /// When it was created.
    pub created_at: SystemTime,
    /// When its status or status message last changed.
    pub updated_at: SystemTime,
    /// How long it is kept, counted from creation; `None` means until deleted.
    pub ttl: Option<Duration>,
    /// The poll interval suggested to clients.
    pub poll_interval: Duration,
    /// The result or error, once `completed` or `failed`.
    ///
    /// Boxed, like [`cancel_requested`](Self::cancel_requested): a record has it only once
    /// it finished, and an unfinished one (each running or queued task keeps its record in
    /// memory) then costs a pointer rather than room for the whole outcome.
    pub outcome: Option<Box<CallOutcome>>,
    /// Input requests the client has not answered yet, by key.
    pub input_requests: BTreeMap<String, InputRequest>,
    /// Answers that arrived and the tool has not taken yet, by key.
    pub input_responses: BTreeMap<String, Value>,
    /// The number of input keys ever issued (keys are never reused).
    pub input_seq: u64,
    /// The capabilities the creating client declared, so whichever process runs the task
    /// knows what it may ask the client.
    ///
    /// Shared: records created with the same capabilities hold one copy of them.
    pub client_capabilities: Arc<Value>,
    /// The process running it, while one does; `None` while it waits to be claimed (and
    /// once it is terminal).
    pub lease: Option<Lease>,
    /// How many times the task was claimed. A lease holder's writes are fenced by it: a
    /// write made under an older epoch never lands.
    pub epoch: u64,
    /// Set when a client asked to cancel it. Boxed: most tasks are never cancelled.
    pub cancel_requested: Option<Box<CancelRequest>>,
    /// Bumped by every successful write; the compare-and-set token.
    pub version: u64,
    /// The outputs of the durable steps its tool finished, by step name (the `Steps` handle
    /// a tool takes). A rerun finds them and does not run those steps again.
    /// Written only by the lease holder, fenced by [`epoch`](Self::epoch).
    pub steps: BTreeMap<String, Value>,
    /// The key of a tool declared unique: while this task is unfinished, no other
    /// unfinished task in the store holds the same key, and a store's `create` refuses a
    /// second one as taken. `None` for most tasks.
    pub unique_key: Option<String>,
    /// `true` for the record of a synchronous call, kept for the call's idempotency key so
    /// that a repeat gets the same result: not a task. Owner listings and scans leave it out,
    /// and no `tasks/*` request finds it.
    pub synchronous: bool,
    /// The status changes since creation, oldest first, each written in the same store write
    /// as the change itself. At most [`MAX_HISTORY`](Self::MAX_HISTORY) are kept: the first
    /// and the latest.
    pub history: Vec<StatusChange>,
    /// The trace context of the request that created it, when that request carried one.
    pub trace: Option<Arc<TraceContext>>,
}

impl TaskRecord {
    /// The most status changes a record keeps in [`history`](Self::history). A task that
    /// asks many questions moves between `working` and `input_required` often; past this,
    /// the oldest changes after the first are dropped.
    pub const MAX_HISTORY: usize = 32;

    /// Adds `change` to [`history`](Self::history), dropping the oldest change after the
    /// first when it is full.
    pub fn record_change(&mut self, change: StatusChange) {
        if self.history.len() >= Self::MAX_HISTORY {
            self.history.remove(1.min(self.history.len() - 1));
        }
        self.history.push(change);
    }

    /// A task of `tool` called with `arguments`, created at `created_at`: `working`, queued
    /// (no lease, epoch 0), owned by no one, with a tool's default TTL and poll interval
    /// ([`DEFAULT_TTL`](crate::tool::DEFAULT_TTL),
    /// [`DEFAULT_POLL_INTERVAL`](crate::tool::DEFAULT_POLL_INTERVAL)), nothing asked or
    /// answered, never written (version 0).
    pub fn new(
        id: impl Into<String>,
        tool: impl Into<String>,
        arguments: JsonObject,
        created_at: SystemTime,
    ) -> Self {
        Self {
            id: id.into(),
            owner: None,
            principal: None,
            tool: tool.into(),
            arguments,
            settle: SettlePolicy::default(),
            status: TaskStatus::Working,
            status_message: None,
            created_at,
            updated_at: created_at,
            ttl: Some(crate::tool::DEFAULT_TTL),
            poll_interval: crate::tool::DEFAULT_POLL_INTERVAL,
            outcome: None,
            input_requests: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            input_seq: 0,
            client_capabilities: Arc::new(Value::Object(JsonObject::new())),
            lease: None,
            epoch: 0,
            cancel_requested: None,
            version: 0,
            steps: BTreeMap::new(),
            unique_key: None,
            synchronous: false,
            history: Vec::new(),
            trace: None,
        }
    }

    /// When the task may be deleted: `created_at + ttl`, and never while it is still running.
    ///
    /// A TTL never aborts work: a task that outlives its TTL is deleted once it is terminal
    /// (the engine then keeps its result readable for a short while).
    pub fn expires_at(&self) -> Option<SystemTime> {
        if !self.status.is_terminal() {
            return None;
        }
        self.ttl.map(|ttl| self.created_at + ttl)
    }

    /// `true` while the task waits for a process to claim it.
    pub fn is_queued(&self) -> bool {
        self.lease.is_none() && !self.status.is_terminal()
    }

    /// `true` when `worker` holds the task's lease under `epoch`: the fence every write of
    /// a lease holder passes.
    pub fn is_held_by(&self, worker: &str, epoch: u64) -> bool {
        !self.status.is_terminal()
            && self.epoch == epoch
            && self.lease.as_ref().is_some_and(|l| l.worker == worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    const ALL: [TaskStatus; 5] = [Working, InputRequired, Completed, Failed, Cancelled];

    #[test]
    fn transition_table() {
        let allowed = [
            (Working, InputRequired),
            (Working, Completed),
            (Working, Failed),
            (Working, Cancelled),
            (InputRequired, Working),
            (InputRequired, Completed),
            (InputRequired, Failed),
            (InputRequired, Cancelled),
        ];
        for from in ALL {
            for to in ALL {
                assert_eq!(
                    from.can_move_to(to),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn terminal_statuses_are_final() {
        for s in ALL {
            assert_eq!(s.is_terminal(), !ALL.iter().any(|t| s.can_move_to(*t)));
        }
    }

    #[test]
    fn status_names_round_trip() {
        for s in ALL {
            assert_eq!(s.as_str().parse::<TaskStatus>().unwrap(), s);
        }
    }

    #[test]
    fn ids_are_uuid_v4_shaped_and_distinct() {
        let a = random_id().unwrap();
        let b = random_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        for (i, c) in a.char_indices() {
            match i {
                8 | 13 | 18 | 23 => assert_eq!(c, '-', "{a}"),
                _ => assert!(matches!(c, '0'..='9' | 'a'..='f'), "{a}"),
            }
        }
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn ids_across_reseeds_and_threads_are_distinct() {
        // More than one seeding per thread, on several threads at once.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..3 * RESEED_AFTER)
                        .map(|_| random_id().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for thread in threads {
            for id in thread.join().unwrap() {
                assert!(all.insert(id), "an id repeated");
            }
        }
        assert_eq!(all.len(), 4 * 3 * RESEED_AFTER as usize);
    }

    #[test]
    fn a_trace_context_takes_only_a_w3c_traceparent() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::parse(ok, Some("congo=t61rcWkgMzE"), Some("")).unwrap();
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(ctx.baggage, None);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-ff",
        ] {
            assert_eq!(TraceContext::parse(bad, None, None), None, "{bad}");
        }
        let long = "k=".to_owned() + &"v".repeat(TraceContext::MAX_VALUE_LEN);
        assert_eq!(
            TraceContext::parse(ok, Some(&long), None)
                .unwrap()
                .tracestate,
            None
        );
    }

    #[test]
    fn the_history_keeps_the_first_change_and_the_latest() {
        let mut record = TaskRecord::new("t", "tool", JsonObject::new(), SystemTime::UNIX_EPOCH);
        for n in 0..TaskRecord::MAX_HISTORY as u64 + 5 {
            let mut change = StatusChange::new(Working, SystemTime::UNIX_EPOCH);
            change.epoch = n;
            record.record_change(change);
        }
        assert_eq!(record.history.len(), TaskRecord::MAX_HISTORY);
        assert_eq!(record.history[0].epoch, 0);
        assert_eq!(record.history[1].epoch, 6);
        assert_eq!(
            record.history.last().unwrap().epoch,
            TaskRecord::MAX_HISTORY as u64 + 4
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // Written into JSON, the same text.
        for millis in [0, 1_800_000_000_123, 253_402_300_799_999] {
            let time = SystemTime::UNIX_EPOCH + Duration::from_millis(millis);
            let json = serde_json::to_string(&Rfc3339(time)).unwrap();
            assert_eq!(json, format!("\"{}\"", rfc3339(time)));
        }
        assert_eq!(
            serde_json::to_string(&Rfc3339(
                SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_123)
            ))
            .unwrap(),
            "\"2027-01-15T08:00:00.123Z\""
        );
    }
}

/// A few recently seen JSON values, each kept once and handed out shared: task records of
/// clients that declare the same capabilities point at one copy instead of holding a tree
/// of maps each.
#[derive(Debug, Default)]
pub(crate) struct SharedValues {
    recent: crate::sync::Recent<Arc<Value>, SHARED_VALUES>,
}

/// How many distinct values a [`SharedValues`] keeps.
const SHARED_VALUES: usize = 8;

impl SharedValues {
    /// An empty set.
    pub(crate) const fn new() -> Self {
        Self {
            recent: crate::sync::Recent::new(),
        }
    }

    /// `value` as a shared copy: one kept earlier when equal, else a new one (which then
    /// replaces the least recently used).
    pub(crate) fn share(&self, value: &Value) -> Arc<Value> {
        self.recent
            .find(|kept| **kept == *value)
            .unwrap_or_else(|| self.recent.keep(Arc::new(value.clone()), |a, b| a == b))
    }

    /// [`share`](Self::share) for a value the caller owns (the durable stores' decoders).
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn share_owned(&self, value: Value) -> Arc<Value> {
        self.recent
            .find(|kept| **kept == value)
            .unwrap_or_else(|| self.recent.keep(Arc::new(value), |a, b| a == b))
    }
}

#[cfg(test)]
mod shared_values_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_share_one_copy_and_the_least_recent_goes_first() {
        let shared = SharedValues::default();
        let a = shared.share(&json!({"extensions": {"x": {}}}));
        let b = shared.share_owned(json!({"extensions": {"x": {}}}));
        assert!(Arc::ptr_eq(&a, &b));
        for n in 0..SHARED_VALUES {
            shared.share(&json!({ "n": n }));
        }
        // Eight newer values pushed the first out: an equal value gets a new copy.
        let c = shared.share(&json!({"extensions": {"x": {}}}));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a, c);
        // A value used again moves to the front and outlives newer ones.
        let d = shared.share(&json!({ "n": 1 }));
        for n in 100..100 + SHARED_VALUES - 1 {
            shared.share(&json!({ "n": n }));
        }
        assert!(Arc::ptr_eq(&d, &shared.share(&json!({ "n": 1 }))));
    }
}
