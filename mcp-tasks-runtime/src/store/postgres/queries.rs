//! The SQL of the store's statements.

use crate::store::scan::count_query;

/// The columns a record is read from, in the order [`decode`](super::row::decode) expects.
pub(super) const COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, version, input_seq, arguments::text, \
    input_requests::text, input_responses::text, outcome::text, seq, client::text, \
    lease_worker, lease_until, epoch, cancel_at, cancel_by, steps::text, unique_key, \
    synchronous, journal::text";

/// The number of [`COLUMNS`].
pub(super) const COLUMN_COUNT: usize = 27;

/// [`COLUMNS`] with each column qualified by `table`.
pub(super) fn qualified_columns(table: &str) -> String {
    COLUMNS
        .split(", ")
        .map(|column| format!("{table}.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The states in which a task is unfinished, as SQL.
pub(super) const UNFINISHED: &str = "status IN ('working', 'input_required')";

/// The rows of a batch of task writes (inserts and updates), one array a column, for
/// `FROM {ROWS} AS u({ROW_COLUMNS})`.
const ROWS: &str = "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
    $6::text[], $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[], \
    $13::int8[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], \
    $19::text[], $20::int8[], $21::int8[], $22::int8[], $23::text[], $24::text[], \
    $25::text[], $26::bool[], $27::text[])";

/// The names of [`ROWS`]' columns.
const ROW_COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, expires_at, version, input_seq, arguments, \
    input_requests, input_responses, outcome, client, lease_worker, lease_until, epoch, \
    cancel_at, cancel_by, steps, unique_key, synchronous, journal";

/// The SQL of every statement, with the schema filled in.
pub(super) struct Sql {
    pub(super) insert: String,
    /// Which of some ids exist.
    pub(super) existing: String,
    /// The unfinished tasks that hold some unique keys: `unique_key, id`.
    pub(super) holders: String,
    /// Compare-and-sets of many tasks, as arrays in the order of `insert` (the version
    /// column holds the version each write expects): `id, change_seq` of those written.
    pub(super) update_many: String,
    pub(super) get: String,
    pub(super) get_many: String,
    pub(super) delete: String,
    pub(super) list_owner: String,
    pub(super) list_unowned: String,
    pub(super) expire: String,
    pub(super) unfinished: String,
    pub(super) claim: String,
    pub(super) lapsed: String,
    pub(super) catch_up: String,
    /// The table, for the scans across owners.
    pub(super) table: String,
    pub(super) count: String,
}

impl Sql {
    pub(super) fn new(s: &str) -> Self {
        Self {
            insert: format!(
                "INSERT INTO {s}.tasks (id, owner, tool, settle, status, status_message, \
                    created_at, updated_at, ttl_ms, poll_interval_ms, expires_at, version, \
                    input_seq, arguments, input_requests, input_responses, outcome, client, \
                    lease_worker, lease_until, epoch, cancel_at, cancel_by, steps, \
                    unique_key, synchronous, journal) \
                 SELECT id, owner, tool, settle, status, status_message, created_at, \
                    updated_at, ttl_ms, poll_interval_ms, expires_at, version, input_seq, \
                    arguments::jsonb, input_requests::jsonb, input_responses::jsonb, \
                    outcome::jsonb, client::jsonb, lease_worker, lease_until, epoch, \
                    cancel_at, cancel_by, steps::jsonb, unique_key, synchronous, \
                    journal::jsonb \
                 FROM {ROWS} \
                    WITH ORDINALITY \
                    AS u({ROW_COLUMNS}, n) \
                 ORDER BY id, n \
                 ON CONFLICT DO NOTHING RETURNING id, change_seq"
            ),
            update_many: format!(
                "UPDATE {s}.tasks AS t SET owner = u.owner, tool = u.tool, settle = u.settle, \
                    status = u.status, status_message = u.status_message, \
                    created_at = u.created_at, updated_at = u.updated_at, ttl_ms = u.ttl_ms, \
                    poll_interval_ms = u.poll_interval_ms, expires_at = u.expires_at, \
                    version = u.version + 1, input_seq = u.input_seq, \
                    arguments = u.arguments::jsonb, input_requests = u.input_requests::jsonb, \
                    input_responses = u.input_responses::jsonb, outcome = u.outcome::jsonb, \
                    client = u.client::jsonb, lease_worker = u.lease_worker, \
                    lease_until = u.lease_until, epoch = u.epoch, cancel_at = u.cancel_at, \
                    cancel_by = u.cancel_by, steps = u.steps::jsonb, unique_key = u.unique_key, \
                    synchronous = u.synchronous, journal = u.journal::jsonb, \
                    change_seq = nextval('{s}.change_seq') \
                 FROM {ROWS} \
                    AS u({ROW_COLUMNS}) \
                 WHERE t.id = ANY($1::text[]) AND t.id = u.id AND t.version = u.version \
                 RETURNING t.id, t.change_seq"
            ),
            existing: format!("SELECT id FROM {s}.tasks WHERE id = ANY($1::text[])"),
            holders: format!(
                "SELECT unique_key, id FROM {s}.tasks \
                 WHERE unique_key = ANY($1::text[]) AND {UNFINISHED}"
            ),
            get: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE id = $1"),
            get_many: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE id = ANY($1::text[])"),
            delete: format!("DELETE FROM {s}.tasks WHERE id = $1"),
            list_owner: format!(
                "SELECT {COLUMNS} FROM {s}.tasks WHERE owner = $1 AND seq > $2 \
                 AND NOT synchronous ORDER BY seq LIMIT $3"
            ),
            list_unowned: format!(
                "SELECT {COLUMNS} FROM {s}.tasks WHERE owner IS NULL AND seq > $1 \
                 AND NOT synchronous ORDER BY seq LIMIT $2"
            ),
            expire: format!(
                "WITH due AS MATERIALIZED ( \
                    SELECT id FROM {s}.tasks WHERE expires_at <= $1 \
                    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED \
                 ) \
                 DELETE FROM {s}.tasks AS t USING due WHERE t.id = due.id RETURNING t.id"
            ),
            unfinished: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE {UNFINISHED}"),
            // The pick is a CTE, evaluated once: as a subquery it may be run again for
            // each updated row and take more than `LIMIT` tasks.
            claim: format!(
                "WITH picked AS MATERIALIZED ( \
                    SELECT id FROM {s}.tasks \
                    WHERE lease_worker IS NULL AND {UNFINISHED} AND tool <> ALL($3::text[]) \
                    ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED \
                 ) \
                 UPDATE {s}.tasks AS t SET lease_worker = $1, lease_until = $2, \
                    epoch = t.epoch + 1, version = t.version + 1, \
                    change_seq = nextval('{s}.change_seq') \
                 FROM picked WHERE t.id = picked.id \
                 RETURNING {}, t.change_seq",
                qualified_columns("t")
            ),
            lapsed: format!(
                "SELECT {COLUMNS} FROM {s}.tasks \
                 WHERE lease_worker IS NOT NULL AND {UNFINISHED} AND lease_until <= $1 \
                 ORDER BY lease_until, id LIMIT $2"
            ),
            catch_up: format!(
                "SELECT id, change_seq FROM {s}.tasks WHERE change_seq > $1 \
                 ORDER BY change_seq LIMIT $2"
            ),
            table: format!("{s}.tasks"),
            count: count_query(&format!("{s}.tasks")),
        }
    }
}
