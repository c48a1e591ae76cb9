//! Flow control: what an operator has paused, and what that holds back.
//!
//! Pauses are rows of Formica's records schema (`formica_<schema>.pauses`), changed by
//! `WorkerUtils::pause`/`resume` (which notify [`FLOW`](crate::protocol::FLOW)). A worker
//! reads them ([`Statement::ReadFlow`](crate::protocol::Statement::ReadFlow)) before its
//! first fetch, on each notification and every poll interval, and decides from them what
//! to fetch and what to start: a paused task leaves the fetch's task list, a paused named
//! queue is excluded by name, a pause of everything fetches nothing. Running jobs finish;
//! jobs fetched before the pause was read are given back unstarted (attempt refunded).

use std::collections::BTreeSet;

/// What a pause applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The jobs of one task identifier.
    Task,
    /// The jobs of one named queue.
    Queue,
    /// Every job (the name is empty).
    All,
}

impl Scope {
    /// The scope as stored: `task`, `queue` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Task => "task",
            Scope::Queue => "queue",
            Scope::All => "all",
        }
    }

    /// The scope stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "task" => Some(Scope::Task),
            "queue" => Some(Scope::Queue),
            "all" => Some(Scope::All),
            _ => None,
        }
    }
}

/// One pause in force.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pause {
    /// What it applies to.
    pub scope: Scope,
    /// The task identifier or queue name (empty for [`Scope::All`]).
    pub name: String,
}

impl Pause {
    /// A pause of the jobs of task `identifier`.
    pub fn task(identifier: impl Into<String>) -> Self {
        Pause { scope: Scope::Task, name: identifier.into() }
    }

    /// A pause of the jobs of the named queue `name`.
    pub fn queue(name: impl Into<String>) -> Self {
        Pause { scope: Scope::Queue, name: name.into() }
    }

    /// A pause of every job.
    pub fn all() -> Self {
        Pause { scope: Scope::All, name: String::new() }
    }

    /// How logs and metrics name it: `task:send_email`, `queue:mail`, `all`.
    pub fn label(&self) -> String {
        match self.scope {
            Scope::All => "all".into(),
            scope => format!("{}:{}", scope.as_str(), self.name),
        }
    }
}

/// The flow controls in force, as a worker last read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowState {
    all: bool,
    tasks: BTreeSet<String>,
    queues: BTreeSet<String>,
}

/// Nothing paused: the state of a worker without flow control.
pub static NOTHING_PAUSED: FlowState =
    FlowState { all: false, tasks: BTreeSet::new(), queues: BTreeSet::new() };

impl FlowState {
    /// The state made of these pauses (in any order, repeats harmless).
    pub fn new(pauses: &[Pause]) -> Self {
        let mut state = FlowState::default();
        for pause in pauses {
            match pause.scope {
                Scope::All => state.all = true,
                Scope::Task => _ = state.tasks.insert(pause.name.clone()),
                Scope::Queue => _ = state.queues.insert(pause.name.clone()),
            }
        }
        state
    }

    /// Nothing is paused: the worker fetches exactly as without flow control.
    pub fn is_empty(&self) -> bool {
        !self.all && self.tasks.is_empty() && self.queues.is_empty()
    }

    /// Of `tasks`, those whose jobs may be fetched.
    pub fn fetchable(&self, tasks: &[String]) -> Vec<String> {
        if self.all {
            return Vec::new();
        }
        tasks.iter().filter(|t| !self.tasks.contains(*t)).cloned().collect()
    }

    /// The named queues whose jobs must not be fetched.
    pub fn paused_queues(&self) -> Vec<String> {
        self.queues.iter().cloned().collect()
    }

    /// Whether a job of `task` in `queue` must not start now.
    pub fn holds_back(&self, task: &str, queue: Option<&str>) -> bool {
        self.all || self.tasks.contains(task) || queue.is_some_and(|q| self.queues.contains(q))
    }

    /// The pauses, as labels (`all`, `task:<name>`, `queue:<name>`), sorted.
    pub fn labels(&self) -> Vec<String> {
        let all = self.all.then(|| Pause { scope: Scope::All, name: String::new() });
        let tasks = self.tasks.iter().map(|name| Pause { scope: Scope::Task, name: name.clone() });
        let queues = self.queues.iter().map(|name| Pause { scope: Scope::Queue, name: name.clone() });
        all.into_iter().chain(tasks).chain(queues).map(|p| p.label()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(scope: Scope, name: &str) -> Pause {
        Pause { scope, name: name.into() }
    }

    #[test]
    fn a_paused_task_leaves_the_fetch_and_a_paused_queue_holds_back_its_jobs() {
        let state = FlowState::new(&[pause(Scope::Task, "a"), pause(Scope::Queue, "q")]);
        assert_eq!(state.fetchable(&["a".into(), "b".into()]), vec!["b".to_owned()]);
        assert_eq!(state.paused_queues(), vec!["q".to_owned()]);
        assert!(state.holds_back("a", None));
        assert!(state.holds_back("b", Some("q")));
        assert!(!state.holds_back("b", Some("r")) && !state.holds_back("b", None));
        assert_eq!(state.labels(), vec!["task:a".to_owned(), "queue:q".to_owned()]);
    }

    #[test]
    fn pausing_everything_fetches_nothing_and_no_pause_is_empty() {
        let all = FlowState::new(&[pause(Scope::All, "")]);
        assert!(all.fetchable(&["a".into()]).is_empty() && all.holds_back("a", None));
        assert!(FlowState::new(&[]).is_empty() && !all.is_empty());
        assert_eq!(Scope::parse("queue"), Some(Scope::Queue));
        assert_eq!(Scope::parse(Scope::All.as_str()), Some(Scope::All));
        assert_eq!(Scope::parse("nope"), None);
    }
}
