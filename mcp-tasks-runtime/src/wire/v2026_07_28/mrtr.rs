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

use crate::sync::LockExt;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

use crate::call::Suspended;
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

/// The parked calls of a server: suspended synchronous calls waiting for the client's retry.
pub(crate) struct Parking {
    slots: Mutex<Slots>,
    max: usize,
    timeout: Duration,
    /// How long the id of an ended call is remembered, so that a replayed state is refused.
    remember: Duration,
    this: Weak<Parking>,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking")
            .field("max", &self.max)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Slots {
    calls: HashMap<String, Slot>,
    /// Parked and busy calls.
    live: usize,
    /// Ended calls, oldest first, with the time they are forgotten.
    ended: VecDeque<(Instant, String)>,
}

enum Slot {
    /// Waiting for the retry of `round`.
    Parked {
        round: u32,
        target: String,
        call: Suspended,
    },
    /// A retry of `round` is running it.
    Busy { round: u32 },
    /// It finished or was cancelled (`expired: false`), or it waited too long.
    Ended { expired: bool },
}

/// What a retry finds when it looks for its parked call.
pub(crate) enum Taken {
    /// The call, to resume.
    Resumed(Suspended),
    /// The call is not here (any more): the tool's `ResumePolicy` decides.
    Gone,
    /// The state cannot resume anything, whatever the policy.
    Refused(StateError),
}

/// A parked call being resumed by one request: when the request is done with it (it ended, was
/// cancelled, became a task, or the request's future was dropped), its states resume nothing
/// any more, unless it was parked again for its next round.
pub(crate) struct Resuming<'a> {
    parking: &'a Parking,
    id: String,
}

impl Resuming<'_> {
    /// The id of the call.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Resuming<'_> {
    fn drop(&mut self) {
        self.parking.finish(&self.id);
    }
}

/// How many ended calls are remembered per parked call allowed.
const REMEMBERED_PER_SLOT: usize = 16;

impl Parking {
    pub(crate) fn new(max: usize, timeout: Duration, remember: Duration) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            slots: Mutex::default(),
            max: max.max(1),
            timeout,
            remember,
            this: this.clone(),
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        let mut slots = self.slots.locked();
        let now = Instant::now();
        let cap = self.max.saturating_mul(REMEMBERED_PER_SLOT);
        while let Some((until, _)) = slots.ended.front() {
            if *until > now && slots.ended.len() <= cap {
                break;
            }
            let (_, id) = slots.ended.pop_front().expect("front exists");
            if matches!(slots.calls.get(&id), Some(Slot::Ended { .. })) {
                slots.calls.remove(&id);
            }
        }
        slots
    }

    /// Parks a call that waits for answers: a new one, or the one `resumed` continues. Gives
    /// the call back when the server already holds as many parked calls as it may.
    pub(crate) fn park(
        &self,
        resumed: Option<&str>,
        target: &str,
        call: Suspended,
    ) -> Result<(String, u32), Suspended> {
        let mut slots = self.slots();
        let next = resumed.and_then(|id| match slots.calls.get(id) {
            Some(Slot::Busy { round }) => Some((id.to_owned(), round + 1)),
            _ => None,
        });
        let (id, round) = match next {
            Some(next) => next,
            None if slots.live >= self.max => return Err(call),
            None => {
                // Without random bytes there is no id to resume by: the call is not parked.
                let Ok(id) = crate::task::random_id() else {
                    return Err(call);
                };
                slots.live += 1;
                (id, 1)
            }
        };
        slots.calls.insert(
            id.clone(),
            Slot::Parked {
                round,
                target: target.to_owned(),
                call,
            },
        );
        drop(slots);
        let parking = self.this.clone();
        let timeout = self.timeout;
        let timer_id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(parking) = parking.upgrade() {
                parking.expire(&timer_id, round);
            }
        });
        Ok((id, round))
    }

    /// Takes the parked call a retry's state names, to resume it.
    pub(crate) fn take(&self, id: &str, round: u32, target: &str) -> Taken {
        let mut slots = self.slots();
        match slots.calls.get(id) {
            None | Some(Slot::Ended { expired: true }) => return Taken::Gone,
            Some(Slot::Ended { expired: false }) => {
                return Taken::Refused(StateError::AlreadyUsed);
            }
            Some(Slot::Busy { .. }) => return Taken::Refused(StateError::InUse),
            Some(Slot::Parked {
                round: r,
                target: t,
                ..
            }) if *r != round || t != target => {
                return Taken::Refused(StateError::AlreadyUsed);
            }
            Some(Slot::Parked { .. }) => {}
        }
        match slots.calls.insert(id.to_owned(), Slot::Busy { round }) {
            Some(Slot::Parked { call, .. }) => Taken::Resumed(call),
            _ => unreachable!("the slot was parked"),
        }
    }

    /// Runs `check` on the call parked under `id`, if one is, leaving it parked: a retry
    /// whose answers do not fit is refused before it takes the call.
    pub(crate) fn check<E>(
        &self,
        id: &str,
        check: impl FnOnce(&Suspended) -> Result<(), E>,
    ) -> Result<(), E> {
        match self.slots().calls.get(id) {
            Some(Slot::Parked { call, .. }) => check(call),
            _ => Ok(()),
        }
    }

    /// Marks the call a retry's state names as being resumed by that retry.
    pub(crate) fn resuming(&self, id: String) -> Resuming<'_> {
        Resuming { parking: self, id }
    }

    /// Marks a resumed call as ended, unless it was parked again.
    fn finish(&self, id: &str) {
        let mut slots = self.slots();
        if matches!(slots.calls.get(id), Some(Slot::Busy { .. })) {
            self.end(&mut slots, id, false);
        }
    }

    /// Cancels a call that is still parked at `round`: it waited too long.
    fn expire(&self, id: &str, round: u32) {
        let mut slots = self.slots();
        if !matches!(slots.calls.get(id), Some(Slot::Parked { round: r, .. }) if *r == round) {
            return;
        }
        if let Some(Slot::Parked { call, .. }) = self.end(&mut slots, id, true) {
            drop(slots);
            tracing::debug!(call = %id, "a parked call waited too long for its answers");
            call.abandon();
        }
    }

    fn end(&self, slots: &mut Slots, id: &str, expired: bool) -> Option<Slot> {
        let old = slots.calls.insert(id.to_owned(), Slot::Ended { expired });
        slots.live = slots.live.saturating_sub(1);
        slots
            .ended
            .push_back((Instant::now() + self.remember, id.to_owned()));
        old
    }

    /// The number of calls parked or being resumed.
    /// The number of calls parked or being resumed.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.slots().live
    }
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

    fn suspended() -> Suspended {
        use crate::call::{Caller, LogGate, Notifier};
        let (tx, _rx) = crate::session::outbound_channel(crate::OUTBOUND_CAPACITY);
        let caller = Caller {
            name: "t".into(),
            client_capabilities: Arc::new(json!({})),
            principal: None,
            state: Default::default(),
            notifier: Notifier {
                sink: crate::session::Sink::new(tx),
                progress_token: None,
                log: LogGate::Request(None),
            },
        };
        Suspended::start(caller, BTreeMap::new(), false, |_| {
            Box::pin(std::future::pending())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn parked_calls_are_bounded_resumed_once_and_expire() {
        let parking = Parking::new(2, Duration::from_secs(30), Duration::from_secs(600));
        let (a, round) = parking.park(None, "t", suspended()).ok().unwrap();
        assert_eq!(round, 1);
        let waiting = suspended();
        let waiting_token = waiting.cancel.clone();
        let (b, _) = parking.park(None, "t", waiting).ok().unwrap();
        assert!(parking.park(None, "t", suspended()).is_err(), "at most two");

        for (round, target) in [(1, "other"), (2, "t")] {
            assert!(matches!(
                parking.take(&a, round, target),
                Taken::Refused(StateError::AlreadyUsed)
            ));
        }
        let Taken::Resumed(call) = parking.take(&a, 1, "t") else {
            panic!("parked at round 1")
        };
        assert!(matches!(
            parking.take(&a, 1, "t"),
            Taken::Refused(StateError::InUse)
        ));
        let (again, round) = parking.park(Some(&a), "t", call).ok().unwrap();
        assert_eq!((again.as_str(), round), (a.as_str(), 2));
        assert_eq!(parking.live(), 2, "parking again takes no new place");
        assert!(
            matches!(
                parking.take(&a, 1, "t"),
                Taken::Refused(StateError::AlreadyUsed)
            ),
            "the state of an earlier round resumes nothing"
        );
        let Taken::Resumed(_call) = parking.take(&a, 2, "t") else {
            panic!("parked at round 2")
        };
        parking.finish(&a);
        assert!(matches!(
            parking.take(&a, 2, "t"),
            Taken::Refused(StateError::AlreadyUsed)
        ));
        assert_eq!(parking.live(), 1);

        tokio::time::sleep(Duration::from_secs(31)).await;
        assert!(
            waiting_token.is_cancelled(),
            "a call that waits too long is cancelled"
        );
        assert!(matches!(parking.take(&b, 1, "t"), Taken::Gone));
        assert_eq!(parking.live(), 0);
        assert!(parking.park(None, "t", suspended()).is_ok());

        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(
            matches!(parking.take(&a, 2, "t"), Taken::Gone),
            "ended calls are forgotten once their states have expired"
        );
    }
}
