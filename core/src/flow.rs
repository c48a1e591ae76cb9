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
//! A [`Control`] bounds the jobs of a task across the fleet, or per partition of the task:
//! a cap on those locked at once, by anyone (so graphile-worker's and a crashed worker's
//! count until released), or a rate limit on those locked (started) per period of the
//! database clock. A worker whose tasks include a controlled one sends its fetch with the
//! controls ([`Statement::GetJobs`](crate::protocol::Statement::GetJobs)'s `caps`,
//! `limits` and `fair`): the statement serializes the controlled fetches of each task and
//! locks at most the room left. A task may have several controls (one of each kind per
//! partition): a job starts only if every one allows it. Fairness bounds nothing: it
//! chooses which of a task's ready jobs fill the places the fetch has, round robin across
//! the partition's tenants (weighted, see [`ControlLimit::Fair`]). A bound
//! ([`ControlLimit::Waiting`]) is no worker's business: it holds the jobs of a task waiting,
//! and Formica's add statements keep it (records step 25's `make_room`), so a worker never
//! reads one. Pauses stay their own kind: they hold back by task, named queue or everything, in the worker as well as the
//! fetch, and bound nothing by count.

use std::collections::{BTreeMap, BTreeSet};

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

    /// Whether it holds back a job of `task` in `queue`.
    pub fn covers(&self, task: &str, queue: Option<&str>) -> bool {
        match self.scope {
            Scope::All => true,
            Scope::Task => self.name == task,
            Scope::Queue => queue == Some(self.name.as_str()),
        }
    }

    /// How logs and metrics name it: `task:send_email`, `queue:mail`, `all`.
    pub fn label(&self) -> String {
        match self.scope {
            Scope::All => "all".into(),
            scope @ (Scope::Task | Scope::Queue) => format!("{}:{}", scope.as_str(), self.name),
        }
    }
}

/// How a controlled task's jobs are grouped, each group held to the limit on its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Partition {
    /// By the text of this payload field (`payload->>'field'`; a job without it is in the
    /// partition named by the empty text).
    Field(String),
    /// By the job key's text before the first occurrence of this separator (the whole key
    /// if it has none; a job without a key is in the partition named by the empty text).
    KeyPrefix(String),
}

/// A partition kind that is neither `field` nor `key_prefix`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown partition {0:?}: field or key_prefix")]
pub struct UnknownPartition(pub String);

impl Partition {
    /// The partition of `kind` (`field` or `key_prefix`, as stored and as the dashboard's
    /// and the command line's forms name it) over `argument` (the field or separator): the
    /// one parser of a partition.
    pub fn parse(kind: &str, argument: impl Into<String>) -> Result<Self, UnknownPartition> {
        match kind {
            "field" => Ok(Partition::Field(argument.into())),
            "key_prefix" => Ok(Partition::KeyPrefix(argument.into())),
            other => Err(UnknownPartition(other.to_owned())),
        }
    }

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
}

/// What a [`Control`] bounds, or (fairness) how it orders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControlLimit {
    /// At most `max` jobs of the task locked at once, by anyone (so graphile-worker's and a
    /// crashed worker's count until released): a cap.
    Running {
        /// Most jobs locked at once.
        max: u32,
    },
    /// At most `max` jobs of the task locked (started) in any `period_ms` milliseconds of
    /// the database clock: a rate limit.
    Starts {
        /// Most jobs locked in one period.
        max: u32,
        /// The period, in milliseconds.
        period_ms: u32,
    },
    /// The task's ready jobs are taken round robin across the tenants of the control's
    /// partition (start-time fair queueing): each start of a tenant's job advances the
    /// tenant's pass by [`FAIR_STRIDE`] / its weight, and the fetch takes first the jobs
    /// whose start begins at the least pass. A tenant that was idle joins at the pass where
    /// the latest start began, so it banks no credit. Fairness never leaves a job waiting
    /// that could start: it picks which jobs fill the places a fetch has.
    Fair {
        /// Each tenant's weight, 1 to [`MAX_WEIGHT`] (a tenant not named weighs 1): a
        /// tenant of weight 3 starts three jobs while one of weight 1 starts one.
        weights: BTreeMap<String, u32>,
    },
    /// At most `max` jobs of the task waiting (not locked, attempts left, due or not), held
    /// by Formica's add path: an add beyond it waits up to `wait_ms` milliseconds for room
    /// (0: not at all), then is refused. A bound.
    Waiting {
        /// Most jobs waiting.
        max: u32,
        /// How long an add over the bound waits for room, in milliseconds.
        wait_ms: u32,
    },
}

/// How far one start advances a tenant of weight 1 (a tenant of weight `w`: this / `w`).
pub const FAIR_STRIDE: i64 = 1_000_000;

/// The heaviest weight a tenant may have.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// The kinds of [`Control`]: a task has at most one of each per partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControlKind {
    /// [`ControlLimit::Running`].
    Cap,
    /// [`ControlLimit::Starts`].
    RateLimit,
    /// [`ControlLimit::Fair`] (one per task: it orders the task's jobs).
    Fair,
    /// [`ControlLimit::Waiting`]: enforced where jobs are added, not by workers.
    Bound,
}

impl ControlKind {
    /// How messages name it: `cap`, `rate limit`, `fairness` or `bound`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlKind::Cap => "cap",
            ControlKind::RateLimit => "rate limit",
            ControlKind::Fair => "fairness",
            ControlKind::Bound => "bound",
        }
    }
}

/// A control on the jobs of `task` across the fleet (per partition, if any): a cap on those
/// running, a rate limit on those started per period, fairness between the partition's
/// tenants, or a bound on those waiting.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Control {
    /// The task identifier.
    pub task: String,
    /// How the jobs are grouped (`None`: all the task's jobs together).
    pub partition: Option<Partition>,
    /// What is bounded, and how far.
    pub limit: ControlLimit,
}

impl Control {
    /// At most `max` jobs of `task` running at once.
    pub fn cap(task: impl Into<String>, max: u32) -> Self {
        Control { task: task.into(), partition: None, limit: ControlLimit::Running { max } }
    }

    /// At most `max` jobs of `task` started in any `period_ms` milliseconds.
    pub fn rate_limit(task: impl Into<String>, max: u32, period_ms: u32) -> Self {
        Control { task: task.into(), partition: None, limit: ControlLimit::Starts { max, period_ms } }
    }

    /// The jobs of `task` taken round robin across the tenants of `partition`, each of
    /// weight 1 (see [`weighted`](Self::weighted)).
    pub fn fair(task: impl Into<String>, partition: Partition) -> Self {
        let limit = ControlLimit::Fair { weights: BTreeMap::new() };
        Control { task: task.into(), partition: Some(partition), limit }
    }

    /// At most `max` jobs of `task` waiting; an add beyond waits up to `wait_ms` for room.
    pub fn bound(task: impl Into<String>, max: u32, wait_ms: u32) -> Self {
        Control { task: task.into(), partition: None, limit: ControlLimit::Waiting { max, wait_ms } }
    }

    /// The same fairness, `tenant` weighing `weight` (a cap or rate limit is unchanged).
    pub fn weighted(mut self, tenant: impl Into<String>, weight: u32) -> Self {
        if let ControlLimit::Fair { weights } = &mut self.limit {
            weights.insert(tenant.into(), weight);
        }
        self
    }

    /// The same control, per `partition`.
    pub fn per(self, partition: Partition) -> Self {
        Control { partition: Some(partition), ..self }
    }

    /// A cap, a rate limit, fairness or a bound.
    pub fn kind(&self) -> ControlKind {
        match self.limit {
            ControlLimit::Running { .. } => ControlKind::Cap,
            ControlLimit::Starts { .. } => ControlKind::RateLimit,
            ControlLimit::Fair { .. } => ControlKind::Fair,
            ControlLimit::Waiting { .. } => ControlKind::Bound,
        }
    }

    /// What names it among a task's controls: a task has one control per kind and
    /// partition (fairness and a bound: one per task), and setting one replaces the one it
    /// names.
    pub fn identity(&self) -> (&str, ControlKind, Option<&Partition>) {
        let per_task = matches!(self.kind(), ControlKind::Fair | ControlKind::Bound);
        let partition = self.partition.as_ref().filter(|_| !per_task);
        (&self.task, self.kind(), partition)
    }

    /// Most jobs running at once, started in one period, or waiting (0 for fairness, which
    /// bounds nothing).
    pub fn max(&self) -> u32 {
        match self.limit {
            ControlLimit::Running { max }
            | ControlLimit::Starts { max, .. }
            | ControlLimit::Waiting { max, .. } => max,
            ControlLimit::Fair { .. } => 0,
        }
    }

    /// The weight of `tenant` under fairness (1 if not named).
    pub fn weight_of(&self, tenant: &str) -> u32 {
        match &self.limit {
            ControlLimit::Fair { weights } => weights.get(tenant).copied().unwrap_or(1),
            ControlLimit::Running { .. } | ControlLimit::Starts { .. } | ControlLimit::Waiting { .. } => 1,
        }
    }

    /// How far a start of `tenant`'s job advances its pass under fairness.
    pub fn stride_of(&self, tenant: &str) -> i64 {
        FAIR_STRIDE / i64::from(self.weight_of(tenant).clamp(1, MAX_WEIGHT))
    }

    /// How long a start counts (`None`: a cap, fairness or a bound).
    pub fn period(&self) -> Option<chrono::Duration> {
        match self.limit {
            ControlLimit::Running { .. } | ControlLimit::Fair { .. } | ControlLimit::Waiting { .. } => None,
            ControlLimit::Starts { period_ms, .. } => Some(chrono::Duration::milliseconds(period_ms.into())),
        }
    }

    /// Its partition as the starts log names it: `field:customer`, `key_prefix::`, or the
    /// empty text for the whole task (so two limits of one task count apart).
    pub fn partition_key(&self) -> String {
        self.partition.as_ref().map(|p| format!("{}:{}", p.kind(), p.argument())).unwrap_or_default()
    }

    /// The partition of `job` (the empty text without one).
    pub fn partition_of(&self, job: &crate::job::Job) -> String {
        self.partition.as_ref().map(|p| p.of(&job.payload, job.key.as_deref())).unwrap_or_default()
    }

    /// How logs, the dashboard and the command line name it: `send_email<=3` (a cap),
    /// `send_email 100/min` (a rate limit), `send_email fair` (fairness, with its weights
    /// as ` (a×3, b×2)`), `send_email waiting<=1000` (a bound, with ` wait 5s` if adds wait
    /// for room), with ` per field customer` or ` per key_prefix :`.
    pub fn label(&self) -> String {
        let per = self.partition.as_ref().map(|p| format!(" per {} {}", p.kind(), p.argument()));
        let duration = |ms: u32| match ms {
            1_000 => "s".to_owned(),
            60_000 => "min".to_owned(),
            3_600_000 => "h".to_owned(),
            ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
            ms => format!("{ms}ms"),
        };
        let bound = match &self.limit {
            ControlLimit::Fair { weights } if weights.is_empty() => " fair".to_owned(),
            ControlLimit::Fair { weights } => {
                let each: Vec<String> = weights.iter().map(|(t, w)| format!("{t}×{w}")).collect();
                return format!("{} fair{} ({})", self.task, per.unwrap_or_default(), each.join(", "));
            }
            ControlLimit::Running { max } => format!("<={max}"),
            ControlLimit::Starts { max, period_ms } => format!(" {max}/{}", duration(*period_ms)),
            ControlLimit::Waiting { max, wait_ms: 0 } => format!(" waiting<={max}"),
            ControlLimit::Waiting { max, wait_ms } => {
                // "s" alone reads as no number: a wait of one second is "1s".
                let wait = match duration(*wait_ms) {
                    unit if unit.starts_with(|c: char| c.is_ascii_digit()) => unit,
                    unit => format!("1{unit}"),
                };
                format!(" waiting<={max} wait {wait}")
            }
        };
        format!("{}{bound}{}", self.task, per.unwrap_or_default())
    }
}

/// The flow controls in force, as a worker reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// The pauses.
    pub pauses: Vec<Pause>,
    /// The caps, rate limits and fairness, one of each kind per task and partition at most.
    pub controls: Vec<Control>,
}

/// The flow controls in force, as a worker last read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowState {
    all: bool,
    tasks: BTreeSet<String>,
    queues: BTreeSet<String>,
    /// By task, kind and partition, one of each ([`Control::identity`]).
    controls: Vec<Control>,
}

/// Nothing paused: the state of a worker without flow control.
pub static NOTHING_PAUSED: FlowState =
    FlowState { all: false, tasks: BTreeSet::new(), queues: BTreeSet::new(), controls: Vec::new() };

impl FlowState {
    /// The state made of these controls (in any order, repeats harmless).
    pub fn new(controls: &Controls) -> Self {
        let mut state = FlowState { controls: controls.controls.clone(), ..FlowState::default() };
        state.controls.sort_by(|a, b| (a.identity(), a).cmp(&(b.identity(), b)));
        state.controls.dedup_by(|a, b| a.identity() == b.identity());
        for pause in &controls.pauses {
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
        self.pauses_nothing() && self.controls.is_empty()
    }

    /// The caps and rate limits, as labels ([`Control::label`]), by task.
    pub fn labels(&self) -> Vec<String> {
        self.controls.iter().map(Control::label).collect()
    }

    /// The controls of `kind` on these tasks, by task.
    pub fn controls_of(&self, kind: ControlKind, tasks: &[String]) -> Vec<Control> {
        let of = |c: &&Control| c.kind() == kind && tasks.contains(&c.task);
        self.controls.iter().filter(of).cloned().collect()
    }

    /// Whether any rate limit is in force.
    pub fn has_limits(&self) -> bool {
        self.controls.iter().any(|c| c.kind() == ControlKind::RateLimit)
    }

    /// How long a start of `task` counts against its rate limits, if it has any (the
    /// shortest period: the first that may have room again).
    pub fn period_of(&self, task: &str) -> Option<chrono::Duration> {
        self.controls.iter().filter(|c| c.task == task).filter_map(Control::period).min()
    }

    /// Nothing is paused (caps may be in force).
    pub fn pauses_nothing(&self) -> bool {
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

    #[test]
    fn a_pause_covers_its_task_its_queue_or_everything() {
        assert!(Pause::all().covers("a", None));
        assert!(Pause::task("a").covers("a", Some("q")) && !Pause::task("a").covers("b", Some("a")));
        assert!(Pause::queue("q").covers("b", Some("q")) && !Pause::queue("q").covers("q", None));
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
        assert_eq!(Partition::parse(prefix.kind(), ":"), Ok(prefix));
        assert_eq!(Partition::parse(field.kind(), "customer"), Ok(field));
        let unknown = Partition::parse("hash", "x").unwrap_err();
        assert_eq!(unknown.to_string(), "unknown partition \"hash\": field or key_prefix");
    }

    #[test]
    fn a_cap_goes_with_its_task_s_fetch() {
        let state = FlowState::new(&Controls {
            controls: vec![Control::cap("a", 3), Control::cap("b", 1), Control::rate_limit("a", 9, 1_000)],
            ..Controls::default()
        });
        let caps = state.controls_of(ControlKind::Cap, &["a".into(), "c".into()]);
        assert_eq!(caps, vec![Control::cap("a", 3)]);
        assert!(!state.is_empty() && state.paused().is_empty());
        assert_eq!(state.period_of("a"), Some(chrono::Duration::seconds(1)));
        assert_eq!(state.period_of("b"), None);
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
        let limit = |task: &str, period_ms| Control::rate_limit(task, 100, period_ms);
        let state = FlowState::new(&Controls {
            controls: vec![limit("a", 60_000), limit("b", 250), limit("a", 1)],
            ..Controls::default()
        });
        assert!(!state.is_empty() && state.pauses_nothing() && state.has_limits());
        assert_eq!(
            state.controls_of(ControlKind::RateLimit, &["b".into(), "c".into()]),
            vec![limit("b", 250)]
        );
        assert_eq!(state.labels(), vec!["a 100/1ms".to_owned(), "b 100/250ms".to_owned()]);
    }

    #[test]
    fn a_task_keeps_one_control_per_kind_and_partition_and_one_fairness() {
        let customer = Partition::Field("customer".into());
        let region = Partition::Field("region".into());
        let state = FlowState::new(&Controls {
            controls: vec![
                Control::cap("a", 20),
                Control::cap("a", 1).per(customer.clone()),
                Control::cap("a", 2).per(customer.clone()),
                Control::rate_limit("a", 100, 60_000).per(customer.clone()),
                Control::rate_limit("a", 5, 1_000),
                Control::fair("a", customer.clone()),
                Control::fair("a", region).weighted("eu", 2),
            ],
            ..Controls::default()
        });
        assert_eq!(state.controls_of(ControlKind::Cap, &["a".into()]).len(), 2);
        assert_eq!(state.controls_of(ControlKind::RateLimit, &["a".into()]).len(), 2);
        assert_eq!(state.controls_of(ControlKind::Fair, &["a".into()]).len(), 1);
        assert_eq!(state.period_of("a"), Some(chrono::Duration::seconds(1)));
    }

    #[test]
    fn a_tenant_s_stride_shrinks_with_its_weight() {
        let fair = Control::fair("t", Partition::Field("customer".into())).weighted("big", 4);
        assert_eq!(fair.stride_of("big") * 4, fair.stride_of("small"));
        assert_eq!(fair.weight_of("small"), 1);
        assert_eq!(fair.label(), "t fair per field customer (big×4)");
        let plain = Control::fair("t", Partition::KeyPrefix(":".into()));
        assert_eq!(plain.label(), "t fair per key_prefix :");
        assert_eq!(Control::max(&plain), 0);
        assert_eq!(plain.kind().as_str(), "fairness");
    }

    #[test]
    fn a_control_s_label_names_its_task_bound_and_partition() {
        let per = Partition::Field("customer".into());
        assert_eq!(Control::cap("imports", 1).per(per.clone()).label(), "imports<=1 per field customer");
        assert_eq!(Control::rate_limit("mail", 100, 60_000).label(), "mail 100/min");
        let limit = Control::rate_limit("imports", 5, 10_000).per(Partition::KeyPrefix(":".into()));
        assert_eq!(limit.label(), "imports 5/10s per key_prefix :");
        assert_eq!(Control::rate_limit("t", 1, 3_600_000).label(), "t 1/h");
        assert_eq!(Control::bound("mail", 1_000, 0).label(), "mail waiting<=1000");
        let waits = Control::bound("imports", 10, 60_000).per(per);
        assert_eq!(waits.label(), "imports waiting<=10 wait 1min per field customer");
        assert_eq!(Control::bound("t", 1, 2_500).label(), "t waiting<=1 wait 2500ms");
    }
}
