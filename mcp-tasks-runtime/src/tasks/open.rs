//! A task face over the store a URL names, for a process that only reads (an admin
//! command on the same database as the servers).

use super::Tasks;
use crate::store;

/// Why [`Tasks::open_read_only`] could not open a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The URL names no kind of store this build knows.
    #[error(
        "{0:?} is not a task store URL: give a SQLite path (or sqlite:PATH), postgres://... or redis://..."
    )]
    UnknownScheme(String),
    /// The URL names a store whose cargo feature this build lacks.
    #[error("this build has no {store} task store (cargo feature `{feature}`)")]
    NotBuilt {
        /// The kind of store.
        store: &'static str,
        /// The feature that adds it.
        feature: &'static str,
    },
    /// A SQLite file that does not exist (reading never creates one).
    #[error("there is no task database at {0}")]
    NoSuchFile(String),
    /// The store refused or could not be reached.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

impl Tasks {
    /// A read-only face ([`Tasks::read_only`]) over the store `url` names: a SQLite file
    /// (`PATH` or `sqlite:PATH`, which must exist), `postgres://...` or `redis://...`, each
    /// when this build has its feature.
    pub async fn open_read_only(url: &str) -> Result<Tasks, OpenStoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Ok(Tasks::read_only(
                store::PostgresTaskStore::connect(url).await?,
            ));
            #[cfg(not(feature = "postgres"))]
            return Err(OpenStoreError::NotBuilt {
                store: "PostgreSQL",
                feature: "postgres",
            });
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            #[cfg(feature = "redis")]
            return Ok(Tasks::read_only(store::RedisTaskStore::connect(url).await?));
            #[cfg(not(feature = "redis"))]
            return Err(OpenStoreError::NotBuilt {
                store: "Redis",
                feature: "redis",
            });
        }
        let path = url.strip_prefix("sqlite:").unwrap_or(url);
        if path.is_empty() || path.contains("://") {
            return Err(OpenStoreError::UnknownScheme(url.to_owned()));
        }
        if !std::path::Path::new(path).is_file() {
            return Err(OpenStoreError::NoSuchFile(path.to_owned()));
        }
        #[cfg(feature = "sqlite")]
        return Ok(Tasks::read_only(store::SqliteTaskStore::open(path)?));
        #[cfg(not(feature = "sqlite"))]
        Err(OpenStoreError::NotBuilt {
            store: "SQLite",
            feature: "sqlite",
        })
    }
}
