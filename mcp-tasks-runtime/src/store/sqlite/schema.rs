//! The file: opening connections, the schema and its migrations.

use super::open_error;
use super::options::SqliteOptions;
use crate::store::StoreError;
use crate::store::codec::millis;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// `PRAGMA application_id` of a task database: "mcpt".
pub(super) const APPLICATION_ID: i32 = 0x6d63_7074;

/// Forward migrations: `MIGRATIONS[n]` takes a database from schema version `n` to `n + 1`.
/// Version 0 is an empty file. Append only; never edit a migration that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE meta (
        key TEXT PRIMARY KEY NOT NULL,
        value ANY
    ) STRICT;
    INSERT INTO meta (key, value) VALUES ('last_seq', 0);
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY NOT NULL,
        seq INTEGER NOT NULL,
        owner TEXT,
        tool TEXT NOT NULL,
        protocol TEXT NOT NULL,
        status TEXT NOT NULL,
        status_message TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        ttl_ms INTEGER,
        poll_interval_ms INTEGER NOT NULL,
        expires_at INTEGER,
        version INTEGER NOT NULL,
        input_seq INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        input_requests TEXT NOT NULL,
        input_responses TEXT NOT NULL,
        outcome TEXT
    ) STRICT;
    CREATE INDEX tasks_owner_seq ON tasks (owner, seq);
    CREATE INDEX tasks_expires_at ON tasks (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX tasks_unfinished ON tasks (status)
        WHERE status IN ('working', 'input_required');",
    // 2: many processes on one file. The protocol column becomes the settle policy;
    // leases, fencing epochs, stored cancellation, the client's capabilities and a change
    // sequence for cross-process signals. Tasks left unfinished by an earlier version get a
    // lease that has already lapsed, so their tools' restart policies settle them.
    "ALTER TABLE tasks ADD COLUMN settle TEXT NOT NULL DEFAULT 'complete';
    UPDATE tasks SET settle = 'fail' WHERE protocol = '2025-11-25';
    ALTER TABLE tasks DROP COLUMN protocol;
    ALTER TABLE tasks ADD COLUMN client TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE tasks ADD COLUMN lease_worker TEXT;
    ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
    ALTER TABLE tasks ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN cancel_at INTEGER;
    ALTER TABLE tasks ADD COLUMN cancel_by TEXT;
    ALTER TABLE tasks ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
    UPDATE tasks SET lease_worker = 'an earlier version', lease_until = 0, epoch = 1
        WHERE status IN ('working', 'input_required');
    INSERT INTO meta (key, value) VALUES ('change_seq', 0);
    CREATE INDEX tasks_queued ON tasks (seq)
        WHERE lease_worker IS NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_lease ON tasks (lease_until)
        WHERE lease_worker IS NOT NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_changes ON tasks (change_seq);",
    // 3: listing across owners by status and by tool, newest first, and counts.
    "CREATE INDEX tasks_status_seq ON tasks (status, seq);
    CREATE INDEX tasks_tool_status_seq ON tasks (tool, status, seq);",
    // 4: durable step outputs, unique keys (held by one unfinished task at a time) and
    // the records of synchronous calls, which no listing shows.
    "ALTER TABLE tasks ADD COLUMN steps TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE tasks ADD COLUMN unique_key TEXT;
    ALTER TABLE tasks ADD COLUMN synchronous INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX tasks_unique_key ON tasks (unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('working', 'input_required');",
    // 5: the journal: each task's status history and its creating request's trace context.
    "ALTER TABLE tasks ADD COLUMN journal TEXT NOT NULL DEFAULT '{}';",
];

pub(super) fn open_connection(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    Ok(conn)
}

pub(super) fn open_reader(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let conn = open_connection(path, options.busy_timeout)?;
    conn.pragma_update(None, "query_only", true)?;
    conn.pragma_update(
        None,
        "mmap_size",
        i64::try_from(options.mmap_bytes).unwrap_or(i64::MAX),
    )?;
    // A first read, so a reader that cannot read fails now.
    conn.query_row("SELECT count(*) FROM meta", [], |_| Ok(()))?;
    Ok(conn)
}

/// Brings the database at `path` to the newest schema version in `migrations`, or refuses
/// a file that is not a task database or is newer than this build.
pub(super) fn migrate(
    conn: &mut Connection,
    path: &Path,
    migrations: &[&str],
) -> Result<(), StoreError> {
    let fail = |what: &str, error: rusqlite::Error| open_error(path, what, error);
    let latest = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail("cannot start a transaction", e))?;
    let application_id: i32 = tx
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(|e| fail("cannot read the database header", e))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| fail("cannot read the database header", e))?;
    let objects: i64 = tx
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(|e| fail("cannot read the schema", e))?;
    let foreign = if application_id == 0 {
        version != 0 || objects != 0
    } else {
        application_id != APPLICATION_ID
    };
    if foreign {
        return Err(StoreError::backend(format!(
            "cannot open the task database {}: it is an SQLite database of another \
             application (application_id {application_id:#x}, user_version {version}), \
             not an mcp-tasks task database",
            path.display()
        )));
    }
    if version > latest {
        return Err(StoreError::backend(format!(
            "cannot open the task database {}: it has schema version {version}, written by \
             a newer version of mcp-tasks; this version (mcp-tasks-runtime {}) reads schema \
             versions up to {latest}. Upgrade, or open another file",
            path.display(),
            env!("CARGO_PKG_VERSION"),
        )));
    }
    if version == latest {
        return Ok(());
    }
    let from = usize::try_from(version).unwrap_or(0);
    for (n, migration) in migrations.iter().enumerate().skip(from) {
        tx.execute_batch(migration).map_err(|e| {
            fail(
                &format!("the migration to schema version {} failed", n + 1),
                e,
            )
        })?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .and_then(|()| tx.pragma_update(None, "user_version", latest))
        .and_then(|()| tx.commit())
        .map_err(|e| fail("cannot record the schema version", e))
}

/// Commits a real write and reads it back; returns the last creation sequence number.
pub(super) fn probe(conn: &Connection) -> rusqlite::Result<i64> {
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('opened_at', ?1)",
        [millis(SystemTime::now())],
    )?;
    // Touch every index's root page too, so a damaged table fails here.
    conn.query_row(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_owner_seq \
                    WHERE owner IS NULL AND seq > 0 LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_expires_at \
                    WHERE expires_at <= 0 LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_unfinished \
                    WHERE status IN ('working', 'input_required') LIMIT 1))",
        [],
        |_| Ok(()),
    )?;
    conn.query_row("SELECT value FROM meta WHERE key = 'last_seq'", [], |row| {
        row.get(0)
    })
}
