//! The stock signal handling of a process: a graceful stop on `SIGTERM` or `SIGINT`, and
//! the kill switch of task creation on `SIGUSR1` (pause) and `SIGUSR2` (resume).
//!
//! [`Server::serve_stdio`], `HttpHandle::run_until_signal` and [`Worker::run`](crate::Worker::run)
//! install it. The first `SIGTERM` or `SIGINT` starts [`Server::shutdown`] with the server's
//! [`shutdown_grace`](crate::ServerBuilder::shutdown_grace) while the transport goes on
//! serving; a second one cuts the grace short: the tasks still running are handed off at
//! once, and the process stops at most [`FORCED_HAND_OFF`] later even if the store does not
//! answer.

use crate::server::Server;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the hand-off may take once a second signal forced the stop.
pub const FORCED_HAND_OFF: Duration = Duration::from_secs(2);

/// What the stop signals of a process have said so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct StopSignals {
    /// The first `SIGTERM` or `SIGINT` came: stop gracefully.
    pub(crate) stop: CancellationToken,
    /// A second one came: stop now.
    pub(crate) force: CancellationToken,
}

impl Server {
    /// The stop signals of this process, listened to from the first call on; the kill
    /// switch follows `SIGUSR1` and `SIGUSR2` from then on too. Needs a Tokio runtime.
    pub(crate) fn stop_signals(&self) -> StopSignals {
        let (stop, force) = self
            .inner
            .signals
            .get_or_init(|| {
                let signals = StopSignals::default();
                tokio::spawn(listen_stop(signals.clone()));
                #[cfg(unix)]
                tokio::spawn(listen_switch(self.creation()));
                (signals.stop, signals.force)
            })
            .clone();
        StopSignals { stop, force }
    }
}

/// Cancels `stop` at the first `SIGTERM` or `SIGINT`, `force` at the second.
async fn listen_stop(signals: StopSignals) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::warn!("cannot listen to SIGTERM and SIGINT");
            return;
        };
        for token in [&signals.stop, &signals.force] {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
            token.cancel();
        }
    }
    #[cfg(not(unix))]
    for token in [&signals.stop, &signals.force] {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        token.cancel();
    }
}

/// Turns task creation off at `SIGUSR1` and on at `SIGUSR2`.
#[cfg(unix)]
async fn listen_switch(creation: crate::creation::TaskCreation) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut pause), Ok(mut resume)) = (
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::warn!("cannot listen to SIGUSR1 and SIGUSR2");
        return;
    };
    loop {
        tokio::select! {
            Some(()) = pause.recv() => creation.pause(),
            Some(()) = resume.recv() => creation.resume(),
            else => return,
        }
    }
}

/// Runs `serving` until it ends on its own or `stop` fires; either way then shuts `server`
/// down gracefully ([`Server::shutdown`]) while `serving` goes on (when it has not ended),
/// and returns what `serving` returned, or `None` when it was still running at the end.
pub(crate) async fn serve_then_shut_down<F: Future>(
    server: &Server,
    grace: Duration,
    serving: F,
    signals: &StopSignals,
) -> Option<F::Output> {
    tokio::pin!(serving);
    let mut ended = tokio::select! {
        out = &mut serving => Some(out),
        () = signals.stop.cancelled() => None,
    };
    let force = signals.force.clone();
    let shutdown = async {
        tokio::select! {
            _ = server.shutdown_until(grace, &force) => {}
            () = async {
                force.cancelled().await;
                tokio::time::sleep(FORCED_HAND_OFF).await;
            } => tracing::warn!("stopped before every task was handed off; the rest are taken over when their leases lapse"),
        }
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return ended,
            out = &mut serving, if ended.is_none() => ended = Some(out),
        }
    }
}
