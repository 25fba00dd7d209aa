//! Multi round-trip requests (2026-07-28): the signed `requestState` that carries answers
//! from one round to the next.
//!
//! A tool that asks the client something during a plain call is stopped, the questions are
//! returned as `inputRequests`, and the client retries the call with `inputResponses`. The
//! tool then runs again from the start and finds its earlier answers. Answers from earlier
//! rounds travel in `requestState`, which the client cannot read meaningfully nor forge: it is
//! HMAC-SHA256-signed with the server's key and bound to the tool, a digest of the arguments,
//! the principal and an expiry time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::JsonObject;

type HmacSha256 = Hmac<Sha256>;

/// Why a `requestState` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not made by this server, or changed since.
    #[error("requestState is malformed or its signature does not match")]
    BadSignature,
    /// Made for another tool, other arguments or another principal.
    #[error("requestState belongs to a different call")]
    WrongCall,
    /// Too old.
    #[error("requestState has expired; call the tool again without it")]
    Expired,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    /// Tool name.
    t: String,
    /// Digest of the arguments.
    a: String,
    /// Principal, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    /// Expiry, seconds since the epoch.
    e: u64,
    /// Answers collected so far.
    r: BTreeMap<String, Value>,
}

/// A SHA-256 digest of a call's arguments (keys are sorted, so the digest is canonical).
pub(crate) fn arguments_digest(args: &JsonObject) -> String {
    let text = serde_json::to_string(args).unwrap_or_default();
    let digest = Sha256::digest(text.as_bytes());
    B64.encode(digest)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Signs the answers collected so far for the next round of this call.
pub(crate) fn seal(
    key: &[u8; 32],
    tool: &str,
    args: &JsonObject,
    principal: Option<&str>,
    ttl: Duration,
    answers: &BTreeMap<String, Value>,
) -> String {
    let payload = Payload {
        t: tool.to_owned(),
        a: arguments_digest(args),
        p: principal.map(str::to_owned),
        e: now_secs() + ttl.as_secs().max(1),
        r: answers.clone(),
    };
    let body = B64.encode(serde_json::to_vec(&payload).unwrap_or_default());
    let mut mac = HmacSha256::new_from_slice(key).expect("hmac takes any key length");
    mac.update(body.as_bytes());
    let tag = B64.encode(mac.finalize().into_bytes());
    format!("{body}.{tag}")
}

/// Checks a `requestState` and returns the answers it carries.
pub(crate) fn open(
    key: &[u8; 32],
    state: &str,
    tool: &str,
    args: &JsonObject,
    principal: Option<&str>,
) -> Result<BTreeMap<String, Value>, StateError> {
    let (body, tag) = state.split_once('.').ok_or(StateError::BadSignature)?;
    let tag = B64.decode(tag).map_err(|_| StateError::BadSignature)?;
    let mut mac = HmacSha256::new_from_slice(key).expect("hmac takes any key length");
    mac.update(body.as_bytes());
    mac.verify_slice(&tag)
        .map_err(|_| StateError::BadSignature)?;
    let bytes = B64.decode(body).map_err(|_| StateError::BadSignature)?;
    let payload: Payload = serde_json::from_slice(&bytes).map_err(|_| StateError::BadSignature)?;
    if payload.t != tool || payload.a != arguments_digest(args) || payload.p.as_deref() != principal
    {
        return Err(StateError::WrongCall);
    }
    if payload.e < now_secs() {
        return Err(StateError::Expired);
    }
    Ok(payload.r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args() -> JsonObject {
        json!({"b": 1, "a": [1, 2]}).as_object().unwrap().clone()
    }

    #[test]
    fn round_trips_answers() {
        let key = [7u8; 32];
        let mut answers = BTreeMap::new();
        answers.insert("elicit-1".to_owned(), json!({"action": "accept"}));
        let s = seal(&key, "t", &args(), None, Duration::from_secs(60), &answers);
        assert_eq!(open(&key, &s, "t", &args(), None).unwrap(), answers);
    }

    #[test]
    fn rejects_tampering_other_calls_and_other_keys() {
        let key = [7u8; 32];
        let s = seal(
            &key,
            "t",
            &args(),
            None,
            Duration::from_secs(60),
            &BTreeMap::new(),
        );
        let mut tampered = s.clone();
        tampered.replace_range(0..1, if s.starts_with('e') { "f" } else { "e" });
        assert_eq!(
            open(&key, &tampered, "t", &args(), None),
            Err(StateError::BadSignature)
        );
        assert_eq!(
            open(&[8u8; 32], &s, "t", &args(), None),
            Err(StateError::BadSignature)
        );
        assert_eq!(
            open(&key, &s, "other", &args(), None),
            Err(StateError::WrongCall)
        );
        assert_eq!(
            open(&key, &s, "t", &JsonObject::new(), None),
            Err(StateError::WrongCall)
        );
        assert_eq!(
            open(&key, &s, "t", &args(), Some("eve")),
            Err(StateError::WrongCall)
        );
        assert_eq!(
            open(&key, "garbage", "t", &args(), None),
            Err(StateError::BadSignature)
        );
    }

    #[test]
    fn rejects_expired_state() {
        let key = [7u8; 32];
        let payload = Payload {
            t: "t".into(),
            a: arguments_digest(&args()),
            p: None,
            e: now_secs() - 5,
            r: BTreeMap::new(),
        };
        let body = B64.encode(serde_json::to_vec(&payload).unwrap());
        let mut mac = HmacSha256::new_from_slice(&key).unwrap();
        mac.update(body.as_bytes());
        let s = format!("{body}.{}", B64.encode(mac.finalize().into_bytes()));
        assert_eq!(open(&key, &s, "t", &args(), None), Err(StateError::Expired));
    }
}
