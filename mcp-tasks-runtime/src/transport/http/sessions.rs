//! The table of 2025-11-25 sessions over HTTP, bounded so that no client can lock others out.
//!
//! - Each owner (the principal, or the peer's address for an anonymous client; IPv6 peers by
//!   their /64) has at most `per_owner` sessions.
//! - A session idle for `idle` is ended; one that never sent a request after `initialize`
//!   only lasts `unused_idle`.
//! - When a new session does not fit (its owner's share or the whole table is full), the
//!   least recently used idle session makes room, sessions that never sent a request first
//!   once they have had [`FIRST_REQUEST_GRACE`] to send one (a client that has just
//!   initialized is not ended for sending its first request a moment later than a burst of
//!   other clients behind the same address). Only when every candidate is busy (a request running, a stream open) is the new one
//!   refused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What the table needs to know of a session.
pub(crate) trait Slot {
    /// A request is running or a stream is open: the session must not be ended.
    fn busy(&self) -> bool;
    /// When the session was last used (a request, or the end of a stream).
    fn last_seen(&self) -> Instant;
    /// Orders the sessions by their last use, finer than any clock: higher is more recent.
    fn recency(&self) -> u64;
    /// Records a use.
    fn touch(&self, now: Instant);
    /// Ends the session.
    fn end(&self);
}

/// Who a session's share is counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// An authenticated principal.
    Principal(String),
    /// An anonymous client, by address (IPv6 by its /64).
    Peer(IpAddr),
    /// An anonymous client whose address is not known: no share applies.
    Unknown,
}

impl Owner {
    pub(crate) fn of(principal: Option<&str>, peer: Option<IpAddr>) -> Self {
        match (principal, peer) {
            (Some(p), _) => Self::Principal(p.to_owned()),
            (None, Some(ip)) => Self::Peer(client_group(ip)),
            (None, None) => Self::Unknown,
        }
    }
}

/// The address that stands for a client: its own, IPv4-mapped addresses as IPv4, and IPv6
/// addresses by their /64 (one host usually has a whole /64 to draw from).
pub(crate) fn client_group(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

/// The table's bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_sessions: usize,
    pub(crate) per_owner: usize,
    pub(crate) idle: Duration,
    pub(crate) unused_idle: Duration,
}

/// Why a new session was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its owner already has `per_owner` busy sessions.
    Owner,
    /// The table holds `max_sessions` busy sessions.
    Table,
    /// No session id could be made: the operating system gave no random bytes.
    NoId(crate::task::RandomError),
}

struct Entry<T> {
    session: Arc<T>,
    principal: Option<String>,
    owner: Owner,
    /// A request came after `initialize`.
    used: bool,
}

/// How long a new session has to send its first request before it goes ahead of used ones
/// when room is made.
pub(crate) const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(5);

/// How often expired sessions are looked for, at most (and whenever the table is full).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The sessions, by id.
pub(crate) struct Sessions<T> {
    limits: Limits,
    entries: HashMap<String, Entry<T>>,
    by_owner: HashMap<Owner, Vec<String>>,
    swept: Option<Instant>,
}

impl<T: Slot> Sessions<T> {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: HashMap::new(),
            by_owner: HashMap::new(),
            swept: None,
        }
    }

    /// The session with this id if it belongs to `principal`; `used` records a request.
    pub(crate) fn get(
        &mut self,
        id: &str,
        principal: &Option<String>,
        used: bool,
        now: Instant,
    ) -> Option<Arc<T>> {
        let entry = self
            .entries
            .get_mut(id)
            .filter(|e| e.principal == *principal)?;
        entry.used |= used;
        entry.session.touch(now);
        Some(Arc::clone(&entry.session))
    }

    /// Adds a session under a new random id, making room as the module says.
    pub(crate) fn insert(
        &mut self,
        session: Arc<T>,
        principal: Option<String>,
        owner: Owner,
        now: Instant,
    ) -> Result<String, Full> {
        let full = self.entries.len() >= self.limits.max_sessions;
        if full
            || self
                .swept
                .is_none_or(|s| now.duration_since(s) >= SWEEP_EVERY)
        {
            self.sweep(now);
        }
        let id = crate::task::random_id().map_err(Full::NoId)?;
        if owner != Owner::Unknown {
            let owned = self.by_owner.get(&owner).map_or(0, Vec::len);
            if owned >= self.limits.per_owner {
                let owned = self.by_owner.get(&owner).into_iter().flatten();
                let victim =
                    least_recently_used(owned.filter_map(|id| self.entries.get_key_value(id)), now);
                self.evict(victim).ok_or(Full::Owner)?;
            }
        }
        if self.entries.len() >= self.limits.max_sessions {
            let victim = least_recently_used(self.entries.iter(), now);
            self.evict(victim).ok_or(Full::Table)?;
        }
        session.touch(now);
        self.by_owner
            .entry(owner.clone())
            .or_default()
            .push(id.clone());
        self.entries.insert(
            id.clone(),
            Entry {
                session,
                principal,
                owner,
                used: false,
            },
        );
        Ok(id)
    }

    /// Takes a session out of the table (it is not ended).
    pub(crate) fn remove(&mut self, id: &str) -> Option<Arc<T>> {
        let entry = self.entries.remove(id)?;
        if let Some(ids) = self.by_owner.get_mut(&entry.owner) {
            ids.retain(|i| i != id);
            if ids.is_empty() {
                self.by_owner.remove(&entry.owner);
            }
        }
        Some(entry.session)
    }

    /// How many sessions there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Ends the sessions idle past their limit.
    fn sweep(&mut self, now: Instant) {
        self.swept = Some(now);
        let limits = self.limits;
        let expired: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                let limit = if e.used {
                    limits.idle
                } else {
                    limits.unused_idle.min(limits.idle)
                };
                !e.session.busy() && now.saturating_duration_since(e.session.last_seen()) >= limit
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(session) = self.remove(&id) {
                tracing::debug!(session = %id, "idle session ended");
                session.end();
            }
        }
    }

    fn evict(&mut self, id: Option<String>) -> Option<()> {
        let id = id?;
        let session = self.remove(&id)?;
        tracing::debug!(session = %id, "session ended to make room for a new one");
        session.end();
        Some(())
    }
}

/// The idle session among `entries` to end first: never used past its grace, then least
/// recently used.
fn least_recently_used<'a, T: Slot + 'a>(
    entries: impl Iterator<Item = (&'a String, &'a Entry<T>)>,
    now: Instant,
) -> Option<String> {
    entries
        .filter(|(_, e)| !e.session.busy())
        .min_by_key(|(_, e)| {
            let abandoned = !e.used
                && now.saturating_duration_since(e.session.last_seen()) >= FIRST_REQUEST_GRACE;
            (!abandoned, e.session.recency())
        })
        .map(|(id, _)| id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::LockExt;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    static USES: AtomicU64 = AtomicU64::new(0);

    struct Fake {
        busy: AtomicBool,
        ended: AtomicBool,
        seen: Mutex<Instant>,
        recency: AtomicU64,
    }

    impl Slot for Fake {
        fn busy(&self) -> bool {
            self.busy.load(Ordering::Relaxed)
        }
        fn last_seen(&self) -> Instant {
            *self.seen.locked()
        }
        fn recency(&self) -> u64 {
            self.recency.load(Ordering::Relaxed)
        }
        fn touch(&self, now: Instant) {
            *self.seen.locked() = now;
            self.recency
                .store(USES.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        }
        fn end(&self) {
            self.ended.store(true, Ordering::Relaxed);
        }
    }

    fn fake() -> Arc<Fake> {
        Arc::new(Fake {
            busy: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            seen: Mutex::new(Instant::now()),
            recency: AtomicU64::new(0),
        })
    }

    fn limits() -> Limits {
        Limits {
            max_sessions: 4,
            per_owner: 2,
            idle: Duration::from_secs(60),
            unused_idle: Duration::from_secs(10),
        }
    }

    fn peer(last: u8) -> Owner {
        Owner::of(None, Some(IpAddr::from([10, 0, 0, last])))
    }

    #[test]
    fn owners_are_principals_or_peers_with_ipv6_by_prefix() {
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        let c: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        assert_eq!(Owner::of(None, Some(a)), Owner::of(None, Some(b)));
        assert_ne!(Owner::of(None, Some(a)), Owner::of(None, Some(c)));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Owner::of(None, Some(mapped)), peer(1));
        assert_eq!(
            Owner::of(Some("alice"), Some(a)),
            Owner::Principal("alice".into())
        );
        assert_eq!(Owner::of(None, None), Owner::Unknown);
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_over_its_share_ends_its_own_least_recently_used_idle_session() {
        let mut sessions = Sessions::new(limits());
        let now = Instant::now;
        let (a, b, other) = (fake(), fake(), fake());
        let a_id = sessions.insert(a.clone(), None, peer(1), now()).unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        let b_id = sessions.insert(b.clone(), None, peer(1), now()).unwrap();
        sessions
            .insert(other.clone(), None, peer(2), now())
            .unwrap();
        // `a` was used later than `b`, and `b` never sent a request in its grace: `b` goes
        // first.
        tokio::time::advance(FIRST_REQUEST_GRACE).await;
        sessions.get(&a_id, &None, true, now()).unwrap();
        let c = fake();
        sessions.insert(c.clone(), None, peer(1), now()).unwrap();
        assert!(b.ended.load(Ordering::Relaxed));
        assert!(sessions.get(&b_id, &None, true, now()).is_none());
        assert!(!a.ended.load(Ordering::Relaxed) && !other.ended.load(Ordering::Relaxed));
        // With both of its sessions busy, the owner is refused; others are not.
        a.busy.store(true, Ordering::Relaxed);
        c.busy.store(true, Ordering::Relaxed);
        assert_eq!(
            sessions.insert(fake(), None, peer(1), now()),
            Err(Full::Owner)
        );
        sessions.insert(fake(), None, peer(3), now()).unwrap();
        assert_eq!(sessions.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_table_ends_the_least_recently_used_idle_session_never_used_first() {
        let mut sessions = Sessions::new(limits());
        let now = Instant::now;
        let all: Vec<_> = (0..4).map(|_| fake()).collect();
        let mut ids = Vec::new();
        for (i, s) in all.iter().enumerate() {
            ids.push(
                sessions
                    .insert(s.clone(), None, peer(i as u8), now())
                    .unwrap(),
            );
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        for id in &ids[..3] {
            sessions.get(id, &None, true, now()).unwrap();
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        tokio::time::advance(FIRST_REQUEST_GRACE).await;
        let newest = sessions
            .insert(fake(), None, Owner::Unknown, now())
            .unwrap();
        assert!(all[3].ended.load(Ordering::Relaxed), "the one never used");
        sessions.get(&newest, &None, true, now()).unwrap();
        sessions
            .insert(fake(), None, Owner::Unknown, now())
            .unwrap();
        assert!(
            all[0].ended.load(Ordering::Relaxed),
            "then the least recently used"
        );
        assert!(!all[1].ended.load(Ordering::Relaxed));
        for s in sessions.entries.values() {
            s.session.busy.store(true, Ordering::Relaxed);
        }
        assert_eq!(
            sessions.insert(fake(), None, Owner::Unknown, now()),
            Err(Full::Table)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_in_its_first_request_grace_outlives_older_used_ones() {
        // A burst of clients behind one address: each initializes, then sends its first
        // request a moment later. A new one must not end one that has not had time to.
        let mut sessions = Sessions::new(limits());
        let now = Instant::now;
        let old = fake();
        let old_id = sessions.insert(old.clone(), None, peer(1), now()).unwrap();
        sessions.get(&old_id, &None, true, now()).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let fresh = fake();
        sessions
            .insert(fresh.clone(), None, peer(1), now())
            .unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        sessions.insert(fake(), None, peer(1), now()).unwrap();
        assert!(old.ended.load(Ordering::Relaxed), "the used one made room");
        assert!(
            !fresh.ended.load(Ordering::Relaxed),
            "the fresh one is kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unused_sessions_expire_sooner_than_used_ones_and_busy_ones_never() {
        let mut sessions = Sessions::new(limits());
        let now = Instant::now;
        let (unused, used, busy) = (fake(), fake(), fake());
        let unused_id = sessions
            .insert(unused.clone(), None, peer(1), now())
            .unwrap();
        let used_id = sessions.insert(used.clone(), None, peer(2), now()).unwrap();
        sessions.insert(busy.clone(), None, peer(3), now()).unwrap();
        sessions.get(&used_id, &None, true, now()).unwrap();
        busy.busy.store(true, Ordering::Relaxed);
        // A notification-like touch does not make a session used.
        sessions.get(&unused_id, &None, false, now()).unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        sessions.insert(fake(), None, peer(4), now()).unwrap();
        assert!(unused.ended.load(Ordering::Relaxed));
        assert!(!used.ended.load(Ordering::Relaxed));
        tokio::time::advance(Duration::from_secs(50)).await;
        sessions.insert(fake(), None, peer(5), now()).unwrap();
        assert!(used.ended.load(Ordering::Relaxed));
        assert!(!busy.ended.load(Ordering::Relaxed));
    }

    #[test]
    fn a_session_is_found_only_by_its_principal() {
        let mut sessions = Sessions::new(limits());
        let now = Instant::now();
        let alice = Some("alice".to_owned());
        let id = sessions
            .insert(
                fake(),
                alice.clone(),
                Owner::of(alice.as_deref(), None),
                now,
            )
            .unwrap();
        assert!(sessions.get(&id, &None, true, now).is_none());
        assert!(sessions.get(&id, &Some("bob".into()), true, now).is_none());
        assert!(sessions.get(&id, &alice, true, now).is_some());
        assert!(sessions.remove(&id).is_some());
        assert!(sessions.by_owner.is_empty());
    }
}
