//! The knobs of the SQLite store.

use std::time::Duration;

/// How the commit that answers a write reaches the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// `PRAGMA synchronous=FULL`: every commit `fsync`s the write-ahead log before the
    /// writes it holds are answered. A write that returned `Ok` survives a process crash and
    /// a power loss. The default.
    #[default]
    Full,
    /// `PRAGMA synchronous=NORMAL`: commits are written to the log but `fsync`ed only at
    /// checkpoints. A write that returned `Ok` survives a process crash (`kill -9`) but the
    /// last commits may be lost if the machine loses power or the OS crashes.
    Normal,
}

/// Knobs for [`SqliteTaskStore::open_with`](super::SqliteTaskStore::open_with). `SqliteOptions::default()` is what
/// [`SqliteTaskStore::open`](super::SqliteTaskStore::open) uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`](crate::store::StoreError::Backend) and changes nothing. Default 16 MiB.
    pub max_outcome_bytes: usize,
    /// How commits reach the disk. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// The number of reader threads, each with its own connection. Default 2; at least 1.
    pub read_connections: usize,
    /// The most writes committed in one transaction. Default 1024; at least 1.
    pub max_batch: usize,
    /// How long a connection waits for a lock SQLite holds briefly (checkpoints, recovery).
    /// Default 5 s.
    pub busy_timeout: Duration,
    /// Bytes of the database each reader maps into memory (`PRAGMA mmap_size`), so pages
    /// are read without a system call and without a copy into SQLite's own page cache.
    /// A read beyond the mapped part costs a system call per page, so a `get` that misses
    /// the read cache slows down once the file outgrows this. The mapping takes address
    /// space, not memory: the pages read are the operating system's file cache, shared
    /// by the readers (they count in the process's resident size). Default 2 GiB on 64-bit
    /// targets (the most the bundled SQLite maps), 256 MiB elsewhere; 0 turns it off.
    pub mmap_bytes: u64,
    /// The memory, in bytes of stored JSON and text, of the in-process cache of recently
    /// read tasks that answers `get` without a trip to a reader thread. Every write of
    /// this store drops the task from the cache before it is answered; writes of other
    /// processes drop it when [`ClaimStore::changes`](crate::store::ClaimStore::changes) sees them (the engine looks every
    /// few tens of milliseconds), and a compare-and-set that loses drops it at once, so a
    /// retry reads the stored version. A program that reads a shared file without an engine
    /// (and so never calls `changes`) should turn the cache off. Tasks larger than 1/64 of this are not cached.
    /// Default 64 MiB; 0 turns the cache off.
    pub cache_bytes: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            max_outcome_bytes: 16 * 1024 * 1024,
            synchronous: Synchronous::Full,
            read_connections: 2,
            max_batch: 1024,
            busy_timeout: Duration::from_secs(5),
            mmap_bytes: if cfg!(target_pointer_width = "64") {
                0x7fff_0000
            } else {
                256 * 1024 * 1024
            },
            cache_bytes: 64 * 1024 * 1024,
        }
    }
}

impl SqliteOptions {
    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }

    /// These options with a different [`synchronous`](Self::synchronous) mode.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// These options with a different number of [reader threads](Self::read_connections).
    pub fn read_connections(mut self, readers: usize) -> Self {
        self.read_connections = readers;
        self
    }

    /// These options with a different [cache size](Self::cache_bytes); 0 turns it off.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }
}
