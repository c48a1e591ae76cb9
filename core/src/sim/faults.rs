//! Faults as data, and a driver that plays an application's scenario on a [`World`].
//!
//! A scenario is a list of [`Op`]s: the application's own events (whatever type `E` it
//! uses), [`Fault`]s (crashes, restarts, clock jumps, dropped listeners, failing queries, lost answers)
//! and waits. [`run_ops`] plays it on the application ([`App`]: how it reacts to an event,
//! what must hold) and checks after every step of the world, so an invariant is checked
//! at every instant something happened, not only between operations; [`heal`] ends the
//! faults, and [`settle`] (or [`run_checked`]) lets the healed world work on under the
//! same check. Ops print short (`crash w1`, `jump -300s`, `wait 1.5s`)
//! so that a shrunk failing case reads as a story; [`render_trace`] prints what the world
//! did, one line per input or effect.
//!
//! The strategies that generate faults and ops are in `sim::strategies` (feature
//! `proptest`).

use super::{TraceEntry, Traced, WorkerIndex, World};
use crate::protocol::FetchRequest;
use crate::worker::{Effect, Input, QueryResult, Statement, TaskOutcome};
use chrono::Duration;
use std::fmt;

/// The error a worker sees for a query whose answer [`Fault::LoseAnswers`] lost: the
/// statement ran, so a checker applies it to its model all the same.
pub const LOST_ANSWER: &str = "simulated: connection lost after the statement ran";

/// One thing going wrong, applied to a [`World`] with [`Fault::apply`].
#[derive(Clone, PartialEq, Eq)]
pub enum Fault {
    /// The worker's process dies: its tasks, queries and listener vanish; the jobs and
    /// queues it holds stay locked until a lock sweep frees them (after four hours).
    Crash(WorkerIndex),
    /// The worker starts again as a new process with a new worker id (crashing first if
    /// it runs).
    Restart(WorkerIndex),
    /// The wall clock, which the workers and the database read, moves by this many seconds
    /// (back if negative).
    JumpClock(i64),
    /// The worker's LISTEN connection drops; it reconnects with backoff.
    DropListener(WorkerIndex),
    /// The worker's listener connections are refused (`false`) or accepted again (`true`).
    ListenerAvailable(WorkerIndex, bool),
    /// The worker's next `n` queries fail (retryable) without running.
    FailQueries(WorkerIndex, u32),
    /// The worker's next `n` queries run, but their answers are lost (the connection ends
    /// after the statement committed): the worker sees a retryable error.
    LoseAnswers(WorkerIndex, u32),
    /// The worker's loop stalls for this many milliseconds while its tasks and its lease's
    /// keeper go on ([`World::stall_loop`]): tasks blocking their threads, or a deadlock
    /// that ends. Past `Config::watchdog` the worker gives its lease up.
    StallLoop(WorkerIndex, u32),
}

impl Fault {
    /// Do it to `world`. A fault naming a worker the world does not have is a mistake in
    /// the scenario: it panics.
    pub fn apply(&self, world: &mut World) {
        let check = |w: WorkerIndex| {
            assert!(w < world.workers(), "fault {self:?} names worker {w} of {}", world.workers());
            w
        };
        match *self {
            Fault::Crash(w) => world.crash(check(w)),
            Fault::Restart(w) => world.restart(check(w)),
            Fault::JumpClock(secs) => world.jump_clock(Duration::seconds(secs)),
            Fault::DropListener(w) => world.drop_listener(check(w)),
            Fault::ListenerAvailable(w, up) => world.set_listener_available(check(w), up),
            Fault::FailQueries(w, n) => world.fail_next_queries(check(w), n),
            Fault::LoseAnswers(w, n) => world.lose_next_answers(check(w), n),
            Fault::StallLoop(w, ms) => world.stall_loop(check(w), Duration::milliseconds(i64::from(ms))),
        }
    }
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash(w) => write!(f, "crash w{w}"),
            Fault::Restart(w) => write!(f, "restart w{w}"),
            Fault::JumpClock(secs) => write!(f, "jump {secs:+}s"),
            Fault::DropListener(w) => write!(f, "drop listener w{w}"),
            Fault::ListenerAvailable(w, true) => write!(f, "listener up w{w}"),
            Fault::ListenerAvailable(w, false) => write!(f, "listener refused w{w}"),
            Fault::FailQueries(w, n) => write!(f, "fail {n} queries w{w}"),
            Fault::LoseAnswers(w, n) => write!(f, "lose {n} answers w{w}"),
            Fault::StallLoop(w, ms) => write!(f, "stall loop w{w} {}s", f64::from(*ms) / 1000.0),
        }
    }
}

/// One operation of a scenario.
#[derive(Clone, PartialEq)]
pub enum Op<E> {
    /// Something the application reacts to (it adds jobs, say): given to `on_event`.
    Event(E),
    /// Something going wrong.
    Fault(Fault),
    /// Let this many milliseconds pass.
    Wait(u32),
}

impl<E: fmt::Debug> fmt::Debug for Op<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Event(event) => event.fmt(f),
            Op::Fault(fault) => fault.fmt(f),
            Op::Wait(ms) => write!(f, "wait {}s", f64::from(*ms) / 1000.0),
        }
    }
}

/// The application under test: how it reacts to its events, and what must always hold.
pub trait App<E> {
    /// React to `event`: add jobs through [`World::db_mut`], as the application would
    /// through `add_job`.
    fn on_event(&mut self, world: &mut World, event: &E);

    /// Check the application's invariants on the world as it is now (its database,
    /// [`World::running`], the new lines of [`World::trace`]); an error says what broke.
    fn check(&mut self, world: &World) -> Result<(), String>;
}

/// Play `ops` on `world`: events go to [`App::on_event`], faults are applied, waits let
/// time pass step by step. [`App::check`] runs after every op and after every step of the
/// world; its first error ends the run, prefixed with the op it happened in
/// (`op 3 (crash w1): ...`).
pub fn run_ops<E: fmt::Debug>(world: &mut World, ops: &[Op<E>], app: &mut impl App<E>) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        let done = match op {
            Op::Event(event) => {
                app.on_event(world, event);
                app.check(world)
            }
            Op::Fault(fault) => {
                fault.apply(world);
                app.check(world)
            }
            Op::Wait(ms) => run_checked(world, Duration::milliseconds(i64::from(*ms)), |w| app.check(w)),
        };
        done.map_err(|e| format!("op {i} ({op:?}): {e}"))?;
    }
    Ok(())
}

/// Step `world` until `by` has elapsed, calling `check` after every step (and once at the
/// end); the first error is returned.
pub fn run_checked(
    world: &mut World,
    by: Duration,
    mut check: impl FnMut(&World) -> Result<(), String>,
) -> Result<(), String> {
    let until = world.elapsed() + by;
    while world.next_at().is_some_and(|at| at <= until) {
        world.step();
        check(world)?;
    }
    // Nothing is due before `until`: this only moves the clock.
    world.run_for(until - world.elapsed());
    check(world)
}

/// Step `world` until `done` holds, calling `check` after every step; an error if `check`
/// fails, or if `done` does not hold within `limit`. Use it after [`heal`]: "once the faults stop, every job
/// runs" is `settle(world, limit, |w| w.db().jobs().next().is_none(), check)`.
pub fn settle(
    world: &mut World,
    limit: Duration,
    done: impl Fn(&World) -> bool,
    mut check: impl FnMut(&World) -> Result<(), String>,
) -> Result<(), String> {
    let until = world.elapsed() + limit;
    check(world)?;
    while !done(world) {
        match world.next_at() {
            Some(at) if at <= until => {
                world.step();
                check(world)?;
            }
            _ => return Err(format!("not done {} minutes after the faults stopped", limit.num_minutes())),
        }
    }
    Ok(())
}

/// End every fault: crashed workers start again (as new processes), listeners are
/// accepted, queries stop failing. The clock stays where the jumps left it, and locks
/// the crashed processes held stay until a lock sweep frees them, as they would in
/// production.
pub fn heal(world: &mut World) {
    for w in 0..world.workers() {
        world.set_listener_available(w, true);
        world.fail_next_queries(w, 0);
        world.lose_next_answers(w, 0);
        if world.is_crashed(w) {
            world.restart(w);
        }
    }
}

/// `entries` (a slice of [`World::trace`]) one per line, as
/// `+<elapsed> <wall clock> w<worker> <what>`, with statements, results and tasks
/// summarised (job ids, task identifiers, attempts) rather than printed whole.
pub fn render_trace(entries: &[TraceEntry]) -> String {
    let mut out = String::new();
    for entry in entries {
        let elapsed = entry.elapsed.num_milliseconds() as f64 / 1000.0;
        let worker = entry.worker.map_or_else(|| "  ".to_owned(), |w| format!("w{w}"));
        let at = entry.at.format("%H:%M:%S%.3f");
        out.push_str(&format!("+{elapsed:>10.3}s {at} {worker} {}\n", describe(&entry.what)));
    }
    out
}

/// The first word of a `Debug` rendering: the variant's name.
fn variant<T: fmt::Debug>(value: &T) -> String {
    let text = format!("{value:?}");
    text.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_owned()
}

fn describe(what: &Traced) -> String {
    match what {
        Traced::Started { worker_id } => format!("started as {worker_id}"),
        Traced::Crashed => "CRASHED".into(),
        Traced::ClockJumped(by) => format!("CLOCK JUMPED {:+}s", by.num_seconds()),
        Traced::Lease(event) => format!("lease: {}", variant(event)),
        Traced::ClockRead => "clock read".into(),
        Traced::Heartbeat { result, .. } => format!("lease: heartbeat {}", result_text(result)),
        Traced::Input(input) => match input {
            Input::QueryDone { id, result } => format!("<- query {id:?}: {}", result_text(result)),
            Input::TaskFinished { job_id, outcome } => {
                let outcome = match outcome {
                    TaskOutcome::Ok => "ok".to_owned(),
                    TaskOutcome::Committed => "committed in its transaction".to_owned(),
                    TaskOutcome::Skipped(reason) => format!("skipped {reason:?}"),
                    TaskOutcome::Err(e) | TaskOutcome::Panicked(e) => format!("error {e:?}"),
                    TaskOutcome::ItemsFailed { error, items } => format!("error {error:?}, keeping {items}"),
                    other @ (TaskOutcome::Aborted | TaskOutcome::Unstoppable) => {
                        variant(other).to_lowercase()
                    }
                    TaskOutcome::Snoozed(delay) => format!("snoozed {}s", delay.num_seconds()),
                };
                format!("<- task of job {job_id} ended: {outcome}")
            }
            Input::Notification { channel, .. } => format!("<- notification on {channel}"),
            other @ (Input::ListenerUp
            | Input::ListenerDown { .. }
            | Input::ShutdownRequested { .. }
            | Input::Timeout) => format!("<- {other:?}"),
            Input::Heartbeat { result: Ok(()), .. } => "<- heartbeat landed".into(),
            Input::Heartbeat { result: Err(e), .. } => format!("<- heartbeat failed: {:?}", e.message),
        },
        Traced::Effect(effect) => match effect {
            Effect::Query { id, statement } => format!("-> query {id:?}: {}", statement_text(statement)),
            Effect::StartTask { job } => format!(
                "-> start job {} {} (attempt {}/{}{}) {}",
                job.id,
                job.task_identifier,
                job.attempts,
                job.max_attempts,
                job.queue_name.as_ref().map(|q| format!(", queue {q}")).unwrap_or_default(),
                job.payload
            ),
            Effect::AbortTask { job_id } => format!("-> abort job {job_id}"),
            Effect::Emit(event) => format!("-> event {}", variant(event)),
            other @ (Effect::ConnectListener | Effect::Stopped) => format!("-> {other:?}"),
        },
    }
}

fn statement_text(statement: &Statement) -> String {
    match statement {
        Statement::GetJobs(FetchRequest { limit, .. }) => format!("fetch up to {limit} jobs"),
        Statement::CompleteJobs { ids, .. } => format!("complete jobs {ids:?}"),
        Statement::ReturnJobs { ids, .. } => format!("return jobs {ids:?}"),
        Statement::ReturnUnknown { known, .. } => format!("return jobs other than {known:?}"),
        Statement::SnoozeJobs { snoozes, .. } => {
            let ids: Vec<i64> = snoozes.iter().map(|s| s.job_id).collect();
            format!("snooze jobs {ids:?}")
        }
        Statement::FailJobs { failures, .. } => {
            let ids: Vec<i64> = failures.iter().map(|f| f.job_id).collect();
            format!("fail jobs {ids:?}")
        }
        Statement::ScheduleCron(batch) => {
            let items: Vec<&str> = batch.jobs.iter().map(|j| j.identifier.as_str()).collect();
            format!("schedule cron {items:?} at {}", batch.at.format("%H:%M"))
        }
        other @ (Statement::ResetLocked { .. }
        | Statement::Heartbeat { .. }
        | Statement::RecoverLapsed { .. }
        | Statement::RegisterCrontabs { .. }
        | Statement::ReadCancels { .. }
        | Statement::ReadSchedules
        | Statement::ReadFlow
        | Statement::PruneHistory { .. }
        | Statement::ResolveWorkflows
        | Statement::ReindexBloated
        | Statement::VacuumJobs
        | Statement::AgePriorities { .. }) => variant(other),
    }
}

fn result_text(result: &QueryResult) -> String {
    match result {
        QueryResult::Jobs { jobs, .. } => {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            format!("jobs {ids:?}")
        }
        QueryResult::Err(e) => format!("error {:?}", e.message),
        QueryResult::Fenced(fenced) => {
            let fenced: Vec<String> = fenced
                .iter()
                .map(|f| format!("{} ({})", f.job_id, f.holder.as_deref().unwrap_or("-")))
                .collect();
            format!("fenced {fenced:?}")
        }
        QueryResult::Cancels(requests) => format!("cancel requests {requests:?}"),
        QueryResult::Schedules(rows) => format!("{} runtime schedules", rows.len()),
        QueryResult::Flow(controls) => format!("flow controls {controls:?}"),
        QueryResult::Pruned { dropped, deleted } => format!("pruned {dropped} days, {deleted} rows"),
        QueryResult::Resolved { settled } => format!("resolved {settled} workflow jobs"),
        QueryResult::Reindexed { index } => format!("rebuilt index {index:?}"),
        QueryResult::Aged { raised } => format!("aged {raised} jobs"),
        other @ (QueryResult::KnownCrontabs(_) | QueryResult::Done) => variant(other),
    }
}
