//! Multi round-trip requests (2026-07-28): a synchronous call that asks the client something
//! is suspended, not stopped, and the client's retry resumes it.
//!
//! A tool (or a prompt or resource handler) that asks a question during a plain call waits
//! for the answer. The server answers the request with an `InputRequiredResult` listing every
//! question still open and keeps the suspended call, parked, under a random id. The client
//! retries the request with `inputResponses` and the `requestState` it was given; the parked
//! call gets the answers and continues from the question, and what it ends with answers the
//! retry (or another `InputRequiredResult`, if it asks again). Nothing before the question
//! runs twice.
//!
//! `requestState` carries the parked call's id and round, and, for tools that may run again
//! ([`ResumePolicy::Rerun`](crate::ResumePolicy)), the answers collected so far. The client
//! can neither read it meaningfully nor forge it: it is HMAC-SHA256-signed with the server's
//! key and bound to the tool (or prompt, or resource), a digest of the arguments, the
//! principal and an expiry time. The server holds a keyring
//! ([`ServerBuilder::request_state_keys`]): it signs with the newest key and accepts a state
//! signed with any key of the ring, so a key can be rotated without failing the calls that
//! are suspended when it is.
//!
//! Parked calls are bounded ([`ServerBuilder::max_parked_calls`], and
//! [`ServerBuilder::parked_call_timeout`], past which a parked call is cancelled as a
//! cancelled request is). Each state resumes its call once: a replayed or superseded state is
//! refused. A retry whose call is gone (timed out, the server restarted, another process got
//! the retry) follows the tool's [`ResumePolicy`](crate::ResumePolicy).
//!
//! [`ServerBuilder::max_parked_calls`]: crate::ServerBuilder::max_parked_calls
//! [`ServerBuilder::request_state_keys`]: crate::ServerBuilder::request_state_keys
//! [`ServerBuilder::parked_call_timeout`]: crate::ServerBuilder::parked_call_timeout

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
    /// The call this state would resume is gone (it waited too long, the server restarted,
    /// or another server process got the retry) and its tool does not run again.
    #[error(
        "the interaction expired: the call that asked these questions is gone; start over by calling again without requestState and inputResponses"
    )]
    CallGone,
    /// The call this state resumed has already been resumed with it (a replayed retry).
    #[error(
        "requestState was already used: the call it resumed has moved on or ended; start over by calling again without requestState"
    )]
    AlreadyUsed,
    /// Another request is resuming the same call right now.
    #[error("requestState is being used by another request that resumes the same call")]
    InUse,
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
    /// The parked call this state resumes, if one was parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    k: Option<String>,
    /// The round of the parked call this state resumes.
    #[serde(default)]
    n: u32,
    /// Answers collected so far (for a call that may run again from the start).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    r: BTreeMap<String, Value>,
}

/// What a `requestState` was made for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding<'a> {
    /// The tool name, `prompt:<name>` or `resource:<uri>`.
    pub(crate) target: &'a str,
    /// The request's arguments.
    pub(crate) args: &'a JsonObject,
    /// The authenticated principal, if any.
    pub(crate) principal: Option<&'a str>,
}

/// What a `requestState` carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct State {
    /// The parked call to resume and its round.
    pub(crate) call: Option<(String, u32)>,
    /// Answers given in earlier rounds (empty unless the call may run again).
    pub(crate) answers: BTreeMap<String, Value>,
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

/// Signs the state of this call for its next round.
pub(crate) fn seal(key: &[u8; 32], to: Binding<'_>, ttl: Duration, state: &State) -> String {
    let payload = Payload {
        t: to.target.to_owned(),
        a: arguments_digest(to.args),
        p: to.principal.map(str::to_owned),
        e: now_secs() + ttl.as_secs().max(1),
        k: state.call.as_ref().map(|(id, _)| id.clone()),
        n: state.call.as_ref().map_or(0, |(_, round)| *round),
        r: state.answers.clone(),
    };
    let body = B64.encode(serde_json::to_vec(&payload).unwrap_or_default());
    let mut mac = HmacSha256::new_from_slice(key).expect("hmac takes any key length");
    mac.update(body.as_bytes());
    let tag = B64.encode(mac.finalize().into_bytes());
    format!("{body}.{tag}")
}

/// Checks a `requestState` signed with any key of `keys` and returns what it carries.
pub(crate) fn open(keys: &[[u8; 32]], state: &str, to: Binding<'_>) -> Result<State, StateError> {
    let (body, tag) = state.split_once('.').ok_or(StateError::BadSignature)?;
    let tag = B64.decode(tag).map_err(|_| StateError::BadSignature)?;
    let signed = keys.iter().any(|key| {
        let mut mac = HmacSha256::new_from_slice(key).expect("hmac takes any key length");
        mac.update(body.as_bytes());
        mac.verify_slice(&tag).is_ok()
    });
    if !signed {
        return Err(StateError::BadSignature);
    }
    let bytes = B64.decode(body).map_err(|_| StateError::BadSignature)?;
    let payload: Payload = serde_json::from_slice(&bytes).map_err(|_| StateError::BadSignature)?;
    if payload.t != to.target
        || payload.a != arguments_digest(to.args)
        || payload.p.as_deref() != to.principal
    {
        return Err(StateError::WrongCall);
    }
    if payload.e < now_secs() {
        return Err(StateError::Expired);
    }
    Ok(State {
        call: payload.k.map(|id| (id, payload.n)),
        answers: payload.r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args() -> JsonObject {
        json!({"b": 1, "a": [1, 2]}).as_object().unwrap().clone()
    }

    fn to<'a>(target: &'a str, args: &'a JsonObject, principal: Option<&'a str>) -> Binding<'a> {
        Binding {
            target,
            args,
            principal,
        }
    }

    #[test]
    fn round_trips_the_call_and_answers() {
        let key = [7u8; 32];
        let args = args();
        let mut state = State {
            call: Some(("call-1".into(), 3)),
            answers: BTreeMap::new(),
        };
        state
            .answers
            .insert("elicit-1".to_owned(), json!({"action": "accept"}));
        let s = seal(&key, to("t", &args, None), Duration::from_secs(60), &state);
        assert_eq!(open(&[key], &s, to("t", &args, None)).unwrap(), state);
        let bare = seal(
            &key,
            to("t", &args, None),
            Duration::from_secs(60),
            &State::default(),
        );
        assert_eq!(
            open(&[key], &bare, to("t", &args, None)).unwrap(),
            State::default()
        );
    }

    #[test]
    fn rejects_tampering_other_calls_and_other_keys() {
        let key = [7u8; 32];
        let args = args();
        let empty = JsonObject::new();
        let s = seal(
            &key,
            to("t", &args, None),
            Duration::from_secs(60),
            &State::default(),
        );
        let mut tampered = s.clone();
        tampered.replace_range(0..1, if s.starts_with('e') { "f" } else { "e" });
        let cases = [
            (
                key,
                tampered.as_str(),
                to("t", &args, None),
                StateError::BadSignature,
            ),
            (
                [8u8; 32],
                s.as_str(),
                to("t", &args, None),
                StateError::BadSignature,
            ),
            (
                key,
                s.as_str(),
                to("other", &args, None),
                StateError::WrongCall,
            ),
            (
                key,
                s.as_str(),
                to("t", &empty, None),
                StateError::WrongCall,
            ),
            (
                key,
                s.as_str(),
                to("t", &args, Some("eve")),
                StateError::WrongCall,
            ),
            (
                key,
                "garbage",
                to("t", &args, None),
                StateError::BadSignature,
            ),
        ];
        for (key, state, binding, error) in cases {
            assert_eq!(open(&[key], state, binding), Err(error), "{state}");
        }
    }

    #[test]
    fn a_keyring_accepts_every_key_it_holds_and_no_other() {
        let (old, new, other) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let args = args();
        let signed_by = |key: &[u8; 32]| {
            seal(
                key,
                to("t", &args, None),
                Duration::from_secs(60),
                &State::default(),
            )
        };
        let (by_old, by_new) = (signed_by(&old), signed_by(&new));
        let rotated = [new, old];
        assert!(open(&rotated, &by_old, to("t", &args, None)).is_ok());
        assert!(open(&rotated, &by_new, to("t", &args, None)).is_ok());
        for state in [&by_old, &by_new] {
            assert_eq!(
                open(&[other], state, to("t", &args, None)),
                Err(StateError::BadSignature)
            );
        }
        assert_eq!(
            open(&[new], &by_old, to("t", &args, None)),
            Err(StateError::BadSignature)
        );
        assert_eq!(
            open(&[], &by_new, to("t", &args, None)),
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
            k: None,
            n: 0,
            r: BTreeMap::new(),
        };
        let body = B64.encode(serde_json::to_vec(&payload).unwrap());
        let mut mac = HmacSha256::new_from_slice(&key).unwrap();
        mac.update(body.as_bytes());
        let s = format!("{body}.{}", B64.encode(mac.finalize().into_bytes()));
        assert_eq!(
            open(&[key], &s, to("t", &args(), None)),
            Err(StateError::Expired)
        );
    }
}
