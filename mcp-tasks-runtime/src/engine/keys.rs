//! Who a call is: the id the task (or kept result) of a call with an idempotency key gets,
//! and the key of a unique tool's task.
//!
//! Both are derived, not stored in an index of their own: a keyed call's id is a hash of
//! its scope, tool and key, so every process sharing the store derives the same id for a
//! repeat, and the store's unique ids settle a race between two of them. A unique tool's
//! task carries a hash of its scope, tool and compared arguments as its
//! [`unique_key`](crate::task::TaskRecord::unique_key), which the store keeps unique among
//! unfinished tasks; with a window, the window's number goes into a derived id instead, so
//! that finished tasks of the window count too.

use crate::model::JsonObject;
use crate::tool::{Tool, Unique};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::time::SystemTime;

/// The scope of a caller's keys and unique tasks: its principal; for anonymous callers,
/// their session only when sessions are strictly bound, else every anonymous caller
/// (whose task ids are bearer handles anyway).
pub(super) fn scope(owner: Option<&str>, strict_session_binding: bool) -> &str {
    match owner {
        Some(o) if o.starts_with("principal:") => o,
        Some(o) if strict_session_binding => o,
        _ => "anonymous",
    }
}

/// The id of the task or kept result of the call of `tool` with `key` in `scope`: a UUID
/// of version 8 whose bits are the first of SHA-256 over the three, length-prefixed.
pub(super) fn keyed_id(scope: &str, tool: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    for part in [scope, tool, key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What makes a call of a unique tool the same as another.
pub(super) enum UniqueIdentity {
    /// Equal to an unfinished task holding this unique key.
    Key(String),
    /// Equal to the task with this derived id, finished or not (a window).
    Id(String),
}

/// The identity of a call of `tool` (declared unique) with `args` by a caller in `scope`.
pub(super) fn unique_identity(
    unique: &Unique,
    scope: &str,
    tool: &Tool,
    args: &JsonObject,
    now: SystemTime,
) -> UniqueIdentity {
    let compared: Vec<(&str, &Value)> = match &unique.args {
        None => args.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        Some(names) => names
            .iter()
            .map(|n| (n.as_str(), args.get(n).unwrap_or(&Value::Null)))
            .collect(),
    };
    let mut text = String::new();
    let mut sorted = compared;
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (name, value) in sorted {
        canonical(&Value::String(name.to_owned()), &mut text);
        text.push(':');
        canonical(value, &mut text);
        text.push(',');
    }
    let digest = Sha256::digest(text.as_bytes());
    let hash: String = digest.iter().map(|x| format!("{x:02x}")).collect();
    match unique.window {
        None => UniqueIdentity::Key(format!("{}/{scope}/{hash}", tool.name)),
        Some(window) => {
            let since = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let bucket = since / window.as_millis().max(1);
            UniqueIdentity::Id(keyed_id(
                scope,
                &tool.name,
                &format!("unique window {bucket} {hash}"),
            ))
        }
    }
}

/// Writes `value` as JSON with the keys of every object sorted, so equal values give equal
/// text whatever order their keys came in.
pub(super) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CallToolResult;
    use serde_json::json;
    use std::time::Duration;

    fn tool() -> Tool {
        Tool::new("reindex", |_, _| async { Ok(CallToolResult::default()) })
    }

    fn object(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn keyed_ids_are_uuids_that_depend_on_every_part() {
        let id = keyed_id("anonymous", "render", "k1");
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8");
        assert_eq!(id, keyed_id("anonymous", "render", "k1"));
        assert_ne!(id, keyed_id("anonymous", "render", "k2"));
        assert_ne!(id, keyed_id("anonymous", "other", "k1"));
        assert_ne!(id, keyed_id("principal:ann", "render", "k1"));
        // Parts cannot run into each other.
        assert_ne!(keyed_id("a", "bc", "d"), keyed_id("ab", "c", "d"));
    }

    #[test]
    fn scopes_keep_principals_apart_and_anonymous_callers_together() {
        assert_eq!(scope(Some("principal:ann"), false), "principal:ann");
        assert_eq!(scope(Some("session:s1"), false), "anonymous");
        assert_eq!(scope(None, false), "anonymous");
        assert_eq!(scope(Some("session:s1"), true), "session:s1");
    }

    #[test]
    fn unique_keys_compare_the_named_arguments_in_any_order() {
        let now = SystemTime::now();
        let by_index = Unique::by(["index"]);
        let key = |args: Value| match unique_identity(
            &by_index,
            "anonymous",
            &tool(),
            &object(args),
            now,
        ) {
            UniqueIdentity::Key(k) => k,
            UniqueIdentity::Id(_) => panic!("no window, no id"),
        };
        assert_eq!(
            key(json!({"index": "a", "ms": 1})),
            key(json!({"ms": 2, "index": "a"}))
        );
        assert_ne!(key(json!({"index": "a"})), key(json!({"index": "b"})));
        assert_eq!(key(json!({})), key(json!({"index": null})));
        let all = Unique::all();
        let whole =
            |args: Value| match unique_identity(&all, "anonymous", &tool(), &object(args), now) {
                UniqueIdentity::Key(k) => k,
                UniqueIdentity::Id(_) => panic!("no window, no id"),
            };
        assert_eq!(
            whole(json!({"a": {"x": 1, "y": [1, 2]}, "b": 2})),
            whole(json!({"b": 2, "a": {"y": [1, 2], "x": 1}}))
        );
        assert_ne!(whole(json!({"a": 1})), whole(json!({"a": 1, "b": 2})));
    }

    #[test]
    fn a_window_gives_one_id_per_window() {
        let hourly = Unique::by(["index"]).within(Duration::from_secs(3600));
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let id = |secs: u64| match unique_identity(
            &hourly,
            "anonymous",
            &tool(),
            &object(json!({"index": "a"})),
            at(secs),
        ) {
            UniqueIdentity::Id(id) => id,
            UniqueIdentity::Key(_) => panic!("a window gives an id"),
        };
        assert_eq!(id(7200), id(7200 + 3599));
        assert_ne!(id(7200), id(7200 + 3600));
    }
}
