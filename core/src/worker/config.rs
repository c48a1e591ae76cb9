//! How a worker behaves: [`Config`] and its defaults.

use crate::cron::CronItem;
use chrono::Duration;
use std::collections::BTreeMap;

/// The default most jobs held in the local queue.
pub const DEFAULT_LOCAL_QUEUE_SIZE: usize = 1000;

/// How a worker behaves. `Default` gives Formica's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The id written to `locked_by` (a pool id in graphile-worker's terms).
    pub worker_id: String,
    /// The tasks this worker can run; it fetches only their jobs.
    pub task_identifiers: Vec<String>,
    /// Most tasks running at once.
    pub concurrency: usize,
    /// How long to wait for a notification before looking for jobs anyway.
    pub poll_interval: Duration,
    /// Most jobs held locked but not yet started (`None`: fetch only for free slots).
    ///
    /// Prefetching keeps the slots busy while PostgreSQL locks the next batch, but jobs in
    /// the local queue are held away from other workers. So the batch adapts: it starts at
    /// `concurrency` and doubles (up to a third of the size) only when the slots ran dry and
    /// a full batch arrives to find them idle, and falls back to `concurrency` when no job
    /// is taken from the queue for `local_queue_ttl` (they are given back). The next batch
    /// is asked for once fewer than a batch wait, at most two fetches at a time, and only
    /// for slots about to idle once a fetch came back short. So a worker holds about what
    /// it runs during one or two fetches: a few ms of work under load, a few times
    /// `concurrency` jobs with slow tasks. Default: 1000; the batch grows only if tasks are
    /// quick.
    pub local_queue_size: Option<usize>,
    /// How long the local queue may hand out no job (every slot busy) before its jobs are
    /// given back, so another worker can run them. Short (5 s by default): under load the
    /// queue hands out a job every few milliseconds, so only slots held by slow tasks make
    /// it expire, and then the jobs are better run elsewhere than held.
    pub local_queue_ttl: Duration,
    /// How long completions wait to be written together (zero: at once).
    pub complete_batch_delay: Duration,
    /// How long failures wait to be written together (zero: at once).
    pub fail_batch_delay: Duration,
    /// How long a graceful shutdown waits for running tasks before aborting them.
    pub graceful_shutdown_timeout: Duration,
    /// Jobs with any of these flags are not fetched.
    pub forbidden_flags: Vec<String>,
    /// Send this process's clock with fetches and failures instead of using the database's.
    pub use_local_time: bool,
    /// Stop once no job is runnable (no listener, no lock sweep).
    pub run_once: bool,
    /// The longest wait between attempts to reconnect the listener.
    pub max_listener_backoff: Duration,
    /// Seed of the jitter (lock sweep times, listener backoff).
    pub seed: u64,
    /// Recurring jobs this worker schedules (not in `run_once` mode).
    pub crontab: Vec<CronItem>,
    /// Per task identifier, the longest its task may run: then it is aborted (its
    /// `abort_signal` fires) and that attempt fails with `timed out after <timeout>`, to be
    /// retried as any failure. Tasks not named run as long as they take.
    pub task_timeouts: BTreeMap<String, Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            worker_id: String::new(),
            task_identifiers: Vec::new(),
            concurrency: 10,
            poll_interval: Duration::seconds(2),
            local_queue_size: Some(DEFAULT_LOCAL_QUEUE_SIZE),
            local_queue_ttl: Duration::seconds(5),
            complete_batch_delay: Duration::milliseconds(1),
            fail_batch_delay: Duration::milliseconds(1),
            graceful_shutdown_timeout: Duration::seconds(5),
            forbidden_flags: Vec::new(),
            use_local_time: false,
            run_once: false,
            max_listener_backoff: Duration::seconds(60),
            seed: 0x5eed,
            crontab: Vec::new(),
            task_timeouts: BTreeMap::new(),
        }
    }
}
