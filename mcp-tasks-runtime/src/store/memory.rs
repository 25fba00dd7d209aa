//! The in-memory task store: the reference backend, and the default when no durable store
//! is configured. Tasks are lost when the process exits.

use super::scan::{
    ALL_STATUSES, ScanIndex, ScanTasks, TaskCounts, TaskFilter, index_for, no_page, scan_start,
    scan_take,
};
use super::{Changes, ClaimStore, StoreError, TaskPage, TaskStore, paging};
use crate::sync::LockExt;
use crate::task::{Lease, TaskRecord, TaskStatus};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

/// The number of shards; a power of two so a shard is picked with a mask.
const SHARDS: usize = 32;

/// A task store that keeps tasks in this process's memory.
///
/// Tasks are spread over 32 independently locked shards by a hash of their id, so
/// operations on different tasks rarely contend and no lock is shared by all of them.
/// Each shard also keeps two key-only indexes:
///
/// - an expiry index ordered by `expires_at`, so [`TaskStore::expire`] reads only the tasks
///   that have expired (plus one entry per shard to see where to stop), earliest first;
/// - an owner index ordered by a store-wide creation sequence number, so
///   [`TaskStore::list`] reads only the owner's tasks after the cursor;
/// - a status index and a tool index by the same number, and counts by status and tool, for
///   [`ScanTasks`].
///
/// Listing cursors encode that sequence number, so a cursor stays valid when the task it
/// points after is deleted. Records of synchronous calls are kept out of the owner, status
/// and tool indexes, so listings and counts never see them.
///
/// One more map, shared by all shards, holds the [`unique_key`](TaskRecord::unique_key) of
/// every unfinished task that has one, with the task's id. It is locked after a shard's
/// lock, never before.
pub struct MemoryTaskStore {
    shards: Box<[Mutex<Shard>]>,
    /// The unique keys unfinished tasks hold, with the holder's id.
    held: Held,
    /// The last creation sequence number handed out; the first task gets 1.
    last_seq: AtomicU64,
}

/// One shard. Ids are shared between the map and the indexes through `Arc<str>`, so an
/// index entry costs a pointer rather than another copy of the id.
#[derive(Default)]
struct Shard {
    tasks: HashMap<Arc<str>, Slot>,
    /// `(expires_at, id)` of every task here that has a TTL.
    expiry: BTreeSet<(SystemTime, Arc<str>)>,
    /// Owned tasks by owner, then by creation sequence number. The owner string is kept once
    /// per owner and shard, not once per task.
    owned: HashMap<String, BTreeMap<u64, Arc<str>>>,
    /// Tasks without an owner, by creation sequence number.
    unowned: BTreeMap<u64, Arc<str>>,
    /// Queued tasks (unfinished, no lease), by creation sequence number.
    queued: BTreeMap<u64, Arc<str>>,
    /// `(lease end, id)` of every unfinished task with a lease.
    leased: BTreeSet<(SystemTime, Arc<str>)>,
    /// Tasks by status (in [`status_index`] order), then by creation sequence number.
    by_status: [BTreeMap<u64, Arc<str>>; 5],
    /// Tasks by tool, then by creation sequence number.
    /// Tasks by tool and status, then by creation sequence number; their sizes are the
    /// counts by status and tool.
    by_tool: HashMap<String, [BTreeMap<u64, Arc<str>>; 5]>,
}

/// Unique keys held by unfinished tasks, each with the holder's id.
type Held = Mutex<HashMap<String, Arc<str>>>;

/// The unique key `record` holds: its key while it is unfinished.
fn held_key(record: &TaskRecord) -> Option<&str> {
    if record.status.is_terminal() {
        return None;
    }
    record.unique_key.as_deref()
}

/// Frees `key` if `id` holds it.
fn release(held: &Held, key: Option<&str>, id: &str) {
    if let Some(key) = key {
        let mut held = held.locked();
        if held.get(key).is_some_and(|holder| **holder == *id) {
            held.remove(key);
        }
    }
}

/// Where a status's tasks are in [`Shard::by_status`].
fn status_index(status: TaskStatus) -> usize {
    match status {
        TaskStatus::Working => 0,
        TaskStatus::InputRequired => 1,
        TaskStatus::Completed => 2,
        TaskStatus::Failed => 3,
        TaskStatus::Cancelled => 4,
    }
}

/// Where a record stands in the claim indexes.
#[derive(PartialEq, Eq)]
enum ClaimKey {
    Queued,
    Leased(SystemTime),
    None,
}

fn claim_key(record: &TaskRecord) -> ClaimKey {
    if record.status.is_terminal() {
        return ClaimKey::None;
    }
    match &record.lease {
        None => ClaimKey::Queued,
        Some(lease) => ClaimKey::Leased(lease.until),
    }
}

/// A stored task, held in the map itself: two words, less than a box of its own would
/// cost. The record is shared: a read ([`TaskStore::get_shared`]) takes a reference count,
/// not a copy, and a write replaces it.
struct Slot {
    record: Arc<TaskRecord>,
    seq: u64,
}

impl Shard {
    fn owner_index(&self, owner: Option<&str>) -> Option<&BTreeMap<u64, Arc<str>>> {
        match owner {
            Some(owner) => self.owned.get(owner),
            None => Some(&self.unowned),
        }
    }

    fn index_owner(&mut self, owner: Option<&str>, seq: u64, id: Arc<str>) {
        let index = match owner {
            None => &mut self.unowned,
            Some(owner) => {
                if !self.owned.contains_key(owner) {
                    self.owned.insert(owner.to_owned(), BTreeMap::new());
                }
                self.owned.get_mut(owner).expect("inserted above")
            }
        };
        index.insert(seq, id);
    }

    fn unindex_owner(&mut self, owner: Option<&str>, seq: u64) {
        match owner {
            None => {
                self.unowned.remove(&seq);
            }
            Some(owner) => {
                if let Some(index) = self.owned.get_mut(owner) {
                    index.remove(&seq);
                    if index.is_empty() {
                        self.owned.remove(owner);
                    }
                }
            }
        }
    }

    fn index_claim(&mut self, key: ClaimKey, seq: u64, id: &Arc<str>) {
        match key {
            ClaimKey::Queued => {
                self.queued.insert(seq, Arc::clone(id));
            }
            ClaimKey::Leased(until) => {
                self.leased.insert((until, Arc::clone(id)));
            }
            ClaimKey::None => {}
        }
    }

    fn unindex_claim(&mut self, key: ClaimKey, seq: u64, id: &Arc<str>) {
        match key {
            ClaimKey::Queued => {
                self.queued.remove(&seq);
            }
            ClaimKey::Leased(until) => {
                self.leased.remove(&(until, Arc::clone(id)));
            }
            ClaimKey::None => {}
        }
    }

    /// Adds a task to the status and tool indexes.
    fn index_scan(&mut self, status: TaskStatus, tool: &str, seq: u64, id: &Arc<str>) {
        self.by_status[status_index(status)].insert(seq, Arc::clone(id));
        if !self.by_tool.contains_key(tool) {
            self.by_tool.insert(tool.to_owned(), Default::default());
        }
        let tools = self.by_tool.get_mut(tool).expect("inserted above");
        tools[status_index(status)].insert(seq, Arc::clone(id));
    }

    /// Removes a task from the status and tool indexes.
    fn unindex_scan(&mut self, status: TaskStatus, tool: &str, seq: u64) {
        self.by_status[status_index(status)].remove(&seq);
        if let Some(tools) = self.by_tool.get_mut(tool) {
            tools[status_index(status)].remove(&seq);
            if tools.iter().all(BTreeMap::is_empty) {
                self.by_tool.remove(tool);
            }
        }
    }

    /// Up to `take` entries below `before`, newest first, of the index that serves `filter`
    /// best ([`index_for`]).
    fn candidates(&self, filter: &TaskFilter, before: u64, take: usize) -> Vec<(u64, Arc<str>)> {
        let from = |index: &BTreeMap<u64, Arc<str>>| -> Vec<(u64, Arc<str>)> {
            index
                .range(..before)
                .rev()
                .take(take)
                .map(|(seq, id)| (*seq, Arc::clone(id)))
                .collect()
        };
        let indexes = match index_for(filter) {
            ScanIndex::Owner(owner) => return self.owned.get(owner).map(from).unwrap_or_default(),
            ScanIndex::Tool(tool) => match self.by_tool.get(tool) {
                Some(by_status) => by_status,
                None => return Vec::new(),
            },
            ScanIndex::Statuses => &self.by_status,
        };
        let mut merged: Vec<(u64, Arc<str>)> = filter
            .wanted_statuses()
            .iter()
            .flat_map(|status| from(&indexes[status_index(*status)]))
            .collect();
        merged.sort_unstable_by_key(|entry| std::cmp::Reverse(entry.0));
        merged.truncate(take);
        merged
    }

    /// Adds a task to the owner, status and tool indexes, unless it is the record of a
    /// synchronous call, which no listing shows.
    fn index_listed(&mut self, record: &TaskRecord, seq: u64, id: &Arc<str>) {
        if !record.synchronous {
            self.index_owner(record.owner.as_deref(), seq, Arc::clone(id));
            self.index_scan(record.status, &record.tool, seq, id);
        }
    }

    /// Removes a task and its index entries, and frees the unique key it holds.
    fn remove(&mut self, id: &str, held: &Held) -> Option<Slot> {
        let (key, slot) = self.tasks.remove_entry(id)?;
        release(held, held_key(&slot.record), id);
        self.unindex_scan(slot.record.status, &slot.record.tool, slot.seq);
        self.unindex_claim(claim_key(&slot.record), slot.seq, &key);
        if let Some(at) = slot.record.expires_at() {
            self.expiry.remove(&(at, key));
        }
        self.unindex_owner(slot.record.owner.as_deref(), slot.seq);
        Some(slot)
    }
}

impl MemoryTaskStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            held: Mutex::default(),
            last_seq: AtomicU64::new(0),
        }
    }

    fn shard_index(id: &str) -> usize {
        // FNV-1a: fast, deterministic and good enough to spread random ids.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash ^ (hash >> 32)) as usize & (SHARDS - 1)
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index].locked()
    }

    fn shard(&self, id: &str) -> MutexGuard<'_, Shard> {
        self.lock(Self::shard_index(id))
    }
}

impl Default for MemoryTaskStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTaskStore")
            .field("shards", &self.shards.len())
            .field("tasks_created", &self.last_seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl TaskStore for MemoryTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let id = Arc::from(record.id.as_str());
        self.create_with_id(record, id).await
    }

    async fn create_with_id(&self, record: TaskRecord, id: Arc<str>) -> Result<(), StoreError> {
        debug_assert_eq!(*id, *record.id, "a create's shared id is its record's");
        let mut shard = self.shard(&record.id);
        if shard.tasks.contains_key(record.id.as_str()) {
            return Err(StoreError::Duplicate(record.id));
        }
        if let Some(key) = held_key(&record) {
            let mut held = self.held.locked();
            if let Some(holder) = held.get(key) {
                return Err(StoreError::Taken(holder.to_string()));
            }
            held.insert(key.to_owned(), Arc::clone(&id));
        }
        let seq = self.last_seq.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(at) = record.expires_at() {
            shard.expiry.insert((at, Arc::clone(&id)));
        }
        shard.index_claim(claim_key(&record), seq, &id);
        shard.index_listed(&record, seq, &id);
        let record = Arc::new(record);
        shard.tasks.insert(id, Slot { record, seq });
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self
            .shard(id)
            .tasks
            .get(id)
            .map(|slot| TaskRecord::clone(&slot.record)))
    }

    async fn get_shared(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        Ok(self
            .shard(id)
            .tasks
            .get(id)
            .map(|slot| Arc::clone(&slot.record)))
    }

    async fn compare_and_set(
        &self,
        mut record: TaskRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let mut guard = self.shard(&record.id);
        let shard = &mut *guard;
        let Some((id, slot)) = shard.tasks.get_key_value(record.id.as_str()) else {
            return Ok(false);
        };
        if slot.record.version != expected_version {
            return Ok(false);
        }
        let (old_key, new_key) = (held_key(&slot.record), held_key(&record));
        if old_key != new_key {
            let mut held = self.held.locked();
            if let Some(key) = new_key {
                if let Some(holder) = held.get(key) {
                    return Err(StoreError::backend(format!(
                        "task {}: its unique key is held by the unfinished task {holder}",
                        record.id
                    )));
                }
                held.insert(key.to_owned(), Arc::clone(id));
            }
            if let Some(key) = old_key
                && held.get(key).is_some_and(|holder| **holder == *record.id)
            {
                held.remove(key);
            }
        }
        let slot = shard
            .tasks
            .get_mut(record.id.as_str())
            .expect("the task was just read");
        record.version = expected_version + 1;
        let old = std::mem::replace(&mut slot.record, Arc::new(record));
        let seq = slot.seq;
        let new = &slot.record;
        let (old_expiry, new_expiry) = (old.expires_at(), new.expires_at());
        let relist = old.synchronous != new.synchronous;
        let new_owner =
            (old.owner != new.owner || relist).then(|| (new.owner.clone(), new.synchronous));
        let (old_claim, new_claim) = (claim_key(&old), claim_key(new));
        let rescan = (old.status != new.status || old.tool != new.tool || relist)
            .then(|| (new.status, new.tool.clone(), new.synchronous));
        if old_expiry == new_expiry
            && new_owner.is_none()
            && old_claim == new_claim
            && rescan.is_none()
        {
            return Ok(true);
        }
        let (key, _) = shard
            .tasks
            .get_key_value(old.id.as_str())
            .expect("the task was just written");
        let key = Arc::clone(key);
        if let Some((status, tool, synchronous)) = rescan {
            shard.unindex_scan(old.status, &old.tool, seq);
            if !synchronous {
                shard.index_scan(status, &tool, seq, &key);
            }
        }
        if old_claim != new_claim {
            shard.unindex_claim(old_claim, seq, &key);
            shard.index_claim(new_claim, seq, &key);
        }
        if old_expiry != new_expiry {
            if let Some(at) = old_expiry {
                shard.expiry.remove(&(at, Arc::clone(&key)));
            }
            if let Some(at) = new_expiry {
                shard.expiry.insert((at, Arc::clone(&key)));
            }
        }
        if let Some((new_owner, synchronous)) = new_owner {
            shard.unindex_owner(old.owner.as_deref(), seq);
            if !synchronous {
                shard.index_owner(new_owner.as_deref(), seq, key);
            }
        }
        Ok(true)
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.shard(id).remove(id, &self.held).is_some())
    }

    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let after: u64 = paging::cursor_after(cursor, 'm')?;
        // Collect the first `limit + 1` keys of every shard, then merge: one more than a page
        // tells whether a next page exists. Records are cloned only for the page itself.
        let wanted = limit.saturating_add(1);
        let mut keys: Vec<(u64, usize, Arc<str>)> = Vec::new();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            if let Some(tasks) = shard.owner_index(owner) {
                let range = tasks.range((Bound::Excluded(after), Bound::Unbounded));
                keys.extend(
                    range
                        .take(wanted)
                        .map(|(seq, id)| (*seq, index, Arc::clone(id))),
                );
            }
        }
        keys.sort_unstable_by_key(|(seq, _, _)| *seq);
        let more = keys.len() > limit;
        keys.truncate(limit);
        let mut tasks = Vec::with_capacity(keys.len());
        for (seq, index, id) in &keys {
            // A task deleted, or given to another owner, since its key was read is left out.
            let shard = self.lock(*index);
            if let Some(slot) = shard.tasks.get(&**id)
                && slot.seq == *seq
                && slot.record.owner.as_deref() == owner
            {
                tasks.push(TaskRecord::clone(&slot.record));
            }
        }
        let next_cursor = more.then(|| {
            let last = keys.last().map_or(after, |(seq, _, _)| *seq);
            paging::cursor('m', last)
        });
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        // Gather up to `limit` expired keys per shard, keep the `limit` earliest overall, then
        // delete those still in the index (a concurrent write may have moved or removed one).
        let mut due: Vec<(SystemTime, usize, Arc<str>)> = Vec::new();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            due.extend(
                shard
                    .expiry
                    .iter()
                    .take_while(|(at, _)| *at <= now)
                    .take(limit)
                    .map(|(at, id)| (*at, index, Arc::clone(id))),
            );
        }
        due.sort_unstable_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        due.truncate(limit);
        let mut expired = Vec::with_capacity(due.len());
        for (at, index, id) in due {
            let mut shard = self.lock(index);
            let key = (at, id);
            if shard.expiry.contains(&key)
                && let Some(slot) = shard.remove(&key.1, &self.held)
            {
                expired.push(slot.record.id.clone());
            }
        }
        Ok(expired)
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let mut records = Vec::new();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            records.extend(
                shard
                    .tasks
                    .values()
                    .filter(|slot| !slot.record.status.is_terminal())
                    .map(|slot| TaskRecord::clone(&slot.record)),
            );
        }
        Ok(records)
    }
}

impl ClaimStore for MemoryTaskStore {
    async fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        // Oldest first over all shards: gather candidates per shard, merge, then claim each
        // under its shard's lock (a concurrent claim may have taken one meanwhile).
        let mut keys: Vec<(u64, usize, Arc<str>)> = Vec::new();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            keys.extend(
                shard
                    .queued
                    .iter()
                    .filter(|(_, id)| {
                        skip.is_empty()
                            || shard
                                .tasks
                                .get(&***id)
                                .is_some_and(|slot| !skip.contains(&slot.record.tool))
                    })
                    .take(limit)
                    .map(|(seq, id)| (*seq, index, Arc::clone(id))),
            );
        }
        keys.sort_unstable_by_key(|(seq, _, _)| *seq);
        keys.truncate(limit);
        let mut claimed = Vec::with_capacity(keys.len());
        for (seq, index, id) in keys {
            let mut guard = self.lock(index);
            let shard = &mut *guard;
            if shard.queued.get(&seq) != Some(&id) {
                continue;
            }
            let Some(slot) = shard.tasks.get_mut(&*id) else {
                continue;
            };
            let record = Arc::make_mut(&mut slot.record);
            record.lease = Some(Lease {
                worker: worker.to_owned(),
                until,
            });
            record.epoch += 1;
            record.version += 1;
            let record = record.clone();
            shard.queued.remove(&seq);
            shard.leased.insert((until, id));
            claimed.push(record);
        }
        Ok(claimed)
    }

    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let mut due: Vec<(SystemTime, TaskRecord)> = Vec::new();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            due.extend(
                shard
                    .leased
                    .iter()
                    .take_while(|(until, _)| *until <= now)
                    .take(limit)
                    .filter_map(|(until, id)| {
                        shard
                            .tasks
                            .get(&**id)
                            .map(|slot| (*until, TaskRecord::clone(&slot.record)))
                    }),
            );
        }
        due.sort_unstable_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        due.truncate(limit);
        Ok(due.into_iter().map(|(_, record)| record).collect())
    }

    async fn changes(&self, _cursor: Option<u64>, _limit: usize) -> Result<Changes, StoreError> {
        Ok(Changes::default())
    }

    fn is_shared(&self) -> bool {
        false
    }
}

impl ScanTasks for MemoryTaskStore {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        // The cursor is the creation number the next page starts below.
        let Some(before) = scan_start(cursor, 'n', u64::MAX, limit)? else {
            return Ok(no_page(cursor));
        };
        // Each shard gives its newest index entries below the cursor, at most `take`, and
        // the matches among them. Past the oldest entry of a shard that gave `take`, that
        // shard was not read: only matches above the highest such floor are known complete.
        let take = scan_take(filter, limit);
        let mut matched: Vec<(u64, usize, Arc<str>)> = Vec::new();
        let mut floor: Option<u64> = None;
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            let candidates = shard.candidates(filter, before, take);
            if candidates.len() == take {
                let oldest = candidates.last().map_or(0, |(seq, _)| *seq);
                floor = Some(floor.map_or(oldest, |f| f.max(oldest)));
            }
            matched.extend(candidates.into_iter().filter_map(|(seq, id)| {
                let slot = shard.tasks.get(&*id)?;
                (slot.seq == seq && filter.matches(&slot.record)).then_some((seq, index, id))
            }));
        }
        matched.sort_unstable_by_key(|entry| std::cmp::Reverse(entry.0));
        if let Some(floor) = floor {
            matched.retain(|(seq, _, _)| *seq >= floor);
        }
        let full = matched.len() > limit;
        matched.truncate(limit);
        let mut tasks = Vec::with_capacity(matched.len());
        for (seq, index, id) in &matched {
            // A task deleted or changed since its key was read is left out.
            let shard = self.lock(*index);
            if let Some(slot) = shard.tasks.get(&**id)
                && slot.seq == *seq
                && filter.matches(&slot.record)
            {
                tasks.push(TaskRecord::clone(&slot.record));
            }
        }
        let next_cursor = if full {
            matched.last().map(|(seq, _, _)| paging::cursor('n', seq))
        } else {
            floor.map(|floor| paging::cursor('n', floor))
        };
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn count(&self) -> Result<TaskCounts, StoreError> {
        let mut counts = TaskCounts::default();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            for (tool, by_status) in &shard.by_tool {
                for status in ALL_STATUSES {
                    counts.add(status, tool, by_status[status_index(status)].len() as u64);
                }
            }
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{check_store, sample_record};
    use crate::task::TaskStatus;
    use std::time::{Duration, UNIX_EPOCH};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_store_passes_the_suite() {
        check_store(|| async { MemoryTaskStore::new() }).await;
    }

    #[tokio::test]
    async fn memory_store_passes_the_suite_on_one_thread() {
        check_store(|| async { MemoryTaskStore::new() }).await;
    }

    #[tokio::test]
    async fn the_suite_catches_broken_stores() {
        crate::store::testing::flawed::check_catches_flaws(MemoryTaskStore::new).await;
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    /// Every index entry points at a stored task and every stored task is indexed once.
    fn assert_consistent(store: &MemoryTaskStore) {
        for index in 0..SHARDS {
            let shard = store.lock(index);
            let with_ttl = shard
                .tasks
                .values()
                .filter(|s| s.record.expires_at().is_some())
                .count();
            assert_eq!(shard.expiry.len(), with_ttl, "shard {index}: expiry index");
            for (at, id) in &shard.expiry {
                assert_eq!(shard.tasks[id].record.expires_at(), Some(*at));
            }
            let owner_entries: usize =
                shard.owned.values().map(BTreeMap::len).sum::<usize>() + shard.unowned.len();
            let listed = shard.tasks.values().filter(|s| !s.record.synchronous);
            assert_eq!(owner_entries, listed.count(), "shard {index}: owner index");
            for (owner, tasks) in &shard.owned {
                assert!(
                    !tasks.is_empty(),
                    "shard {index}: empty index kept for {owner}"
                );
                for (seq, id) in tasks {
                    let slot = &shard.tasks[id];
                    assert_eq!(slot.seq, *seq);
                    assert_eq!(slot.record.owner.as_deref(), Some(owner.as_str()));
                }
            }
            for (seq, id) in &shard.unowned {
                assert_eq!(shard.tasks[id].seq, *seq);
                assert_eq!(shard.tasks[id].record.owner, None);
            }
            for (id, slot) in &shard.tasks {
                assert_eq!(MemoryTaskStore::shard_index(id), index);
                assert_eq!(**id, *slot.record.id);
                match claim_key(&slot.record) {
                    ClaimKey::Queued => assert_eq!(shard.queued.get(&slot.seq), Some(id)),
                    ClaimKey::Leased(until) => {
                        assert!(shard.leased.contains(&(until, Arc::clone(id))));
                    }
                    ClaimKey::None => {}
                }
            }
            let claimable = shard
                .tasks
                .values()
                .filter(|s| claim_key(&s.record) != ClaimKey::None)
                .count();
            assert_eq!(
                shard.queued.len() + shard.leased.len(),
                claimable,
                "shard {index}: claim indexes"
            );
        }
    }

    #[tokio::test]
    async fn many_tasks_spread_over_every_shard_and_list_in_creation_order() {
        let store = MemoryTaskStore::new();
        let mut ids = Vec::new();
        for n in 0..1000u64 {
            let owner = if n % 3 == 0 {
                Some("alice")
            } else {
                Some("bob")
            };
            let mut record = sample_record(&crate::task::random_id().unwrap(), owner, at(n));
            if n % 2 == 0 {
                record.ttl = Some(Duration::from_secs(5000));
            }
            if owner == Some("alice") {
                ids.push(record.id.clone());
            }
            store.create(record).await.unwrap();
        }
        assert_consistent(&store);
        for index in 0..SHARDS {
            assert!(
                !store.lock(index).tasks.is_empty(),
                "shard {index} is empty"
            );
        }

        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let page = store
                .list(Some("alice"), cursor.as_deref(), 7)
                .await
                .unwrap();
            assert!(page.tasks.len() <= 7);
            listed.extend(page.tasks.into_iter().map(|t| t.id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(listed, ids);
        assert_eq!(store.unfinished().await.unwrap().len(), 1000);
    }

    #[tokio::test]
    async fn expire_reads_only_expired_entries_and_keeps_indexes_in_sync() {
        let store = MemoryTaskStore::new();
        for n in 0..200u64 {
            let mut record = sample_record(&format!("task-{n}"), Some("alice"), at(0));
            record.ttl = Some(Duration::from_secs(if n < 3 { 10 } else { 1000 + n }));
            record.status = TaskStatus::Completed;
            store.create(record).await.unwrap();
        }
        let mut expired = store.expire(at(500), 1000).await.unwrap();
        expired.sort();
        assert_eq!(expired, ["task-0", "task-1", "task-2"]);
        let indexed: usize = (0..SHARDS).map(|i| store.lock(i).expiry.len()).sum();
        assert_eq!(indexed, 197);
        assert_consistent(&store);

        // Earliest first across shards.
        let expired = store.expire(at(2000), 3).await.unwrap();
        assert_eq!(expired, ["task-3", "task-4", "task-5"]);

        // An owner change and a TTL change through compare-and-set move the index entries.
        let mut record = store.get("task-10").await.unwrap().unwrap();
        record.owner = Some("carol".into());
        record.ttl = None;
        record.status = TaskStatus::Completed;
        assert!(store.compare_and_set(record, 0).await.unwrap());
        assert!(store.delete("task-11").await.unwrap());
        assert_consistent(&store);
        let page = store.list(Some("carol"), None, 10).await.unwrap();
        assert_eq!(page.tasks.len(), 1);
        assert_eq!(page.tasks[0].id, "task-10");
        assert!(
            !store
                .list(Some("alice"), None, 1000)
                .await
                .unwrap()
                .tasks
                .iter()
                .any(|t| t.id == "task-10" || t.id == "task-11")
        );
    }

    #[tokio::test]
    async fn zero_limits_return_nothing_and_keep_the_position() {
        let store = MemoryTaskStore::new();
        store
            .create(sample_record("a", Some("alice"), at(0)))
            .await
            .unwrap();
        let page = store.list(Some("alice"), None, 0).await.unwrap();
        assert!(page.tasks.is_empty());
        let page = store
            .list(Some("alice"), page.next_cursor.as_deref(), 5)
            .await
            .unwrap();
        assert_eq!(page.tasks.len(), 1);
        assert_eq!(page.next_cursor, None);
        assert!(store.expire(at(1_000_000), 0).await.unwrap().is_empty());
    }

    #[test]
    fn a_stored_task_stays_small() {
        // The record is the bulk of the fixed per-task cost; the slot and the indexes add a
        // few pointers. Its rare parts (the outcome, a cancel request) are boxed.
        let record = std::mem::size_of::<TaskRecord>();
        assert!(record <= 416, "a record is {record} bytes");
        assert!(std::mem::size_of::<Slot>() <= 16);
    }

    #[tokio::test]
    async fn a_create_with_a_shared_id_keeps_that_id() {
        let store = MemoryTaskStore::new();
        let id: Arc<str> = "a".into();
        store
            .create_with_id(sample_record("a", Some("alice"), at(0)), Arc::clone(&id))
            .await
            .unwrap();
        // The map and the indexes hold the id given, not a copy of it.
        assert!(Arc::strong_count(&id) > 2, "{}", Arc::strong_count(&id));
        assert_eq!(store.get("a").await.unwrap().unwrap().id, "a");
        assert_consistent(&store);
    }
}
