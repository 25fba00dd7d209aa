//! The change listener: one connection that listens for the notifications of every
//! write, reconnects with backoff and catches up on what it missed; and the notifier that
//! sends them.

use super::connection::{Shared, problem};
use crate::store::StoreError;
use crate::store::remote::{Backoff, Ready, read_feed, within};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::{AsyncMessage, NoTls};

/// The most change ids kept for [`ClaimStore::changes`](crate::store::ClaimStore::changes);
/// older ones are dropped.
pub(super) const MAX_LOG: usize = 1 << 17;

/// The change ids the listener heard, numbered by this process.
#[derive(Default)]
pub(super) struct ChangeLog {
    pub(super) ids: VecDeque<String>,
    /// The number of the first id in `ids`, minus one.
    pub(super) base: u64,
    /// The highest change sequence number heard.
    pub(super) max_seq: i64,
    /// `(when, max_seq)` samples, one a second, to find where a catch-up scan starts.
    pub(super) history: VecDeque<(Instant, i64)>,
}

impl ChangeLog {
    pub(super) fn end(&self) -> u64 {
        self.base + self.ids.len() as u64
    }

    pub(super) fn push(&mut self, id: String) {
        if self.ids.len() == MAX_LOG {
            self.ids.pop_front();
            self.base += 1;
        }
        self.ids.push_back(id);
    }

    pub(super) fn sample(&mut self, keep: Duration) {
        let now = Instant::now();
        if self
            .history
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= Duration::from_secs(1))
        {
            self.history.push_back((now, self.max_seq));
        }
        while self.history.len() > 2
            && self
                .history
                .get(1)
                .is_some_and(|(at, _)| now.duration_since(*at) > keep)
        {
            self.history.pop_front();
        }
    }

    /// A change sequence number every write that could still commit after `since` is
    /// above: the highest heard at least `settle` before `since`.
    pub(super) fn floor(&self, since: Instant, settle: Duration) -> i64 {
        self.history
            .iter()
            .rev()
            .find(|(at, _)| since.saturating_duration_since(*at) >= settle)
            .or(self.history.front())
            .map_or(0, |(_, seq)| *seq)
    }
}

impl Shared {
    /// Sends the change notifications of writes that just committed (`SEQ WHAT STATUS ID`)
    /// and waits, within the timeout, until they are sent. A notification that cannot be
    /// sent is logged: the write stands.
    pub(super) async fn announce(&self, payloads: Vec<String>) {
        if payloads.is_empty() {
            return;
        }
        let (done, sent) = oneshot::channel();
        let notice = Notice {
            payloads,
            sync: None,
            done,
        };
        if self.notices.send(notice).is_err() {
            return;
        }
        let _ = within(self.options.timeout * 2, sent).await;
    }

    /// Makes sure the listener has heard every write that returned before this call.
    pub(super) async fn sync(&self) -> Result<(), StoreError> {
        if !self.listening.load(Ordering::Acquire) {
            return Err(self
                .remote
                .unavailable("the change listener is reconnecting"));
        }
        let token = self.sync_sent.fetch_add(1, Ordering::AcqRel) + 1;
        // The token goes with the change notifications waiting to be sent, if any: the
        // statement that sends them sends it too.
        let (done, sent) = oneshot::channel();
        let notice = Notice {
            payloads: Vec::new(),
            sync: Some(token),
            done,
        };
        if self.notices.send(notice).is_err() {
            return Err(self.remote.error("the store is closed"));
        }
        let timeout = self.options.timeout;
        match within(timeout * 2, sent).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => return Err(error),
            _ => {
                return Err(self
                    .remote
                    .unavailable("cannot read the change feed: no answer in time"));
            }
        }
        let mut heard = self.sync_heard.subscribe();
        match within(timeout, heard.wait_for(|heard| *heard >= token)).await {
            Ok(Ok(_)) => Ok(()),
            _ => {
                // A listener that stops hearing its own notifications has lost its
                // connection without noticing: make it connect again.
                self.reconnect.notify_one();
                Err(self.remote.unavailable(format!(
                    "the change listener did not hear back within {timeout:?}"
                )))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The change listener

/// The listener task: keeps one connection listening on the store's channels, reconnects
/// with backoff, and scans for what it missed after each reconnect.
pub(super) async fn listen(shared: Arc<Shared>, mut ready: Ready) {
    let mut backoff = Backoff::new();
    // When the listener last knew it had heard everything, for the catch-up scan.
    let mut down_since: Option<Instant> = None;
    let settle = shared.options.timeout * 2 + Duration::from_secs(1);
    while !shared.closing.is_closed() {
        match listen_once(&shared, &mut ready, &mut down_since, settle).await {
            Ok(()) => backoff.reset(),
            Err(problem) => {
                if ready.is_pending() {
                    ready.fail(problem);
                    return;
                }
                tracing::warn!(store = %shared.remote.label(), %problem, "the task store's change listener lost its connection; reconnecting");
            }
        }
        shared.listening.store(false, Ordering::Release);
        down_since.get_or_insert_with(Instant::now);
        backoff.wait(&shared.closing).await;
    }
}

/// One connection of the listener, until it is lost. `Ok` when it ended for a reason that
/// warrants no backoff (the store closing, a forced reconnect).
pub(super) async fn listen_once(
    shared: &Shared,
    ready: &mut Ready,
    down_since: &mut Option<Instant>,
    settle: Duration,
) -> Result<(), String> {
    let (remote, timeout) = (&shared.remote, shared.options.timeout);
    let (client, mut connection) = remote
        .answer(timeout, shared.config.connect(NoTls), problem)
        .await?;
    let (messages, mut inbox) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if messages.send(n).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(problem(&e)),
                None => return Ok(()),
            }
        }
    });
    let _abort = AbortOnDrop(driver.abort_handle());
    let data_channel = shared.data_channel.as_str();
    let listen = format!(
        "LISTEN \"{data_channel}\"; LISTEN \"{}\"",
        shared.sync_channel
    );
    remote
        .answer(timeout, client.batch_execute(&listen), problem)
        .await?;

    // Everything committed from here on is heard. What was committed while the listener
    // was down is found by its change sequence number.
    if let Some(since) = down_since.take() {
        let floor = shared.log().floor(since, settle);
        catch_up(shared, &client, floor).await?;
    }
    shared.listening.store(true, Ordering::Release);
    ready.up();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        // Checked at least once a second (the tick), so a store closed while this
        // connection was being made is noticed too.
        if shared.closing.is_closed() {
            return Ok(());
        }
        tokio::select! {
            message = inbox.recv() => {
                let Some(n) = message else {
                    return match driver.await {
                        Ok(Ok(())) | Err(_) => Err("the connection closed".into()),
                        Ok(Err(problem)) => Err(problem),
                    };
                };
                if n.channel() == shared.sync_channel {
                    let token: u64 = n.payload().parse().unwrap_or(0);
                    shared.sync_heard.send_if_modified(|heard| {
                        let newer = token > *heard;
                        if newer {
                            *heard = token;
                        }
                        newer
                    });
                } else if n.channel() == data_channel {
                    heard_change(shared, n.payload());
                }
            }
            _ = tick.tick() => shared.log().sample(settle * 2),
            () = shared.reconnect.notified() => return Ok(()),
            () = shared.closing.notified() => return Ok(()),
        }
    }
}

/// Records a change notification: `SEQ OP STATUS ID`.
pub(super) fn heard_change(shared: &Shared, payload: &str) {
    let mut parts = payload.splitn(4, ' ');
    let seq = parts.next().and_then(|s| s.parse::<i64>().ok());
    let id = parts.nth(2);
    let (Some(seq), Some(id)) = (seq, id) else {
        tracing::warn!(store = %shared.remote.label(), payload, "an unreadable change notification");
        return;
    };
    let mut log = shared.log();
    log.max_seq = log.max_seq.max(seq);
    log.push(id.to_owned());
    drop(log);
    shared.changed.notify_one();
}

/// Reads every task written after the change sequence number `floor` into the log.
pub(super) async fn catch_up(
    shared: &Shared,
    client: &tokio_postgres::Client,
    floor: i64,
) -> Result<(), String> {
    const PAGE: i64 = 10_000;
    let (remote, timeout) = (&shared.remote, shared.options.timeout);
    let statement = &remote
        .answer(timeout, client.prepare(&shared.sql.catch_up), problem)
        .await?;
    let read = |after: i64| async move {
        let rows = remote
            .answer(timeout, client.query(statement, &[&after, &PAGE]), problem)
            .await?;
        let mut page = Vec::with_capacity(rows.len());
        let mut next = after;
        for row in &rows {
            let id: String = row.try_get(0).map_err(|e| problem(&e))?;
            let seq: i64 = row.try_get(1).map_err(|e| problem(&e))?;
            next = next.max(seq);
            page.push((id, seq));
        }
        Ok::<_, String>(Some((page, next)))
    };
    let keep = |page: Vec<(String, i64)>| {
        let mut log = shared.log();
        for (id, seq) in page {
            log.max_seq = log.max_seq.max(seq);
            log.push(id);
        }
    };
    let found = read_feed(floor, PAGE as usize, usize::MAX, read, keep)
        .await?
        .unwrap_or_default();
    tracing::info!(store = %remote.label(), after = floor, found, "the task store's change listener reconnected and caught up");
    if found > 0 {
        shared.changed.notify_one();
    }
    Ok(())
}

/// Change notifications of one write (or batch), or a sync token, to be sent.
pub(super) struct Notice {
    pub(super) payloads: Vec<String>,
    /// A sync token for this store's sync channel.
    pub(super) sync: Option<u64>,
    /// Told once the statement that sends them has committed, or why it did not.
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// The most notifications sent by one statement.
pub(super) const NOTICE_BATCH: usize = 1024;

/// Sends the notifications of the array `$2` on channel `$1`, and `$4` on channel `$3`
/// unless it is null, committing without waiting for the WAL flush.
///
/// A notifying transaction gets a transaction id (the queue entries carry it) and so a
/// commit record, and PostgreSQL holds its one database-wide notification lock from before
/// that commit until it returns: with `synchronous_commit` on, every notifying transaction
/// in the database would wait for its own `fsync` while the others wait for the lock. These
/// transactions write no data, so nothing is lost by not waiting: listeners are signalled at
/// commit either way, and a notification lost to a crash is made up for by the listeners'
/// catch-up scans. (The setting is local to the statement's own transaction.)
pub(super) const NOTIFY_MANY: &str = "SELECT pg_notify(n.channel, n.payload) \
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS quick, \
    (SELECT $1::text AS channel, p AS payload FROM unnest($2::text[]) AS p \
     UNION ALL SELECT $3::text, $4::text WHERE $4::text IS NOT NULL) AS n";

/// The notifier task: sends the notifications that are waiting, together, on a pooled
/// connection, at most two statements at a time. It holds the store weakly (the store
/// holds its queue), and ends with it.
pub(super) async fn send_notices(
    shared: std::sync::Weak<Shared>,
    mut queue: mpsc::UnboundedReceiver<Notice>,
) {
    let slots = Arc::new(Semaphore::new(2));
    let statement = NOTIFY_MANY;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut payloads = first.payloads;
        // Only the newest sync token matters: hearing it, the listener has heard the
        // earlier ones' too.
        let mut sync = first.sync;
        let mut done = vec![first.done];
        while payloads.len() < NOTICE_BATCH {
            match queue.try_recv() {
                Ok(notice) => {
                    payloads.extend(notice.payloads);
                    sync = sync.max(notice.sync);
                    done.push(notice.done);
                }
                Err(_) => break,
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let (data, sync_channel) = (shared.data_channel.as_str(), &shared.sync_channel);
            let token = sync.map(|token| token.to_string());
            let (payloads, token) = (&payloads, &token);
            let what = if payloads.is_empty() {
                "cannot read the change feed"
            } else {
                "cannot send change notifications"
            };
            let sent = shared
                .run(what, |client| async move {
                    let statement = client.prepare_cached(statement).await?;
                    client
                        .execute(&statement, &[&data, payloads, sync_channel, token])
                        .await
                })
                .await;
            if let Err(error) = &sent
                && !payloads.is_empty()
            {
                tracing::warn!(%error, "other processes may hear of these writes only through their scans");
            }
            for done in done {
                let _ = done.send(sent.clone().map(|_| ()));
            }
            drop(slot);
        });
    }
}

/// Aborts a spawned task when dropped.
pub(super) struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
