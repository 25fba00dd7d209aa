//! The token store: one small JSON file per protected server, in a directory only its owner
//! may enter (`0700`), each file readable by its owner only (`0600`).

use super::super::AuthError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the tokens of protected servers are kept: a directory of one file per server, only
/// its owner may read (on Unix: the directory `0700`, each file `0600`, written whole and
/// renamed into place). A file holds the server's access token, its refresh token, the
/// client it was issued to (with the client's secret, when it has one) and the endpoints to
/// renew it; never the user's password.
///
/// Several processes may share it: renewing a server's token holds a lock on its file, so
/// that a refresh token is used once.
#[derive(Clone, Debug)]
pub struct TokenStore {
    dir: PathBuf,
}

/// The grant of one server, as stored.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Grant {
    /// The MCP endpoint, as the client names it.
    pub(super) server: String,
    /// The protected resource the token is for (RFC 8707).
    pub(super) resource: String,
    /// The authorization server.
    pub(super) issuer: String,
    pub(super) token_endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) revocation_endpoint: Option<String>,
    pub(super) client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) client_secret: Option<String>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub(super) auth_method: String,
    /// Whether the client was registered dynamically (and may be reused for this issuer).
    #[serde(default)]
    pub(super) registered: bool,
    /// `authorization_code` or `client_credentials`.
    pub(super) flow: String,
    pub(super) access_token: String,
    /// Seconds since the Unix epoch.
    pub(super) issued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) scope: Option<String>,
}

impl Grant {
    /// Whether the access token is still good for at least `margin` (default: a quarter of
    /// its life, at most a minute).
    pub(super) fn fresh(&self, margin: Option<Duration>) -> bool {
        let Some(expires) = self.expires_at else {
            return true;
        };
        let life = expires.saturating_sub(self.issued_at);
        let margin = margin.map_or_else(|| (life / 4).min(60), |m| m.as_secs());
        now_secs() + margin < expires
    }
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn fail(what: &str, path: &Path, e: impl std::fmt::Display) -> AuthError {
    AuthError::Store(format!("cannot {what} {}: {e}", path.display()))
}

impl TokenStore {
    /// A store in `dir`, made (owner-only) if missing, and made owner-only if it was not.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, AuthError> {
        let dir = dir.as_ref().to_owned();
        std::fs::create_dir_all(&dir).map_err(|e| fail("create", &dir, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| fail("restrict", &dir, e))?;
        }
        Ok(Self { dir })
    }

    /// The store beside a handle store at `handles` (its `tokens` directory).
    pub fn beside(handles: impl AsRef<Path>) -> Result<Self, AuthError> {
        let parent = handles
            .as_ref()
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Self::open(parent.join("tokens"))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server`'s tokens (whether or not there is one).
    pub fn file(&self, server: &str) -> PathBuf {
        let digest = Sha256::digest(server.as_bytes());
        let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }

    /// The servers with stored tokens.
    pub fn servers(&self) -> Result<Vec<String>, AuthError> {
        let mut servers = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| fail("list", &self.dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Ok(text) = std::fs::read(&path)
                && let Ok(grant) = serde_json::from_slice::<Grant>(&text)
            {
                servers.push(grant.server);
            }
        }
        servers.sort();
        Ok(servers)
    }

    /// Removes `server`'s tokens; whether there were any.
    pub fn forget(&self, server: &str) -> Result<bool, AuthError> {
        let path = self.file(server);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(fail("remove", &path, e)),
        }
    }

    pub(super) fn load(&self, server: &str) -> Result<Option<Grant>, AuthError> {
        let path = self.file(server);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| fail("read", &path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fail("read", &path, e)),
        }
    }

    /// Writes `grant` whole beside its file, owner-only, and renames it into place.
    pub(super) fn save(&self, grant: &Grant) -> Result<(), AuthError> {
        let path = self.file(&grant.server);
        let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec_pretty(grant).map_err(|e| fail("write", &path, e))?;
        // A new file, so that it is made owner-only (a leftover keeps its own mode).
        let _ = std::fs::remove_file(&temp);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temp).map_err(|e| fail("write", &temp, e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| fail("write", &temp, e))?;
        std::fs::rename(&temp, &path).map_err(|e| fail("write", &path, e))
    }

    /// Holds `server`'s lock file until the guard is dropped: one process renews its tokens
    /// at a time.
    pub(super) async fn lock(&self, server: &str) -> Result<std::fs::File, AuthError> {
        let path = self.file(server).with_extension("lock");
        tokio::task::spawn_blocking(move || {
            let mut options = OpenOptions::new();
            options.write(true).create(true).truncate(false);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(&path).map_err(|e| fail("lock", &path, e))?;
            file.lock().map_err(|e| fail("lock", &path, e))?;
            Ok(file)
        })
        .await
        .map_err(|e| AuthError::Store(format!("cannot lock the token store: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(server: &str) -> Grant {
        Grant {
            server: server.into(),
            resource: server.into(),
            issuer: "https://id.example".into(),
            token_endpoint: "https://id.example/token".into(),
            revocation_endpoint: None,
            client_id: "c".into(),
            client_secret: None,
            auth_method: "none".into(),
            registered: false,
            flow: "authorization_code".into(),
            access_token: "a".into(),
            issued_at: now_secs(),
            expires_at: Some(now_secs() + 400),
            refresh_token: Some("r".into()),
            scope: None,
        }
    }

    #[test]
    fn tokens_are_kept_owner_only_and_forgotten() {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TokenStore::beside(dir.join("handles.db")).unwrap();
        let server = "https://mcp.example/mcp";
        store.save(&grant(server)).unwrap();
        assert_eq!(store.load(server).unwrap().unwrap().access_token, "a");
        assert_eq!(store.servers().unwrap(), [server]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(store.dir()), 0o700);
            assert_eq!(mode(&store.file(server)), 0o600);
        }
        assert!(store.forget(server).unwrap());
        assert!(!store.forget(server).unwrap());
        assert!(store.load(server).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_token_is_renewed_in_the_last_quarter_of_its_life_or_the_margin_given() {
        let mut g = grant("s");
        g.issued_at = now_secs();
        g.expires_at = Some(g.issued_at + 400);
        assert!(g.fresh(None));
        assert!(!g.fresh(Some(Duration::from_secs(500))));
        g.expires_at = Some(g.issued_at + 40);
        assert!(g.fresh(None));
        g.issued_at = now_secs() - 35;
        g.expires_at = Some(now_secs() + 5);
        assert!(!g.fresh(None), "5 s of 40 left");
        g.expires_at = None;
        assert!(g.fresh(Some(Duration::from_secs(500))));
    }
}
