//! The parked calls of a server: suspended synchronous calls waiting for the client's retry,
//! bounded, each resumed once, cancelled when they wait too long.

use super::Suspended;
use crate::sync::LockExt;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

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
    /// The call was resumed with this round's state already: it has moved on or ended, so
    /// the state resumes nothing, whatever the policy.
    AlreadyUsed,
    /// Another request is resuming the call right now.
    InUse,
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
                return Taken::AlreadyUsed;
            }
            Some(Slot::Busy { .. }) => return Taken::InUse,
            Some(Slot::Parked {
                round: r,
                target: t,
                ..
            }) if *r != round || t != target => {
                return Taken::AlreadyUsed;
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
    use std::collections::BTreeMap;

    fn suspended() -> Suspended {
        use crate::notify::{LogGate, Notifier};
        use crate::suspended::Caller;
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
                Taken::AlreadyUsed
            ));
        }
        let Taken::Resumed(call) = parking.take(&a, 1, "t") else {
            panic!("parked at round 1")
        };
        assert!(matches!(parking.take(&a, 1, "t"), Taken::InUse));
        let (again, round) = parking.park(Some(&a), "t", call).ok().unwrap();
        assert_eq!((again.as_str(), round), (a.as_str(), 2));
        assert_eq!(parking.live(), 2, "parking again takes no new place");
        assert!(
            matches!(parking.take(&a, 1, "t"), Taken::AlreadyUsed),
            "the state of an earlier round resumes nothing"
        );
        let Taken::Resumed(_call) = parking.take(&a, 2, "t") else {
            panic!("parked at round 2")
        };
        parking.finish(&a);
        assert!(matches!(parking.take(&a, 2, "t"), Taken::AlreadyUsed));
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
