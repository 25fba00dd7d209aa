//! The durable handle store: one small SQLite file that remembers every task the client
//! started, so that a client that crashed or lost its connection resumes watching the task
//! instead of calling the tool again.
//!
//! A handle records the server, the protocol era, the task id, the tool and a digest of the
//! arguments (not the arguments themselves, which may be secret). It is written as soon as
//! the server names the task, before anything else happens, and marked finished when the
//! task ends.

use super::{Era, StoreError};
use crate::sync::LockExt;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
            )",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
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
}
