//! The options of the Redis task store, what the server's settings promise, and the
//! store's URL and key prefix.

use std::time::Duration;

/// The longest key prefix accepted.
pub(super) const MAX_PREFIX_LEN: usize = 100;

/// Knobs for [`RedisTaskStore::connect_with`]. `RedisOptions::default()` is what
/// [`RedisTaskStore::connect`] uses.
///
/// [`RedisTaskStore::connect_with`]: super::RedisTaskStore::connect_with
/// [`RedisTaskStore::connect`]: super::RedisTaskStore::connect
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The prefix of every key the store writes (followed by `:`), so several groups of
    /// servers can share one Redis database. Letters, digits and `_ - . :`, at most 100
    /// characters. Default `mcp-tasks`. A URL given to [`RedisTaskStore::connect`] may set it
    /// too, as `?prefix=NAME`.
    ///
    /// [`RedisTaskStore::connect`]: super::RedisTaskStore::connect
    pub key_prefix: String,
    /// The bound on every store operation, connecting included. A read that takes longer
    /// fails with [`StoreError::Unavailable`], a write with [`StoreError::Ambiguous`] (it
    /// may have been applied); a lost connection to Redis is an error within this time,
    /// never a hang, and while it is down requests fail at once. Default 5 s.
    ///
    /// [`StoreError::Unavailable`]: crate::store::StoreError::Unavailable
    /// [`StoreError::Ambiguous`]: crate::store::StoreError::Ambiguous
    pub timeout: Duration,
    /// How long after a terminal task's expiry Redis removes its record by itself (with
    /// `PEXPIREAT`), when no server's sweeper did so first. Covers clock skew between the
    /// servers and Redis. Default 60 s.
    pub expiry_grace: Duration,
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`] and changes nothing. Default 16 MiB.
    ///
    /// [`StoreError::Backend`]: crate::store::StoreError::Backend
    pub max_outcome_bytes: usize,
    /// The most entries the change feed keeps: each write trims the oldest past this. A
    /// process that reads the feed less often than this many writes happen misses some
    /// (it says so in the log) and learns of them through its scans. Default 131,072; at
    /// least 1.
    pub feed_len: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            key_prefix: "mcp-tasks".into(),
            timeout: Duration::from_secs(5),
            expiry_grace: Duration::from_secs(60),
            max_outcome_bytes: 16 * 1024 * 1024,
            feed_len: 1 << 17,
        }
    }
}

impl RedisOptions {
    /// These options with a different [key prefix](Self::key_prefix).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// These options with a different [operation timeout](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with a different [expiry grace](Self::expiry_grace).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }

    /// These options with a different [`feed_len`](Self::feed_len).
    pub fn feed_len(mut self, entries: usize) -> Self {
        self.feed_len = entries;
        self
    }
}

/// What Redis' persistence settings promise for an acknowledged write, read at connect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisDurability {
    /// `appendonly yes` with `appendfsync always`: every write is on disk before Redis
    /// answers; nothing acknowledged is lost, even on a power loss.
    Always,
    /// `appendonly yes` with `appendfsync everysec`: a restart of Redis loses nothing, an
    /// operating-system crash or power loss up to about a second of writes.
    EverySecond,
    /// `appendonly yes` with `appendfsync no`: a restart of Redis loses nothing, an
    /// operating-system crash or power loss whatever the kernel had not written yet.
    OsDecides,
    /// `appendonly no`: a restart of Redis loses every write since the last RDB snapshot;
    /// `snapshots` says whether snapshots are on at all (`save` is not empty).
    NotDurable {
        /// Whether RDB snapshots are configured.
        snapshots: bool,
    },
    /// `CONFIG GET` was refused (managed services often do that), so nothing is known.
    Unknown,
}

/// The URL without a `prefix` query parameter, and that parameter.
pub(super) fn split_prefix(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut prefix = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("prefix=") {
            Some(value) => {
                prefix = Some(value.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, prefix)
}

/// `redis://host:port/db (prefix p)`, without credentials.
pub(super) fn describe(url: &str, prefix: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{host} (prefix {prefix})")
}

pub(super) fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid key prefix {prefix:?}: use letters, digits and `_ - . :`, at most \
             {MAX_PREFIX_LEN} characters"
        ))
    }
}
