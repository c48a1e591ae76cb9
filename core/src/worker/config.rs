//! How a worker behaves: [`Config`], its defaults, and the bounds [`Config::validate`]
//! holds it to.

use super::chores::Pruning;
use super::lease::{LEASE, RECOVERY_PERIOD};
use super::refetch::RefetchDelay;
use super::sweep::{LOCK_SWEEP_INTERVAL, STALE_LOCK_AGE};
use crate::cron::CronItem;
use crate::policy::TaskPolicy;
use chrono::Duration;
use std::collections::BTreeMap;

/// The default most jobs held in the local queue.
///
/// Large, because it costs nothing where it is not used: the batch grows toward a third of
/// it only while tasks are quick enough to drain it (see [`Config::local_queue_size`]), and
/// with it untuned defaults drain no-op jobs about as fast as a tuned worker.
pub const DEFAULT_LOCAL_QUEUE_SIZE: usize = 5000;

/// The shortest poll interval [`Config::validate`] allows: shorter, an idle worker would look
/// for jobs without pause, keeping a core busy (a zero interval used 65-87% of one) and
/// the database too. The integration tests poll every 50 ms at the least.
pub const MIN_POLL_INTERVAL: Duration = Duration::milliseconds(10);

/// How a worker behaves. `Default` gives Formica's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The id written to `locked_by` (a pool id in graphile-worker's terms).
    pub worker_id: String,
    /// The tasks this worker can run; it fetches only their jobs.
    pub task_identifiers: Vec<String>,
    /// Most tasks running at once; at least 1.
    pub concurrency: usize,
    /// How long to wait for a notification before looking for jobs anyway; at least
    /// [`MIN_POLL_INTERVAL`] (10 ms).
    pub poll_interval: Duration,
    /// Most jobs held locked but not yet started (`None`: fetch only for free slots).
    ///
    /// Prefetching keeps the slots busy while PostgreSQL locks the next batch, but jobs in
    /// the local queue are held away from other workers. So the batch adapts: it starts at
    /// `concurrency` and doubles (up to a third of the size; for a size under 300, up to all of it or 100 jobs) only when the slots ran dry and
    /// a full batch arrives to find them idle, and falls back to `concurrency` when no job
    /// is taken from the queue for `local_queue_ttl` (they are given back). The next batch
    /// is asked for once fewer than a batch wait, one fetch at a time, and only
    /// for slots about to idle once a fetch came back short. So a worker holds about what
    /// it runs during one or two fetches: a few ms of work under load, a few times
    /// `concurrency` jobs with slow tasks. Default: 5000; the batch grows only if tasks are
    /// quick.
    pub local_queue_size: Option<usize>,
    /// Most fetches out at once with a local queue (without one: one). Default 1: a fetch
    /// sent while another is out reads with a snapshot from before the other commits, so it
    /// tries to lock the rows the other just took; PostgreSQL locks each one's newest version
    /// before it finds it taken and keeps that lock to its commit, which costs WAL and CPU
    /// and makes the owner's completion wait (docs/performance.md, "Several worker processes").
    pub fetches_in_flight: usize,
    /// How long the local queue may hand out no job (every slot busy) before its jobs are
    /// given back, so another worker can run them. Short (5 s by default): under load the
    /// queue hands out a job every few milliseconds, so only slots held by slow tasks make
    /// it expire, and then the jobs are better run elsewhere than held.
    pub local_queue_ttl: Duration,
    /// The local queue's refetch delay (off by default): after a fetch that found few
    /// jobs, hold fetches a while, so that many workers on a trickle of jobs do not all
    /// fetch at each notification (see [`RefetchDelay`]). At most the poll interval.
    pub refetch_delay: Option<RefetchDelay>,
    /// How often the four-hour rule's sweep frees locks older than
    /// [`STALE_LOCK_AGE`](super::STALE_LOCK_AGE) (plus up to a quarter, jittered so that
    /// workers started together spread theirs); one sweep also runs at start. Default 8
    /// minutes (so 8 to 10); at least 1 s, at most the rule's age.
    pub lock_sweep_interval: Duration,
    /// How often this worker looks for workers whose lease lapsed, to free their jobs (plus
    /// up to a third, jittered). A dead worker's jobs run again within
    /// `LEASE + SUSPICION_GRACE + 8/3 * recovery_interval`. Default 3 s; at least 100 ms (it is
    /// a query on every worker), at most the lease (10 s).
    pub recovery_interval: Duration,
    /// How long the worker's loop may go without turning before its lease is given up (the
    /// lease's keeper stops renewing it and logs `LoopWedged`): a deadlock or a hook that
    /// never returns, not a long task (tasks run beside the loop). Its jobs then run
    /// elsewhere within `watchdog + LEASE + SUSPICION_GRACE + HEARTBEAT_INTERVAL + 8/3 *
    /// recovery_interval` (56 s by default). Default 30 s; from 1 s to 1 h.
    pub watchdog: Duration,
    /// How long completions wait to be written together (zero: at once).
    pub complete_batch_delay: Duration,
    /// How long failures wait to be written together (zero: at once).
    pub fail_batch_delay: Duration,
    /// How long a graceful shutdown waits for running tasks before aborting them.
    pub graceful_shutdown_timeout: Duration,
    /// Jobs with any of these flags are not fetched.
    pub forbidden_flags: Vec<String>,
    /// If any, only jobs carrying at least one of these flags are fetched (an allowlist,
    /// beside `forbidden_flags`, which still wins).
    pub accepted_flags: Vec<String>,
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
    /// The newest graphile-worker migration this worker knows (the driver sets
    /// `formica_sql::LATEST`, to which it migrated the schema). A breaking `worker:migrate`
    /// notice for a migration up to it means the schema was installed again (dropped and
    /// migrated anew): the worker goes on. One for a newer migration means a schema this
    /// worker may corrupt: it stops. Default 0: every breaking notice stops it.
    pub latest_migration: i32,
    /// Per task identifier, its retry curve and snooze window (see [`TaskPolicy`]); tasks
    /// not named get [`TaskPolicy::default`].
    pub task_policies: BTreeMap<String, TaskPolicy>,
    /// Also schedule the runtime schedules (Formica's `schedules` table), read at start,
    /// on each `formica:schedules` notification and at least this often (`None`: not).
    pub runtime_schedules: Option<Duration>,
    /// Obey the flow controls ([`crate::flow`]) kept in Formica's records schema: read them
    /// before the first fetch, on each [`FLOW`](crate::protocol::FLOW) notification, when the
    /// listener comes back, and every poll interval. The driver turns it on. Off (the
    /// default here, for a machine driven without the records schema), nothing is read and
    /// every fetch is the plain one.
    pub flow_control: bool,
    /// Per task identifier, the most of its jobs running at once in this worker (within
    /// `concurrency`): a task at its limit is left out of fetches, and its jobs already
    /// fetched wait in the local queue while other jobs start. At least 1 each. Tasks not
    /// named share `concurrency` freely. Global limits across workers are caps
    /// ([`crate::flow::Control`]).
    pub task_concurrency: BTreeMap<String, usize>,
    /// Prune the job history this often, keeping what its retention says (`None`: no
    /// pruner; the driver sets it with history on). Not in `run_once` mode. A period is at
    /// most [`MAX_CHORE_PERIOD`](super::MAX_CHORE_PERIOD) (longer counts as that).
    pub prune_history: Option<Pruning>,
    /// Run the workflows' resolver this often (`None`: not; the driver sets it). Not in
    /// `run_once` mode; at most [`MAX_CHORE_PERIOD`](super::MAX_CHORE_PERIOD).
    pub resolve_workflows: Option<Duration>,
    /// Run the reindexing chore this often (`None`, the default: not; the driver sets it
    /// when asked). Not in `run_once` mode; at most
    /// [`MAX_CHORE_PERIOD`](super::MAX_CHORE_PERIOD).
    pub reindex_bloated: Option<Duration>,
    /// Run the aging chore ([`crate::aging`]) this often (`None`: not; the driver sets it).
    /// Not in `run_once` mode; at most [`MAX_CHORE_PERIOD`](super::MAX_CHORE_PERIOD).
    pub age_priorities: Option<Duration>,
    /// Vacuum the jobs table when what the fetches step over since the last pass costs as
    /// much as a pass ([`crate::worker::STEP_COST`]; `false`, the default: never; the driver
    /// turns it on).
    pub vacuum_jobs: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            worker_id: String::new(),
            task_identifiers: Vec::new(),
            concurrency: 10,
            poll_interval: Duration::seconds(2),
            local_queue_size: Some(DEFAULT_LOCAL_QUEUE_SIZE),
            fetches_in_flight: 1,
            local_queue_ttl: Duration::seconds(5),
            refetch_delay: None,
            lock_sweep_interval: LOCK_SWEEP_INTERVAL,
            recovery_interval: RECOVERY_PERIOD,
            watchdog: crate::lease::DEFAULT_WATCHDOG,
            complete_batch_delay: Duration::milliseconds(1),
            fail_batch_delay: Duration::milliseconds(1),
            graceful_shutdown_timeout: Duration::seconds(5),
            forbidden_flags: Vec::new(),
            accepted_flags: Vec::new(),
            use_local_time: false,
            run_once: false,
            max_listener_backoff: Duration::seconds(60),
            seed: 0x5eed,
            crontab: Vec::new(),
            task_timeouts: BTreeMap::new(),
            runtime_schedules: None,
            latest_migration: 0,
            task_policies: BTreeMap::new(),
            flow_control: false,
            task_concurrency: BTreeMap::new(),
            prune_history: None,
            resolve_workflows: None,
            reindex_bloated: None,
            age_priorities: None,
            vacuum_jobs: false,
        }
    }
}

impl Config {
    /// The policy of `task`'s jobs.
    pub fn policy(&self, task: &str) -> TaskPolicy {
        self.task_policies.get(task).copied().unwrap_or_default()
    }

    /// Whether every interval is one a worker can run with: `Err` names the setting, its
    /// value and what is allowed. (A zero sweep interval would send one sweep after
    /// another; an interval longer than what it guards leaves dead workers' jobs waiting.)
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 {
            return Err("concurrency is 0: it must be at least 1, or no job could ever run".into());
        }
        if let Some((task, _)) = self.task_concurrency.iter().find(|(_, n)| **n == 0) {
            return Err(format!(
                "task_concurrency of {task} is 0: it must be at least 1 (pause the task instead)"
            ));
        }
        let within = |name: &str, value: Duration, least: Duration, most: Duration, why: &str| {
            if value < least || value > most {
                Err(format!(
                    "{name} is {}: it must be from {} to {} ({why})",
                    show(value),
                    show(least),
                    show(most)
                ))
            } else {
                Ok(())
            }
        };
        within(
            "lock_sweep_interval",
            self.lock_sweep_interval,
            Duration::seconds(1),
            STALE_LOCK_AGE,
            "at most the age after which a lock is stale",
        )?;
        within(
            "recovery_interval",
            self.recovery_interval,
            Duration::milliseconds(100),
            LEASE,
            "at most the lease: a dead worker's jobs wait up to 8/3 of it more",
        )?;
        within(
            "watchdog",
            self.watchdog,
            Duration::seconds(1),
            Duration::hours(1),
            "a loop turns at least once a second",
        )?;
        within(
            "poll_interval",
            self.poll_interval,
            MIN_POLL_INTERVAL,
            Duration::days(365),
            "shorter, an idle worker would look for jobs without pause, keeping a core busy",
        )?;
        if let Some(delay) = self.refetch_delay {
            within(
                "refetch_delay",
                delay.duration,
                Duration::milliseconds(1),
                self.poll_interval,
                "at most the poll interval",
            )?;
        }
        within(
            "local_queue_ttl",
            self.local_queue_ttl,
            Duration::milliseconds(1),
            STALE_LOCK_AGE,
            "longer would hold jobs past the four-hour rule",
        )?;
        // The machine adds these to the clock: beyond a year is a mistake, and would overflow.
        let timers = [
            ("complete_batch_delay", self.complete_batch_delay),
            ("fail_batch_delay", self.fail_batch_delay),
            ("graceful_shutdown_timeout", self.graceful_shutdown_timeout),
            ("max_listener_backoff", self.max_listener_backoff),
        ]
        .map(|(name, value)| (name.to_owned(), value));
        let task_timeouts =
            self.task_timeouts.iter().map(|(task, t)| (format!("the task_timeout of {task}"), *t));
        for (name, value) in timers.into_iter().chain(task_timeouts) {
            within(
                &name,
                value,
                Duration::zero(),
                Duration::days(365),
                "a timer beyond a year is a mistake",
            )?;
        }
        Ok(())
    }
}

/// `d` as a person writes it: `250ms`, `3s`, `8m`, `4h` (or seconds with a fraction).
fn show(d: Duration) -> String {
    let ms = d.num_milliseconds();
    if ms != 0 && ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms != 0 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else if ms.abs() < 1000 {
        format!("{ms}ms")
    } else {
        format!("{}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_beyond_a_year_are_refused_rather_than_overflowing_the_clock() {
        let forever = Config { graceful_shutdown_timeout: Duration::MAX, ..Config::default() };
        let error = forever.validate().unwrap_err();
        assert!(error.starts_with("graceful_shutdown_timeout is ") && error.contains("to 8760h"), "{error}");
        let mut timeouts = BTreeMap::new();
        timeouts.insert("mail".to_owned(), Duration::days(366));
        let error = Config { task_timeouts: timeouts, ..Config::default() }.validate().unwrap_err();
        assert!(error.starts_with("the task_timeout of mail is 8784h"), "{error}");
        let year = Config { poll_interval: Duration::days(365), ..Config::default() };
        assert_eq!(year.validate(), Ok(()));
    }

    #[test]
    fn the_defaults_are_valid_and_zero_or_absurd_intervals_are_refused_by_name() {
        assert_eq!(Config::default().validate(), Ok(()));
        let zero_sweep = Config { lock_sweep_interval: Duration::zero(), ..Config::default() };
        assert_eq!(
            zero_sweep.validate(),
            Err("lock_sweep_interval is 0s: it must be from 1s to 4h (at most the age after which a lock is stale)"
                .into())
        );
        let slow_recovery = Config { recovery_interval: Duration::minutes(5), ..Config::default() };
        let error = slow_recovery.validate().unwrap_err();
        assert!(error.starts_with("recovery_interval is 5m: it must be from 100ms to 10s"), "{error}");
        let zero_ttl = Config { local_queue_ttl: Duration::zero(), ..Config::default() };
        assert!(zero_ttl.validate().unwrap_err().starts_with("local_queue_ttl is 0s"));
        let slow_refetch = Config {
            refetch_delay: Some(RefetchDelay {
                duration: Duration::seconds(3),
                threshold: 0,
                max_abort_threshold: 0,
            }),
            ..Config::default()
        };
        assert!(slow_refetch
            .validate()
            .unwrap_err()
            .starts_with("refetch_delay is 3s: it must be from 1ms to 2s"));
        let bounds = Config {
            lock_sweep_interval: Duration::seconds(1),
            recovery_interval: LEASE,
            local_queue_ttl: Duration::milliseconds(1),
            ..Config::default()
        };
        assert_eq!(bounds.validate(), Ok(()));
    }

    #[test]
    fn a_poll_interval_under_ten_milliseconds_is_refused_naming_the_minimum() {
        let zero = Config { poll_interval: Duration::zero(), ..Config::default() };
        assert_eq!(
            zero.validate(),
            Err(
                "poll_interval is 0s: it must be from 10ms to 8760h (shorter, an idle worker would look for \
                 jobs without pause, keeping a core busy)"
                    .into()
            )
        );
        let short = Config { poll_interval: Duration::milliseconds(9), ..Config::default() };
        assert!(short.validate().unwrap_err().starts_with("poll_interval is 9ms: it must be from 10ms"));
        let shortest = Config { poll_interval: MIN_POLL_INTERVAL, ..Config::default() };
        assert_eq!(shortest.validate(), Ok(()));
    }

    #[test]
    fn a_concurrency_of_zero_is_refused() {
        let none = Config { concurrency: 0, ..Config::default() };
        assert_eq!(
            none.validate(),
            Err("concurrency is 0: it must be at least 1, or no job could ever run".into())
        );
        assert_eq!(Config { concurrency: 1, ..Config::default() }.validate(), Ok(()));
    }
}
