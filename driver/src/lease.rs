//! The lease's keeper, driven on a thread of its own with a connection of its own: the
//! core's [`Keeper`] (see `formica_core::lease`) renews the worker's lease beside its loop,
//! so nothing a task does (block its thread, every thread, or compute for an hour) costs
//! the worker its lease. It reads when the loop last turned from the shared [`Clock`], and
//! hands every heartbeat's result to the loop as an input.
//!
//! Beside each heartbeat it records what the worker runs on the lease row (when it differs):
//! its crontab, its tasks and the flags it accepts and refuses, so that whoever reads the
//! leases (the dashboard's Cron page, `formica why`) sees what the live workers run; a
//! heartbeat that made the row anew (after a sweep) gets it back at once. When the worker
//! stops cleanly, the keeper ends the lease, so that no one counts it alive after.

use crate::clock::Clock;
use crate::db::connect_watched;
use crate::error::Error;
use crate::log::log_event;
use crate::runtime::Runtime;
use crate::settings::ConnectionSettings;
use crate::statements::{bind, is_retryable, Catalog};
use formica_core::cron::CronItem;
use formica_core::lease::{Keeper, KeeperEffect, KeeperInput, LEASE};
use formica_core::worker::{DbError, Input, QueryId, Statement};
use futures::channel::{mpsc, oneshot};
use futures::future::{self, BoxFuture, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

/// What the keeper needs besides its machine.
pub(crate) struct LeaseKeeping {
    /// The lease thread's runtime: its timers and its connection.
    pub runtime: Arc<dyn Runtime>,
    pub clock: Arc<Clock>,
    pub settings: ConnectionSettings,
    /// The worker's SQL.
    pub catalog: Arc<Catalog>,
    pub worker_id: Arc<str>,
    pub watchdog: chrono::Duration,
    /// What the worker runs, recorded on its lease.
    pub runs: Arc<Runs>,
    /// The loop's inputs.
    pub inputs: mpsc::UnboundedSender<Input>,
    /// Set from each heartbeat's answer: another Formica worker is alive (the fetch then
    /// takes turns, see `Executor::others_alive`).
    pub others_alive: Arc<AtomicBool>,
    /// The worker stopped cleanly: end the lease, then answer.
    pub end: oneshot::Receiver<oneshot::Sender<()>>,
}

/// How long ending the lease may take: the heartbeats in flight, then the statement. Past
/// it, the lease lapses by itself.
const ENDING_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Keep the lease until the loop's inputs close, or end it when told (or stop when this
/// future is dropped: the loop ended).
pub(crate) async fn keep_lease(keeping: LeaseKeeping) {
    let LeaseKeeping {
        runtime,
        clock,
        settings,
        catalog,
        worker_id,
        watchdog,
        runs,
        inputs,
        others_alive,
        mut end,
    } = keeping;
    let mut keeper = Keeper::new(&*worker_id, watchdog, clock.now());
    // The connection between heartbeats; a second heartbeat while one hangs opens another.
    let idle: Arc<Mutex<Option<Client>>> = Arc::default();
    let mut beats: FuturesUnordered<BoxFuture<'static, (QueryId, Result<(), DbError>)>> =
        FuturesUnordered::new();
    loop {
        while let Some(effect) = keeper.poll_effect() {
            match effect {
                KeeperEffect::Heartbeat { id, statement } => {
                    let on = Connection {
                        runtime: runtime.clone(),
                        settings: settings.clone(),
                        catalog: catalog.clone(),
                        idle: idle.clone(),
                    };
                    let beat = heartbeat(on, statement, worker_id.clone(), runs.clone());
                    let others_alive = others_alive.clone();
                    beats.push(Box::pin(async move {
                        let result = beat.await.map(|others| others_alive.store(others, Ordering::Relaxed));
                        (id, result.map_err(db_error))
                    }));
                }
                KeeperEffect::Report { sent, result } => {
                    if inputs.unbounded_send(Input::Heartbeat { sent, result }).is_err() {
                        return;
                    }
                }
                KeeperEffect::Emit(event) => log_event(&event, &worker_id),
            }
        }
        let Some((deadline, _)) = keeper.poll_timeout() else { return };
        let timer = runtime.sleep_until(clock.instant_at(deadline));
        let beat = match beats.is_empty() {
            true => Either::Left(future::pending()),
            false => Either::Right(beats.select_next_some()),
        };
        let input = match future::select(future::select(beat, timer), &mut end).await {
            Either::Right((Ok(answer), _)) => {
                let on = Connection { runtime: runtime.clone(), settings, catalog, idle };
                end_lease(on, beats, &worker_id).await;
                let _ = answer.send(());
                return;
            }
            Either::Right((Err(_), _)) => return,
            Either::Left((Either::Left(((id, result), _)), _)) => KeeperInput::HeartbeatDone { id, result },
            Either::Left((Either::Right(((), _)), _)) => {
                let now = clock.now();
                keeper.handle(KeeperInput::LoopTurned { at: clock.last_turn() }, now).ok();
                KeeperInput::Timeout
            }
        };
        if let Err(e) = keeper.handle(input, clock.now()) {
            tracing::error!(worker_id = &*worker_id, "internal error in the lease's keeper: {e}");
        }
    }
}

/// End the lease of `worker_id`, which stopped cleanly (`end_lease.sql`), so the other
/// workers stop counting it alive at once; after the `beats` in flight, which would renew
/// it if answered after. Within [`ENDING_WITHIN`], else it lapses by itself.
async fn end_lease(
    on: Connection,
    beats: FuturesUnordered<BoxFuture<'static, (QueryId, Result<(), DbError>)>>,
    worker_id: &str,
) {
    let runtime = on.runtime.clone();
    let ending = async {
        beats.for_each(|_| future::ready(())).await;
        on.client().await?.execute(on.catalog.end_lease(), &[&worker_id]).await?;
        Ok::<_, Error>(())
    };
    let outcome = match future::select(Box::pin(ending), runtime.sleep(ENDING_WITHIN)).await {
        Either::Left((outcome, _)) => outcome,
        Either::Right(((), _)) => Err(Error::TimedOut(format!("no answer within {ENDING_WITHIN:?}"))),
    };
    if let Err(e) = outcome {
        tracing::debug!(worker_id, "the lease was not ended (it lapses by itself): {e}");
    }
}

/// What a worker runs, as its lease records it (records step 15): what `formica why` reads
/// to tell whether a live worker would take a job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Runs {
    /// Its crontab, one canonical line an item (`None`: it runs none).
    pub crontab: Option<String>,
    /// The tasks it has handlers for.
    pub tasks: Vec<String>,
    /// The flags it accepts (empty: any job).
    pub accepted_flags: Vec<String>,
    /// The flags it refuses (`None`: a function decides before each fetch).
    pub forbidden_flags: Option<Vec<String>>,
}

/// The crontab of `items` as recorded on the lease: one canonical line an item (`None`: no
/// crontab).
pub(crate) fn crontab_text(items: &[CronItem]) -> Option<String> {
    (!items.is_empty()).then(|| items.iter().map(|item| format!("{item}\n")).collect::<String>())
}

/// The keeper's connection: the one idle between heartbeats, or a new one.
struct Connection {
    runtime: Arc<dyn Runtime>,
    settings: ConnectionSettings,
    catalog: Arc<Catalog>,
    idle: Arc<Mutex<Option<Client>>>,
}

impl Connection {
    /// The connection idle between heartbeats, or a new one.
    async fn client(&self) -> Result<Client, Error> {
        let open = self.idle.lock().unwrap_or_else(PoisonError::into_inner).take().filter(|c| !c.is_closed());
        match open {
            Some(client) => Ok(client),
            None => connect_watched(self.runtime.clone(), &self.settings).await,
        }
    }
}

/// Run `statement` on the keeper's connection (opening one if none is idle), within the
/// lease: an answer later than that renews nothing the next heartbeat would not. What the
/// worker runs is recorded in the same round trip, after it (a no-op update when unchanged);
/// failing to record it is logged and costs the lease nothing. Answers whether another
/// Formica worker is alive.
async fn heartbeat(
    on: Connection,
    statement: Statement,
    worker_id: Arc<str>,
    runs: Arc<Runs>,
) -> Result<bool, Error> {
    let timeout = on.runtime.sleep(LEASE.to_std().unwrap_or_default());
    let beat = async move {
        let client = on.client().await?;
        let bound = bind(&on.catalog, statement, &[]);
        let params = bound.typed();
        let beat = client.query_typed(bound.sql, &params);
        // Pipelined: the update is sent behind the heartbeat, which may insert the row.
        let id: &str = &worker_id;
        let recording: [(&(dyn ToSql + Sync), Type); 5] = [
            (&id, Type::TEXT),
            (&runs.crontab, Type::TEXT),
            (&runs.tasks, Type::TEXT_ARRAY),
            (&runs.accepted_flags, Type::TEXT_ARRAY),
            (&runs.forbidden_flags, Type::TEXT_ARRAY),
        ];
        let (beat, recorded) =
            future::join(beat, client.query_typed(on.catalog.record_runs(), &recording)).await;
        if let Err(e) = recorded {
            tracing::warn!(worker_id = id, "cannot record what the worker runs on its lease: {e}");
        }
        let rows = beat?;
        on.idle.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(client);
        Ok(rows.first().and_then(|row| row.try_get(0).ok()).unwrap_or(false))
    };
    match future::select(Box::pin(beat), timeout).await {
        Either::Left((result, _)) => result,
        Either::Right(((), _)) => Err(Error::TimedOut(format!("no answer to the heartbeat within {LEASE}"))),
    }
}

fn db_error(e: Error) -> DbError {
    DbError { retryable: is_retryable(&e), message: e.to_string() }
}
