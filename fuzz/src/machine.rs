//! Worker machine target: the bytes choose a world (seed, one to three workers and their
//! configurations, how tasks end) and a sequence of operations on it (add jobs with
//! colliding keys, queues, flags and delays; admin functions; let time pass; finish tasks;
//! drop listeners; notify; move the clock; crash, restart, stop; fail queries), then every
//! worker is stopped gracefully.
//!
//! The bytes are decoded into `formica-check`'s operations and played by its `Run`: the
//! lockstep model and the trace checker check the machine's promises after every step (the
//! crate's docs list them), and a broken one panics with the operations that led there.
//! The decoding is fixed: the committed corpora and the traces of `fuzz/tests/traces.rs`
//! depend on each byte meaning what it means.

use chrono::Duration;
use formica_check::{Action, NewJob, Op, Pick, Run};
use formica_core::job::JobKeyMode;
use formica_core::sim::{Fault, TaskPlan, World, WorldConfig};
use formica_core::worker::{Config, TaskOutcome};

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
        // One (the default) or two, by the worker: reading more bytes would change the corpora.
        fetches_in_flight: 1 + index % 2,
        // The defaults: reading more bytes would change what the committed corpora mean.
        lock_sweep_interval: formica_core::worker::LOCK_SWEEP_INTERVAL,
        recovery_interval: formica_core::worker::RECOVERY_PERIOD,
        watchdog: formica_core::lease::DEFAULT_WATCHDOG,
        complete_batch_delay: Duration::milliseconds(i64::from(b.below(3)) * 25),
        fail_batch_delay: Duration::milliseconds(i64::from(b.below(3)) * 25),
        graceful_shutdown_timeout: Duration::seconds(i64::from(b.below(6))),
        forbidden_flags: if b.below(4) == 0 { vec!["x".into()] } else { vec![] },
        // None: reading more bytes would change what the committed corpora mean.
        accepted_flags: Vec::new(),
        use_local_time: b.flag(),
        run_once: b.below(8) == 0,
        max_listener_backoff: Duration::milliseconds(100 + i64::from(b.u16())),
        seed: u64::from(b.u16()),
        crontab: Vec::new(),
        runtime_schedules: None,
        task_timeouts: Default::default(),
        task_policies: Default::default(),
        latest_migration: 20,
        refetch_delay: None,
        // Off: the fuzzed database keeps no flow controls (core/tests/flow_sim.rs and
        // controls_sim.rs check them), and reading more bytes would change the corpora.
        flow_control: false,
        task_concurrency: Default::default(),
        // Off: the fuzzed database keeps no history nor workflows (core/tests/chores_sim.rs
        // checks the chores), and reading more bytes would change the corpora.
        prune_history: None,
        resolve_workflows: None,
        reindex_bloated: None,
        age_priorities: None,
        // By the worker, as `fetches_in_flight` (the fuzzed database answers a vacuum as done).
        vacuum_jobs: index % 2 == 1,
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

/// A job for `add_job` (or a spec of `add_jobs`): the fields are read in this order.
fn new_job(b: &mut Bytes<'_>, serial: u64) -> NewJob {
    let payload =
        if b.below(3) == 0 { serde_json::json!([serial]) } else { serde_json::json!({ "n": serial }) };
    let queue = match b.below(3) {
        0 => Some(format!("q{}", b.below(2))),
        _ => None,
    };
    let delay_s = match b.below(3) {
        0 => Some(i64::from(b.byte() as i8)),
        _ => None,
    };
    let max_attempts = 1 + i16::from(b.below(4));
    let key = match b.below(2) {
        0 => Some(format!("k{}", b.below(4))),
        _ => None,
    };
    let mode =
        [JobKeyMode::Replace, JobKeyMode::PreserveRunAt, JobKeyMode::UnsafeDedupe][usize::from(b.below(3))];
    let priority = i16::from(b.below(3)) - 1;
    let flags = if b.below(4) == 0 { Some(vec!["x".into()]) } else { None };
    NewJob {
        task: TASKS[usize::from(b.below(3))].to_owned(),
        payload,
        queue,
        delay_s,
        max_attempts,
        key,
        mode: Some(mode),
        priority,
        flags,
    }
}

/// The next operation. `world` is read (never changed) for the one choice that depends on
/// it: an admin function reads one byte per job present, and takes the job if its id
/// modulo 3 equals that byte modulo 3.
fn next_op(b: &mut Bytes<'_>, world: &World, serial: &mut u64) -> Op {
    let w = usize::from(b.byte()) % world.workers();
    let mut next_job = |b: &mut Bytes<'_>| {
        *serial += 1;
        new_job(b, *serial)
    };
    match b.below(16) {
        0..=3 => Op::Event(Action::RawJob(next_job(b))),
        4 => {
            let jobs = (0..b.below(4)).map(|_| next_job(b)).collect();
            Op::Event(Action::AddJobs { jobs, preserve_run_at: b.flag() })
        }
        5 => Op::Event(Action::RemoveJob { key: format!("k{}", b.below(4)) }),
        6 => {
            let ids: Vec<i64> =
                world.db().jobs().map(|j| j.id).filter(|id| id % 3 == i64::from(b.below(3))).collect();
            let pick = Pick::Ids(ids);
            Op::Event(match b.below(3) {
                0 => Action::CompleteJobs { pick },
                1 => Action::PermanentlyFailJobs { pick, message: None },
                _ => Action::RescheduleJobs {
                    pick,
                    delay_s: Some(i64::from(b.byte() as i8)),
                    priority: None,
                    attempts: Some(i16::from(b.below(2))),
                    max_attempts: None,
                },
            })
        }
        7..=9 => Op::Wait(u32::from(b.u16())),
        10 => Op::Event(Action::FinishTask {
            worker: w,
            nth: b.byte(),
            outcome: TaskOutcome::Err("manual".into()),
        }),
        11 => match b.below(3) {
            0 => Op::Fault(Fault::DropListener(w)),
            1 => Op::Fault(Fault::ListenerAvailable(w, b.flag())),
            _ => Op::Event(Action::Notify(format!("{{\"count\":{}}}", i32::from(b.below(3)) - 1))),
        },
        12 => Op::Fault(Fault::JumpClock(i64::from(b.u16() as i16))),
        13 => match b.below(3) {
            0 => Op::Fault(Fault::Crash(w)),
            _ => Op::Fault(Fault::Restart(w)),
        },
        14 => Op::Event(Action::Shutdown { worker: w, graceful: b.flag() }),
        _ => Op::Fault(Fault::FailQueries(w, u32::from(b.below(4)))),
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
    for index in 0..1 + usize::from(b.below(3)) {
        let config = worker_config(index, &mut b);
        world.add_worker(config);
    }
    let mut run = Run::new(world);
    let mut ops = Vec::new();
    let broken = |ops: &[Op], e: String| -> ! {
        let list: Vec<String> = ops.iter().enumerate().map(|(i, op)| format!("{i:>4} {op:?}")).collect();
        panic!("{e}\nthe operations:\n{}", list.join("\n"))
    };
    if let Err(e) = run.check() {
        broken(&ops, e);
    }
    let mut serial = 0;
    while !b.is_empty() && ops.len() < MAX_OPS {
        ops.push(next_op(&mut b, run.world(), &mut serial));
        if let Err(e) = run.apply(&ops[ops.len() - 1]) {
            broken(&ops, e);
        }
    }
    if let Err(e) = run.stop_all(Duration::days(2)) {
        broken(&ops, e);
    }
    run.into_world()
}

/// `count` inputs of pseudo-random bytes from `seed`, the `n`th `n` bytes long (xorshift:
/// the same seed gives the same inputs on every machine).
pub fn generated_inputs(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut state = seed;
    let mut byte = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    (0..count).map(|len| (0..len).map(|_| byte()).collect()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn arbitrary_bytes_keep_the_promises() {
        for data in super::generated_inputs(0x1234_5678, 300) {
            super::check(&data);
        }
    }
}
