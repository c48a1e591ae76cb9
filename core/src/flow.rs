//! Flow control: what an operator has paused, and what that holds back.
//!
//! Pauses are rows of Formica's records schema (`formica_<schema>.pauses`), changed by
//! `WorkerUtils::pause`/`resume` (which notify [`FLOW`](crate::protocol::FLOW)). A worker
//! reads them ([`Statement::ReadFlow`](crate::protocol::Statement::ReadFlow)) before its
//! first fetch, on each notification and every poll interval, and decides from them what
//! to fetch and what to start: a paused task leaves the fetch's task list, a paused named
//! queue is excluded by name, a pause of everything fetches nothing. Running jobs finish;
//! jobs fetched before the pause was read are given back unstarted (attempt refunded).
//!
//! A [`Cap`] bounds the jobs of a task locked at once, by anyone (so graphile-worker's and
//! a crashed worker's count until released), across the fleet, or per partition of the
//! task. A worker whose tasks include a capped one sends its fetch with the caps
//! ([`Statement::GetJobs`](crate::protocol::Statement::GetJobs)'s `caps`): the statement
//! serializes the capped fetches of each task and locks at most the room left.

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
            scope @ (Scope::Task | Scope::Queue) => format!("{}:{}", scope.as_str(), self.name),
        }
    }
}

/// How a capped task's jobs are grouped, each group capped on its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Partition {
    /// By the text of this payload field (`payload->>'field'`; a job without it is in the
    /// partition named by the empty text).
    Field(String),
    /// By the job key's text before the first occurrence of this separator (the whole key
    /// if it has none; a job without a key is in the partition named by the empty text).
    KeyPrefix(String),
}

impl Partition {
    /// The partition of a job with this payload and key.
    pub fn of(&self, payload: &serde_json::Value, key: Option<&str>) -> String {
        match self {
            Partition::Field(field) => match payload.get(field) {
                None | Some(serde_json::Value::Null) => String::new(),
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
            },
            Partition::KeyPrefix(separator) => {
                key.and_then(|k| k.split(separator.as_str()).next()).unwrap_or_default().to_owned()
            }
        }
    }

    /// The kind as stored: `field` or `key_prefix`.
    pub fn kind(&self) -> &'static str {
        match self {
            Partition::Field(_) => "field",
            Partition::KeyPrefix(_) => "key_prefix",
        }
    }

    /// The field or separator.
    pub fn argument(&self) -> &str {
        match self {
            Partition::Field(arg) | Partition::KeyPrefix(arg) => arg,
        }
    }

    /// The partition stored as `kind` and `argument`, if the kind is one.
    pub fn parse(kind: &str, argument: String) -> Option<Self> {
        match kind {
            "field" => Some(Partition::Field(argument)),
            "key_prefix" => Some(Partition::KeyPrefix(argument)),
            _ => None,
        }
    }
}

/// At most `max_running` jobs of `task` locked at once (per partition, if any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cap {
    /// The task identifier.
    pub task: String,
    /// Most jobs locked at once (per partition).
    pub max_running: u32,
    /// How the jobs are grouped (`None`: all the task's jobs together).
    pub partition: Option<Partition>,
}

/// At most `max_starts` jobs of `task` locked (started) in any `period_ms` milliseconds of
/// the database clock, across the fleet (per partition, if any): a rate limit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Limit {
    /// The task identifier.
    pub task: String,
    /// Most jobs locked in one period (per partition).
    pub max_starts: u32,
    /// The period, in milliseconds.
    pub period_ms: u32,
    /// How the jobs are grouped (`None`: all the task's jobs together).
    pub partition: Option<Partition>,
}

impl Limit {
    /// How logs and the dashboard name it: `send_email 100/min`, `imports 5/10s per field
    /// customer`.
    pub fn label(&self) -> String {
        let per = |p: &Partition| format!(" per {} {}", p.kind(), p.argument());
        let period = match self.period_ms {
            1_000 => "s".to_owned(),
            60_000 => "min".to_owned(),
            3_600_000 => "h".to_owned(),
            ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
            ms => format!("{ms}ms"),
        };
        format!(
            "{} {}/{period}{}",
            self.task,
            self.max_starts,
            self.partition.as_ref().map(per).unwrap_or_default()
        )
    }
}

/// The flow controls in force, as a worker reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// The pauses.
    pub pauses: Vec<Pause>,
    /// The caps, one per task at most.
    pub caps: Vec<Cap>,
    /// The rate limits, one per task at most.
    pub limits: Vec<Limit>,
}

/// The flow controls in force, as a worker last read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowState {
    all: bool,
    tasks: BTreeSet<String>,
    queues: BTreeSet<String>,
    caps: Vec<Cap>,
    limits: Vec<Limit>,
}

/// Nothing paused: the state of a worker without flow control.
pub static NOTHING_PAUSED: FlowState = FlowState {
    all: false,
    tasks: BTreeSet::new(),
    queues: BTreeSet::new(),
    caps: Vec::new(),
    limits: Vec::new(),
};

impl FlowState {
    /// The state made of these controls (in any order, repeats harmless).
    pub fn new(controls: &Controls) -> Self {
        let mut state = FlowState::default();
        let mut caps = controls.caps.clone();
        caps.sort();
        caps.dedup_by(|a, b| a.task == b.task);
        state.caps = caps;
        let mut limits = controls.limits.clone();
        limits.sort();
        limits.dedup_by(|a, b| a.task == b.task);
        state.limits = limits;
        let pauses = &controls.pauses;
        for pause in pauses {
            match pause.scope {
                Scope::All => state.all = true,
                Scope::Task => _ = state.tasks.insert(pause.name.clone()),
                Scope::Queue => _ = state.queues.insert(pause.name.clone()),
            }
        }
        state
    }

    /// Nothing is paused, capped or limited: the worker fetches exactly as without flow
    /// control.
    pub fn is_empty(&self) -> bool {
        self.pauses_nothing() && self.caps.is_empty() && self.limits.is_empty()
    }

    /// The rate limits, as labels (`send_email 100/1s`), by task.
    pub fn limited(&self) -> Vec<String> {
        self.limits.iter().map(Limit::label).collect()
    }

    /// The rate limits of these tasks, by task.
    pub fn limits_of(&self, tasks: &[String]) -> Vec<Limit> {
        self.limits.iter().filter(|limit| tasks.contains(&limit.task)).cloned().collect()
    }

    /// Whether any rate limit is in force.
    pub fn has_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// How long a start of `task` counts against its rate limit, if it has one.
    pub fn period_of(&self, task: &str) -> Option<chrono::Duration> {
        let limit = self.limits.iter().find(|limit| limit.task == task)?;
        Some(chrono::Duration::milliseconds(i64::from(limit.period_ms)))
    }

    /// The caps, as labels (`send_email<=3`, `imports<=1 per field customer`), by task.
    pub fn capped(&self) -> Vec<String> {
        let per = |p: &Partition| format!(" per {} {}", p.kind(), p.argument());
        let label = |c: &Cap| {
            format!("{}<={}{}", c.task, c.max_running, c.partition.as_ref().map(per).unwrap_or_default())
        };
        self.caps.iter().map(label).collect()
    }

    /// Nothing is paused (caps may be in force).
    pub fn pauses_nothing(&self) -> bool {
        !self.all && self.tasks.is_empty() && self.queues.is_empty()
    }

    /// The caps of these tasks, by task.
    pub fn caps_of(&self, tasks: &[String]) -> Vec<Cap> {
        self.caps.iter().filter(|cap| tasks.contains(&cap.task)).cloned().collect()
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
    pub fn paused(&self) -> Vec<String> {
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

    fn paused(pauses: &[Pause]) -> Controls {
        Controls { pauses: pauses.to_vec(), ..Controls::default() }
    }

    #[test]
    fn a_partition_is_a_payload_field_s_text_or_a_key_s_prefix() {
        let field = Partition::Field("customer".into());
        assert_eq!(field.of(&serde_json::json!({"customer": "c1"}), None), "c1");
        assert_eq!(field.of(&serde_json::json!({"customer": 42}), None), "42");
        assert_eq!(field.of(&serde_json::json!({"customer": null}), Some("k")), "");
        assert_eq!(field.of(&serde_json::json!([1]), None), "");
        let prefix = Partition::KeyPrefix(":".into());
        assert_eq!(prefix.of(&serde_json::json!({}), Some("c7:import:3")), "c7");
        assert_eq!(prefix.of(&serde_json::json!({}), Some("whole")), "whole");
        assert_eq!(prefix.of(&serde_json::json!({}), None), "");
        assert_eq!(Partition::parse(prefix.kind(), ":".into()), Some(prefix));
        let cap = |task: &str, max| Cap { task: task.into(), max_running: max, partition: None };
        let state = FlowState::new(&Controls { caps: vec![cap("a", 3), cap("b", 1)], ..Controls::default() });
        assert_eq!(state.caps_of(&["a".into(), "c".into()]), vec![cap("a", 3)]);
        assert!(!state.is_empty() && state.paused().is_empty());
    }

    #[test]
    fn a_paused_task_leaves_the_fetch_and_a_paused_queue_holds_back_its_jobs() {
        let state = FlowState::new(&paused(&[pause(Scope::Task, "a"), pause(Scope::Queue, "q")]));
        assert_eq!(state.fetchable(&["a".into(), "b".into()]), vec!["b".to_owned()]);
        assert_eq!(state.paused_queues(), vec!["q".to_owned()]);
        assert!(state.holds_back("a", None));
        assert!(state.holds_back("b", Some("q")));
        assert!(!state.holds_back("b", Some("r")) && !state.holds_back("b", None));
        assert_eq!(state.paused(), vec!["task:a".to_owned(), "queue:q".to_owned()]);
    }

    #[test]
    fn pausing_everything_fetches_nothing_and_no_pause_is_empty() {
        let all = FlowState::new(&paused(&[pause(Scope::All, "")]));
        assert!(all.fetchable(&["a".into()]).is_empty() && all.holds_back("a", None));
        assert!(FlowState::new(&Controls::default()).is_empty() && !all.is_empty());
        assert_eq!(Scope::parse("queue"), Some(Scope::Queue));
        assert_eq!(Scope::parse(Scope::All.as_str()), Some(Scope::All));
        assert_eq!(Scope::parse("nope"), None);
    }

    #[test]
    fn a_limit_makes_the_state_non_empty_and_goes_with_its_task_s_fetch() {
        let limit =
            |task: &str, period_ms| Limit { task: task.into(), max_starts: 100, period_ms, partition: None };
        let state = FlowState::new(&Controls {
            limits: vec![limit("a", 60_000), limit("b", 250)],
            ..Controls::default()
        });
        assert!(!state.is_empty() && state.pauses_nothing());
        assert_eq!(state.limits_of(&["b".into(), "c".into()]), vec![limit("b", 250)]);
        assert_eq!(state.limited(), vec!["a 100/min".to_owned(), "b 100/250ms".to_owned()]);
    }
}
