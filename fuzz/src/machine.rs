//! Worker machine target: the bytes choose a world (seed, one to three workers and their
//! configurations, how tasks end) and a sequence of operations on it (add jobs with
//! colliding keys, queues, flags and delays; admin functions; let time pass; finish tasks;
//! drop listeners; notify; move the clock; crash, restart, stop; fail queries), then every
//! worker is stopped gracefully.
//!
//! The sim checks the machine's promises as it goes (a job started twice, more tasks than
//! `concurrency`, an effect after `Stopped`, a stop with work out) and panics when one
//! breaks. On top of that this target checks, after every step: each machine's clock never
//! goes back; a job runs only after a fetch of its worker locked it; at most one job of a
//! named queue runs while its lock is held; and at the end: every worker that was not
//! crashed stopped, holds no lock, arms no timer and answers no input; and no job was lost
//! (each one that left the table was completed after its task succeeded, completed by an
//! admin or removed by key).

use chrono::Duration;
use formica_core::job::{JobKeyMode, JobSpec, RawJob, RescheduleJobOptions};
use formica_core::sim::{TaskPlan, Traced, World, WorldConfig};
use formica_core::worker::{Config, Effect, Event, Input, QueryResult, Statement, TaskOutcome, Timestamp};
use std::collections::{BTreeMap, BTreeSet};

/// Reads the bytes front to back; zeros once they run out.
struct Bytes<'a> {
    data: &'a [u8],
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    fn below(&mut self, n: u8) -> u8 {
        self.byte() % n.max(1)
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

const TASKS: [&str; 3] = ["a", "b", "c"];
const MAX_OPS: usize = 300;

fn worker_config(index: usize, b: &mut Bytes<'_>) -> Config {
    let tasks = b.byte();
    let mut config = Config {
        worker_id: format!("w{index}"),
        task_identifiers: TASKS
            .iter()
            .enumerate()
            .filter(|(i, _)| tasks & (1 << i) != 0 || tasks == 0)
            .map(|(_, t)| (*t).to_owned())
            .collect(),
        concurrency: 1 + usize::from(b.below(4)),
        poll_interval: Duration::milliseconds(200 + i64::from(b.u16() % 3000)),
        local_queue_size: match b.below(3) {
            0 => Some(1 + usize::from(b.below(5))),
            _ => None,
        },
        local_queue_ttl: Duration::seconds(1 + i64::from(b.below(120))),
        // The defaults: reading more bytes would change what the committed corpora mean.
        lock_sweep_interval: formica_core::worker::LOCK_SWEEP_INTERVAL,
        recovery_interval: formica_core::worker::RECOVERY_PERIOD,
        watchdog: formica_core::lease::DEFAULT_WATCHDOG,
        complete_batch_delay: Duration::milliseconds(i64::from(b.below(3)) * 25),
        fail_batch_delay: Duration::milliseconds(i64::from(b.below(3)) * 25),
        graceful_shutdown_timeout: Duration::seconds(i64::from(b.below(6))),
        forbidden_flags: if b.below(4) == 0 { vec!["x".into()] } else { vec![] },
        use_local_time: b.flag(),
        run_once: b.below(8) == 0,
        max_listener_backoff: Duration::milliseconds(100 + i64::from(b.u16())),
        seed: u64::from(b.u16()),
        crontab: Vec::new(),
        task_timeouts: Default::default(),
        refetch_delay: None,
    };
    // From bytes already read, so the committed corpora keep their meaning.
    if config.seed.is_multiple_of(3) {
        config.refetch_delay = Some(formica_core::worker::RefetchDelay {
            duration: config.poll_interval / 4,
            threshold: (config.seed % 2) as usize,
            max_abort_threshold: (config.seed % 5) as usize,
        });
    }
    config
}

fn add_job(b: &mut Bytes<'_>, now: Timestamp, serial: u64) -> RawJob {
    let payload =
        if b.below(3) == 0 { serde_json::json!([serial]) } else { serde_json::json!({ "n": serial }) };
    let spec = JobSpec {
        queue_name: match b.below(3) {
            0 => Some(format!("q{}", b.below(2))),
            _ => None,
        },
        run_at: match b.below(3) {
            0 => Some(now + Duration::seconds(i64::from(b.byte() as i8))),
            _ => None,
        },
        max_attempts: Some(1 + i16::from(b.below(4))),
        job_key: match b.below(2) {
            0 => Some(format!("k{}", b.below(4))),
            _ => None,
        },
        job_key_mode: Some(
            [JobKeyMode::Replace, JobKeyMode::PreserveRunAt, JobKeyMode::UnsafeDedupe]
                [usize::from(b.below(3))],
        ),
        priority: Some(i16::from(b.below(3)) - 1),
        flags: if b.below(4) == 0 { Some(vec!["x".into()]) } else { None },
    };
    RawJob { identifier: TASKS[usize::from(b.below(3))].to_owned(), payload, spec }
}

/// What the target knows of one worker's current process, from the trace.
#[derive(Default)]
struct Watch {
    worker_id: String,
    /// Jobs its fetches locked and it has not started since.
    granted: BTreeSet<i64>,
    /// Its running tasks, with their queues.
    running: BTreeMap<i64, Option<String>>,
    pending: BTreeMap<u64, Statement>,
    clock: Option<Timestamp>,
}

struct Checks {
    watches: BTreeMap<usize, Watch>,
    cursor: usize,
    /// Jobs whose task succeeded, and jobs an admin completed or removed.
    may_leave: BTreeSet<i64>,
}

impl Checks {
    fn read(&mut self, world: &World) {
        let trace = world.trace();
        while self.cursor < trace.len() {
            let entry = &trace[self.cursor];
            self.cursor += 1;
            let Some(w) = entry.worker else { continue };
            match &entry.what {
                Traced::Started { worker_id } => {
                    self.watches.insert(w, Watch { worker_id: worker_id.clone(), ..Watch::default() });
                }
                Traced::Crashed => {
                    self.watches.remove(&w);
                }
                Traced::ClockJumped(_) | Traced::Heartbeat { .. } | Traced::Lease(_) => {}
                Traced::Input(input) => {
                    let Some(watch) = self.watches.get_mut(&w) else { continue };
                    match input {
                        Input::QueryDone { id, result } => {
                            match (watch.pending.remove(id), result) {
                                (Some(Statement::GetJobs { .. }), QueryResult::Jobs { jobs, .. }) => {
                                    // A job still running here may be locked again (after a
                                    // stale-lock sweep); that lock must not start it twice.
                                    let fresh = jobs
                                        .iter()
                                        .map(|j| j.id)
                                        .filter(|id| !watch.running.contains_key(id));
                                    watch.granted.extend(fresh.collect::<Vec<_>>());
                                }
                                (Some(Statement::ReturnJobs { ids, .. }), QueryResult::Done) => {
                                    for id in ids {
                                        watch.granted.remove(&id);
                                    }
                                }
                                _ => {}
                            }
                        }
                        Input::TaskFinished { job_id, outcome } => {
                            watch.running.remove(job_id);
                            if *outcome == TaskOutcome::Ok {
                                self.may_leave.insert(*job_id);
                            }
                        }
                        Input::Notification { .. }
                        | Input::ListenerUp
                        | Input::ListenerDown { .. }
                        | Input::ShutdownRequested { .. }
                        | Input::Timeout
                        | Input::Heartbeat { .. } => {}
                    }
                }
                Traced::Effect(effect) => {
                    let Some(watch) = self.watches.get_mut(&w) else { continue };
                    match effect {
                        Effect::Query { id, statement } => {
                            watch.pending.insert(*id, statement.clone());
                        }
                        Effect::StartTask { job } => {
                            assert!(watch.granted.remove(&job.id), "job {} started without a lock", job.id);
                            watch.running.insert(job.id, job.queue_name.clone());
                            if let Some(queue) = &job.queue_name {
                                for other in self.watches.values() {
                                    for (id, q) in &other.running {
                                        let held = world.db().job(*id).is_some_and(|j| {
                                            j.locked_by.as_deref() == Some(&other.worker_id)
                                        });
                                        assert!(
                                            *id == job.id || q.as_ref() != Some(queue) || !held,
                                            "queue {queue}: job {} started while {id} runs",
                                            job.id
                                        );
                                    }
                                }
                            }
                        }
                        Effect::AbortTask { .. }
                        | Effect::ConnectListener
                        | Effect::Emit(_)
                        | Effect::Stopped => {}
                    }
                }
            }
        }
        for (w, watch) in &mut self.watches {
            if world.is_stopped(*w) || world.is_crashed(*w) {
                continue;
            }
            let now = world.machine(*w).now();
            assert!(watch.clock.is_none_or(|before| before <= now), "worker {w}: clock went back");
            watch.clock = Some(now);
        }
    }
}

/// Drives the worker machine with operations decoded from the bytes.
pub fn check(data: &[u8]) {
    run(data);
}

/// [`check`], returning the world it drove (its trace pins the machine's behaviour:
/// `fuzz/tests/traces.rs`).
pub fn run(data: &[u8]) -> World {
    let mut b = Bytes { data };
    let config = WorldConfig {
        seed: u64::from(b.u16()),
        query_failure_per_mille: u32::from(b.below(4)) * 20,
        ..WorldConfig::default()
    };
    let mut world = World::new(config);
    let mix =
        [1 + u64::from(b.below(8)), u64::from(b.below(4)), u64::from(b.below(3)), u64::from(b.below(2))];
    world.set_script(move |_, rng| {
        let after = Duration::milliseconds(rng.between(0, 3000));
        let mut pick = rng.below(mix.iter().sum());
        for (i, weight) in mix.iter().enumerate() {
            if pick < *weight {
                return match i {
                    0 => TaskPlan::finish(after, TaskOutcome::Ok),
                    1 if rng.below(2) == 0 => TaskPlan::finish(after, TaskOutcome::Err("boom".into())),
                    // A batch job's failed items replace its payload.
                    1 => {
                        let items = serde_json::json!([{ "left": rng.below(1000) }]);
                        TaskPlan::finish(after, TaskOutcome::ItemsFailed { error: "some".into(), items })
                    }
                    2 => TaskPlan::finish(after, TaskOutcome::Panicked("p".into())),
                    _ => TaskPlan::Hang,
                };
            }
            pick -= weight;
        }
        TaskPlan::finish(after, TaskOutcome::Ok)
    });
    let workers = 1 + usize::from(b.below(3));
    for index in 0..workers {
        let config = worker_config(index, &mut b);
        world.add_worker(config);
    }
    let mut checks = Checks { watches: BTreeMap::new(), cursor: 0, may_leave: BTreeSet::new() };
    let mut created = BTreeSet::new();
    let mut serial = 0;
    let mut ops = 0;
    checks.read(&world);
    while !b.is_empty() && ops < MAX_OPS {
        ops += 1;
        let now = world.now();
        let w = usize::from(b.byte()) % workers;
        match b.below(16) {
            0..=3 => {
                serial += 1;
                let add = add_job(&mut b, now, serial);
                if let Ok(job) = world.db_mut().add_job(&add) {
                    created.insert(job.id);
                }
            }
            4 => {
                let adds: Vec<RawJob> = (0..b.below(4))
                    .map(|_| {
                        serial += 1;
                        add_job(&mut b, now, serial)
                    })
                    .collect();
                let preserve = b.flag();
                if let Ok(jobs) = world.db_mut().add_jobs(&adds, preserve) {
                    created.extend(jobs.iter().map(|j| j.id));
                }
            }
            5 => {
                let key = format!("k{}", b.below(4));
                if let Some(job) = world.db().jobs().find(|j| j.key.as_deref() == Some(&key)).map(|j| j.id) {
                    checks.may_leave.insert(job);
                }
                world.db_mut().remove_job(&key);
            }
            6 => {
                let ids: Vec<i64> =
                    world.db().jobs().map(|j| j.id).filter(|id| id % 3 == i64::from(b.below(3))).collect();
                match b.below(3) {
                    0 => {
                        let done = world.db_mut().complete_jobs(&ids);
                        checks.may_leave.extend(done.iter().map(|j| j.id));
                    }
                    1 => {
                        world.db_mut().permanently_fail_jobs(&ids, None);
                    }
                    _ => {
                        let with = RescheduleJobOptions {
                            run_at: Some(now + Duration::seconds(i64::from(b.byte() as i8))),
                            attempts: Some(i16::from(b.below(2))),
                            ..RescheduleJobOptions::default()
                        };
                        let _ = world.db_mut().reschedule_jobs(&ids, &with);
                    }
                }
            }
            7..=9 => {
                let until = world.elapsed() + Duration::milliseconds(i64::from(b.u16()));
                while world.next_at().is_some_and(|at| at <= until) {
                    world.step();
                    checks.read(&world);
                }
                world.run_for(until - world.elapsed());
            }
            10 => {
                let running: Vec<i64> = world.running(w).map(|j| j.id).collect();
                if let Some(&job) = running.get(usize::from(b.byte()) % running.len().max(1)) {
                    world.finish_task(w, job, TaskOutcome::Err("manual".into()));
                }
            }
            11 => match b.below(3) {
                0 => world.drop_listener(w),
                1 => world.set_listener_available(w, b.flag()),
                _ => world.notify("jobs:insert", &format!("{{\"count\":{}}}", i32::from(b.below(3)) - 1)),
            },
            12 => world.jump_clock(Duration::seconds(i64::from(b.u16() as i16))),
            13 => match b.below(3) {
                0 => world.crash(w),
                _ => world.restart(w),
            },
            14 => world.shutdown(w, b.flag()),
            _ => world.fail_next_queries(w, u32::from(b.below(4))),
        }
        checks.read(&world);
    }
    for w in 0..workers {
        world.set_listener_available(w, true);
        world.shutdown(w, true);
    }
    checks.read(&world);
    let limit = world.elapsed() + Duration::days(2);
    while !(0..workers).all(|w| world.is_stopped(w) || world.is_crashed(w)) {
        if world.next_at().is_none_or(|at| at > limit) {
            let stuck: Vec<String> = (0..workers)
                .filter(|w| !world.is_stopped(*w) && !world.is_crashed(*w))
                .map(|w| {
                    format!(
                        "{}: {} running, {} in flight, timer {:?}",
                        world.worker_id(w),
                        world.running(w).count(),
                        world.in_flight(w),
                        world.machine(w).poll_timeout()
                    )
                })
                .collect();
            let tail: Vec<String> = world.trace().iter().rev().take(30).map(|e| format!("{e:?}")).collect();
            panic!(
                "the workers did not stop: {stuck:?}\nlast trace entries (newest first):\n{}",
                tail.join("\n")
            );
        }
        world.step();
        checks.read(&world);
    }
    for w in (0..workers).filter(|w| world.is_stopped(*w)) {
        let id = world.worker_id(w);
        // A worker that gave up on a refusing database names the jobs it leaves locked.
        let abandoned: Vec<i64> = (world.trace().iter())
            .filter(|e| e.worker == Some(w))
            .filter_map(|e| match &e.what {
                Traced::Effect(Effect::Emit(Event::OutcomesAbandoned { job_ids })) => Some(job_ids.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(
            (world.db().jobs())
                .all(|j| j.locked_by.as_deref() != Some(id.as_str()) || abandoned.contains(&j.id)),
            "{id} stopped holding a job it did not name as abandoned"
        );
        assert_eq!(world.machine(w).poll_timeout(), None, "{id} arms a timer after Stopped");
        let mut machine = world.machine(w).clone();
        for input in [Input::Timeout, Input::ListenerUp, Input::ShutdownRequested { graceful: false }] {
            let _ = machine.handle(input, world.now());
            assert_eq!(machine.poll_effect(), None, "{id}: an effect after Stopped");
        }
    }
    for id in created {
        assert!(world.db().job(id).is_some() || checks.may_leave.contains(&id), "job {id} was lost");
    }
    world
}

#[cfg(test)]
mod tests {
    #[test]
    fn arbitrary_bytes_keep_the_promises() {
        let mut state = 0x1234_5678_u64;
        for len in 0..300 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            super::check(&data);
        }
    }
}
