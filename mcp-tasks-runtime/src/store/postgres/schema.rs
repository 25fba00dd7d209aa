//! The schema: versioned migrations run at connect, and the checks that the store can
//! write and read its tables.

use super::PostgresTaskStore;
use super::connection::problem;
use crate::store::codec::millis;
use crate::store::remote::{Remote, within};
use std::time::{Duration, SystemTime};
use tokio_postgres::error::SqlState;

/// Forward migrations: `MIGRATIONS[n]` takes a schema from version `n` to `n + 1`. `{s}` is
/// the quoted schema name. Append only; never edit a migration that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE SEQUENCE {s}.task_seq;
    CREATE SEQUENCE {s}.change_seq;
    CREATE TABLE {s}.tasks (
        id text PRIMARY KEY,
        seq bigint NOT NULL DEFAULT nextval('{s}.task_seq'),
        owner text,
        tool text NOT NULL,
        settle text NOT NULL,
        status text NOT NULL,
        status_message text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        ttl_ms bigint,
        poll_interval_ms bigint NOT NULL,
        expires_at bigint,
        version bigint NOT NULL,
        input_seq bigint NOT NULL,
        arguments jsonb NOT NULL,
        input_requests jsonb NOT NULL,
        input_responses jsonb NOT NULL,
        outcome jsonb,
        client jsonb NOT NULL,
        lease_worker text,
        lease_until bigint,
        epoch bigint NOT NULL,
        cancel_at bigint,
        cancel_by text,
        change_seq bigint NOT NULL DEFAULT nextval('{s}.change_seq')
    );
    CREATE INDEX tasks_owner_seq ON {s}.tasks (owner, seq);
    CREATE INDEX tasks_expires_at ON {s}.tasks (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX tasks_unfinished ON {s}.tasks (status)
        WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_queued ON {s}.tasks (seq)
        WHERE lease_worker IS NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_lease ON {s}.tasks (lease_until, id)
        WHERE lease_worker IS NOT NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_changes ON {s}.tasks (change_seq);",
    // 2: listing across owners by status and by tool, newest first, and counts.
    "CREATE INDEX tasks_status_seq ON {s}.tasks (status, seq);
    CREATE INDEX tasks_tool_status_seq ON {s}.tasks (tool, status, seq);",
    // 3: durable step outputs, unique keys (held by one unfinished task at a time) and
    // the records of synchronous calls, which no listing shows.
    "ALTER TABLE {s}.tasks ADD COLUMN steps jsonb NOT NULL DEFAULT '{}';
    ALTER TABLE {s}.tasks ADD COLUMN unique_key text;
    ALTER TABLE {s}.tasks ADD COLUMN synchronous boolean NOT NULL DEFAULT false;
    CREATE UNIQUE INDEX tasks_unique_key ON {s}.tasks (unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('working', 'input_required');",
    // 4: the journal: each task's status history and its creating request's trace context.
    "ALTER TABLE {s}.tasks ADD COLUMN journal jsonb NOT NULL DEFAULT '{}';",
];

/// Creates the schema or brings it to the newest version, or refuses one that is not a
/// task schema or is newer than this build.
pub(super) async fn migrate(
    client: &mut deadpool_postgres::Object,
    name: &str,
    schema: &str,
    remote: &Remote,
    timeout: Duration,
) -> Result<(), String> {
    let work = async {
        let tx = client.transaction().await.map_err(|e| problem(&e))?;
        // One migrator at a time per schema, across every process.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('mcp_tasks.migrate.' || $1))",
            &[&name],
        )
        .await
        .map_err(|e| problem(&e))?;
        let exists = !tx
            .query("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
            .await
            .map_err(|e| problem(&e))?
            .is_empty();
        if !exists {
            tx.batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .map_err(|e| {
                    let hint = if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                        format!(
                            " (grant the role CREATE on the database, or create the schema \
                             {schema} for it with AUTHORIZATION)"
                        )
                    } else {
                        String::new()
                    };
                    format!("cannot create the schema: {}{hint}", problem(&e))
                })?;
        }
        let tables: Vec<String> = tx
            .query(
                "SELECT c.relname::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                &[&name],
            )
            .await
            .map_err(|e| problem(&e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let version: i64 = if tables.iter().any(|t| t == "meta") {
            let rows = tx
                .query(
                    &format!("SELECT value FROM {schema}.meta WHERE key = 'schema_version'"),
                    &[],
                )
                .await
                .map_err(|e| format!("cannot read the schema version: {}", problem(&e)))?;
            match rows.first() {
                Some(row) => row.try_get(0).map_err(|e| problem(&e))?,
                None => {
                    return Err(
                        "the schema's meta table has no schema version: it is not an \
                                mcp-tasks task schema"
                            .into(),
                    );
                }
            }
        } else if tables.is_empty() {
            tx.batch_execute(&format!(
                "CREATE TABLE {schema}.meta (key text PRIMARY KEY, value bigint NOT NULL); \
                 INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', 0);"
            ))
            .await
            .map_err(|e| format!("cannot create the schema's tables: {}", problem(&e)))?;
            0
        } else {
            return Err(format!(
                "the schema holds tables of another application ({}); choose another schema",
                tables.join(", ")
            ));
        };
        let latest = PostgresTaskStore::SCHEMA_VERSION;
        if version > latest {
            return Err(format!(
                "the schema has version {version}, written by a newer version of mcp-tasks; \
                 this version (mcp-tasks-runtime {}) reads schema versions up to {latest}. \
                 Upgrade, or use another schema",
                env!("CARGO_PKG_VERSION"),
            ));
        }
        if version == latest {
            return tx.commit().await.map_err(|e| problem(&e));
        }
        let from = usize::try_from(version).unwrap_or(0);
        for (n, migration) in MIGRATIONS.iter().enumerate().skip(from) {
            tx.batch_execute(&migration.replace("{s}", schema))
                .await
                .map_err(|e| {
                    format!(
                        "the migration to schema version {} failed: {}",
                        n + 1,
                        problem(&e)
                    )
                })?;
        }
        tx.execute(
            &format!("UPDATE {schema}.meta SET value = $1 WHERE key = 'schema_version'"),
            &[&latest],
        )
        .await
        .map_err(|e| format!("cannot record the schema version: {}", problem(&e)))?;
        tx.commit().await.map_err(|e| problem(&e))
    };
    within(timeout * 4, work)
        .await
        .map_err(|()| remote.timed_out(timeout * 4))?
}

/// Commits a real write and reads the tasks table, so missing privileges fail at connect.
pub(super) async fn probe(
    client: &deadpool_postgres::Object,
    schema: &str,
    remote: &Remote,
    timeout: Duration,
) -> Result<(), String> {
    let work = async {
        client
            .execute(
                &format!(
                    "INSERT INTO {schema}.meta (key, value) VALUES ('opened_at', $1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                &[&millis(SystemTime::now())],
            )
            .await
            .map_err(|e| format!("the database failed a write test: {}", problem(&e)))?;
        client
            .query(&format!("SELECT id FROM {schema}.tasks LIMIT 1"), &[])
            .await
            .map_err(|e| format!("cannot read the tasks table: {}", problem(&e)))?;
        Ok(())
    };
    within(timeout, work)
        .await
        .map_err(|()| remote.timed_out(timeout))?
}

pub(super) async fn current_change_seq(
    client: &deadpool_postgres::Object,
    schema: &str,
    remote: &Remote,
    timeout: Duration,
) -> Result<i64, String> {
    let work = async {
        let row = client
            .query_one(
                &format!("SELECT COALESCE(max(change_seq), 0) FROM {schema}.tasks"),
                &[],
            )
            .await
            .map_err(|e| format!("cannot read the change sequence: {}", problem(&e)))?;
        row.try_get::<_, i64>(0).map_err(|e| problem(&e))
    };
    within(timeout, work)
        .await
        .map_err(|()| remote.timed_out(timeout))?
}
