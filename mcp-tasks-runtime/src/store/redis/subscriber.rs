//! The signal subscriber: one connection subscribed to the store's signal channel, which
//! reconnects with backoff and keeps the store's connection state.

use super::connection::{Shared, problem};
use crate::store::remote::{Backoff, Ready, within};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How one connection of the subscriber ended.
pub(super) enum Ended {
    /// The store closed.
    Closed,
    /// It was subscribed, then lost its connection (or a ping went unanswered).
    Lost(String),
    /// It could not connect, subscribe, or reach Redis through the request connection.
    Unreachable(String),
}

/// The subscriber task: keeps one connection subscribed to the store's signal channel,
/// reconnects with backoff, and wakes `changed` after each reconnect so the engine reads
/// the feed for whatever it missed. It also keeps the store's connection state: a lost
/// connection that cannot be made again at once marks Redis out of reach (requests then
/// fail at once), and a reconnect whose request connection answers marks it back.
pub(super) async fn subscribe(shared: Arc<Shared>, mut ready: Ready) {
    let mut backoff = Backoff::new();
    while !shared.closing.is_closed() {
        match subscribe_once(&shared, &mut ready).await {
            Ended::Closed => return,
            Ended::Lost(problem) => {
                // Try again at once: a killed connection (a restart, a proxy, `CLIENT
                // KILL`) usually comes back on the first try, and requests carry on.
                tracing::debug!(store = %shared.remote.label(), %problem, "the Redis task store's signal subscriber lost its connection; reconnecting");
                backoff.reset();
                continue;
            }
            Ended::Unreachable(problem) => {
                if ready.is_pending() {
                    ready.fail(problem);
                    return;
                }
                shared.mark_down(&problem);
            }
        }
        backoff.wait(&shared.closing).await;
    }
}

/// Whether the request connection answers, trying a few times within the timeout (the
/// connection manager makes a new connection after a failed request).
pub(super) async fn answers(shared: &Shared) -> Result<(), String> {
    let timeout = shared.options.timeout;
    let attempt = async {
        let mut last = String::new();
        for _ in 0..3 {
            let mut conn = shared.conn.clone();
            match ::redis::cmd("PING").query_async::<String>(&mut conn).await {
                Ok(_) => return Ok(()),
                Err(e) => last = problem(&e),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(last)
    };
    within(timeout, attempt)
        .await
        .map_err(|()| shared.remote.timed_out(timeout))?
}

/// One connection of the subscriber, until it is lost.
pub(super) async fn subscribe_once(shared: &Shared, ready: &mut Ready) -> Ended {
    let (remote, timeout) = (&shared.remote, shared.options.timeout);
    let connect = async {
        let mut pubsub = remote
            .answer(timeout, shared.client.get_async_pubsub(), problem)
            .await?;
        let channel = format!("{}signal", shared.prefix);
        remote
            .answer(timeout, pubsub.subscribe(&channel), problem)
            .await?;
        if !ready.is_pending() {
            // Requests go to the other connection: it must answer too.
            answers(shared).await?;
        }
        Ok::<_, String>(pubsub)
    };
    let pubsub = match connect.await {
        Ok(pubsub) => pubsub,
        Err(problem) => return Ended::Unreachable(problem),
    };
    let (mut sink, mut messages) = pubsub.split();
    shared.subscriptions.fetch_add(1, Ordering::Relaxed);
    if !ready.up() {
        tracing::debug!(store = %remote.label(), "the Redis task store's signal subscriber reconnected");
        shared.mark_up();
        // Whatever was published while the subscriber was down is in the feed.
        shared.changed.notify_one();
    }
    // A ping now and then, so a connection that died silently is noticed.
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.tick().await;
    loop {
        if shared.closing.is_closed() {
            return Ended::Closed;
        }
        tokio::select! {
            message = messages.next() => match message {
                Some(_) => {
                    shared.changed.notify_one();
                    continue;
                }
                None => return Ended::Lost("the connection closed".into()),
            },
            _ = tick.tick() => {}
            () = shared.probe.notified() => {}
            () = shared.closing.notified() => return Ended::Closed,
        }
        // A subscribed connection answers a ping with `["pong", ""]`.
        let pong = remote.answer(timeout, sink.ping::<::redis::Value>(), problem);
        if let Err(problem) = pong.await {
            return Ended::Lost(problem);
        }
    }
}
