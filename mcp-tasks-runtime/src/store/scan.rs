//! Listing and counting tasks across owners: what an operator, an admin command or a
//! user's own code asks of a store, beside the owner-scoped listing the protocol uses.

use super::{StoreError, TaskPage, TaskStore};
use crate::task::{TaskRecord, TaskStatus};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::SystemTime;

/// Every status, in the order listings and counts name them.
pub const ALL_STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

/// A half-open range of times: from `after` (inclusive) to `before` (exclusive); either end
/// may be open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// The earliest time in the range, if any.
    pub after: Option<SystemTime>,
    /// The first time past the range, if any.
    pub before: Option<SystemTime>,
}

impl TimeRange {
    /// Whether `at` lies in the range.
    pub fn contains(&self, at: SystemTime) -> bool {
        self.after.is_none_or(|after| at >= after) && self.before.is_none_or(|before| at < before)
    }

    /// Whether the range is open at both ends.
    pub fn is_open(&self) -> bool {
        self.after.is_none() && self.before.is_none()
    }
}

/// Which tasks a listing across owners returns. The default matches every task.
///
/// ```
/// use mcp_tasks_runtime::store::TaskFilter;
/// use mcp_tasks_runtime::task::TaskStatus;
/// use std::time::{Duration, SystemTime};
///
/// // The failed tasks of one tool in the last hour.
/// let filter = TaskFilter::new()
///     .status(TaskStatus::Failed)
///     .tool("render_report")
///     .created_after(SystemTime::now() - Duration::from_secs(3600));
/// # let _ = filter;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// The statuses to match; empty matches every status.
    pub statuses: Vec<TaskStatus>,
    /// The tool, if only one.
    pub tool: Option<String>,
    /// The owner key (as [`TaskRecord::owner`] holds it), if only one owner's tasks.
    pub owner: Option<String>,
    /// When the task was created.
    pub created: TimeRange,
    /// When the task was last written.
    pub updated: TimeRange,
}

impl TaskFilter {
    /// A filter that matches every task.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a status to match (tasks of any of the added statuses match).
    pub fn status(mut self, status: TaskStatus) -> Self {
        if !self.statuses.contains(&status) {
            self.statuses.push(status);
        }
        self
    }

    /// Matches only tasks of these statuses.
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = TaskStatus>) -> Self {
        self.statuses.clear();
        for status in statuses {
            self = self.status(status);
        }
        self
    }

    /// Matches only tasks of this tool.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Matches only tasks of this owner key.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Matches only tasks created at or after `at`.
    pub fn created_after(mut self, at: SystemTime) -> Self {
        self.created.after = Some(at);
        self
    }

    /// Matches only tasks created before `at`.
    pub fn created_before(mut self, at: SystemTime) -> Self {
        self.created.before = Some(at);
        self
    }

    /// Matches only tasks last written at or after `at`.
    pub fn updated_after(mut self, at: SystemTime) -> Self {
        self.updated.after = Some(at);
        self
    }

    /// Matches only tasks last written before `at`.
    pub fn updated_before(mut self, at: SystemTime) -> Self {
        self.updated.before = Some(at);
        self
    }

    /// The statuses a listing reads: those named, or every status.
    pub fn wanted_statuses(&self) -> &[TaskStatus] {
        if self.statuses.is_empty() {
            &ALL_STATUSES
        } else {
            &self.statuses
        }
    }

    /// Whether `record` matches the filter.
    pub fn matches(&self, record: &TaskRecord) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&record.status))
            && self.tool.as_deref().is_none_or(|tool| record.tool == tool)
            && self
                .owner
                .as_deref()
                .is_none_or(|owner| record.owner.as_deref() == Some(owner))
            && self.created.contains(record.created_at)
            && self.updated.contains(record.updated_at)
    }
}

/// How many tasks a store holds, by status and tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// The number of tasks of each status and tool; pairs with none are left out.
    pub by_status_and_tool: BTreeMap<(TaskStatus, String), u64>,
}

impl TaskCounts {
    /// Adds `n` tasks of this status and tool.
    pub fn add(&mut self, status: TaskStatus, tool: &str, n: u64) {
        if n == 0 {
            return;
        }
        *self
            .by_status_and_tool
            .entry((status, tool.to_owned()))
            .or_default() += n;
    }

    /// The number of tasks in all.
    pub fn total(&self) -> u64 {
        self.by_status_and_tool.values().sum()
    }

    /// The number of tasks of this status.
    pub fn of_status(&self, status: TaskStatus) -> u64 {
        self.by_status_and_tool
            .iter()
            .filter(|((s, _), _)| *s == status)
            .map(|(_, n)| n)
            .sum()
    }

    /// The number of tasks of this tool.
    pub fn of_tool(&self, tool: &str) -> u64 {
        self.by_status_and_tool
            .iter()
            .filter(|((_, t), _)| t == tool)
            .map(|(_, n)| n)
            .sum()
    }
}

/// Listing and counting across owners, served by indexes, so that neither slows down as the
/// store grows.
///
/// Tasks are listed newest first (by the store's creation order). A page holds at most
/// `limit` tasks; a store may return a shorter page, even an empty one, with a
/// `next_cursor` when the filter's status, tool or owner index held many entries that the
/// rest of the filter (times) left out: each call does a bounded amount of work. Listing
/// stops when `next_cursor` is `None`.
pub trait ScanTasks: TaskStore {
    /// The tasks that match `filter`, newest first, starting after `cursor` (a
    /// `next_cursor` this store returned for the same filter).
    fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<TaskPage, StoreError>> + Send;

    /// How many tasks the store holds, by status and tool (expired tasks not yet swept
    /// included).
    fn count(&self) -> impl Future<Output = Result<TaskCounts, StoreError>> + Send;
}

/// Where a scan starts: below the creation number its cursor names (`tag`, then digits), or
/// below `top` without a cursor; a cursor this store did not make is
/// [`StoreError::InvalidCursor`]. `None` for a limit of 0, which lists nothing and hands the
/// cursor back.
pub(crate) fn scan_start<T: std::str::FromStr>(
    cursor: Option<&str>,
    tag: char,
    top: T,
    limit: usize,
) -> Result<Option<T>, StoreError> {
    let before = match cursor {
        None => top,
        Some(c) => super::paging::parse_cursor(c, tag)
            .ok_or_else(|| StoreError::InvalidCursor(c.to_owned()))?,
    };
    Ok((limit > 0).then_some(before))
}

/// The page of a scan with a limit of 0.
pub(crate) fn no_page(cursor: Option<&str>) -> TaskPage {
    TaskPage {
        tasks: Vec::new(),
        next_cursor: cursor.map(str::to_owned),
    }
}

/// The index a store without a query planner reads for a filter.
#[derive(Debug)]
pub(crate) enum ScanIndex<'a> {
    /// One owner's tasks.
    Owner(&'a str),
    /// One tool's tasks of the wanted statuses.
    Tool(&'a str),
    /// The tasks of the wanted statuses.
    Statuses,
}

/// The index that serves `filter`: the owner's, else the tool's (by status), else the
/// statuses'.
pub(crate) fn index_for(filter: &TaskFilter) -> ScanIndex<'_> {
    if let Some(owner) = &filter.owner {
        ScanIndex::Owner(owner)
    } else if let Some(tool) = &filter.tool {
        ScanIndex::Tool(tool)
    } else {
        ScanIndex::Statuses
    }
}

/// How many index entries one call of [`ScanTasks::scan`] reads (per shard or script) for a
/// page of `limit` tasks: one more than a page where the index decides the whole filter,
/// else a bounded budget whose matches may fill less than a page.
pub(crate) fn scan_take(filter: &TaskFilter, limit: usize) -> usize {
    let times_open = filter.created.is_open() && filter.updated.is_open();
    let decided = times_open
        && match index_for(filter) {
            ScanIndex::Owner(_) => filter.statuses.is_empty() && filter.tool.is_none(),
            ScanIndex::Tool(_) | ScanIndex::Statuses => true,
        };
    if decided {
        limit.saturating_add(1)
    } else {
        limit.saturating_mul(8).max(1024)
    }
}

/// A parameter of a [`ScanQuery`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) enum SqlValue {
    Text(String),
    Int(i64),
}

/// The SQL of one [`ScanTasks::scan`] call and its parameters.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) struct ScanQuery {
    pub(crate) sql: String,
    pub(crate) params: Vec<SqlValue>,
}

/// The query of a scan on a SQL store whose `tasks` table has `status, seq` and
/// `tool, status, seq` indexes: one branch per status, each reading its index newest first
/// from below `before`, merged newest first, `wanted` rows in all. Records of synchronous
/// calls (a true `synchronous` column) are left out. `columns` must include
/// `seq`; `placeholder(n)` spells the n-th parameter (from 1).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn scan_query(
    filter: &TaskFilter,
    columns: &str,
    table: &str,
    before: i64,
    wanted: i64,
    placeholder: impl Fn(usize) -> String,
) -> ScanQuery {
    use super::codec::millis;
    let mut params = vec![SqlValue::Int(before), SqlValue::Int(wanted)];
    let (before, wanted) = (placeholder(1), placeholder(2));
    let mut conditions = format!("seq < {before} AND NOT synchronous");
    let mut add = |params: &mut Vec<SqlValue>, test: &str, value: SqlValue| {
        params.push(value);
        conditions.push_str(&format!(" AND {test} {}", placeholder(params.len())));
    };
    if let Some(tool) = &filter.tool {
        add(&mut params, "tool =", SqlValue::Text(tool.clone()));
    }
    if let Some(owner) = &filter.owner {
        add(&mut params, "owner =", SqlValue::Text(owner.clone()));
    }
    for (column, range) in [
        ("created_at", &filter.created),
        ("updated_at", &filter.updated),
    ] {
        if let Some(after) = range.after {
            add(
                &mut params,
                &format!("{column} >="),
                SqlValue::Int(millis(after)),
            );
        }
        if let Some(before) = range.before {
            add(
                &mut params,
                &format!("{column} <"),
                SqlValue::Int(millis(before)),
            );
        }
    }
    let branches: Vec<String> = filter
        .wanted_statuses()
        .iter()
        .enumerate()
        .map(|(n, status)| {
            params.push(SqlValue::Text(status.as_str().to_owned()));
            format!(
                "SELECT * FROM (SELECT {columns} FROM {table} WHERE status = {} AND {conditions} \
                 ORDER BY seq DESC LIMIT {wanted}) AS branch{n}",
                placeholder(params.len())
            )
        })
        .collect();
    ScanQuery {
        sql: format!(
            "{} ORDER BY seq DESC LIMIT {wanted}",
            branches.join(" UNION ALL ")
        ),
        params,
    }
}

/// Counts a SQL store's tasks by status and tool, leaving out records of synchronous calls.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn count_query(table: &str) -> String {
    format!(
        "SELECT status, tool, count(*) FROM {table} WHERE NOT synchronous GROUP BY tool, status"
    )
}
