//! The read cache of recently read tasks.

use crate::sync::LockExt;
use crate::task::TaskRecord;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The number of cache shards; a power of two.
pub(super) const CACHE_SHARDS: usize = 16;

/// Recently read tasks, so a `get` of a hot task needs no trip to a reader thread.
///
/// Coherence: the writer calls [`Cache::forget`] for every task a batch changed after the
/// batch commits and before any caller is answered. A read that missed fills the cache
/// only if no task of its shard was forgotten since the miss (the shard's `epoch` is
/// unchanged), so a fill can never bring back a version older than a forget it raced with.
pub(super) struct Cache {
    pub(super) shards: Box<[Mutex<CacheShard>]>,
    /// The byte budget of each shard.
    shard_bytes: usize,
}

#[derive(Default)]
pub(super) struct CacheShard {
    pub(super) tasks: HashMap<String, (TaskRecord, usize)>,
    pub(super) bytes: usize,
    /// Bumped by every forget.
    pub(super) epoch: u64,
    /// Tasks a transaction is writing now (with how many writes): never cached meanwhile.
    pub(super) writing: HashMap<String, u32>,
}

impl CacheShard {
    /// Drops a task, and makes every read that missed before this unable to fill it.
    pub(super) fn invalidate(&mut self, id: &str) {
        self.epoch += 1;
        if let Some((_, size)) = self.tasks.remove(id) {
            self.bytes -= size;
        }
    }
}

// Returned by value straight to the caller, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Lookup {
    Hit(TaskRecord),
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
        let shard = self.shard(id);
        match shard.tasks.get(id) {
            Some((record, _)) => Lookup::Hit(record.clone()),
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
    pub(super) fn fill(&self, record: &TaskRecord, bytes: usize, epoch: u64) {
        // A shard's budget holds at least 4 tasks of the largest size cached.
        if bytes > self.shard_bytes / 4 {
            return;
        }
        let mut shard = self.shard(&record.id);
        if shard.epoch != epoch
            || shard.tasks.contains_key(&record.id)
            || shard.writing.contains_key(&record.id)
        {
            return;
        }
        while shard.bytes + bytes > self.shard_bytes {
            // Evict an arbitrary task: the hash map's order is as good as random.
            let Some(victim) = shard.tasks.keys().next().cloned() else {
                break;
            };
            if let Some((_, size)) = shard.tasks.remove(&victim) {
                shard.bytes -= size;
            }
        }
        shard.bytes += bytes;
        shard
            .tasks
            .insert(record.id.clone(), (record.clone(), bytes));
    }

    /// Drops a task that was just written.
    pub(super) fn forget(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        self.shard(id).invalidate(id);
    }
}
