//! A workflow's shape: its jobs, what each depends on and does when a dependency fails,
//! validated at add (rule 7's graph part).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a waiting job does when a job it depends on fails for good or is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnDependencyFailure {
    /// It is cancelled too (and so are the jobs that wait for it, by their own policies).
    #[default]
    Cancel,
    /// It is still released, once every job it depends on has settled.
    Release,
}

stored_names!(OnDependencyFailure { Cancel => "cancel", Release => "release" });

/// When a batch callback is released (its payload then gets the batch's counts:
/// `Progress::batch_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Callback {
    /// Once every job it depends on has settled, whatever the outcomes.
    AllFinished,
    /// At the first job it depends on that fails for good or is cancelled; or, if none
    /// does, once all of them completed.
    FirstFailure,
}

stored_names!(Callback { AllFinished => "all_finished", FirstFailure => "first_failure" });

/// What a job waiting for a signal does when the signal has not come within its timeout
/// (counted from when every job it depends on has settled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnSignalTimeout {
    /// It is cancelled (and so are the jobs that wait for it, by their own policies).
    #[default]
    Cancel,
    /// It is released without the signal (its payload says `timed_out`).
    Release,
}

stored_names!(OnSignalTimeout { Cancel => "cancel", Release => "release" });

/// A named signal a job waits for besides its dependencies (rule 8): sent from outside the
/// workflow (`WorkerUtils`, the CLI, SQL, the dashboard), with an optional payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalWait {
    /// The signal's name, as senders give it (several jobs may wait for one name).
    pub name: String,
    /// How long it may wait once every job it depends on has settled; none: for ever.
    pub timeout: Option<Duration>,
    /// What happens at the timeout.
    pub on_timeout: OnSignalTimeout,
}

impl SignalWait {
    /// A wait for the signal `name`, without a timeout.
    pub fn new(name: impl Into<String>) -> Self {
        SignalWait { name: name.into(), timeout: None, on_timeout: OnSignalTimeout::Cancel }
    }

    /// Stop waiting `timeout` after every dependency settled, doing `on_timeout`.
    pub fn timeout(mut self, timeout: Duration, on_timeout: OnSignalTimeout) -> Self {
        self.timeout = Some(timeout);
        self.on_timeout = on_timeout;
        self
    }
}

/// One job of a workflow, as added: its name and what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique in its workflow.
    pub name: String,
    /// Names of jobs of the same workflow it waits for (a name given twice counts once).
    pub depends_on: Vec<String>,
    /// What it does when one of them fails for good or is cancelled (callbacks ignore it).
    pub on_dependency_failure: OnDependencyFailure,
    /// Set for a batch callback.
    pub callback: Option<Callback>,
    /// A signal it also waits for (rule 8).
    pub signal: Option<SignalWait>,
    /// A timer (rule 9): once released, it runs this long after the release, not before.
    pub delay: Option<Duration>,
}

impl Node {
    /// An ordinary job (policy [`OnDependencyFailure::Cancel`]).
    pub fn new(name: impl Into<String>, depends_on: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Node {
            name: name.into(),
            depends_on: depends_on.into_iter().map(Into::into).collect(),
            on_dependency_failure: OnDependencyFailure::Cancel,
            callback: None,
            signal: None,
            delay: None,
        }
    }

    /// The same node waiting for `signal` too.
    pub fn signal(mut self, signal: SignalWait) -> Self {
        self.signal = Some(signal);
        self
    }

    /// The same node with a timer: it runs `delay` after its release.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The same node with another dependency-failure policy.
    pub fn on_dependency_failure(mut self, policy: OnDependencyFailure) -> Self {
        self.on_dependency_failure = policy;
        self
    }

    /// The same node as a batch callback of kind `callback`.
    pub fn callback(mut self, callback: Callback) -> Self {
        self.callback = Some(callback);
        self
    }
}

/// Why a workflow was refused at add (nothing of it was added).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowError {
    /// No jobs.
    #[error("a workflow needs at least one job")]
    Empty,
    /// Two jobs share a name.
    #[error("two jobs of the workflow are named {0:?}: a job's name must be unique in its workflow")]
    DuplicateName(String),
    /// A dependency names no job of the workflow.
    #[error("job {job:?} depends on {dependency:?}, which is not a job of the workflow")]
    UnknownDependency {
        /// The job that names it.
        job: String,
        /// The name not found.
        dependency: String,
    },
    /// Jobs wait for each other: none of them could ever be released.
    #[error("jobs {} depend on each other in a cycle ({}), so none of them could ever run", names(.0), cycle(.0))]
    Cycle(Vec<String>),
    /// A callback with nothing to call back about.
    #[error("callback {0:?} depends on no job: a callback needs the jobs whose outcome it reports")]
    CallbackWithoutDependencies(String),
    /// A callback waiting for a signal: a callback is released by its dependencies' outcomes.
    #[error("callback {0:?} waits for a signal: a callback is released by the outcomes of the jobs it depends on only")]
    CallbackSignal(String),
    /// A signal without a name.
    #[error("job {0:?} waits for a signal with an empty name: name the signal its senders give")]
    SignalName(String),
    /// A job waiting for a signal whose payload cannot take the signal. Checked by the driver.
    #[error(
        "job {0:?} waits for a signal and needs a JSON object payload without a key \"signal\" (the signal goes there)"
    )]
    SignalPayload(String),
    /// A job with a job key (or `unique`), which could replace or remove it behind the
    /// workflow's back. Checked by the driver, which sees the specs.
    #[error("job {0:?} has a job key (or is unique): a workflow's jobs cannot have one")]
    JobKey(String),
    /// Jobs added at runtime by a job that is not released (it settled, or it waits): the
    /// add and the job's settling are ordered, and the add came second.
    #[error("job {0:?} is not running in its workflow: only a running job can add jobs to it")]
    NotRunning(String),
    /// A callback whose payload cannot take the batch's counts. Checked by the driver.
    #[error(
        "callback {0:?} needs a JSON object payload without a key \"batch\" (the batch's counts go there)"
    )]
    CallbackPayload(String),
}

fn names(cycle: &[String]) -> String {
    let quoted: Vec<String> = cycle.iter().map(|name| format!("{name:?}")).collect();
    quoted.join(", ")
}

fn cycle(cycle: &[String]) -> String {
    let steps: Vec<String> = (0..cycle.len())
        .map(|i| format!("{:?} depends on {:?}", cycle[i], cycle[(i + 1) % cycle.len()]))
        .collect();
    steps.join(", ")
}

/// A workflow's validated shape: its jobs by index (the order given), each one's
/// dependencies and dependents by index, in index order and without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    nodes: Vec<Node>,
    dependencies: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    index: BTreeMap<String, usize>,
}

impl Graph {
    /// Validates `nodes` (rule 7's graph part): at least one, names unique, dependencies
    /// among them, no cycle, every callback depending on something. The first problem
    /// found, in that order, is the error.
    pub fn new(nodes: Vec<Node>) -> Result<Graph, WorkflowError> {
        if nodes.is_empty() {
            return Err(WorkflowError::Empty);
        }
        let mut index = BTreeMap::new();
        for (i, node) in nodes.iter().enumerate() {
            if index.insert(node.name.clone(), i).is_some() {
                return Err(WorkflowError::DuplicateName(node.name.clone()));
            }
        }
        let mut dependencies = Vec::with_capacity(nodes.len());
        for node in &nodes {
            let mut of_node = Vec::with_capacity(node.depends_on.len());
            for dependency in &node.depends_on {
                let Some(&d) = index.get(dependency) else {
                    return Err(WorkflowError::UnknownDependency {
                        job: node.name.clone(),
                        dependency: dependency.clone(),
                    });
                };
                of_node.push(d);
            }
            of_node.sort_unstable();
            of_node.dedup();
            dependencies.push(of_node);
        }
        if let Some(node) = nodes.iter().find(|n| n.callback.is_some() && n.depends_on.is_empty()) {
            return Err(WorkflowError::CallbackWithoutDependencies(node.name.clone()));
        }
        for node in &nodes {
            match &node.signal {
                Some(_) if node.callback.is_some() => {
                    return Err(WorkflowError::CallbackSignal(node.name.clone()))
                }
                Some(signal) if signal.name.is_empty() => {
                    return Err(WorkflowError::SignalName(node.name.clone()))
                }
                _ => {}
            }
        }
        let mut dependents = vec![Vec::new(); nodes.len()];
        for (job, of_job) in dependencies.iter().enumerate() {
            for &d in of_job {
                dependents[d].push(job);
            }
        }
        if let Some(jobs) = find_cycle(&dependencies, &dependents) {
            return Err(WorkflowError::Cycle(jobs.into_iter().map(|i| nodes[i].name.clone()).collect()));
        }
        Ok(Graph { nodes, dependencies, dependents, index })
    }

    /// The jobs, in the order given.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// How many jobs.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never: a graph has at least one job (here for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The jobs job `i` waits for.
    pub fn dependencies(&self, i: usize) -> &[usize] {
        &self.dependencies[i]
    }

    /// The jobs that wait for job `i`.
    pub fn dependents(&self, i: usize) -> &[usize] {
        &self.dependents[i]
    }

    /// The index of the job named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Jobs added at runtime by job `adder` (rule 10): `nodes` are validated as a workflow of
    /// their own (their dependencies name jobs among them), then each is added as
    /// `"<adder>/<name>"`, unless a job has that name already (added by an earlier run of the
    /// adder: it is left as it is), and every job that waits for `adder` waits for each job
    /// added too. Returns the jobs added, by index (the graph's length before onwards).
    pub fn extend(&mut self, adder: usize, nodes: Vec<Node>) -> Result<Vec<usize>, WorkflowError> {
        let batch = Graph::new(nodes)?;
        let prefix = format!("{}/", self.nodes[adder].name);
        let waiting_for_adder = self.dependents[adder].clone();
        let mut added = Vec::new();
        for node in batch.nodes {
            let name = format!("{prefix}{}", node.name);
            if self.index.contains_key(&name) {
                continue;
            }
            let i = self.nodes.len();
            self.index.insert(name.clone(), i);
            let depends_on = node.depends_on.iter().map(|d| format!("{prefix}{d}")).collect();
            self.nodes.push(Node { name, depends_on, ..node });
            self.dependencies.push(Vec::new());
            self.dependents.push(Vec::new());
            added.push(i);
        }
        // Once all are in: a job may depend on one after it.
        for &i in &added {
            let mut of_node: Vec<usize> =
                self.nodes[i].depends_on.iter().filter_map(|d| self.index.get(d).copied()).collect();
            of_node.sort_unstable();
            of_node.dedup();
            for &d in &of_node {
                self.dependents[d].push(i);
            }
            self.dependencies[i] = of_node;
        }
        for list in &mut self.dependents {
            list.sort_unstable();
        }
        // Appended after every job, so each list stays in index order.
        for &i in &added {
            for &d in &waiting_for_adder {
                self.dependencies[d].push(i);
                let name = self.nodes[i].name.clone();
                self.nodes[d].depends_on.push(name);
                self.dependents[i].push(d);
            }
        }
        Ok(added)
    }

    /// The jobs of `graph`, each after all it depends on (lowest index first among the ready).
    pub fn topological_order(&self) -> Vec<usize> {
        let mut unmet: Vec<usize> = (0..self.len()).map(|i| self.dependencies(i).len()).collect();
        let mut ready: BTreeSet<usize> = (0..self.len()).filter(|&i| unmet[i] == 0).collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &d in self.dependents(i) {
                unmet[d] -= 1;
                if unmet[d] == 0 {
                    ready.insert(d);
                }
            }
        }
        order
    }
}

/// A cycle of `dependencies`, as jobs each depending on the next (and the last on the
/// first), starting at its lowest index; none if the graph is acyclic.
fn find_cycle(dependencies: &[Vec<usize>], dependents: &[Vec<usize>]) -> Option<Vec<usize>> {
    // Kahn: peel off jobs whose dependencies are all peeled; what remains waits on a cycle.
    let mut unmet: Vec<usize> = dependencies.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..unmet.len()).filter(|&i| unmet[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for &d in &dependents[i] {
            unmet[d] -= 1;
            if unmet[d] == 0 {
                ready.push(d);
            }
        }
    }
    // Every remaining job has a remaining dependency: following them must loop.
    let start = (0..unmet.len()).find(|&i| unmet[i] > 0)?;
    let mut seen_at = vec![None; unmet.len()];
    let mut path = Vec::new();
    let mut job = start;
    while seen_at[job].is_none() {
        seen_at[job] = Some(path.len());
        path.push(job);
        job = *dependencies[job].iter().find(|&&d| unmet[d] > 0)?;
    }
    let mut cycle = path.split_off(seen_at[job]?);
    let lowest = (0..cycle.len()).min_by_key(|&k| cycle[k])?;
    cycle.rotate_left(lowest);
    Some(cycle)
}
