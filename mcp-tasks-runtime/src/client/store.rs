//! The durable handle store: one small SQLite file that remembers every task the client
//! started, so that a client that crashed or lost its connection resumes watching the task
//! instead of calling the tool again.
//!
//! A handle records the server, the protocol era, the task id, the tool and a digest of the
//! arguments (not the arguments themselves, which may be secret). It is written as soon as
//! the server names the task, before anything else happens, and marked finished when the
//! task ends.
//!
//! The store also keeps the calls still in flight ([`PendingCall`]): a call made with an
//! idempotency key is recorded before it is sent and forgotten once its answer came, so the
//! calls whose outcome stayed unknown (the connection dropped, the server never answered)
//! can be sent again with the same key, which starts nothing twice. Unlike a handle, a pending
//! call keeps its arguments, which it needs to be repeated; it is dropped after
//! [`PENDING_CALL_AGE`] all the same.

use super::{Era, StoreError};
use crate::idempotency::IdempotencyKey;
use crate::sync::LockExt;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a pending call is kept: older ones are dropped when the store is opened or its
/// pending calls are listed (a server keeps an idempotency key for a limited time, so a
/// repeat that much later is no longer safe).
pub const PENDING_CALL_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// A tool call recorded before it was sent, whose answer has not come (yet).
#[derive(Clone, Debug, PartialEq)]
pub struct PendingCall {
    /// The call's idempotency key: repeat the call with it.
    pub key: IdempotencyKey,
    /// The server, named like a handle's [`Handle::server`].
    pub server: String,
    /// The tool called.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Value,
    /// When the call was first recorded, in ms since the Unix epoch.
    pub created_at_ms: u64,
}

/// A known task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    /// The server, as the client connected to it (`stdio:COMMAND`, `http:URL` or
    /// `local:NAME`).
    pub server: String,
    /// The protocol era the task was created on.
    pub era: Era,
    /// The server's task id.
    pub task_id: String,
    /// The tool called.
    pub tool: String,
    /// SHA-256 of the tool name and canonical arguments, hex.
    pub args_digest: String,
    /// When the call was made, in ms since the Unix epoch.
    pub created_at_ms: u64,
    /// The last status seen.
    pub status: String,
    /// `true` once the task ended (or the server forgot it).
    pub finished: bool,
}

/// The SQLite file of known handles.
#[derive(Debug)]
pub struct HandleStore {
    conn: Mutex<rusqlite::Connection>,
    path: PathBuf,
}

impl HandleStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Corrupt(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let conn = rusqlite::Connection::open(&path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS handles (
                server TEXT NOT NULL,
                task_id TEXT NOT NULL,
                era TEXT NOT NULL,
                tool TEXT NOT NULL,
                args_digest TEXT NOT NULL,
                created_at_ms INTEGER NOT NULL,
                status TEXT NOT NULL,
                finished INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (server, task_id)
            );
            CREATE TABLE IF NOT EXISTS pending_calls (
                server TEXT NOT NULL,
                key TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                created_at_ms INTEGER NOT NULL,
                PRIMARY KEY (server, key)
            )",
        )?;
        let store = Self {
            conn: Mutex::new(conn),
            path,
        };
        store.drop_old_calls()?;
        Ok(store)
    }

    /// The default location: `$MCP_TASKS_HOME/handles.db`, else
    /// `$XDG_STATE_HOME/mcp-tasks/handles.db`, else `~/.local/state/mcp-tasks/handles.db`.
    pub fn default_path() -> PathBuf {
        if let Some(home) = std::env::var_os("MCP_TASKS_HOME") {
            return PathBuf::from(home).join("handles.db");
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local").join("state"))
            })
            .unwrap_or_else(std::env::temp_dir);
        state.join("mcp-tasks").join("handles.db")
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a new handle (or refreshes a known one).
    pub fn record(&self, handle: &Handle) -> Result<(), StoreError> {
        self.conn.locked().execute(
            "INSERT INTO handles (server, task_id, era, tool, args_digest, created_at_ms, status, finished)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (server, task_id) DO UPDATE SET status = excluded.status,
                finished = excluded.finished",
            params![
                handle.server,
                handle.task_id,
                handle.era.as_str(),
                handle.tool,
                handle.args_digest,
                handle.created_at_ms as i64,
                handle.status,
                handle.finished,
            ],
        )?;
        Ok(())
    }

    /// Sets the last status seen of a handle; `finished` once the task ended.
    pub fn update(
        &self,
        server: &str,
        task_id: &str,
        status: &str,
        finished: bool,
    ) -> Result<(), StoreError> {
        self.conn.locked().execute(
            "UPDATE handles SET status = ?3, finished = ?4 WHERE server = ?1 AND task_id = ?2",
            params![server, task_id, status, finished],
        )?;
        Ok(())
    }

    /// One handle.
    pub fn get(&self, server: &str, task_id: &str) -> Result<Option<Handle>, StoreError> {
        let conn = self.conn.locked();
        let row = conn
            .query_row(
                "SELECT server, era, task_id, tool, args_digest, created_at_ms, status, finished
                 FROM handles WHERE server = ?1 AND task_id = ?2",
                params![server, task_id],
                row_tuple,
            )
            .optional()?;
        row.map(from_tuple).transpose()
    }

    /// Every handle, oldest first; only those of `server` when given; only unfinished ones
    /// when `unfinished`.
    pub fn list(&self, server: Option<&str>, unfinished: bool) -> Result<Vec<Handle>, StoreError> {
        let conn = self.conn.locked();
        let mut stmt = conn.prepare_cached(
            "SELECT server, era, task_id, tool, args_digest, created_at_ms, status, finished
             FROM handles WHERE (?1 IS NULL OR server = ?1) AND (?2 = 0 OR finished = 0)
             ORDER BY created_at_ms, rowid",
        )?;
        let rows = stmt.query_map(params![server, unfinished], row_tuple)?;
        rows.map(|r| from_tuple(r?)).collect()
    }

    /// Forgets finished handles; returns how many went.
    pub fn prune(&self) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .locked()
            .execute("DELETE FROM handles WHERE finished = 1", [])?)
    }

    /// Records a call about to be sent to `server` with idempotency key `key`, before it
    /// is sent. A call already recorded under this key keeps its first record.
    pub fn begin_call(
        &self,
        server: &str,
        key: &IdempotencyKey,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), StoreError> {
        self.begin_call_at(server, key, tool, arguments, now_ms())
    }

    fn begin_call_at(
        &self,
        server: &str,
        key: &IdempotencyKey,
        tool: &str,
        arguments: &Value,
        created_at_ms: u64,
    ) -> Result<(), StoreError> {
        self.conn.locked().execute(
            "INSERT INTO pending_calls (server, key, tool, arguments, created_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (server, key) DO NOTHING",
            params![
                server,
                key.as_str(),
                tool,
                arguments.to_string(),
                created_at_ms as i64,
            ],
        )?;
        Ok(())
    }

    /// Forgets the call to `server` with key `key`: its answer came (a result, a task or a
    /// definite error). Returns whether it was recorded.
    pub fn end_call(&self, server: &str, key: &IdempotencyKey) -> Result<bool, StoreError> {
        Ok(self.conn.locked().execute(
            "DELETE FROM pending_calls WHERE server = ?1 AND key = ?2",
            params![server, key.as_str()],
        )? > 0)
    }

    /// The calls whose answer never came, oldest first; only those to `server` when given.
    /// Calls older than [`PENDING_CALL_AGE`] are dropped first.
    pub fn pending_calls(&self, server: Option<&str>) -> Result<Vec<PendingCall>, StoreError> {
        self.drop_old_calls()?;
        let conn = self.conn.locked();
        let mut stmt = conn.prepare_cached(
            "SELECT server, key, tool, arguments, created_at_ms FROM pending_calls
             WHERE (?1 IS NULL OR server = ?1) ORDER BY created_at_ms, rowid",
        )?;
        let rows = stmt.query_map(params![server], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        rows.map(|row| {
            let (server, key, tool, arguments, created) = row?;
            Ok(PendingCall {
                key: IdempotencyKey::new(key)
                    .map_err(|e| StoreError::Corrupt(format!("pending call: {e}")))?,
                server,
                tool,
                arguments: serde_json::from_str(&arguments)
                    .map_err(|e| StoreError::Corrupt(format!("pending call arguments: {e}")))?,
                created_at_ms: created as u64,
            })
        })
        .collect()
    }

    /// Drops the pending calls older than [`PENDING_CALL_AGE`].
    fn drop_old_calls(&self) -> Result<(), StoreError> {
        let oldest = now_ms().saturating_sub(PENDING_CALL_AGE.as_millis() as u64);
        self.conn.locked().execute(
            "DELETE FROM pending_calls WHERE created_at_ms < ?1",
            params![oldest as i64],
        )?;
        Ok(())
    }
}

type Row = (String, String, String, String, String, i64, String, bool);

fn row_tuple(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

fn from_tuple(
    (server, era, task_id, tool, args_digest, created, status, finished): Row,
) -> Result<Handle, StoreError> {
    Ok(Handle {
        era: Era::parse(&era).ok_or_else(|| StoreError::Corrupt(format!("unknown era {era:?}")))?,
        server,
        task_id,
        tool,
        args_digest,
        created_at_ms: created as u64,
        status,
        finished,
    })
}

/// The digest a handle keeps of a call: SHA-256 over the tool name and the arguments with
/// object keys sorted, in hex.
pub fn args_digest(tool: &str, arguments: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update([0]);
    hasher.update(canonical(arguments).as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_ignore_key_order_and_see_values() {
        let a = args_digest("t", &json!({"a": 1, "b": [1, {"y": 2, "x": 1}]}));
        let b = args_digest("t", &json!({"b": [1, {"x": 1, "y": 2}], "a": 1}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            args_digest("t", &json!({"a": 2, "b": [1, {"x": 1, "y": 2}]}))
        );
        assert_ne!(
            a,
            args_digest("u", &json!({"a": 1, "b": [1, {"y": 2, "x": 1}]}))
        );
    }

    #[test]
    fn handles_survive_reopening_and_finish() {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-handles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("handles.db");
        let handle = Handle {
            server: "http:http://x/mcp".into(),
            era: Era::V2026_07_28,
            task_id: "t1".into(),
            tool: "slow".into(),
            args_digest: args_digest("slow", &json!({})),
            created_at_ms: 1,
            status: "working".into(),
            finished: false,
        };
        HandleStore::open(&path).unwrap().record(&handle).unwrap();
        let store = HandleStore::open(&path).unwrap();
        assert_eq!(
            store.list(None, true).unwrap(),
            std::slice::from_ref(&handle)
        );
        store
            .update(&handle.server, "t1", "completed", true)
            .unwrap();
        assert!(store.list(None, true).unwrap().is_empty());
        assert_eq!(
            store.get(&handle.server, "t1").unwrap().unwrap().status,
            "completed"
        );
        assert_eq!(store.prune().unwrap(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn temp_store(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("handles.db");
        (dir, path)
    }

    #[test]
    fn pending_calls_begin_end_and_age() {
        let (dir, path) = temp_store("pending");
        let store = HandleStore::open(&path).unwrap();
        let a = IdempotencyKey::new("key-a").unwrap();
        let b = IdempotencyKey::new("key-b").unwrap();
        store
            .begin_call("http:x", &a, "slow", &json!({"n": 1}))
            .unwrap();
        // A second record under the same key keeps the first.
        store
            .begin_call("http:x", &a, "other", &json!({"n": 2}))
            .unwrap();
        store.begin_call("stdio:y", &b, "slow", &json!({})).unwrap();
        let all = store.pending_calls(None).unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].key, a);
        assert_eq!(all[0].tool, "slow");
        assert_eq!(all[0].arguments, json!({"n": 1}));
        let x = store.pending_calls(Some("http:x")).unwrap();
        assert_eq!(x.len(), 1);
        assert_eq!(x[0].server, "http:x");

        // Pending calls survive reopening; an answered call is forgotten.
        drop(store);
        let store = HandleStore::open(&path).unwrap();
        assert!(store.end_call("http:x", &a).unwrap());
        assert!(!store.end_call("http:x", &a).unwrap());
        assert!(
            !store.end_call("http:x", &b).unwrap(),
            "keys are per server"
        );
        assert_eq!(store.pending_calls(None).unwrap().len(), 1);

        // Calls older than the age limit go when listed, and when the store is opened.
        let old = now_ms() - PENDING_CALL_AGE.as_millis() as u64 - 1000;
        store
            .begin_call_at("http:x", &a, "slow", &json!({}), old)
            .unwrap();
        let left = store.pending_calls(None).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].key, b);
        store
            .begin_call_at("http:x", &a, "slow", &json!({}), old)
            .unwrap();
        drop(store);
        let store = HandleStore::open(&path).unwrap();
        let count: i64 = store
            .conn
            .locked()
            .query_row("SELECT COUNT(*) FROM pending_calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 1, "the old call went on open");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_store_made_before_pending_calls_gains_them() {
        let (dir, path) = temp_store("upgrade");
        std::fs::create_dir_all(&dir).unwrap();
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE handles (
                    server TEXT NOT NULL, task_id TEXT NOT NULL, era TEXT NOT NULL,
                    tool TEXT NOT NULL, args_digest TEXT NOT NULL,
                    created_at_ms INTEGER NOT NULL, status TEXT NOT NULL,
                    finished INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (server, task_id));
                 INSERT INTO handles VALUES ('http:x', 't1', '2025-11-25', 'slow', 'd', 1,
                    'working', 0);",
            )
            .unwrap();
        }
        let store = HandleStore::open(&path).unwrap();
        assert_eq!(store.list(None, true).unwrap().len(), 1, "handles kept");
        let key = IdempotencyKey::new("k").unwrap();
        store
            .begin_call("http:x", &key, "slow", &json!({}))
            .unwrap();
        assert_eq!(store.pending_calls(None).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
