//! The background work of a process: the change feed, claims, lapsed leases, expiry, shutdown.

use super::outcome::{keep_readable, settle};
use super::{Engine, NOT_RENEWED, Run, shard_of};
use crate::error::{CallOutcome, Error};
use crate::sync::LockExt;
use crate::task::{ShortId, TaskRecord, TaskStatus};
use crate::tool::RestartPolicy;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

impl Engine {
    /// Starts the background loops once: the sweeper, the lapsed-lease scan, the claim loop
    /// (when this process runs tools) and the change feed (when the store is shared).
    pub(crate) fn ensure_background(&self) {
        // Called on every read: a plain load first keeps the cache line shared.
        if self.background.load(Ordering::Acquire) || self.background.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = self.this.clone();
        let every = self.config.sweep_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = weak.upgrade() else { break };
                engine.sweep().await;
            }
        });
        let weak = self.this.clone();
        let every = self.config.lapse_scan_every();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = weak.upgrade() else { break };
                if let Err(e) = engine.settle_lapsed().await {
                    tracing::warn!(error = %e, "cannot scan for lapsed leases");
                }
                engine.forget_claimed().await;
                engine.uncount_expired();
            }
        });
        // One loop renews the leases of every run here, rather than a timer per run.
        let weak = self.this.clone();
        let every = self.config.renew_round();
        tokio::spawn(async move {
            let mut rounds = tokio::time::interval(every);
            rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                rounds.tick().await;
                let Some(engine) = weak.upgrade() else { break };
                engine.renew_due().await;
            }
        });
        if let Some((path, every)) = self.pause_file.clone() {
            // Read once before anything is claimed, so that a process started while the
            // file pauses a tool never starts a task of it.
            self.creation
                .set_file(crate::creation::read_pause_file_now(&path));
            let weak = self.this.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let read = crate::creation::read_pause_file(&path).await;
                    {
                        let Some(engine) = weak.upgrade() else { break };
                        engine.creation.set_file(read);
                    }
                }
            });
        }
        if self.config.execute {
            let weak = self.this.clone();
            let wake = Arc::clone(&self.claim_wake);
            tokio::spawn(async move {
                loop {
                    {
                        let Some(engine) = weak.upgrade() else { break };
                        if engine.stopping.load(Ordering::Acquire) {
                            break;
                        }
                        engine.claim_round().await;
                    }
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            });
        }
        if self.store.is_shared() {
            let weak = self.this.clone();
            let every = self.config.signal_interval;
            tokio::spawn(async move {
                let mut cursor = None;
                let mut failing = false;
                let mut later = Vec::new();
                loop {
                    let read_at = tokio::time::Instant::now();
                    let store = {
                        let Some(engine) = weak.upgrade() else { break };
                        cursor = engine.read_changes(cursor, &mut failing, &mut later).await;
                        Arc::clone(&engine.store)
                    };
                    // A store that can tell when there is news is read as soon as there is
                    // some, but not more often than ten times per interval: news after a
                    // quiet spell is read at once, a stream of it in batches.
                    let woken = async {
                        store.changed().await;
                        tokio::time::sleep_until(read_at + every / 10).await;
                    };
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = woken => {}
                    }
                }
            });
        }
    }

    /// Reads the change feed once and hands on what other processes changed. `failing`
    /// says whether the last read failed, so an outage is logged once, not every poll.
    ///
    /// News of a task whose tool runs here is read at the next read of the feed, not at
    /// once (`later` keeps it until then): most often the news is this process's own
    /// write, and by then the run is writing its outcome, which learns of any other write
    /// by itself, or has ended.
    pub(super) async fn read_changes(
        &self,
        cursor: Option<u64>,
        failing: &mut bool,
        later: &mut Vec<String>,
    ) -> Option<u64> {
        const BATCH: usize = 1000;
        let mut cursor = cursor;
        // What waited since the last read; what waits now goes in `later`, for the next.
        let mut waited = std::mem::take(later);
        loop {
            let changes = match self.store.changes(cursor, BATCH).await {
                Ok(c) => c,
                Err(e) => {
                    if *failing {
                        tracing::debug!(error = %e, "cannot read the task store's change feed");
                    } else {
                        tracing::warn!(error = %e, "cannot read the task store's change feed");
                    }
                    *failing = true;
                    later.append(&mut waited);
                    return cursor;
                }
            };
            if std::mem::take(failing) {
                tracing::info!("the task store's change feed is readable again");
            }
            let first = cursor.is_none();
            cursor = Some(changes.cursor);
            let mut unknown = false;
            let mut seen = HashSet::new();
            if first {
                // The feed is read from now on, and a task of this process may have
                // changed since it was created but before now (a worker parked its
                // question while this loop started): read each task waited on here once.
                let live: Vec<Arc<str>> = self
                    .live
                    .iter()
                    .flat_map(|shard| shard.locked().keys().cloned().collect::<Vec<_>>())
                    .collect();
                for id in live {
                    match self.store.get(&id).await {
                        Ok(Some(rec)) => self.observe(&rec),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(task = %id, error = %e, "cannot read a task");
                        }
                    }
                }
            }
            // The tasks waited on here are read all at once: a store that batches
            // concurrent reads reads them with a few statements rather than one each.
            let mut reads = tokio::task::JoinSet::new();
            let waited = std::mem::take(&mut waited);
            let news = changes.ids.iter().map(|id| (id, true));
            for (id, may_wait) in waited.iter().map(|id| (id, false)).chain(news) {
                if !seen.insert(id.as_str()) {
                    continue;
                }
                let counted = self.counted[shard_of(id)]
                    .locked()
                    .contains_key(id.as_str());
                let live = self.live(id);
                if live.is_none() && !counted {
                    // News of a task this process saw finished (most often its own write
                    // coming back) cannot be a task to claim.
                    unknown |= !self.ended_here.locked().has(id);
                    continue;
                }
                // A run here that is writing its outcome learns what it needs from that
                // write (most often, the news is that very write).
                let settling = live.and_then(|live| {
                    live.now
                        .locked()
                        .run
                        .as_ref()
                        .map(|run| run.settling.load(Ordering::Acquire))
                });
                match settling {
                    Some(true) => continue,
                    Some(false) if may_wait => {
                        later.push(id.clone());
                        continue;
                    }
                    _ => {}
                }
                let (store, id) = (Arc::clone(&self.store), id.clone());
                reads.spawn(async move {
                    let read = store.get(&id).await;
                    (id, read)
                });
            }
            while let Some(done) = reads.join_next().await {
                let Ok((id, read)) = done else { continue };
                match read {
                    Ok(Some(rec)) => self.observe(&rec),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(task = %ShortId(&id), error = %e, "cannot read a changed task");
                    }
                }
            }
            if (unknown || first) && self.config.execute {
                self.claim_wake.notify_one();
            }
            if changes.ids.len() < BATCH {
                return cursor;
            }
        }
    }

    /// Claims queued tasks while this process has free slots.
    pub(super) async fn claim_round(&self) {
        const BATCH: usize = 32;
        loop {
            let free = {
                let slots = self.slots.locked();
                self.config.max_running.max(1).saturating_sub(slots.running)
            };
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            if free == 0 {
                // Tasks may be waiting: the next freed slot looks.
                self.claim_backlog.store(true, Ordering::Release);
                return;
            }
            // The kill switch: tools whose creation is off here start nothing here either.
            let Ok(paused) = self.creation.paused_set() else {
                self.claim_backlog.store(true, Ordering::Release);
                return;
            };
            let asked = free.min(BATCH);
            let mut skip = self.full_tools();
            skip.extend(paused);
            // Tasks of the tools left out may wait for a slot of theirs; with none left
            // out, whatever waits now is claimed, and what is queued later says so (the
            // change feed, or the create here).
            self.claim_backlog
                .store(!skip.is_empty(), Ordering::Release);
            let until = SystemTime::now() + self.config.lease;
            let claimed = match self.store.claim(&self.worker, until, asked, &skip).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim queued tasks");
                    self.claim_backlog.store(true, Ordering::Release);
                    return;
                }
            };
            let got = claimed.len();
            for rec in claimed {
                self.run_claimed(rec).await;
            }
            if got < asked {
                return;
            }
        }
    }

    /// Runs a task this process just claimed.
    pub(super) async fn run_claimed(&self, rec: TaskRecord) {
        let queued = {
            let mut queued = self.queued_here.locked();
            queued.remove(rec.id.as_str());
            queued.len()
        };
        crate::spans::queue_depth(queued);
        let Some(tool) = self.registry.get(&rec.tool).cloned() else {
            tracing::error!(task = %ShortId(&rec.id), tool = %rec.tool, "claimed a task of an unknown tool");
            let message = format!("the tool {:?} does not exist in this server", rec.tool);
            let epoch = rec.epoch;
            let id = rec.id.clone();
            let _ = self
                .update_from(&id, Some(rec), |r| {
                    if !r.is_held_by(&self.worker, epoch) {
                        return false;
                    }
                    let outcome = CallOutcome::Error(Error::Internal(message.clone()).into());
                    settle(r, &outcome, self.config.min_retention)
                })
                .await;
            return;
        };
        {
            let mut slots = self.slots.locked();
            slots.running += 1;
            *slots.per_tool.entry(tool.name.to_string()).or_default() += 1;
        }
        tracing::debug!(task = %rec.id, tool = %rec.tool, epoch = rec.epoch, "claimed a task");
        metrics::counter!("mcp_tasks_claimed_total", "tool" => rec.tool.clone()).increment(1);
        self.observe(&rec);
        self.launch(tool, rec.id.as_str().into(), rec, None);
    }

    /// Extends the leases of the runs here whose renewal is due, a few at a time; a run whose
    /// lease turns out to be gone is stopped ([`renew`](Self::renew)). A run's lease is
    /// renewed a renewal period after its tool started and after each renewal, as long as
    /// the tool runs.
    pub(super) async fn renew_due(&self) {
        const AT_ONCE: usize = 64;
        let now = self.millis_now();
        let mut due: Vec<Arc<Run>> = Vec::new();
        for shard in &self.live {
            due.extend(shard.locked().values().filter_map(|live| {
                let held = live.now.locked();
                held.run
                    .as_ref()
                    .filter(|run| run.renew_at.load(Ordering::Acquire) <= now)
                    .map(Arc::clone)
            }));
        }
        if due.is_empty() {
            return;
        }
        let every = self.config.renew_every().as_millis() as u64;
        let mut renewals = tokio::task::JoinSet::new();
        for run in due {
            // Due again a period from now, unless the tool ended meanwhile.
            let next = self.millis_now() + every;
            let at = run.renew_at.load(Ordering::Acquire);
            if at == NOT_RENEWED
                || run
                    .renew_at
                    .compare_exchange(at, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                continue;
            }
            if renewals.len() >= AT_ONCE {
                renewals.join_next().await;
            }
            let engine = Arc::clone(&run.engine);
            renewals.spawn(async move {
                engine.renew(&run).await;
            });
        }
        while renewals.join_next().await.is_some() {}
    }

    /// Settles tasks whose lease lapsed by their tools' restart policies: `rerun` tools go
    /// back to the queue (under the same id), every other task ends `failed`.
    pub(super) async fn settle_lapsed(&self) -> Result<Recovery, Error> {
        const BATCH: usize = 100;
        let mut report = Recovery::default();
        loop {
            let lapsed = self.store.lapsed(SystemTime::now(), BATCH).await?;
            let got = lapsed.len();
            for rec in lapsed {
                if self.runs_here(&rec) {
                    // Still this process's run, storing its outcome (or renewing) while the
                    // store was out of reach: it settles the task itself.
                    continue;
                }
                let (id, tool, lapsed_lease) =
                    (rec.id.clone(), rec.tool.clone(), rec.lease.clone());
                let rerun = self.reruns(&rec);
                let retention = self.config.min_retention;
                let now = SystemTime::now();
                let written = self
                    .update_from(&id, Some(rec), |r| {
                        // Renewed or settled meanwhile: not lapsed any more.
                        if r.status.is_terminal()
                            || r.lease != lapsed_lease
                            || r.lease.as_ref().is_none_or(|l| l.until > now)
                        {
                            return false;
                        }
                        requeue_or_fail(r, rerun, Interruption::Lapsed, retention);
                        true
                    })
                    .await?;
                if let Some((rec, true)) = &written {
                    let lapsed_worker = lapsed_lease.as_ref().map(|l| l.worker.as_str());
                    crate::spans::takeover(
                        &rec.id,
                        &rec.tool,
                        rec.trace.as_deref(),
                        lapsed_worker,
                        &self.worker,
                        rerun,
                    );
                    metrics::counter!(
                        "mcp_tasks_lapsed_total",
                        "tool" => tool.clone(),
                        "policy" => if rerun { "rerun" } else { "fail" }
                    )
                    .increment(1);
                    if rerun {
                        tracing::info!(task = %ShortId(&id), tool = %tool, "took over a task whose runner stopped: queued to run again");
                        report.rerun += 1;
                    } else {
                        tracing::info!(task = %ShortId(&id), tool = %tool, "took over a task whose runner stopped: settled as failed");
                        report.failed += 1;
                    }
                }
            }
            if got < BATCH {
                break;
            }
        }
        if report.rerun > 0 && self.config.execute {
            self.claim_wake.notify_one();
        }
        Ok(report)
    }

    /// Whether the task's lease is this process's and its run here is still going.
    fn runs_here(&self, rec: &TaskRecord) -> bool {
        rec.lease.as_ref().is_some_and(|l| l.worker == self.worker)
            && self.live(&rec.id).is_some_and(|live| {
                live.now
                    .locked()
                    .run
                    .as_ref()
                    .is_some_and(|run| run.epoch == rec.epoch && !run.lost.load(Ordering::Acquire))
            })
    }

    /// Drops from the queued count the tasks created here that another process claimed.
    pub(super) async fn forget_claimed(&self) {
        let ids: Vec<Arc<str>> = self
            .queued_here
            .locked()
            .iter()
            .take(256)
            .cloned()
            .collect();
        for id in ids {
            let gone = match self.store.get(&id).await {
                Ok(Some(rec)) => !rec.is_queued(),
                Ok(None) => true,
                Err(_) => false,
            };
            if gone {
                self.queued_here.locked().remove(&id);
            }
        }
    }

    /// Settles what can be settled now: tasks whose lease has already lapsed (those of an
    /// earlier version of the store, or of a process that died more than a lease ago).
    /// Tasks of a process that died less than a lease ago are settled once it lapses, by
    /// whichever process sees it first. Starts the background loops.
    pub(crate) async fn recover(&self) -> Result<Recovery, Error> {
        self.ensure_background();
        let report = self.settle_lapsed().await?;
        if report.rerun + report.failed > 0 {
            tracing::info!(
                rerun = report.rerun,
                failed = report.failed,
                "settled tasks whose runner had stopped"
            );
        }
        Ok(report)
    }

    /// Deletes expired tasks, in batches.
    pub(crate) async fn sweep(&self) -> usize {
        const BATCH: usize = 1000;
        let mut total = 0;
        loop {
            match self.store.expire(SystemTime::now(), BATCH).await {
                Ok(ids) => {
                    total += ids.len();
                    if ids.len() < BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "expiring tasks failed");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::debug!(expired = total, "expired tasks deleted");
        }
        total
    }

    /// Whether the task's tool runs again when its run is cut short (`on_restart =
    /// "rerun"`). A synchronous call's record never runs again: its caller got no answer,
    /// and a repeat of the call gets the failure.
    fn reruns(&self, rec: &TaskRecord) -> bool {
        !rec.synchronous
            && self
                .registry
                .get(&rec.tool)
                .is_some_and(|t| t.on_restart == RestartPolicy::Rerun)
    }

    /// Stops this process's part in the tasks, as a deploy needs it:
    /// 1. creates and claims nothing more (creation drains, see
    ///    [`TaskCreation::drain`](crate::creation::TaskCreation::drain));
    /// 2. lets the tools running here finish, up to `grace` (or until `force` fires), while
    ///    everything else goes on being served;
    /// 3. hands off the rest at once ([`hand_off`](Self::hand_off)).
    pub(crate) async fn shutdown(
        &self,
        grace: Duration,
        force: &tokio_util::sync::CancellationToken,
    ) -> HandOff {
        self.creation.drain();
        self.stopping.store(true, Ordering::Release);
        self.claim_wake.notify_one();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let ended = self.run_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let running = self.slots.locked().running;
            if running == 0 {
                break;
            }
            tracing::debug!(running, "waiting for the tasks running here to finish");
            tokio::select! {
                () = ended => {}
                () = tokio::time::sleep_until(deadline) => break,
                () = force.cancelled() => break,
            }
        }
        self.hand_off().await
    }

    /// Hands off every task still running here: its tool is stopped (its future dropped)
    /// and its lease released, fenced by its epoch, so that no process waits for it to
    /// lapse: a `rerun` tool's task goes back to the queue, where another process claims it
    /// at once; any other ends `failed`, interrupted by the shutdown.
    pub(crate) async fn hand_off(&self) -> HandOff {
        let runs: Vec<(Arc<str>, Arc<Run>)> = self
            .live
            .iter()
            .flat_map(|shard| {
                shard
                    .locked()
                    .iter()
                    .filter_map(|(id, live)| live.now.locked().run.clone().map(|r| (id.clone(), r)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut report = HandOff::default();
        let retention = self.config.min_retention;
        for (id, run) in runs {
            if run.lost.swap(true, Ordering::AcqRel) {
                continue;
            }
            // Stopped before the release, so that it does nothing once another process may
            // run the task.
            run.cancel.cancel();
            let mut rerun = false;
            let written = self
                .update(&id, |r| {
                    if !r.is_held_by(&self.worker, run.epoch) {
                        return false;
                    }
                    rerun = self.reruns(r);
                    requeue_or_fail(r, rerun, Interruption::Shutdown, retention);
                    true
                })
                .await;
            match written {
                Ok(Some((rec, true))) => {
                    metrics::counter!(
                        "mcp_tasks_handed_off_total",
                        "tool" => rec.tool.clone(),
                        "policy" => if rerun { "rerun" } else { "fail" }
                    )
                    .increment(1);
                    if rerun {
                        tracing::info!(task = %ShortId(&id), tool = %rec.tool, "handed the task off at shutdown: queued to run again");
                        report.requeued += 1;
                    } else {
                        tracing::info!(task = %ShortId(&id), tool = %rec.tool, "handed the task off at shutdown: settled as failed");
                        report.failed += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(task = %ShortId(&id), error = %e, "cannot hand the task off; its lease will lapse");
                    report.unreleased += 1;
                }
            }
        }
        report
    }
}

/// Why a task's run was cut short, for its status message and error.
#[derive(Clone, Copy)]
enum Interruption {
    /// Its lease lapsed: the process running it died or froze.
    Lapsed,
    /// The process running it shut down before it finished.
    Shutdown,
}

/// Puts a task whose run was cut short back in the queue (`rerun`), or settles it as
/// failed, and releases its lease.
fn requeue_or_fail(r: &mut TaskRecord, rerun: bool, why: Interruption, retention: Duration) {
    r.input_requests.clear();
    r.lease = None;
    if rerun {
        r.status = TaskStatus::Working;
        r.status_message = Some(
            match why {
                Interruption::Lapsed => "Running again: the process running it stopped.",
                Interruption::Shutdown => {
                    "Running again: the process running it shut down and handed it off."
                }
            }
            .into(),
        );
        r.input_responses.clear();
    } else {
        r.status = TaskStatus::Failed;
        r.status_message = Some(
            match why {
                Interruption::Lapsed => "The server restarted before the task finished.",
                Interruption::Shutdown => "The server shut down before the task finished.",
            }
            .into(),
        );
        let cause = match (r.synchronous, why) {
            (true, Interruption::Lapsed) => {
                "the first call with this idempotency key was interrupted by a server restart before it answered; it may have had effects (call again with a new key to run it again)"
            }
            (true, Interruption::Shutdown) => {
                "the first call with this idempotency key was interrupted by a server shutdown before it answered; it may have had effects (call again with a new key to run it again)"
            }
            (false, Interruption::Lapsed) => "the task was interrupted by a server restart",
            (false, Interruption::Shutdown) => "the task was interrupted by a server shutdown",
        };
        r.outcome = Some(Box::new(CallOutcome::Error(
            Error::Internal(cause.into()).into(),
        )));
        keep_readable(r, retention);
    }
}

/// What a shutdown did with the tasks still running when its grace ran out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandOff {
    /// Tasks put back in the queue, for another process to run (`on_restart = "rerun"`).
    pub requeued: usize,
    /// Tasks settled as `failed`, interrupted by the shutdown.
    pub failed: usize,
    /// Tasks whose lease could not be released (the store was out of reach): they are taken
    /// over once their lease lapses.
    pub unreleased: usize,
}

/// What [`Server::recover`](crate::Server::recover) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Tasks queued to run again (tools declared `on_restart = "rerun"`).
    pub rerun: usize,
    /// Tasks settled as `failed`.
    pub failed: usize,
}
