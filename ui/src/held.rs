//! Why a ready job waits: the flow controls (docs/guide/flow-control.md) that hold it back,
//! shown beside its state on the job and jobs pages ("ready — held: queue mail paused").
//! The pauses, caps and rate limits are read once per page, and only if it shows a ready
//! job; each job's reasons are then found in memory.

use crate::html::esc;
use crate::{Error, State};
use formica::controls::{ControlLimit, ControlSet, Paused, Scope};
use formica::inspect;
use std::collections::HashMap;

/// The flow controls in force, as a page reads them once.
#[derive(Default)]
pub(crate) struct Holds {
    pauses: Vec<Paused>,
    controls: Vec<ControlSet>,
    /// Jobs of each capped task locked now (only for caps over the whole task).
    running: HashMap<String, i64>,
}

impl Holds {
    /// The controls in force, if any of `states` is `ready` (else none is read).
    pub(crate) async fn read<'a>(
        s: &State,
        mut states: impl Iterator<Item = &'a str>,
    ) -> Result<Holds, Error> {
        if !states.any(|state| state == "ready") {
            return Ok(Holds::default());
        }
        let (pauses, controls) = tokio::try_join!(s.reads.paused(), s.reads.controls())?;
        let mut running = HashMap::new();
        let whole_cap = |c: &ControlSet| c.control.partition.is_none() && c.control.period().is_none();
        if controls.iter().any(whole_cap) {
            for counts in inspect::overview(&s.reads).await?.counts {
                let n = counts.states.get("running").copied().unwrap_or(0);
                *running.entry(counts.task).or_default() += n;
            }
        }
        Ok(Holds { pauses, controls, running })
    }

    /// What holds a ready job of `task` in `queue` for sure (pauses, a cap reached), and
    /// what may (a cap per partition, a rate limit: whether its job's partition or period
    /// is full is not read), one phrase each.
    pub(crate) fn of(&self, task: &str, queue: Option<&str>) -> (Vec<String>, Vec<String>) {
        let mut why: Vec<String> = self
            .pauses
            .iter()
            .filter_map(|p| p.pause().filter(|pause| pause.covers(task, queue)))
            .map(|pause| match pause.scope {
                Scope::All => "everything paused".to_owned(),
                scope => format!("{} {} paused", scope.as_str(), pause.name),
            })
            .collect();
        let mut may = Vec::new();
        for c in self.controls.iter().map(|c| &c.control).filter(|c| c.task == task) {
            match (&c.limit, &c.partition) {
                // Over the whole task: held only while the cap is reached.
                (ControlLimit::Running { max }, None) => {
                    let running = self.running.get(task).copied().unwrap_or(0);
                    if running >= i64::from(*max) {
                        why.push(format!("task {task} capped ({running} running, at most {max})"));
                    }
                }
                (ControlLimit::Running { max }, Some(p)) => {
                    may.push(format!("task {task} capped ({max} at once per {} {})", p.kind(), p.argument()))
                }
                (ControlLimit::Starts { .. }, _) => may.push(format!("rate limit {}", c.label())),
                // A bound holds back adds, not starts; fairness orders the task's jobs and
                // holds none back.
                (ControlLimit::Waiting { .. } | ControlLimit::Fair { .. }, _) => {}
            }
        }
        (why, may)
    }

    /// A job's state as a page shows it: the state, and for a ready job what holds it.
    pub(crate) fn state(&self, state: &str, task: &str, queue: Option<&str>, id: Option<&str>) -> String {
        let id = id.map(|id| format!(r#" id="{id}""#)).unwrap_or_default();
        let shown =
            format!(r#"<span class="state {0}"{id}>{1}</span>"#, esc(state), esc(&state.replace('_', " ")));
        if state != "ready" {
            return shown;
        }
        let (held, may) = self.of(task, queue);
        let mut html = shown;
        for (label, why) in [("held", held), ("may wait", may)] {
            if !why.is_empty() {
                html += &format!(r#" <span class="held">— {label}: {}</span>"#, esc(&why.join("; ")));
            }
        }
        html
    }
}
