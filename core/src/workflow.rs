//! Workflows: sets of jobs added together, where a job may wait for others of its set.
//!
//! This module is the one statement of the rules, as pure functions: which jobs are
//! released when a workflow is added, what a job settling (completed, failed for good or
//! cancelled) does to the jobs that wait for it, what cancel and retry do, what a signal and
//! its timeout do, and the workflow's state. Formica's SQL (records migrations 11, 22, 23 and 24,
//! `sql/queries/workflows/`) applies the same rules in the transactions that settle jobs,
//! and `tests/tests/workflow_differential.rs` compares the two; the simulation
//! ([`sim`](crate::sim)) runs them under crashes and races.
//!
//! A [`Graph`] is the validated shape (names, dependencies, policies); a [`Progress`] is the
//! state of each of its jobs. A job is `waiting` (outside graphile_worker's jobs, counting
//! the dependencies it still waits for), `released` (an ordinary job), then `completed`,
//! `failed` or `cancelled`; a waiting job may be cancelled without ever being released.
//!
//! A running job may add jobs to its own workflow (rule 10, [`Progress::add_jobs`]: fan-out
//! whose width is known only then, as Hatchet's children and Oban Pro's grafts), and a job
//! may be a whole workflow (rule 11, [`Progress::end`]: as Oban Pro's sub-workflows and
//! Hatchet's child workflows), released by adding that workflow and settled by its end;
//! cancelling a workflow cancels the sub-workflows its released jobs wait for.
//!
//! Like Oban Pro's workflows, a job's reaction to a failed dependency is its own
//! ([`OnDependencyFailure`], Oban's `ignore_cancelled`/`ignore_discarded`); like its batches,
//! a callback is an ordinary job added with the counts of what it waited for. Unlike pg-boss's
//! flows, a job not yet released is not a row of the queue at all, so graphile-worker's
//! workers never see it.
//!
//! Like a Hatchet DAG task's `wait_for` conditions, a job may also wait for a named signal
//! sent from outside ([`SignalWait`], rule 8: [`Progress::signal`], with a timeout after
//! which it is released or cancelled, [`Progress::time_out`]) and for a timer ([`Node::delay`],
//! rule 9: released, it runs that long after its release; the states do not change).
//!
//! ```
//! use formica_core::workflow::{Change, Graph, JobState, Node, Outcome, Progress, WorkflowState};
//!
//! // A diamond: b and c need a, d needs b and c.
//! let graph = Graph::new(vec![
//!     Node::new("a", Vec::<String>::new()),
//!     Node::new("b", ["a"]),
//!     Node::new("c", ["a"]),
//!     Node::new("d", ["b", "c"]),
//! ])
//! .unwrap();
//! let (mut progress, released) = Progress::start(&graph);
//! assert_eq!(released, vec![0]);
//! assert_eq!(progress.settle(&graph, 0, Outcome::Completed), vec![Change::Released(1), Change::Released(2)]);
//! assert_eq!(progress.settle(&graph, 1, Outcome::Completed), vec![]);
//! // c fails for good: d (policy cancel, the default) is cancelled.
//! assert_eq!(progress.settle(&graph, 2, Outcome::Failed), vec![Change::Cancelled(3)]);
//! assert_eq!(progress.state(3), JobState::Cancelled);
//! assert_eq!(progress.workflow_state(), WorkflowState::Failed);
//! ```

use std::collections::VecDeque;

/// The flag of every job a workflow releases (records migration 11 sets it): a Formica
/// worker's completion or failure of such a job settles it in the same statement.
pub const FLAG: &str = "formica:workflow";

/// The task identifier stored for a sub-workflow job (records migration 24): it never
/// becomes a `graphile_worker` job, its workflow is added instead.
pub const SUBWORKFLOW_TASK: &str = "formica:subworkflow";

/// `as_str` (the name as stored) and `parse` (the inverse) for a unit enum.
macro_rules! stored_names {
    ($type:ident { $($variant:ident => $name:literal),+ }) => {
        impl $type {
            /// The name as stored in the records schema (and shown to users).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($type::$variant => $name),+
                }
            }

            /// The value stored as `text`, if it names one.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($name => Some($type::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

mod graph;

pub use graph::{Callback, Graph, Node, OnDependencyFailure, OnSignalTimeout, SignalWait, WorkflowError};

/// Where a job of a workflow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Not in graphile_worker's jobs yet: it waits for jobs it depends on.
    Waiting,
    /// An ordinary job (queued, running or retrying), not settled yet.
    Released,
    /// Its handler succeeded (or its row left graphile_worker's jobs, see the resolver).
    Completed,
    /// It failed for good (attempts exhausted, or failed permanently).
    Failed,
    /// Cancelled: by a dependency's failure, by `cancel_workflow`, or by Formica's cancel.
    Cancelled,
}

stored_names!(JobState { Waiting => "waiting", Released => "released", Completed => "completed", Failed => "failed", Cancelled => "cancelled" });
impl JobState {
    /// Completed, failed or cancelled: nothing more happens to it (but a retry).
    pub fn is_settled(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed | JobState::Cancelled)
    }
}

/// How a job ended for good: what settles a workflow job, and what the job history records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Its handler succeeded (or a middleware layer skipped it).
    Completed,
    /// Its last attempt failed, or it did not stop when told to.
    Failed,
    /// It was cancelled (Formica's cancel; its last error starts `cancelled: `).
    Cancelled,
}

stored_names!(Outcome { Completed => "completed", Failed => "failed", Cancelled => "cancelled" });

impl Outcome {
    /// The state a job settled with this outcome is in.
    pub fn state(self) -> JobState {
        match self {
            Outcome::Completed => JobState::Completed,
            Outcome::Failed => JobState::Failed,
            Outcome::Cancelled => JobState::Cancelled,
        }
    }
}

/// A workflow's state, from its jobs' (the view `workflow_states`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkflowState {
    /// A job waits or is released.
    Running,
    /// Every job completed.
    Completed,
    /// Every job settled, and not all completed.
    Failed,
    /// `cancel_workflow` ran (whatever its jobs did after).
    Cancelled,
}

stored_names!(WorkflowState { Running => "running", Completed => "completed", Failed => "failed", Cancelled => "cancelled" });

/// What settling a job did to other jobs, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// The job was released: add it to graphile_worker's jobs (a callback with
    /// [`Progress::batch_counts`] in its payload).
    Released(usize),
    /// The waiting job was cancelled by a dependency's outcome (it was never released).
    Cancelled(usize),
}

/// The counts a callback's payload gets, over the jobs it depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BatchCounts {
    /// Completed.
    pub completed: usize,
    /// Failed for good.
    pub failed: usize,
    /// Cancelled.
    pub cancelled: usize,
    /// Waiting or released (only a `first_failure` callback sees some).
    pub unfinished: usize,
}

/// What sending a signal to a workflow did (rule 8), its one statement for every sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signalled {
    /// Jobs waiting for it got it (index order); those whose dependencies had all settled
    /// were released (index order), the others are released when their dependencies settle.
    Received {
        /// The jobs that got it.
        jobs: Vec<usize>,
        /// Those of them released now.
        released: Vec<usize>,
    },
    /// Every job that waits or waited for it already got it: nothing changes (the first
    /// payload stays).
    Duplicate,
    /// No job waits for it: none was added waiting for it, or those that were are no
    /// longer waiting without it (cancelled, or timed out).
    NotWaiting,
}

/// Where a job's signal is (none for a job that waits for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SignalState {
    None,
    Awaited,
    Received,
    TimedOut,
}

/// Why a job is cancelled, which decides what a retry does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Not cancelled.
    None,
    /// A dependency's outcome (rule 2): a retry may bring it back.
    Dependency,
    /// `cancel_workflow`, Formica's cancel or its signal's timeout: a retry leaves it.
    Cancel,
}

/// The state of every job of one [`Graph`], and whether the workflow was cancelled.
///
/// Every method is a pure function of the progress and its arguments; the graph passed
/// must be the one the progress was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    states: Vec<JobState>,
    /// Of a waiting job: how many of its dependencies it still counts as not settled.
    pending: Vec<usize>,
    causes: Vec<Cause>,
    signals: Vec<SignalState>,
    cancelled: bool,
}

impl Progress {
    /// A workflow just added (rule 1): jobs without dependencies (nor a signal) are
    /// released (returned, in index order), the others wait for all their dependencies
    /// (and their signal).
    pub fn start(graph: &Graph) -> (Progress, Vec<usize>) {
        let pending: Vec<usize> = (0..graph.len()).map(|i| graph.dependencies(i).len()).collect();
        let signals: Vec<SignalState> = (graph.nodes().iter())
            .map(|node| if node.signal.is_some() { SignalState::Awaited } else { SignalState::None })
            .collect();
        let released: Vec<usize> =
            (0..graph.len()).filter(|&i| pending[i] == 0 && signals[i] != SignalState::Awaited).collect();
        let mut states = vec![JobState::Waiting; graph.len()];
        for &i in &released {
            states[i] = JobState::Released;
        }
        let causes = vec![Cause::None; graph.len()];
        (Progress { states, pending, causes, signals, cancelled: false }, released)
    }

    /// Job `job` settled with `outcome` (rule 2). Each dependent still waiting counts it,
    /// and is released when it counted all of its dependencies; a `first_failure` callback
    /// is released at the first dependency not completed; a dependent with policy cancel
    /// (not a callback) is cancelled by a dependency not completed, which settles it in
    /// turn (transitively). Returns what happened to other jobs, in order.
    ///
    /// A job that is not `released` changes nothing (a settlement learnt twice, by the
    /// worker's statement and by the resolver, counts once). Nothing is released once the
    /// workflow is cancelled.
    pub fn settle(&mut self, graph: &Graph, job: usize, outcome: Outcome) -> Vec<Change> {
        if self.states[job] != JobState::Released {
            return Vec::new();
        }
        self.states[job] = outcome.state();
        if outcome == Outcome::Cancelled {
            self.causes[job] = Cause::Cancel;
        }
        let mut changes = Vec::new();
        self.propagate(graph, job, outcome, &mut changes);
        changes
    }

    /// What `job` settling with `outcome` does to the jobs waiting for it, transitively
    /// (rule 2), appended to `changes`. A dependent that counted all its dependencies is
    /// released unless it still waits for its signal.
    fn propagate(&mut self, graph: &Graph, job: usize, outcome: Outcome, changes: &mut Vec<Change>) {
        let mut settled = VecDeque::from([(job, outcome)]);
        while let Some((job, outcome)) = settled.pop_front() {
            for &d in graph.dependents(job) {
                if self.states[d] != JobState::Waiting || self.cancelled {
                    continue;
                }
                let node = &graph.nodes()[d];
                let failed = outcome != Outcome::Completed;
                let counts = !failed
                    || node.callback.is_some()
                    || node.on_dependency_failure == OnDependencyFailure::Release;
                if counts {
                    self.pending[d] -= 1;
                    let first_failure = failed && node.callback == Some(Callback::FirstFailure);
                    let signal_waits = self.signals[d] == SignalState::Awaited;
                    if (self.pending[d] == 0 && !signal_waits) || first_failure {
                        self.states[d] = JobState::Released;
                        changes.push(Change::Released(d));
                    }
                } else {
                    self.states[d] = JobState::Cancelled;
                    self.causes[d] = Cause::Dependency;
                    changes.push(Change::Cancelled(d));
                    settled.push_back((d, Outcome::Cancelled));
                }
            }
        }
    }

    /// The signal `name` was sent to the workflow (rule 8): each waiting job that waits for
    /// it and has not got it gets it, and is released if every job it depends on has
    /// settled (otherwise when they have). A signal sent again, or for no waiting job, changes
    /// nothing: see [`Signalled`].
    pub fn signal(&mut self, graph: &Graph, name: &str) -> Signalled {
        let waits_for = |i: usize| graph.nodes()[i].signal.as_ref().is_some_and(|s| s.name == name);
        let jobs: Vec<usize> = (0..graph.len())
            .filter(|&i| {
                waits_for(i) && self.states[i] == JobState::Waiting && self.signals[i] == SignalState::Awaited
            })
            .collect();
        if jobs.is_empty() {
            let got = (0..graph.len()).any(|i| waits_for(i) && self.signals[i] == SignalState::Received);
            return if got { Signalled::Duplicate } else { Signalled::NotWaiting };
        }
        let mut released = Vec::new();
        for &i in &jobs {
            self.signals[i] = SignalState::Received;
            if self.pending[i] == 0 && !self.cancelled {
                self.states[i] = JobState::Released;
                released.push(i);
            }
        }
        Signalled::Received { jobs, released }
    }

    /// Whether job `i` waits for its signal only (every job it depends on settled): its
    /// timeout, if it has one, runs.
    pub fn waits_for_signal_only(&self, i: usize) -> bool {
        self.states[i] == JobState::Waiting && self.pending[i] == 0 && self.signals[i] == SignalState::Awaited
    }

    /// Job `i`'s signal did not come within its timeout (rule 8; the driver decides when, the
    /// resolver's pass in SQL): released, or cancelled (which settles it, as [`settle`]
    /// does, for the jobs waiting for it), as its [`OnSignalTimeout`] says. A job that does
    /// not [wait for its signal only](Self::waits_for_signal_only) or has no timeout changes
    /// nothing.
    ///
    /// [`settle`]: Self::settle
    pub fn time_out(&mut self, graph: &Graph, i: usize) -> Vec<Change> {
        let Some(signal) = &graph.nodes()[i].signal else { return Vec::new() };
        if !self.waits_for_signal_only(i) || signal.timeout.is_none() || self.cancelled {
            return Vec::new();
        }
        self.signals[i] = SignalState::TimedOut;
        match signal.on_timeout {
            OnSignalTimeout::Release => {
                self.states[i] = JobState::Released;
                vec![Change::Released(i)]
            }
            OnSignalTimeout::Cancel => {
                self.states[i] = JobState::Cancelled;
                self.causes[i] = Cause::Cancel;
                let mut changes = vec![Change::Cancelled(i)];
                self.propagate(graph, i, Outcome::Cancelled, &mut changes);
                changes
            }
        }
    }

    /// `cancel_workflow` (rule 4): every waiting job is cancelled (returned, in index
    /// order) and nothing is released from now on. Released jobs stay released until their
    /// own settlement (Formica's cancel fails them with `cancelled: <reason>`, or they
    /// complete first), which the driver learns and passes to [`settle`](Self::settle).
    /// A second cancel changes nothing.
    pub fn cancel(&mut self) -> Vec<usize> {
        self.cancelled = true;
        let mut cancelled = Vec::new();
        for (i, state) in self.states.iter_mut().enumerate() {
            if *state == JobState::Waiting {
                *state = JobState::Cancelled;
                self.causes[i] = Cause::Cancel;
                cancelled.push(i);
            }
        }
        cancelled
    }

    /// `retry_workflow` (rule 6): every failed job runs again (first list: the driver
    /// reschedules or re-adds it; it is `released`), and every job cancelled because of a
    /// dependency goes back to waiting (second list), unless a dependency of it stays
    /// cancelled (not a callback, policy cancel: it would wait forever). Every waiting job's
    /// count is then recomputed as its dependencies not settled, so a dependency that runs
    /// again is counted once when it settles again. Both lists in index order.
    ///
    /// A cancelled workflow is not retried (the driver refuses it): both lists are empty.
    pub fn retry(&mut self, graph: &Graph) -> (Vec<usize>, Vec<usize>) {
        if self.cancelled {
            return (Vec::new(), Vec::new());
        }
        let mut rerun = Vec::new();
        for (i, state) in self.states.iter_mut().enumerate() {
            if *state == JobState::Failed {
                *state = JobState::Released;
                rerun.push(i);
            }
        }
        // A job is decided after its dependencies: in topological order.
        let mut back = Vec::new();
        for i in graph.topological_order() {
            let node = &graph.nodes()[i];
            if self.causes[i] != Cause::Dependency || self.states[i] != JobState::Cancelled {
                continue;
            }
            let blocked = node.callback.is_none()
                && node.on_dependency_failure == OnDependencyFailure::Cancel
                && graph
                    .dependencies(i)
                    .iter()
                    .any(|&d| matches!(self.states[d], JobState::Failed | JobState::Cancelled));
            if !blocked {
                self.states[i] = JobState::Waiting;
                self.causes[i] = Cause::None;
                back.push(i);
            }
        }
        back.sort_unstable();
        for i in 0..graph.len() {
            if self.states[i] == JobState::Waiting {
                self.pending[i] =
                    graph.dependencies(i).iter().filter(|&&d| !self.states[d].is_settled()).count();
            }
        }
        (rerun, back)
    }

    /// Running job `adder` adds `nodes` to its workflow (rule 10; [`Graph::extend`] names and
    /// links them, idempotently). Refused ([`WorkflowError::NotRunning`]) unless the adder is
    /// released: an add and the adder's settling are ordered by the adder's row lock, so an
    /// add after it settled changes nothing. Each job added waits for its dependencies not
    /// settled, and is released (returned, in index order) if there are none; in a cancelled
    /// workflow it is cancelled at once. Each waiting job that waits for the adder waits for
    /// the jobs added too.
    pub fn add_jobs(
        &mut self,
        graph: &mut Graph,
        adder: usize,
        nodes: Vec<Node>,
    ) -> Result<Vec<usize>, WorkflowError> {
        if self.states[adder] != JobState::Released {
            return Err(WorkflowError::NotRunning(graph.nodes()[adder].name.clone()));
        }
        let added = graph.extend(adder, nodes)?;
        let mut released = Vec::new();
        for &i in &added {
            let pending = graph.dependencies(i).iter().filter(|&&d| !self.states[d].is_settled()).count();
            let signal = match graph.nodes()[i].signal {
                Some(_) => SignalState::Awaited,
                None => SignalState::None,
            };
            let (state, cause) = match (self.cancelled, pending, signal) {
                (true, _, _) => (JobState::Cancelled, Cause::Cancel),
                (false, 0, SignalState::None) => (JobState::Released, Cause::None),
                (false, _, _) => (JobState::Waiting, Cause::None),
            };
            self.states.push(state);
            self.pending.push(pending);
            self.causes.push(cause);
            self.signals.push(signal);
            if state == JobState::Released {
                released.push(i);
            }
        }
        let open = added.iter().filter(|&&i| !self.states[i].is_settled()).count();
        for &d in graph.dependents(adder) {
            if self.states[d] == JobState::Waiting {
                self.pending[d] += open;
            }
        }
        Ok(released)
    }

    /// How a sub-workflow's end settles the job that holds it (rule 11): none while a job of
    /// it waits or is released; then completed if every job completed, cancelled if the
    /// workflow was cancelled, failed otherwise. A sub-workflow deleted before its end
    /// (forced: `delete_workflow` refuses otherwise) fails the job: [`Progress::settle`]
    /// with [`Outcome::Failed`].
    pub fn end(&self) -> Option<Outcome> {
        match self.workflow_state() {
            WorkflowState::Running => None,
            WorkflowState::Completed => Some(Outcome::Completed),
            WorkflowState::Failed => Some(Outcome::Failed),
            WorkflowState::Cancelled if self.states.iter().all(|s| s.is_settled()) => {
                Some(Outcome::Cancelled)
            }
            WorkflowState::Cancelled => None,
        }
    }

    /// Where job `i` is.
    pub fn state(&self, i: usize) -> JobState {
        self.states[i]
    }

    /// Of a waiting job: how many of its dependencies it still waits for (the column
    /// `workflow_jobs.pending`); 0 for a job not waiting.
    pub fn pending(&self, i: usize) -> usize {
        if self.states[i] == JobState::Waiting {
            self.pending[i]
        } else {
            0
        }
    }

    /// Whether `cancel_workflow` ran.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The workflow's state (rule 5): cancelled once cancelled; running while a job waits
    /// or is released; completed when every job completed; failed otherwise.
    pub fn workflow_state(&self) -> WorkflowState {
        if self.cancelled {
            WorkflowState::Cancelled
        } else if self.states.iter().any(|s| !s.is_settled()) {
            WorkflowState::Running
        } else if self.states.iter().all(|&s| s == JobState::Completed) {
            WorkflowState::Completed
        } else {
            WorkflowState::Failed
        }
    }

    /// The counts over the jobs job `i` depends on (rule 3), as its callback payload gets
    /// them when it is released.
    pub fn batch_counts(&self, graph: &Graph, i: usize) -> BatchCounts {
        let mut counts = BatchCounts::default();
        for &d in graph.dependencies(i) {
            match self.states[d] {
                JobState::Completed => counts.completed += 1,
                JobState::Failed => counts.failed += 1,
                JobState::Cancelled => counts.cancelled += 1,
                JobState::Waiting | JobState::Released => counts.unfinished += 1,
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [&str; 0] = [];

    fn graph(nodes: Vec<Node>) -> Graph {
        Graph::new(nodes).expect("a valid graph")
    }

    /// Independent jobs `p1`..`pn`, then `callback` waiting for all of them.
    fn batch(n: usize, callback: Callback) -> Graph {
        let parents: Vec<String> = (1..=n).map(|i| format!("p{i}")).collect();
        let mut nodes: Vec<Node> = parents.iter().map(|p| Node::new(p, NONE)).collect();
        nodes.push(Node::new("callback", parents).callback(callback));
        graph(nodes)
    }

    fn diamond() -> Graph {
        graph(vec![
            Node::new("a", NONE),
            Node::new("b", ["a"]),
            Node::new("c", ["a"]),
            Node::new("d", ["b", "c"]),
        ])
    }

    /// a and b, c needing both, d needing c.
    fn two_then_a_chain() -> Graph {
        graph(vec![
            Node::new("a", NONE),
            Node::new("b", NONE),
            Node::new("c", ["a", "b"]),
            Node::new("d", ["c"]),
        ])
    }

    fn states(progress: &Progress) -> Vec<JobState> {
        progress.states.clone()
    }

    use JobState::{Cancelled as C, Completed as Done, Failed as F, Released as R, Waiting as W};

    #[test]
    fn an_empty_workflow_is_refused() {
        assert_eq!(Graph::new(vec![]), Err(WorkflowError::Empty));
        assert_eq!(WorkflowError::Empty.to_string(), "a workflow needs at least one job");
    }

    #[test]
    fn two_jobs_with_one_name_are_refused() {
        let error = Graph::new(vec![Node::new("a", NONE), Node::new("b", NONE), Node::new("a", NONE)]);
        assert_eq!(error, Err(WorkflowError::DuplicateName("a".into())));
        assert_eq!(
            error.unwrap_err().to_string(),
            "two jobs of the workflow are named \"a\": a job's name must be unique in its workflow"
        );
    }

    #[test]
    fn a_dependency_outside_the_set_is_refused() {
        let error = Graph::new(vec![Node::new("a", NONE), Node::new("b", ["a", "z"])]);
        assert_eq!(error, Err(WorkflowError::UnknownDependency { job: "b".into(), dependency: "z".into() }));
        assert_eq!(
            error.unwrap_err().to_string(),
            "job \"b\" depends on \"z\", which is not a job of the workflow"
        );
    }

    #[test]
    fn a_cycle_is_refused_naming_its_jobs() {
        // x leads into the cycle b -> c -> d -> b but is not part of it.
        let error = Graph::new(vec![
            Node::new("a", NONE),
            Node::new("x", ["c"]),
            Node::new("b", ["c", "a"]),
            Node::new("c", ["d"]),
            Node::new("d", ["b"]),
        ]);
        assert_eq!(error, Err(WorkflowError::Cycle(vec!["b".into(), "c".into(), "d".into()])));
        assert_eq!(
            error.unwrap_err().to_string(),
            "jobs \"b\", \"c\", \"d\" depend on each other in a cycle (\"b\" depends on \"c\", \
             \"c\" depends on \"d\", \"d\" depends on \"b\"), so none of them could ever run"
        );
        let itself = Graph::new(vec![Node::new("a", ["a"])]);
        assert_eq!(itself, Err(WorkflowError::Cycle(vec!["a".into()])));
    }

    #[test]
    fn a_callback_without_dependencies_is_refused() {
        let error = Graph::new(vec![Node::new("done", NONE).callback(Callback::AllFinished)]);
        assert_eq!(error, Err(WorkflowError::CallbackWithoutDependencies("done".into())));
        assert!(error.unwrap_err().to_string().contains("callback \"done\" depends on no job"));
    }

    #[test]
    fn a_graph_knows_dependencies_and_dependents_without_repeats() {
        let g = graph(vec![Node::new("a", NONE), Node::new("b", ["a", "a"]), Node::new("c", ["b", "a"])]);
        assert_eq!(g.dependencies(1), &[0]);
        assert_eq!(g.dependencies(2), &[0, 1]);
        assert_eq!(g.dependents(0), &[1, 2]);
        assert_eq!(g.index("c"), Some(2));
        assert_eq!(g.index("z"), None);
        let (progress, released) = Progress::start(&g);
        assert_eq!(released, vec![0]);
        assert_eq!(progress.pending(1), 1, "a dependency named twice counts once");
        assert_eq!(progress.pending(2), 2);
    }

    fn signalled(name: &str, depends_on: &[&str]) -> Node {
        Node::new(name, depends_on.iter().copied()).signal(SignalWait::new("approved"))
    }

    #[test]
    fn a_signal_releases_a_job_whose_dependencies_settled_and_waits_for_those_that_did_not() {
        let g = graph(vec![Node::new("a", NONE), signalled("b", &["a"]), signalled("c", &[])]);
        let (mut p, released) = Progress::start(&g);
        assert_eq!(released, vec![0], "c has no dependency but waits for its signal");
        assert!(p.waits_for_signal_only(2) && !p.waits_for_signal_only(1));
        assert_eq!(p.signal(&g, "approved"), Signalled::Received { jobs: vec![1, 2], released: vec![2] });
        assert_eq!(states(&p), vec![R, W, R]);
        assert_eq!(p.signal(&g, "approved"), Signalled::Duplicate, "sent twice");
        assert_eq!(p.signal(&g, "other"), Signalled::NotWaiting);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![Change::Released(1)], "b had its signal");
    }

    #[test]
    fn a_job_whose_dependencies_settled_before_its_signal_waits_for_it() {
        let g = graph(vec![Node::new("a", NONE), signalled("b", &["a"])]);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![]);
        assert!(p.waits_for_signal_only(1));
        assert_eq!(p.signal(&g, "approved"), Signalled::Received { jobs: vec![1], released: vec![1] });
    }

    #[test]
    fn a_timeout_releases_or_cancels_as_the_job_says_and_a_late_signal_finds_nobody() {
        let wait = |on| SignalWait::new("approved").timeout(std::time::Duration::from_secs(60), on);
        let g = graph(vec![
            Node::new("a", NONE).signal(wait(OnSignalTimeout::Release)),
            Node::new("b", NONE).signal(wait(OnSignalTimeout::Cancel)),
            Node::new("c", ["b"]),
            Node::new("d", NONE).signal(SignalWait::new("approved")),
        ]);
        let (mut p, released) = Progress::start(&g);
        assert!(released.is_empty());
        assert_eq!(p.time_out(&g, 0), vec![Change::Released(0)]);
        assert_eq!(p.time_out(&g, 1), vec![Change::Cancelled(1), Change::Cancelled(2)]);
        assert_eq!(p.time_out(&g, 3), vec![], "no timeout: it waits for ever");
        assert_eq!(p.time_out(&g, 0), vec![], "timed out once");
        assert_eq!(states(&p), vec![R, C, C, W]);
        assert_eq!(p.signal(&g, "approved"), Signalled::Received { jobs: vec![3], released: vec![3] });
        // A retry leaves the job its timeout cancelled, and so what it blocks.
        assert_eq!(p.settle(&g, 0, Outcome::Failed), vec![]);
        assert_eq!(p.retry(&g), (vec![0], vec![]));
        assert_eq!(states(&p), vec![R, C, C, R]);
    }

    #[test]
    fn a_callback_cannot_wait_for_a_signal_nor_a_signal_be_unnamed() {
        let callback = Node::new("cb", ["a"]).callback(Callback::AllFinished).signal(SignalWait::new("x"));
        let error = Graph::new(vec![Node::new("a", NONE), callback]);
        assert_eq!(error, Err(WorkflowError::CallbackSignal("cb".into())));
        let error = Graph::new(vec![Node::new("a", NONE).signal(SignalWait::new(""))]);
        assert_eq!(error, Err(WorkflowError::SignalName("a".into())));
    }

    #[test]
    fn stored_names_round_trip() {
        for p in [OnDependencyFailure::Cancel, OnDependencyFailure::Release] {
            assert_eq!(OnDependencyFailure::parse(p.as_str()), Some(p));
        }
        for t in [OnSignalTimeout::Cancel, OnSignalTimeout::Release] {
            assert_eq!(OnSignalTimeout::parse(t.as_str()), Some(t));
        }
        for c in [Callback::AllFinished, Callback::FirstFailure] {
            assert_eq!(Callback::parse(c.as_str()), Some(c));
        }
        for s in [W, R, Done, F, C] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        for s in [
            WorkflowState::Running,
            WorkflowState::Completed,
            WorkflowState::Failed,
            WorkflowState::Cancelled,
        ] {
            assert_eq!(WorkflowState::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobState::parse("done"), None);
    }

    #[test]
    fn a_diamond_releases_its_last_job_once_both_branches_completed() {
        let g = diamond();
        let (mut p, released) = Progress::start(&g);
        assert_eq!(released, vec![0]);
        assert_eq!(states(&p), vec![R, W, W, W]);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![Change::Released(1), Change::Released(2)]);
        assert_eq!(p.settle(&g, 2, Outcome::Completed), vec![]);
        assert_eq!(p.pending(3), 1);
        assert_eq!(p.workflow_state(), WorkflowState::Running);
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![Change::Released(3)]);
        assert_eq!(p.settle(&g, 3, Outcome::Completed), vec![]);
        assert_eq!(p.workflow_state(), WorkflowState::Completed);
    }

    #[test]
    fn settling_twice_or_settling_a_job_not_released_changes_nothing() {
        let g = diamond();
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 3, Outcome::Completed), vec![], "d waits: not settled");
        assert_eq!(p.state(3), W);
        p.settle(&g, 0, Outcome::Completed);
        p.settle(&g, 1, Outcome::Completed);
        let before = p.clone();
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![]);
        assert_eq!(p.settle(&g, 1, Outcome::Failed), vec![]);
        assert_eq!(p, before, "a second settlement counts nothing");
        assert_eq!(p.pending(3), 1);
    }

    #[test]
    fn a_failure_cancels_dependents_transitively_by_default() {
        // a -> b -> c -> d, and e depends on c with policy release.
        let g = graph(vec![
            Node::new("a", NONE),
            Node::new("b", ["a"]),
            Node::new("c", ["b"]),
            Node::new("d", ["c"]),
            Node::new("e", ["c"]).on_dependency_failure(OnDependencyFailure::Release),
        ]);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(
            p.settle(&g, 0, Outcome::Failed),
            vec![Change::Cancelled(1), Change::Cancelled(2), Change::Cancelled(3), Change::Released(4)]
        );
        assert_eq!(states(&p), vec![F, C, C, C, R]);
        assert_eq!(p.workflow_state(), WorkflowState::Running);
        p.settle(&g, 4, Outcome::Completed);
        assert_eq!(p.workflow_state(), WorkflowState::Failed);
    }

    #[test]
    fn a_cancelled_dependency_cancels_like_a_failed_one() {
        let g = graph(vec![Node::new("a", NONE), Node::new("b", ["a"])]);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Cancelled), vec![Change::Cancelled(1)]);
        assert_eq!(p.workflow_state(), WorkflowState::Failed);
    }

    #[test]
    fn a_release_policy_job_waits_for_every_dependency_to_settle() {
        let g = graph(vec![
            Node::new("a", NONE),
            Node::new("b", NONE),
            Node::new("c", ["a", "b"]).on_dependency_failure(OnDependencyFailure::Release),
        ]);
        let (mut p, released) = Progress::start(&g);
        assert_eq!(released, vec![0, 1]);
        assert_eq!(p.settle(&g, 0, Outcome::Failed), vec![], "b has not settled yet");
        assert_eq!(p.pending(2), 1);
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![Change::Released(2)]);
    }

    #[test]
    fn an_all_finished_callback_waits_for_all_and_counts_them() {
        let g = batch(3, Callback::AllFinished);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Failed), vec![]);
        assert_eq!(p.settle(&g, 1, Outcome::Cancelled), vec![]);
        assert_eq!(
            p.batch_counts(&g, 3),
            BatchCounts { completed: 0, failed: 1, cancelled: 1, unfinished: 1 }
        );
        assert_eq!(p.settle(&g, 2, Outcome::Completed), vec![Change::Released(3)]);
        assert_eq!(
            p.batch_counts(&g, 3),
            BatchCounts { completed: 1, failed: 1, cancelled: 1, unfinished: 0 }
        );
    }

    #[test]
    fn a_first_failure_callback_fires_at_the_first_failure_and_only_then() {
        let g = batch(3, Callback::FirstFailure);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![]);
        assert_eq!(p.settle(&g, 1, Outcome::Failed), vec![Change::Released(3)]);
        assert_eq!(
            p.batch_counts(&g, 3),
            BatchCounts { completed: 1, failed: 1, cancelled: 0, unfinished: 1 }
        );
        assert_eq!(p.settle(&g, 2, Outcome::Failed), vec![], "a later failure changes nothing");
        assert_eq!(p.state(3), R);
    }

    #[test]
    fn a_first_failure_callback_without_failures_fires_when_all_completed() {
        let g = batch(2, Callback::FirstFailure);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![]);
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![Change::Released(2)]);
        assert_eq!(p.batch_counts(&g, 2), BatchCounts { completed: 2, ..BatchCounts::default() });
    }

    #[test]
    fn a_callback_counts_a_dependency_cancelled_by_its_own_dependency() {
        // b is cancelled when a fails; the callback counts both and fires.
        let g = graph(vec![
            Node::new("a", NONE),
            Node::new("b", ["a"]),
            Node::new("done", ["a", "b"]).callback(Callback::AllFinished),
        ]);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Failed), vec![Change::Cancelled(1), Change::Released(2)]);
        assert_eq!(
            p.batch_counts(&g, 2),
            BatchCounts { completed: 0, failed: 1, cancelled: 1, unfinished: 0 }
        );
    }

    #[test]
    fn cancel_cancels_what_waits_and_releases_nothing_after() {
        let g = diamond();
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 0, Outcome::Completed);
        assert_eq!(p.cancel(), vec![3]);
        assert_eq!(states(&p), vec![Done, R, R, C]);
        assert_eq!(p.workflow_state(), WorkflowState::Cancelled);
        // The released ones end later, whichever way: nothing is released after.
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![]);
        assert_eq!(p.settle(&g, 2, Outcome::Cancelled), vec![]);
        assert_eq!(p.cancel(), Vec::<usize>::new(), "a second cancel changes nothing");
        assert_eq!(p.workflow_state(), WorkflowState::Cancelled);
        assert_eq!(
            p.retry(&g),
            (Vec::<usize>::new(), Vec::<usize>::new()),
            "a cancelled workflow is not retried"
        );
        assert_eq!(states(&p), vec![Done, Done, C, C]);
    }

    #[test]
    fn cancel_leaves_no_callback_to_fire() {
        let g = graph(vec![Node::new("a", NONE), Node::new("done", ["a"]).callback(Callback::FirstFailure)]);
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.cancel(), vec![1]);
        assert_eq!(p.settle(&g, 0, Outcome::Cancelled), vec![]);
        assert_eq!(p.state(1), C);
    }

    #[test]
    fn retry_reruns_failed_jobs_and_brings_back_what_they_cancelled() {
        let g = two_then_a_chain();
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 1, Outcome::Completed);
        assert_eq!(p.settle(&g, 0, Outcome::Failed), vec![Change::Cancelled(2), Change::Cancelled(3)]);
        assert_eq!(p.workflow_state(), WorkflowState::Failed);
        assert_eq!(p.retry(&g), (vec![0], vec![2, 3]));
        assert_eq!(states(&p), vec![R, Done, W, W]);
        assert_eq!((p.pending(2), p.pending(3)), (1, 1), "only what has not completed counts");
        assert_eq!(p.workflow_state(), WorkflowState::Running);
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![Change::Released(2)]);
        assert_eq!(p.settle(&g, 2, Outcome::Completed), vec![Change::Released(3)]);
    }

    #[test]
    fn retry_recounts_a_waiting_callback_so_a_rerun_job_counts_once() {
        let g = graph(vec![
            Node::new("a", NONE),
            Node::new("b", NONE),
            Node::new("done", ["a", "b"]).callback(Callback::AllFinished),
        ]);
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 0, Outcome::Failed);
        assert_eq!(p.pending(2), 1);
        assert_eq!(p.retry(&g), (vec![0], Vec::<usize>::new()));
        assert_eq!(p.pending(2), 2, "a runs again: the callback waits for it again");
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![], "b is still running");
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![Change::Released(2)]);
    }

    #[test]
    fn retry_leaves_what_formicas_cancel_cancelled_and_what_only_it_blocks() {
        // a was cancelled (Formica's cancel), b failed; c needs both, d needs c.
        let g = two_then_a_chain();
        let (mut p, _) = Progress::start(&g);
        assert_eq!(p.settle(&g, 0, Outcome::Cancelled), vec![Change::Cancelled(2), Change::Cancelled(3)]);
        p.settle(&g, 1, Outcome::Failed);
        assert_eq!(p.retry(&g), (vec![1], Vec::<usize>::new()), "c would wait forever for a");
        assert_eq!(states(&p), vec![C, R, C, C]);
        assert_eq!(p.settle(&g, 1, Outcome::Completed), vec![]);
        assert_eq!(p.workflow_state(), WorkflowState::Failed);
    }

    #[test]
    fn a_workflow_with_a_failed_job_and_none_running_is_failed() {
        let g = graph(vec![Node::new("a", NONE), Node::new("b", NONE)]);
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 0, Outcome::Completed);
        assert_eq!(p.workflow_state(), WorkflowState::Running);
        p.settle(&g, 1, Outcome::Failed);
        assert_eq!(p.workflow_state(), WorkflowState::Failed);
    }

    #[test]
    fn jobs_added_at_runtime_hold_up_the_adders_dependents_and_a_second_add_adds_nothing() {
        // spawn, then merge: spawn adds p0..p2 and a reduce after them.
        let mut g = graph(vec![Node::new("spawn", NONE), Node::new("merge", ["spawn"])]);
        let (mut p, _) = Progress::start(&g);
        let children = || {
            vec![
                Node::new("p0", NONE),
                Node::new("p1", NONE),
                Node::new("p2", NONE),
                Node::new("reduce", ["p0", "p1", "p2"]),
            ]
        };
        assert_eq!(p.add_jobs(&mut g, 0, children()), Ok(vec![2, 3, 4]));
        assert_eq!(g.nodes()[5].name, "spawn/reduce");
        assert_eq!(g.dependencies(1), &[0, 2, 3, 4, 5], "merge waits for the adder and all it added");
        assert_eq!(p.pending(1), 5);
        assert_eq!(p.add_jobs(&mut g, 0, children()), Ok(vec![]), "a retried adder adds nothing twice");
        assert_eq!((g.len(), p.pending(1)), (6, 5));
        assert_eq!(p.settle(&g, 0, Outcome::Completed), vec![]);
        for i in 2..4 {
            assert_eq!(p.settle(&g, i, Outcome::Completed), vec![]);
        }
        assert_eq!(p.settle(&g, 4, Outcome::Completed), vec![Change::Released(5)]);
        assert_eq!(p.settle(&g, 5, Outcome::Completed), vec![Change::Released(1)], "the fan-in, last");
        assert_eq!(
            p.add_jobs(&mut g, 5, vec![Node::new("late", NONE)]),
            Err(WorkflowError::NotRunning("spawn/reduce".into())),
            "an add after the adder settled is refused"
        );
    }

    #[test]
    fn jobs_added_to_a_cancelled_workflow_are_cancelled() {
        let mut g = graph(vec![Node::new("a", NONE), Node::new("b", ["a"])]);
        let (mut p, _) = Progress::start(&g);
        p.cancel();
        assert_eq!(p.add_jobs(&mut g, 0, vec![Node::new("x", NONE)]), Ok(vec![]));
        assert_eq!(p.state(2), C);
        assert_eq!(p.end(), None, "a is still released");
        p.settle(&g, 0, Outcome::Cancelled);
        assert_eq!(p.end(), Some(Outcome::Cancelled));
    }

    #[test]
    fn a_workflow_ends_when_every_job_settled() {
        let g = diamond();
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 0, Outcome::Completed);
        assert_eq!(p.end(), None);
        p.settle(&g, 1, Outcome::Completed);
        p.settle(&g, 2, Outcome::Completed);
        p.settle(&g, 3, Outcome::Completed);
        assert_eq!(p.end(), Some(Outcome::Completed));
        let (mut p, _) = Progress::start(&g);
        p.settle(&g, 0, Outcome::Failed);
        assert_eq!(p.end(), Some(Outcome::Failed));
    }
}
