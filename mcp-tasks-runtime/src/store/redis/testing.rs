//! Redis for tests (cargo feature `testing`): a key prefix of a test's own on a shared
//! server, and a server process of a test's own.

use std::time::Duration;

/// A key prefix on a Redis server, made for one test; every key under it is deleted when
/// this is dropped (cargo features `redis` and `testing`).
///
/// The server is the one `MCP_TASKS_TEST_REDIS` names (a `redis://HOST:PORT` URL, or
/// `redis://HOST:PORT/DB` to keep every test in database `DB`; default
/// `redis://127.0.0.1:6379`). Parallel tests are kept apart by their key prefixes; a test
/// that kills every connection of its database ([`TestRedis::create_in`]) gets a database
/// of its own when the URL names none, and otherwise waits until no other test of its
/// process uses Redis, and they for it. Set it to `skip` to skip the tests that need Redis:
/// [`TestRedis::create`] then returns `None` and says so loudly. An unreachable server
/// fails the test.
#[derive(Debug)]
pub struct TestRedis {
    server: String,
    db: u32,
    prefix: String,
    /// Held while the test runs, when every test shares the URL's database.
    _turn: Option<Turn>,
}

/// Turns at the one database every test shares: many tests at once, or one that kills
/// every connection alone.
static TURNS: std::sync::Mutex<Turns> = std::sync::Mutex::new(Turns {
    sharing: 0,
    alone: false,
    waiting_alone: 0,
});

static TURN_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

#[derive(Debug)]
struct Turns {
    sharing: usize,
    alone: bool,
    waiting_alone: usize,
}

/// A test's turn at the shared database, given back when dropped.
#[derive(Debug)]
struct Turn {
    alone: bool,
}

impl Turn {
    /// Waits for a turn: `alone` waits until no other test holds one (and keeps others
    /// waiting); otherwise it waits only for a test that is alone.
    fn take(alone: bool) -> Self {
        let lock =
            |m: &'static std::sync::Mutex<Turns>| m.lock().unwrap_or_else(|p| p.into_inner());
        let mut turns = lock(&TURNS);
        if alone {
            turns.waiting_alone += 1;
            while turns.alone || turns.sharing > 0 {
                turns = TURN_CHANGED.wait(turns).unwrap_or_else(|p| p.into_inner());
            }
            turns.waiting_alone -= 1;
            turns.alone = true;
        } else {
            while turns.alone || turns.waiting_alone > 0 {
                turns = TURN_CHANGED.wait(turns).unwrap_or_else(|p| p.into_inner());
            }
            turns.sharing += 1;
        }
        Self { alone }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = TURNS.lock().unwrap_or_else(|p| p.into_inner());
        if self.alone {
            turns.alone = false;
        } else {
            turns.sharing -= 1;
        }
        TURN_CHANGED.notify_all();
    }
}

/// `redis://HOST:PORT` and the database number of `redis://HOST:PORT/DB`, if it has one.
pub(super) fn split_database(url: &str) -> (String, Option<u32>) {
    let url = url.trim().trim_end_matches('/');
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    match url[after_scheme..].rsplit_once('/') {
        Some((host, db)) => match db.parse() {
            Ok(db) => (format!("{}{host}", &url[..after_scheme]), Some(db)),
            Err(_) => panic!(
                "{} names the database {db:?}: give a number, as in redis://127.0.0.1:6379/10",
                TestRedis::ENV
            ),
        },
        None => (url.to_owned(), None),
    }
}

impl TestRedis {
    /// The environment variable that names the test server, or `skip`.
    pub const ENV: &'static str = "MCP_TASKS_TEST_REDIS";

    /// A fresh key prefix, `mcp-tasks-test:LABEL:PID:RANDOM`, in database 0 or the one the
    /// URL names. Works inside or outside an async runtime.
    pub fn create(label: &str) -> Option<Self> {
        Self::create_on(label, None)
    }

    /// [`TestRedis::create`] for a test that kills every connection of its database: in
    /// database `db`, which no other test of its binary uses; or, when the URL names a
    /// database, in that one, once no other test of this process uses it (and the others
    /// wait until this one is done).
    pub fn create_in(label: &str, db: u32) -> Option<Self> {
        Self::create_on(label, Some(db))
    }

    fn create_on(label: &str, own_db: Option<u32>) -> Option<Self> {
        let server = std::env::var(Self::ENV).unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        if server.trim() == "skip" {
            eprintln!(
                "\n!!! SKIPPED: {label}: this test needs Redis and {}=skip\n",
                Self::ENV
            );
            return None;
        }
        let (server, named) = split_database(&server);
        let (db, turn) = match (named, own_db) {
            (None, db) => (db.unwrap_or(0), None),
            (Some(db), own) => (db, Some(Turn::take(own.is_some()))),
        };
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let suffix = crate::task::random_id().expect("random bytes for a test name");
        let redis = Self {
            prefix: format!(
                "mcp-tasks-test:{label}:{}:{}",
                std::process::id(),
                &suffix[..8]
            ),
            server,
            db,
            _turn: turn,
        };
        if let Err(e) = redis.command(|conn| ::redis::cmd("PING").query::<String>(conn)) {
            panic!(
                "cannot reach the Redis server of {} ({}): {e}\n\
                 Start Redis, point {} at one, or set {}=skip to skip these tests",
                Self::ENV,
                redis.server,
                Self::ENV,
                Self::ENV
            );
        }
        Some(redis)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URL of the test's database, without the prefix.
    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.db)
    }

    /// The URL of the test's database with its prefix (`?prefix=…`), as
    /// `RedisTaskStore::connect` and the fixture's `--store` take it.
    pub fn store_url(&self) -> String {
        format!("{}?prefix={}", self.url(), self.prefix)
    }

    /// How many keys are under the prefix.
    pub fn key_count(&self) -> usize {
        self.keys()
            .unwrap_or_else(|e| panic!("cannot list the test keys: {e}"))
            .len()
    }

    /// Ends every client connection to the test's database (`CLIENT KILL ID`), as a restart
    /// of Redis or a network cut would. Returns how many were ended.
    pub fn kill_clients(&self) -> usize {
        let db = format!("db={}", self.db);
        self.command(|conn| {
            let own: i64 = ::redis::cmd("CLIENT").arg("ID").query(conn)?;
            let list: String = ::redis::cmd("CLIENT").arg("LIST").query(conn)?;
            let mut killed = 0;
            for line in list.lines() {
                let mut fields = line.split_whitespace();
                let id = fields
                    .clone()
                    .find_map(|f| f.strip_prefix("id="))
                    .and_then(|id| id.parse::<i64>().ok());
                let in_db = fields.any(|f| f == db);
                if let Some(id) = id.filter(|id| in_db && *id != own) {
                    let n: i64 = ::redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("ID")
                        .arg(id)
                        .query(conn)?;
                    killed += usize::try_from(n).unwrap_or(0);
                }
            }
            Ok(killed)
        })
        .unwrap_or_else(|e| panic!("cannot kill the test's Redis clients: {e}"))
    }

    fn keys(&self) -> ::redis::RedisResult<Vec<String>> {
        let pattern = format!("{}:*", self.prefix);
        self.command(|conn| {
            let mut keys = Vec::new();
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(conn)?;
                keys.extend(batch);
                if next == 0 {
                    return Ok(keys);
                }
                cursor = next;
            }
        })
    }

    /// Runs `f` on a fresh blocking connection to the test's database.
    fn command<T>(
        &self,
        f: impl FnOnce(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
    ) -> ::redis::RedisResult<T> {
        let client = ::redis::Client::open(self.url())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(10))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        f(&mut conn)
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let mut last = None;
        for _ in 0..3 {
            let cleaned = self.keys().and_then(|keys| {
                for chunk in keys.chunks(500) {
                    self.command(|conn| ::redis::cmd("DEL").arg(chunk).query::<i64>(conn))?;
                }
                Ok(keys.is_empty())
            });
            match cleaned {
                Ok(true) => return,
                // Deleted; look again for keys written meanwhile by a process still exiting.
                Ok(false) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        match last {
            Some(e) => eprintln!("cannot delete the test keys under {}: {e}", self.prefix),
            None => eprintln!(
                "keys under {} keep being written; some may be left",
                self.prefix
            ),
        }
    }
}

/// A `redis-server` process of a test's own, on a free port of 127.0.0.1, for tests that
/// stop, pause or kill Redis (never the shared server of [`TestRedis`]). Killed when
/// dropped (cargo features `redis` and `testing`).
///
/// The binary is `redis-server` on the `PATH`. With `MCP_TASKS_TEST_REDIS=skip`,
/// [`RedisServer::start`] returns `None` and says so loudly; a missing binary fails the
/// test, naming it.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<std::process::Child>,
    port: u16,
}

impl RedisServer {
    /// Starts a server without persistence and waits (at most 10 s) until it answers.
    pub fn start(label: &str) -> Option<Self> {
        if std::env::var(TestRedis::ENV).is_ok_and(|v| v.trim() == "skip") {
            eprintln!(
                "\n!!! SKIPPED: {label}: this test needs redis-server and {}=skip\n",
                TestRedis::ENV
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut server = Self { child: None, port };
        server.restart();
        Some(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (`kill -9`): its clients' connections end, and new ones are refused.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: it keeps nothing), and waits until
    /// it answers.
    pub fn restart(&mut self) {
        self.kill();
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): install it, or set {}=skip to skip the \
                     tests that need Redis",
                    TestRedis::ENV
                )
            });
        self.child = Some(child);
        for _ in 0..200 {
            if self
                .command(|conn| ::redis::cmd("PING").query::<String>(conn))
                .is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    /// `CLIENT PAUSE ms WRITE`: for `pause`, commands that write (scripts included) wait,
    /// unanswered, while reads on other connections are answered.
    pub fn pause_writes(&self, pause: Duration) {
        let ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        self.command(|conn| {
            ::redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(ms)
                .arg("WRITE")
                .query::<()>(conn)
        })
        .unwrap_or_else(|e| panic!("cannot pause the test's Redis: {e}"));
    }

    /// Ends a pause at once (`CLIENT UNPAUSE`).
    pub fn unpause(&self) {
        self.command(|conn| ::redis::cmd("CLIENT").arg("UNPAUSE").query::<()>(conn))
            .unwrap_or_else(|e| panic!("cannot unpause the test's Redis: {e}"));
    }

    fn command<T>(
        &self,
        f: impl FnOnce(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
    ) -> ::redis::RedisResult<T> {
        let client = ::redis::Client::open(self.url())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        f(&mut conn)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
