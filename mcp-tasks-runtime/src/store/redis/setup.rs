//! What the store checks and prepares on the server at connect: the persistence settings,
//! the eviction policy, and the index entries of tasks written by an older version.

use super::connection::Shared;
use super::options::RedisDurability;
use crate::store::StoreError;
use ::redis::aio::ConnectionManager;
use ::redis::{AsyncCommands, RedisError};
use std::collections::HashMap;

impl Shared {
    /// Gives the tasks of a store written before the listings by status and tool existed
    /// their entries, once per store, a few hundred tasks per script.
    pub(super) async fn backfill(&self) -> Result<(), StoreError> {
        let marker = format!("{}scan-indexed", self.prefix);
        let done: bool = self
            .read_with("cannot read the store's version", move |mut conn| {
                let marker = marker.clone();
                async move { conn.exists(marker).await }
            })
            .await?;
        if done {
            return Ok(());
        }
        let mut cursor = "0".to_owned();
        loop {
            let mut call = self.scripts.backfill.prepare_invoke();
            call.arg(&self.prefix).arg(&cursor);
            cursor = self
                .run("cannot index the tasks by status and tool", call)
                .await?;
            if cursor == "0" {
                return Ok(());
            }
        }
    }
}

/// One setting of the server (`CONFIG GET`), or `None` when the command is refused.
pub(super) async fn config_get(conn: &mut ConnectionManager, name: &str) -> Option<String> {
    let got: Result<HashMap<String, String>, RedisError> = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await;
    got.ok()?.remove(name)
}

/// Reads `appendonly`, `appendfsync` and `save`; `Unknown` when `CONFIG` is refused.
pub(super) async fn read_durability(conn: &mut ConnectionManager) -> RedisDurability {
    let appendonly = config_get(conn, "appendonly").await;
    let appendfsync = config_get(conn, "appendfsync").await;
    match (appendonly.as_deref(), appendfsync.as_deref()) {
        (Some("no"), _) => RedisDurability::NotDurable {
            snapshots: config_get(conn, "save")
                .await
                .is_none_or(|save| !save.trim().is_empty()),
        },
        (Some("yes"), Some("always")) => RedisDurability::Always,
        (Some("yes"), Some("everysec")) => RedisDurability::EverySecond,
        (Some("yes"), Some("no")) => RedisDurability::OsDecides,
        _ => RedisDurability::Unknown,
    }
}

/// Warns when the server may evict keys under memory pressure: an evicted task is lost.
pub(super) async fn check_eviction(conn: &mut ConnectionManager, label: &str) {
    let Some(policy) = config_get(conn, "maxmemory-policy").await else {
        return;
    };
    if policy != "noeviction" {
        tracing::warn!(store = %label, policy = %policy, "Redis may evict tasks when it runs out of memory (maxmemory-policy is not noeviction); set maxmemory-policy noeviction so a full Redis refuses writes instead");
    }
}

pub(super) fn report_durability(label: &str, durability: &RedisDurability) {
    match durability {
        RedisDurability::Always => {
            tracing::info!(store = %label, "Redis writes every acknowledged task to disk before answering (appendonly yes, appendfsync always)");
        }
        RedisDurability::EverySecond => {
            tracing::info!(store = %label, "acknowledged tasks survive a Redis restart; a power loss may lose about the last second (appendonly yes, appendfsync everysec); set appendfsync always to lose nothing");
        }
        RedisDurability::OsDecides => {
            tracing::warn!(store = %label, "acknowledged tasks survive a Redis restart, but a power loss or OS crash may lose many seconds of them (appendonly yes, appendfsync no); set appendfsync everysec or always");
        }
        RedisDurability::NotDurable { snapshots: true } => {
            tracing::warn!(store = %label, "acknowledged tasks will NOT survive a Redis restart: the append-only file is off (appendonly no), so a restart loses every task written since the last RDB snapshot; set appendonly yes (and appendfsync always or everysec) on the Redis server");
        }
        RedisDurability::NotDurable { snapshots: false } => {
            tracing::warn!(store = %label, "acknowledged tasks will NOT survive a Redis restart: the append-only file is off (appendonly no) and so are snapshots (save \"\"), so a restart loses every task; set appendonly yes (and appendfsync always or everysec) on the Redis server");
        }
        RedisDurability::Unknown => {
            tracing::warn!(store = %label, "cannot read the Redis persistence settings (CONFIG GET was refused): whether acknowledged tasks survive a Redis restart is unknown; make sure the server runs with appendonly yes");
        }
    }
}
