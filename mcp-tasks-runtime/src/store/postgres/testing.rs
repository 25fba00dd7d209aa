//! A PostgreSQL database of a test's own (cargo feature `testing`).

use std::time::Duration;

/// A PostgreSQL database made for one test and dropped when this is dropped (cargo features
/// `postgres` and `testing`).
///
/// The server is the one `MCP_TASKS_TEST_POSTGRES` names (a URL of a database the user may
/// create databases from; default `postgres://postgres@127.0.0.1:5432/postgres`). Set it
/// to `skip` to skip the tests that need PostgreSQL: [`TestDatabase::create`] then returns
/// `None` and says so loudly. An unreachable server fails the test.
#[derive(Debug)]
pub struct TestDatabase {
    admin: String,
    name: String,
    user: String,
    password: Option<String>,
    host: String,
    port: u16,
}

impl TestDatabase {
    /// The environment variable that names the test server, or `skip`.
    pub const ENV: &'static str = "MCP_TASKS_TEST_POSTGRES";

    /// Creates a fresh, empty database whose name starts with `mcp_tasks_test_` and the
    /// first 24 characters of `label`.
    /// Works inside or outside an async runtime.
    pub fn create(label: &str) -> Option<Self> {
        let admin = std::env::var(Self::ENV)
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        if admin.trim() == "skip" {
            eprintln!(
                "\n!!! SKIPPED: {label}: this test needs PostgreSQL and {}=skip\n",
                Self::ENV
            );
            return None;
        }
        let config: tokio_postgres::Config = admin
            .parse()
            .unwrap_or_else(|e| panic!("{} is not a PostgreSQL URL: {e}", Self::ENV));
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".into(),
        };
        let suffix = crate::task::random_id().expect("random bytes for a test name");
        // Names are at most 63 bytes; keep the label short and plain.
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(24)
            .collect();
        let db = Self {
            name: format!(
                "mcp_tasks_test_{label}_{}_{}",
                std::process::id(),
                &suffix[..8]
            ),
            user: config.get_user().unwrap_or("postgres").to_owned(),
            password: config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            admin,
        };
        let sql = format!("CREATE DATABASE \"{}\"", db.name);
        if let Err(e) = on_own_runtime(db.admin.clone(), sql) {
            panic!(
                "cannot create a test database on the PostgreSQL server of {} ({}): {e}\n\
                 Start PostgreSQL, point {} at one, or set {}=skip to skip these tests",
                Self::ENV,
                db.admin,
                Self::ENV,
                Self::ENV
            );
        }
        Some(db)
    }

    /// The database's name.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// A URL of the database.
    pub fn url(&self) -> String {
        self.url_for(&self.user, &self.name)
    }

    /// A URL of the database `db` on the same server, as `user`.
    pub fn url_for(&self, user: &str, db: &str) -> String {
        let password = self
            .password
            .as_ref()
            .filter(|_| user == self.user)
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        format!(
            "postgres://{user}{password}@{}:{}/{db}",
            self.host, self.port
        )
    }

    /// Runs SQL statements in the database, panicking if they fail.
    pub async fn execute(&self, sql: &str) {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test database: {e}"));
        let driver = tokio::spawn(connection);
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        drop(client);
        let _ = driver.await;
    }

    /// Ends every other connection to the database (`pg_terminate_backend`), as a server
    /// restart would.
    pub async fn terminate_connections(&self) {
        self.execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            self.name
        ))
        .await;
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        if let Err(e) = on_own_runtime(self.admin.clone(), sql) {
            eprintln!("cannot drop the test database {}: {e}", self.name);
        }
    }
}

/// Runs one SQL statement at `url` on a thread of its own, so it works in or out of an
/// async runtime.
fn on_own_runtime(url: String, sql: String) -> Result<(), String> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
            let (client, connection) = tokio::time::timeout(Duration::from_secs(10), connect)
                .await
                .map_err(|_| "no answer within 10 s".to_owned())?
                .map_err(|e| e.to_string())?;
            let driver = tokio::spawn(connection);
            let done = client.batch_execute(&sql).await.map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_owned())
            });
            drop(client);
            let _ = driver.await;
            done
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the thread panicked".into()))
}
