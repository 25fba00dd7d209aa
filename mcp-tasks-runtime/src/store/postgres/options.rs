//! The options of the PostgreSQL task store, and the checks of its schema name.

use std::time::Duration;

/// The longest name a schema may have: channel names are at most 63 bytes.
pub(super) const MAX_SCHEMA_LEN: usize = 40;

/// Knobs for [`PostgresTaskStore::connect_with`]. `PostgresOptions::default()` is what
/// [`PostgresTaskStore::connect`] uses.
///
/// [`PostgresTaskStore::connect_with`]: super::PostgresTaskStore::connect_with
/// [`PostgresTaskStore::connect`]: super::PostgresTaskStore::connect
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema the store's tables live in, created if missing; several servers can
    /// share a database with a schema each. Lowercase letters, digits and `_`, starting
    /// with a letter or `_`, at most 40 characters. Default `mcp_tasks`.
    pub schema: String,
    /// The most connections the store opens for requests (the change listener has one
    /// more of its own). Default 16; at least 1.
    pub pool_size: usize,
    /// The bound on every store operation: waiting for a connection, connecting, and the
    /// statement itself. An operation that gets no connection in time fails with
    /// [`StoreError::Unavailable`], a statement sent without an answer in time with
    /// [`StoreError::Ambiguous`] (a read: `Unavailable`); a lost connection to PostgreSQL
    /// is an error within this time, never a hang.
    /// Default 5 s.
    ///
    /// [`StoreError::Unavailable`]: crate::store::StoreError::Unavailable
    /// [`StoreError::Ambiguous`]: crate::store::StoreError::Ambiguous
    pub timeout: Duration,
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`] and changes nothing. Default 16 MiB.
    ///
    /// [`StoreError::Backend`]: crate::store::StoreError::Backend
    pub max_outcome_bytes: usize,
    /// The most creates inserted, or compare-and-sets written, by one statement. Those that
    /// arrive while every connection is busy are written together; each is still committed
    /// before it is answered. Default 256; at least 1.
    pub max_batch: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: "mcp_tasks".into(),
            pool_size: 16,
            timeout: Duration::from_secs(5),
            max_outcome_bytes: 16 * 1024 * 1024,
            max_batch: 256,
        }
    }
}

impl PostgresOptions {
    /// These options with a different [`schema`](Self::schema).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// These options with a different [pool size](Self::pool_size).
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections;
        self
    }

    /// These options with a different [operation timeout](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }
}

/// `user@host:port/db (schema s)`.
pub(super) fn describe(config: &tokio_postgres::Config, schema: &str) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("(no user)");
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db} (schema {schema})")
}

pub(super) fn check_schema_name(schema: &str) -> Result<(), String> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_LEN {
        return Err(format!(
            "invalid schema name {schema:?}: use lowercase letters, digits and `_`, starting \
             with a letter or `_`, at most {MAX_SCHEMA_LEN} characters"
        ));
    }
    if schema.starts_with("pg_") {
        return Err(format!(
            "invalid schema name {schema:?}: names starting with `pg_` are PostgreSQL's"
        ));
    }
    Ok(())
}

/// A checked schema name as an SQL identifier.
pub(super) fn quote_ident(schema: &str) -> String {
    format!("\"{schema}\"")
}
