//! A generated case: the world to build and the operations to play on it, and
//! [`run_case`], which plays them under the checker.

use crate::ops::Op;
use crate::run::Run;
use chrono::Duration;
use formica_core::sim::{TaskPlan, World, WorldConfig};
use formica_core::worker::{Config, TaskOutcome};

/// The task identifiers of generated jobs and workers.
pub const TASKS: [&str; 3] = ["a", "b", "c"];

/// A world and what happens to it.
#[derive(Debug, Clone)]
pub struct Case {
    /// The world's seed.
    pub seed: u64,
    /// One configuration per worker.
    pub workers: Vec<Config>,
    /// Weights of ok, err, panic, hang, manual outcomes.
    pub mix: [u8; 5],
    /// A task ends within this many milliseconds.
    pub max_task_ms: u32,
    /// How often a query fails.
    pub query_failure_per_mille: u32,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

impl Case {
    /// The world before the first operation: its tasks end as [`Case::mix`] draws, and its
    /// workers are started.
    pub fn world(&self) -> World {
        let config = WorldConfig {
            seed: self.seed,
            query_failure_per_mille: self.query_failure_per_mille,
            ..WorldConfig::default()
        };
        let mut world = World::new(config);
        let mix = self.mix;
        let max_ms = i64::from(self.max_task_ms);
        world.set_script(move |_job, rng| {
            let total: u64 = mix.iter().map(|w| u64::from(*w)).sum();
            let mut pick = rng.below(total.max(1));
            let after = Duration::milliseconds(rng.between(0, max_ms));
            for (i, w) in mix.iter().enumerate() {
                if pick < u64::from(*w) {
                    return match i {
                        0 => TaskPlan::finish(after, TaskOutcome::Ok),
                        // A failure, or a snooze (attempt refunded, run again later).
                        1 => match rng.below(2) {
                            0 => TaskPlan::finish(after, TaskOutcome::Err("boom".into())),
                            _ => TaskPlan::finish(
                                after,
                                TaskOutcome::Snoozed(Duration::milliseconds(rng.between(0, 2000))),
                            ),
                        },
                        2 => TaskPlan::finish(after, TaskOutcome::Panicked("task panicked: p".into())),
                        3 => TaskPlan::Hang,
                        _ => TaskPlan::Manual,
                    };
                }
                pick -= u64::from(*w);
            }
            TaskPlan::finish(after, TaskOutcome::Ok)
        });
        for config in &self.workers {
            world.add_worker(config.clone());
        }
        world
    }
}

/// Plays `case` under the checker, lets the workers work 90 seconds more, stops them all
/// (within a day) and checks what is left; the world on success, else what broke, after
/// which operation. `FORMICA_SIM_TRACE=<file>` keeps a failing run's trace in `<file>`.
pub fn run_case(case: &Case) -> Result<World, String> {
    let mut run = Run::new(case.world());
    run.check()?;
    for (i, op) in case.ops.iter().enumerate() {
        run.apply(op).map_err(|e| format!("op {i} {op:?}: {e}"))?;
    }
    let finished = run.run_for(Duration::seconds(90)).and_then(|()| run.stop_all(Duration::days(1)));
    if let Err(e) = finished {
        if let Some(path) = std::env::var_os("FORMICA_SIM_TRACE") {
            let lines: Vec<String> = run.world().trace().iter().map(|e| format!("{e:?}")).collect();
            if let Err(write) = std::fs::write(path, lines.join("\n")) {
                return Err(format!("{e}\n(and writing FORMICA_SIM_TRACE failed: {write})"));
            }
        }
        return Err(e);
    }
    Ok(run.into_world())
}
