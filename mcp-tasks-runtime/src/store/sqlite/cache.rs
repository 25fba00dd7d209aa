//! The read cache of recently read tasks.

use crate::sync::LockExt;
use crate::task::TaskRecord;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// The number of cache shards; a power of two.
pub(super) const CACHE_SHARDS: usize = 16;

/// Recently read tasks, so a `get` of a hot task needs no trip to a reader thread.
///
/// Coherence: the writer calls [`Cache::forget`] for every task a batch changed after the
/// batch commits and before any caller is answered. A read that missed fills the cache
/// only if no task of its shard was forgotten since the miss (the shard's `epoch` is
/// unchanged), so a fill can never bring back a version older than a forget it raced with.
///
/// Records are kept behind an [`Arc`]: a hit hands out a reference count, not a copy.
/// When a shard is over its budget, a fill evicts by second chance (CLOCK): the oldest
/// fill goes unless it was read since it was filled or last passed over, so the tasks
/// clients poll stay while tasks read once make room.
pub(super) struct Cache {
    pub(super) shards: Box<[Mutex<CacheShard>]>,
    /// The byte budget of each shard.
    shard_bytes: usize,
}

/// A cached task.
pub(super) struct Cached {
    record: Arc<TaskRecord>,
    /// Roughly how many bytes it takes.
    bytes: usize,
    /// Which fill of its shard cached it, so that a stale place in the order of fills
    /// (the task was forgotten and filled again since) is told apart.
    fill: u64,
    /// Read since it was filled or since eviction last passed it over.
    read: bool,
}

#[derive(Default)]
pub(super) struct CacheShard {
    pub(super) tasks: HashMap<Arc<str>, Cached>,
    pub(super) bytes: usize,
    /// Bumped by every forget.
    pub(super) epoch: u64,
    /// Tasks a transaction is writing now (with how many writes): never cached meanwhile.
    pub(super) writing: HashMap<String, u32>,
    /// The cached tasks in the order of their fills (or of their second chances), with the
    /// fill that placed each; places of tasks forgotten since are skipped.
    order: VecDeque<(Arc<str>, u64)>,
    /// Fills so far.
    fills: u64,
}

impl CacheShard {
    /// Drops a task, and makes every read that missed before this unable to fill it.
    pub(super) fn invalidate(&mut self, id: &str) {
        self.epoch += 1;
        if let Some(cached) = self.tasks.remove(id) {
            self.bytes -= cached.bytes;
        }
        // Places of forgotten tasks are dropped when eviction reaches them; keep them from
        // piling up when little is evicted.
        if self.order.len() > 2 * self.tasks.len() + 64 {
            let tasks = &self.tasks;
            self.order
                .retain(|(id, fill)| tasks.get(id).is_some_and(|c| c.fill == *fill));
        }
    }

    /// Evicts one task, the oldest fill not read since; `false` if the shard is empty.
    fn evict_one(&mut self) -> bool {
        while let Some((id, fill)) = self.order.pop_front() {
            let Some(cached) = self.tasks.get_mut(&id) else {
                continue;
            };
            if cached.fill != fill {
                continue;
            }
            if cached.read {
                cached.read = false;
                self.order.push_back((id, fill));
                continue;
            }
            let bytes = cached.bytes;
            self.tasks.remove(&id);
            self.bytes -= bytes;
            return true;
        }
        false
    }
}

pub(super) enum Lookup {
    Hit(Arc<TaskRecord>),
    /// Not cached; the shard's epoch at the time of the miss.
    Miss(u64),
}

impl Cache {
    pub(super) fn new(bytes: usize) -> Self {
        Self {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
            shard_bytes: bytes / CACHE_SHARDS,
        }
    }

    pub(super) fn shard(&self, id: &str) -> MutexGuard<'_, CacheShard> {
        // FNV-1a.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let index = (hash ^ (hash >> 32)) as usize & (CACHE_SHARDS - 1);
        self.shards[index].locked()
    }

    pub(super) fn get(&self, id: &str) -> Lookup {
        if self.shard_bytes == 0 {
            return Lookup::Miss(0);
        }
        let mut shard = self.shard(id);
        match shard.tasks.get_mut(id) {
            Some(cached) => {
                cached.read = true;
                Lookup::Hit(Arc::clone(&cached.record))
            }
            None => Lookup::Miss(shard.epoch),
        }
    }

    /// Keeps a task out of the cache until [`Cache::end_write`]: called before the commit
    /// that writes it.
    pub(super) fn begin_write(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        let mut shard = self.shard(id);
        shard.invalidate(id);
        *shard.writing.entry(id.to_owned()).or_default() += 1;
    }

    /// The commit that wrote a task is done (or failed): reads may cache it again, from a
    /// read that starts after this.
    pub(super) fn end_write(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        let mut shard = self.shard(id);
        shard.invalidate(id);
        if let Some(n) = shard.writing.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                shard.writing.remove(id);
            }
        }
    }

    /// Caches a task read after a miss at `epoch`, unless a write got in between.
    pub(super) fn fill(&self, record: &Arc<TaskRecord>, bytes: usize, epoch: u64) {
        // A shard's budget holds at least 4 tasks of the largest size cached.
        if bytes > self.shard_bytes / 4 {
            return;
        }
        let mut shard = self.shard(&record.id);
        if shard.epoch != epoch
            || shard.tasks.contains_key(record.id.as_str())
            || shard.writing.contains_key(&record.id)
        {
            return;
        }
        while shard.bytes + bytes > self.shard_bytes {
            if !shard.evict_one() {
                break;
            }
        }
        shard.fills += 1;
        let fill = shard.fills;
        let id: Arc<str> = Arc::from(record.id.as_str());
        shard.bytes += bytes;
        shard.order.push_back((Arc::clone(&id), fill));
        shard.tasks.insert(
            id,
            Cached {
                record: Arc::clone(record),
                bytes,
                fill,
                read: false,
            },
        );
    }

    /// Drops a cached task older than `version`, which this process just read from the
    /// database another way (a scan): a `get` never shows an older version than a listing
    /// already showed, even before the change feed tells of another process's write.
    pub(super) fn forget_older(&self, id: &str, version: u64) {
        if self.shard_bytes == 0 {
            return;
        }
        let mut shard = self.shard(id);
        if shard
            .tasks
            .get(id)
            .is_some_and(|cached| cached.record.version < version)
        {
            shard.invalidate(id);
        }
    }

    /// Drops a task that was just written.
    pub(super) fn forget(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        self.shard(id).invalidate(id);
    }
}
