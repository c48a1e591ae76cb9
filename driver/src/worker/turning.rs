//! The worker: the one async loop that drives `formica_core::worker::Worker`.
//!
//! The core decides everything (what to fetch and when, batching, retries, shutdown); this
//! loop only carries its effects out and feeds the results back as inputs:
//!
//! - `Query` runs a statement on the pool (a future polled by this loop, so its answer
//!   reaches the machine with no channel or task switch) and answers `QueryDone`;
//! - `StartTask` hands the task (panics caught) to `run`, which spawns it on the
//!   application's runtime; it answers `TaskFinished`;
//! - `AbortTask` fires the task's abort signal and drops it; one that has not stopped
//!   5 s later is reported `Unstoppable`;
//! - `ConnectListener` opens the LISTEN connection, which answers `ListenerUp`,
//!   `Notification`s and finally `ListenerDown`;
//! - `Emit` goes to the log and to the hooks;
//! - the earliest `poll_timeout` deadline becomes a `Timeout`.
//!
//! The loop runs on the runtime's `formica-io` thread, the lease's keeper on its
//! `formica-lease` thread (see [`Runtime::dedicated`]): no task can hold either up. The
//! keeper's heartbeats arrive as `Heartbeat` inputs. Other inputs arrive through one
//! channel; the machine sees them one at a time, each source in the order its inputs
//! happened. No job state and no retry logic live here.

// A new Effect or Event must be handled here, not swallowed by `_ =>`.
#![warn(clippy::wildcard_enum_match_arm)]

use super::shared::Shared;
use super::start::{start_task, Running};
use super::threads::Stop;
use super::turn::{Source, Turn, YieldNow};
use crate::clock::Clock;
use crate::error::{Error, MigrateError};
use crate::listener::{listen, Starts};
use crate::log::log_event;
use crate::runtime::Runtime;
use crate::statements::answered;
use formica_core::worker::{self as machine, Effect, Event, Input, QueryResult, Statement, TaskOutcome};
use futures::channel::{mpsc, oneshot};
use futures::future::{AbortHandle, Abortable, BoxFuture, Either, FutureExt};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a task told to abort may take to stop before its attempt ends without it: a
/// handler that blocks its thread never sees the signal, and its slot, its job and a
/// shutdown would wait for it forever. Its thread stays busy until it returns.
const GIVE_UP_ON_ABORTED_TASK_AFTER: Duration = Duration::from_secs(5);

/// The loop: it drives `formica_core::worker::Worker`, on the worker's own thread.
pub(super) struct Turning {
    pub(super) shared: Arc<Shared>,
    pub(super) config: machine::Config,
    pub(super) inputs: mpsc::UnboundedSender<Input>,
    pub(super) receiver: mpsc::UnboundedReceiver<Input>,
    pub(super) clock: Arc<Clock>,
    /// The worker's own thread: the loop's timers and its LISTEN stream run there, also
    /// when the pool was the application's.
    pub(super) io: Arc<dyn Runtime>,
    /// Tasks to start on the application's runtime, a turn's at a time.
    pub(super) starts: mpsc::UnboundedSender<Vec<BoxFuture<'static, ()>>>,
    /// Stops the lease's keeper when the loop ends, however it ends.
    pub(super) keeper: Stop,
    /// Tells the lease's keeper to end the lease (the worker stopped cleanly), and is
    /// answered once it did or gave up.
    pub(super) end_lease: oneshot::Sender<oneshot::Sender<()>>,
}

/// The loop turns at least this often, idle or not, so the lease's keeper can tell an idle
/// loop from a wedged one.
const TURN_AT_LEAST_EVERY: chrono::Duration = chrono::Duration::seconds(1);

impl Turning {
    pub(super) async fn run(self) -> Result<(), Error> {
        let Turning {
            shared,
            config,
            inputs,
            mut receiver,
            clock,
            io: runtime,
            starts,
            keeper: _keeper,
            end_lease,
        } = self;
        let mut machine = machine::Worker::new(config, clock.now());
        let mut running: HashMap<i64, Running> = HashMap::new();
        let mut listener: Option<AbortHandle> = None;
        // Why the worker stopped by itself, if it did: what `run` returns.
        let mut failure = None;
        // Statements in flight, and timers of tasks given up on: each may give an input.
        let mut queries: FuturesUnordered<BoxFuture<'static, Option<Input>>> = FuturesUnordered::new();
        let mut turn = Turn::default();
        let sampler = sample_queue_depth(&shared);
        let mut to_start = Vec::new();
        loop {
            while let Some(effect) = machine.poll_effect() {
                match effect {
                    Effect::Query { id, statement } => {
                        // Polled by this loop, not spawned: its answer needs no channel and
                        // no task switch on the way to the machine.
                        let shared = shared.clone();
                        let fetch = matches!(statement, Statement::GetJobs { .. });
                        let sent = runtime.monotonic();
                        queries.push(Box::pin(async move {
                            if fetch {
                                tracing::trace!(target: "formica::latency", "fetch sent");
                            }
                            // The upkeep passes cannot run in a statement's transaction; every
                            // other statement is bound and run alike.
                            #[allow(clippy::wildcard_enum_match_arm)]
                            let result = match statement {
                                Statement::ReindexBloated => answered(
                                    shared
                                        .utils
                                        .reindex_bloated(&shared.health_thresholds)
                                        .await
                                        .map(|index| QueryResult::Reindexed { index }),
                                ),
                                Statement::VacuumJobs => {
                                    answered(shared.utils.vacuum_jobs().await.map(|_| QueryResult::Done))
                                }
                                statement => shared.executor.execute(statement).await,
                            };
                            if fetch {
                                tracing::trace!(target: "formica::latency", "fetch answered");
                                shared.metrics.fetched(
                                    shared.utils.pool().runtime().monotonic() - sent,
                                    result.fetched().map(|(jobs, undecodable)| jobs.len() + undecodable),
                                );
                            }
                            Some(Input::QueryDone { id, result })
                        }));
                    }
                    Effect::StartTask { job } => {
                        let job_id = job.id;
                        let (abort, task) = start_task(&shared, job, inputs.clone());
                        running.insert(job_id, abort);
                        // Not a step of it here: a handler may block the thread it runs on.
                        to_start.push(task);
                    }
                    Effect::AbortTask { job_id } => {
                        if let Some(task) = running.remove(&job_id) {
                            task.trigger.fire();
                            task.abort.abort();
                            let (give_up, worker_id) =
                                (runtime.sleep(GIVE_UP_ON_ABORTED_TASK_AFTER), shared.worker_id.clone());
                            queries.push(Box::pin(async move {
                                give_up.await;
                                if task.reported.swap(true, Ordering::AcqRel) {
                                    return None;
                                }
                                tracing::warn!(
                                    worker_id = &*worker_id,
                                    job_id,
                                    "the task did not stop within {GIVE_UP_ON_ABORTED_TASK_AFTER:?} of being told \
                                     to (it blocks its thread): its job fails for good, and its thread stays \
                                     busy until it returns"
                                );
                                Some(Input::TaskFinished { job_id, outcome: TaskOutcome::Unstoppable })
                            }));
                        }
                    }
                    Effect::ConnectListener => {
                        let (handle, registration) = AbortHandle::new_pair();
                        if let Some(old) = listener.replace(handle) {
                            old.abort();
                        }
                        let settings = shared.utils.pool().settings().clone();
                        let starts = Starts {
                            worker_id: shared.worker_id.clone(),
                            others_alive: shared.executor.others_alive.clone(),
                        };
                        let task = listen(runtime.clone(), settings, inputs.clone(), starts);
                        runtime.spawn(Box::pin(Abortable::new(task, registration).map(|_| ())));
                    }
                    Effect::Emit(event) => {
                        if let Event::JobComplete { job_id, .. } = &event {
                            running.remove(job_id);
                        }
                        failure = failure.or_else(|| stopped_by(&event, &shared));
                        log_event(&event, &shared.worker_id);
                        shared.metrics.event(&event);
                        for hook in &shared.hooks {
                            hook(&event);
                        }
                    }
                    Effect::Stopped => {
                        for task in listener.take().into_iter().chain(sampler) {
                            task.abort();
                        }
                        // The last reports of its jobs wait for their period: not past the stop.
                        crate::reports::flush(&shared.progress, shared.logs.as_deref(), runtime.as_ref())
                            .await;
                        if failure.is_none() {
                            let (ended, answer) = oneshot::channel();
                            if end_lease.send(ended).is_ok() {
                                let _ = answer.await;
                            }
                        }
                        return failure.map_or(Ok(()), Err);
                    }
                }
            }
            let mut now = clock.now();
            clock.loop_turned(now);
            let deadline = machine.poll_timeout().map(|(at, _)| at);
            // A deadline that passed and inputs already waiting are taken without arming a
            // timer, in turns (so an always-due timer cannot starve answers and signals, nor
            // a flood of answers the timer); only an idle loop sleeps.
            let due = deadline.is_some_and(|at| at <= now);
            let ready = turn.next(|source| match source {
                Source::Timer => due.then_some(Input::Timeout),
                Source::Queries => queries.next().now_or_never().flatten().flatten(),
                Source::Channel => receiver.try_recv().ok(),
            });
            let spent = ready.is_some() && turn.spent();
            // The tasks go to the application's runtime together once the inputs waiting
            // are taken: one hand-over to another thread for many jobs under load.
            let handing_over = (ready.is_none() || spent) && !to_start.is_empty();
            if handing_over && starts.unbounded_send(std::mem::take(&mut to_start)).is_err() {
                // `run` was dropped: so is this loop, at its next await.
                return Ok(());
            }
            if spent {
                // Let the runtime run what this loop spawned (the listener, the queries' own
                // tasks) before taking more: on a single-threaded runtime they would wait.
                YieldNow(false).await;
                now = clock.now();
            }
            let (input, now) = match ready {
                Some(input) => (input, now),
                None => {
                    turn.rested();
                    let wake =
                        deadline.map_or(now + TURN_AT_LEAST_EVERY, |at| at.min(now + TURN_AT_LEAST_EVERY));
                    let timer = runtime.sleep_until(clock.instant_at(wake));
                    // An empty set of queries ends its stream: wait on it only when not empty.
                    let answer = match queries.is_empty() {
                        true => Either::Left(futures::future::pending()),
                        false => Either::Right(queries.select_next_some()),
                    };
                    let inputs = futures::future::select(receiver.next(), answer);
                    let input = match futures::future::select(inputs, timer).await {
                        Either::Left((Either::Left((Some(input), _)), _)) => input,
                        Either::Left((Either::Right((Some(answer), _)), _)) => answer,
                        Either::Left((Either::Right((None, _)), _)) => continue,
                        // Every sender lives in this function or in tasks it spawned:
                        // unreachable, but if it happens there is nothing left to wait for.
                        Either::Left((Either::Left((None, _)), _)) => return Ok(()),
                        // Only turning: nothing is due yet.
                        Either::Right(((), _)) if deadline.is_none_or(|at| at > wake) => continue,
                        Either::Right(((), _)) => Input::Timeout,
                    };
                    (input, clock.now())
                }
            };
            if let Input::TaskFinished { job_id, .. } = &input {
                running.remove(job_id);
            }
            machine
                .handle(input, now)
                .map_err(|e| Error::Internal(format!("the worker's state machine refused an input: {e}")))?;
        }
    }
}

/// The error `run` returns when `event` stops the worker by itself.
fn stopped_by(event: &Event, shared: &Shared) -> Option<Error> {
    if let Event::GaveUp { statement, error } = event {
        return Some(Error::GaveUp { statement, error: error.clone() });
    }
    // As if found by `migrate` at start: the CLI exits 57, as graphile-worker does.
    let Event::BreakingMigration { migration } = event else { return None };
    Some(Error::Migrate(MigrateError::NewerBreaking {
        schema: shared.utils.schema().to_owned(),
        breaking: i32::try_from(*migration).unwrap_or(i32::MAX),
        supported: formica_sql::LATEST,
    }))
}

/// With metrics on, sample the queue depth now and at every interval until aborted, and the
/// health every `HEALTH_INTERVAL`, each only once its gauges are read.
/// How often a sampler whose gauges nobody has read yet looks again.
const UNREAD_DEPTH_CHECK: Duration = Duration::from_secs(1);

fn sample_queue_depth(shared: &Arc<Shared>) -> Option<AbortHandle> {
    if !shared.metrics.enabled() {
        return None;
    }
    let (handle, registration) = AbortHandle::new_pair();
    let (shared, runtime) = (shared.clone(), shared.utils.pool().runtime().clone());
    let spawner = runtime.clone();
    let sampling = async move {
        let mut health_due: Option<std::time::Instant> = None;
        loop {
            if shared.metrics.health_wanted() && health_due.is_none_or(|due| runtime.monotonic() >= due) {
                shared.metrics.sample_health(&shared.utils, &shared.health_thresholds).await;
                health_due = Some(runtime.monotonic() + crate::metrics::HEALTH_INTERVAL);
            }
            let wait = if shared.metrics.queue_depth_wanted() {
                shared.metrics.sample_queue_depth(&shared.utils).await;
                shared.queue_depth_interval
            } else {
                // Until a reader collects the gauges; its next collection then has them.
                shared.queue_depth_interval.min(UNREAD_DEPTH_CHECK)
            };
            runtime.sleep(wait).await;
        }
    };
    spawner.spawn(Box::pin(Abortable::new(sampling, registration).map(|_| ())));
    Some(handle)
}
