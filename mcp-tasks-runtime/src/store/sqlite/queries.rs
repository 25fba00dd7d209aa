//! The read queries the reader threads and the watcher run.

use super::super::paging::{self, clamp_limit};
use super::row::{COLUMNS, JOURNAL_COLUMN, SIZED_COLUMNS, STEPS_COLUMN, UNFINISHED, decode};
use super::sql_error;
use crate::store::scan::{SqlValue, count_query, scan_query};
use crate::store::{Changes, StoreError, TaskCounts, TaskFilter, TaskPage};
use crate::task::TaskRecord;
use rusqlite::{Connection, params};
use std::sync::LazyLock;

/// The task with this id, and roughly how many bytes it takes.
pub(super) fn get_record(
    conn: &Connection,
    id: &str,
) -> Result<Option<(TaskRecord, usize)>, StoreError> {
    let sql = |e| sql_error("cannot read a task", e);
    static GET: LazyLock<String> =
        LazyLock::new(|| format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"));
    let mut statement = conn.prepare_cached(&GET).map_err(sql)?;
    let mut rows = statement.query([id]).map_err(sql)?;
    let Some(row) = rows.next().map_err(sql)? else {
        return Ok(None);
    };
    let (record, _) = decode(row)?;
    let mut bytes = 256;
    for column in (0..SIZED_COLUMNS).chain([STEPS_COLUMN, JOURNAL_COLUMN]) {
        if let Ok(rusqlite::types::ValueRef::Text(text)) = row.get_ref(column) {
            bytes += text.len();
        }
    }
    Ok(Some((record, bytes)))
}

pub(super) fn list_records(
    conn: &Connection,
    owner: Option<&str>,
    after: i64,
    limit: usize,
) -> Result<TaskPage, StoreError> {
    let sql = |e| sql_error("cannot list tasks", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_owner_seq \
             WHERE owner IS ?1 AND seq > ?2 AND NOT synchronous ORDER BY seq LIMIT ?3"
        ))
        .map_err(sql)?;
    let wanted = clamp_limit(limit).saturating_add(1);
    let mut rows = statement
        .query(params![owner, after, wanted])
        .map_err(sql)?;
    read_page(&mut rows, limit, after, 's')
}

pub(super) fn unfinished_records(conn: &Connection) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = |e| sql_error("cannot scan unfinished tasks", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_unfinished \
             WHERE status IN ('working', 'input_required')"
        ))
        .map_err(sql)?;
    let mut rows = statement.query([]).map_err(sql)?;
    let mut records = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        records.push(decode(row)?.0);
    }
    Ok(records)
}

pub(super) fn lapsed_records(
    conn: &Connection,
    now: i64,
    limit: i64,
) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = |e| sql_error("cannot scan lapsed leases", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_lease \
             WHERE lease_worker IS NOT NULL AND {UNFINISHED} AND lease_until <= ?1 \
             ORDER BY lease_until, id LIMIT ?2"
        ))
        .map_err(sql)?;
    let mut rows = statement.query(params![now, limit]).map_err(sql)?;
    let mut records = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        records.push(decode(row)?.0);
    }
    Ok(records)
}

/// What [`ClaimStore::changes`] reads on the watcher connection.
pub(super) fn changed_ids(
    watcher: &mut (Connection, Option<i64>),
    cursor: Option<u64>,
    limit: usize,
) -> Result<Changes, StoreError> {
    let sql = |e| sql_error("cannot read the change feed", e);
    let (conn, seen) = watcher;
    let version: i64 = conn
        .pragma_query_value(None, "data_version", |row| row.get(0))
        .map_err(sql)?;
    let Some(after) = cursor else {
        let now: i64 = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'change_seq'",
                [],
                |row| row.get(0),
            )
            .map_err(sql)?;
        *seen = Some(version);
        return Ok(Changes {
            ids: Vec::new(),
            cursor: now.max(0).unsigned_abs(),
        });
    };
    if *seen == Some(version) {
        // Nothing was committed since the last look that read everything.
        return Ok(Changes {
            ids: Vec::new(),
            cursor: after,
        });
    }
    let mut statement = conn
        .prepare_cached(
            "SELECT id, change_seq FROM tasks INDEXED BY tasks_changes \
             WHERE change_seq > ?1 ORDER BY change_seq LIMIT ?2",
        )
        .map_err(sql)?;
    let after_sql = i64::try_from(after).unwrap_or(i64::MAX);
    let mut rows = statement
        .query(params![after_sql, clamp_limit(limit)])
        .map_err(sql)?;
    let mut ids = Vec::new();
    let mut last = after;
    while let Some(row) = rows.next().map_err(sql)? {
        ids.push(row.get::<_, String>(0).map_err(sql)?);
        last = last.max(row.get::<_, i64>(1).map_err(sql)?.max(0).unsigned_abs());
    }
    // A full page may have left more behind: look again next time even if nothing new
    // is committed.
    *seen = (ids.len() < limit).then_some(version);
    Ok(Changes { ids, cursor: last })
}

/// A page of [`crate::store::ScanTasks::scan`]: newest first, below `before`.
pub(super) fn scan_records(
    conn: &Connection,
    filter: &TaskFilter,
    before: i64,
    limit: usize,
) -> Result<TaskPage, StoreError> {
    let sql = |e| sql_error("cannot list tasks", e);
    let wanted = clamp_limit(limit).saturating_add(1);
    let query = scan_query(filter, COLUMNS, "tasks", before, wanted, |n| {
        format!("?{n}")
    });
    let mut statement = conn.prepare_cached(&query.sql).map_err(sql)?;
    let params = query.params.iter().map(|p| match p {
        SqlValue::Text(text) => rusqlite::types::Value::Text(text.clone()),
        SqlValue::Int(n) => rusqlite::types::Value::Integer(*n),
    });
    let mut rows = statement
        .query(rusqlite::params_from_iter(params))
        .map_err(sql)?;
    read_page(&mut rows, limit, before, 'q')
}

/// The tasks by status and tool.
pub(super) fn count_records(conn: &Connection) -> Result<TaskCounts, StoreError> {
    let sql = |e| sql_error("cannot count tasks", e);
    let mut statement = conn.prepare_cached(&count_query("tasks")).map_err(sql)?;
    let mut rows = statement.query([]).map_err(sql)?;
    let mut counts = TaskCounts::default();
    while let Some(row) = rows.next().map_err(sql)? {
        let status: String = row.get(0).map_err(sql)?;
        let tool: String = row.get(1).map_err(sql)?;
        let n: i64 = row.get(2).map_err(sql)?;
        if let Ok(status) = status.parse() {
            counts.add(status, &tool, n.max(0).unsigned_abs());
        }
    }
    Ok(counts)
}

/// A page of at most `limit` records from rows that hold one more when a next page exists;
/// its cursor (tagged `tag`) names the last record's creation number.
fn read_page(
    rows: &mut rusqlite::Rows<'_>,
    limit: usize,
    start: i64,
    tag: char,
) -> Result<TaskPage, StoreError> {
    let sql = |e| sql_error("cannot list tasks", e);
    let mut tasks = Vec::new();
    let mut last = start;
    let mut more = false;
    while let Some(row) = rows.next().map_err(sql)? {
        if tasks.len() == limit {
            more = true;
            break;
        }
        let (record, seq) = decode(row)?;
        tasks.push(record);
        last = seq;
    }
    let next_cursor = more.then(|| paging::cursor(tag, last));
    Ok(TaskPage { tasks, next_cursor })
}
