//! Metrics of a worker, through OpenTelemetry (cargo feature `metrics`): what an operator
//! runs a fleet on, without writing SQL.
//!
//! One [`Metrics`] per worker, fed by the worker loop: every [`Event`] (job outcomes and
//! their durations), every fetch (its latency and how many jobs it brought), the pool's
//! gauges (read when the metrics are collected), and the queue depth by task and state,
//! sampled with the age of each task's oldest due job by one query
//! (`sql/queries/worker/queue_depth.sql`) every
//! [`WorkerOptions::queue_depth_interval`](crate::WorkerOptions::queue_depth_interval) once
//! something has collected those gauges (the query scans the jobs table, a cost for a big
//! backlog that a worker whose metrics nobody reads should not pay), and
//! whether the worker is up (started, its lease renewed, not stopped), and the queue's
//! health checks ([`crate::inspect::health`]: `formica.health.severity` and
//! `formica.health.value` by `formica.health.check`), sampled every
//! [`HEALTH_INTERVAL`] once something has collected those gauges, beside the
//! queue depth and never on a job's path.
//!
//! Instruments come from the global meter provider (`opentelemetry::global`), so they cost
//! next to nothing until the application installs one (the `formica` CLI does with
//! `--metrics-addr`). Names and attributes follow OpenTelemetry's messaging and database
//! conventions where they have one (`messaging.process.duration`,
//! `messaging.client.operation.duration`, `messaging.client.consumed.messages`,
//! `db.client.connection.count`, attribute `messaging.destination.name` = the task
//! identifier), and are `formica.*` otherwise. Without the feature, [`Metrics`] is empty and
//! every call does nothing.

#[cfg(feature = "metrics")]
pub(crate) use self::otel::Metrics;

/// How often a worker whose health gauges are read makes the health checks (catalog reads,
/// a few milliseconds on any table).
pub(crate) const HEALTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Metrics turned off at compile time: every call does nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Debug, Default)]
pub(crate) struct Metrics;

#[cfg(not(feature = "metrics"))]
impl Metrics {
    pub(crate) fn new(_: &crate::Pool, _: &str) -> Self {
        Metrics
    }
    pub(crate) fn event(&self, _: &crate::Event) {}
    pub(crate) fn fetched(&self, _: std::time::Duration, _: Option<usize>) {}
    pub(crate) fn enabled(&self) -> bool {
        false
    }
    pub(crate) fn queue_depth_wanted(&self) -> bool {
        false
    }
    pub(crate) async fn sample_queue_depth(&self, _: &crate::WorkerUtils) {}
    pub(crate) fn health_wanted(&self) -> bool {
        false
    }
    pub(crate) async fn sample_health(&self, _: &crate::WorkerUtils, _: &crate::inspect::Thresholds) {}
}

#[cfg(feature = "metrics")]
mod otel {
    use crate::db::Pool;
    use crate::error::Error;
    use crate::utils::WorkerUtils;
    use crate::Event;
    use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge};
    use opentelemetry::KeyValue;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// The `messaging.system` of every measurement.
    const SYSTEM: &str = "formica";
    /// OpenTelemetry's advice for `messaging.*.duration` histograms, in seconds.
    const DURATION_BOUNDARIES: [f64; 14] =
        [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
    /// Jobs per fetch.
    const BATCH_BOUNDARIES: [f64; 11] = [0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
    /// Attribute sets kept per task.
    const MAX_CACHED_QUEUES: usize = 1000;
    /// The states of `formica.queue.depth`, in the order of the query's columns.
    const STATES: [&str; 5] = ["runnable", "scheduled", "running", "failed", "permanently_failed"];

    /// Latest queue depth by (task, state); a pair seen once stays, at zero when gone.
    type Depths = Arc<Mutex<BTreeMap<(String, &'static str), u64>>>;
    /// Latest age in seconds of the oldest due job by task; a task seen once stays, at zero.
    type OldestDue = Arc<Mutex<BTreeMap<String, f64>>>;
    /// Latest health by check: its severity's level and its measure.
    type HealthSample = Arc<Mutex<BTreeMap<&'static str, (u64, Option<f64>)>>>;

    /// The attribute sets of one (task, queue), built once: recording a job outcome then
    /// allocates nothing.
    struct JobAttributes {
        /// For the counters: system, task, queue.
        job: Vec<KeyValue>,
        /// For the duration of a success, a failure, an abort.
        success: Vec<KeyValue>,
        error: Vec<KeyValue>,
        aborted: Vec<KeyValue>,
    }

    impl JobAttributes {
        fn new(task: &str, queue: Option<&str>) -> Self {
            let mut job = vec![
                KeyValue::new("messaging.system", SYSTEM),
                KeyValue::new("messaging.destination.name", task.to_owned()),
            ];
            job.extend(queue.map(|queue| KeyValue::new("formica.queue", queue.to_owned())));
            let with = |extra: &[(&'static str, &'static str)]| {
                let mut attrs = job.clone();
                attrs.push(KeyValue::new("messaging.operation.name", "process"));
                attrs.extend(extra.iter().map(|(key, value)| KeyValue::new(*key, *value)));
                attrs
            };
            JobAttributes {
                success: with(&[]),
                error: with(&[("error.type", "task_error")]),
                aborted: with(&[("error.type", "aborted")]),
                job,
            }
        }
    }

    /// Attribute sets by task, then queue.
    type JobAttributeCache = Mutex<HashMap<String, HashMap<Option<String>, Arc<JobAttributes>>>>;

    /// The instruments of one worker.
    pub(crate) struct Metrics {
        completed: Counter<u64>,
        failed: Counter<u64>,
        retried: Counter<u64>,
        permanently_failed: Counter<u64>,
        returned: Counter<u64>,
        process_duration: Histogram<f64>,
        fetch_duration: Histogram<f64>,
        fetch_jobs: Histogram<u64>,
        consumed: Counter<u64>,
        attributes: JobAttributeCache,
        depths: Depths,
        oldest_due: OldestDue,
        /// Set once a reader collected the queue gauges: until then sampling them would scan
        /// the jobs table for nobody (the global meter provider is a no-op by default).
        depth_wanted: Arc<AtomicBool>,
        /// 1 while the worker runs and its lease holds, else 0.
        up: Arc<AtomicU64>,
        /// The pauses this worker obeys (`all`, `task:<name>`, `queue:<name>`).
        paused: Arc<std::sync::Mutex<Vec<String>>>,
        health: HealthSample,
        /// Set once a reader collected the health gauges.
        health_wanted: Arc<AtomicBool>,
        /// Observed when collected; kept so their callbacks live as long as the worker.
        _gauges: Vec<ObservableGauge<u64>>,
        _age: ObservableGauge<f64>,
        _health_value: ObservableGauge<f64>,
        worker: KeyValue,
    }

    impl Metrics {
        /// Instruments on the global meter for the worker `worker_id` using `pool`.
        pub(crate) fn new(pool: &Pool, worker_id: &str) -> Self {
            Self::with_meter(&opentelemetry::global::meter("formica"), pool, worker_id)
        }

        fn with_meter(meter: &Meter, pool: &Pool, worker_id: &str) -> Self {
            let jobs = |name: &'static str, description: &'static str| {
                meter.u64_counter(name).with_unit("{job}").with_description(description).build()
            };
            let seconds = |name: &'static str, description: &'static str| {
                let histogram = meter.f64_histogram(name).with_unit("s").with_description(description);
                histogram.with_boundaries(DURATION_BOUNDARIES.to_vec()).build()
            };
            let depths = Depths::default();
            let observed = depths.clone();
            let oldest_due = OldestDue::default();
            let observed_ages = oldest_due.clone();
            let depth_wanted = Arc::new(AtomicBool::new(false));
            let (wanted_depth, wanted_age) = (depth_wanted.clone(), depth_wanted.clone());
            let up = Arc::new(AtomicU64::new(0));
            let observed_up =
                (up.clone(), KeyValue::new("messaging.consumer.group.name", worker_id.to_owned()));
            let health = HealthSample::default();
            let (observed_health, observed_values) = (health.clone(), health.clone());
            let health_wanted = Arc::new(AtomicBool::new(false));
            let (wanted_health, wanted_values) = (health_wanted.clone(), health_wanted.clone());
            let check = |name: &'static str| [KeyValue::new("formica.health.check", name)];
            let paused = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
            let observed_paused = (paused.clone(), observed_up.1.clone());
            let (pool_used, pool_idle, pool_waiting) = (pool.clone(), pool.clone(), pool.clone());
            let pool_attrs = |state: &'static str| {
                [
                    KeyValue::new("db.client.connection.pool.name", "formica"),
                    KeyValue::new("db.client.connection.state", state),
                ]
            };
            let gauges = vec![
                meter
                    .u64_observable_gauge("formica.worker.up")
                    .with_description("1 while the worker runs and its lease holds, else 0")
                    .with_callback(move |gauge| {
                        let (up, worker) = &observed_up;
                        gauge.observe(up.load(Ordering::Relaxed), std::slice::from_ref(worker));
                    })
                    .build(),
                meter
                    .u64_observable_gauge("formica.flow.paused")
                    .with_description("1 for each pause this worker obeys (attribute formica.pause)")
                    .with_callback(move |gauge| {
                        let (paused, worker) = &observed_paused;
                        let paused = paused.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                        for pause in paused.iter() {
                            gauge
                                .observe(1, &[worker.clone(), KeyValue::new("formica.pause", pause.clone())]);
                        }
                    })
                    .build(),
                meter
                    .u64_observable_gauge("formica.queue.depth")
                    .with_unit("{job}")
                    .with_description("Jobs by task and state, sampled by one query at an interval")
                    .with_callback(move |gauge| {
                        wanted_depth.store(true, Ordering::Relaxed);
                        let Ok(depths) = observed.lock() else { return };
                        for ((task, state), count) in depths.iter() {
                            let attrs = [
                                KeyValue::new("messaging.destination.name", task.clone()),
                                KeyValue::new("formica.job.state", *state),
                            ];
                            gauge.observe(*count, &attrs);
                        }
                    })
                    .build(),
                meter
                    .u64_observable_gauge("formica.health.severity")
                    .with_description(
                        "Each health check's severity: 0 ok (or unknown), 1 warning, 2 critical",
                    )
                    .with_callback(move |gauge| {
                        wanted_health.store(true, Ordering::Relaxed);
                        let Ok(health) = observed_health.lock() else { return };
                        for (name, (level, _)) in health.iter() {
                            gauge.observe(*level, &check(name));
                        }
                    })
                    .build(),
                meter
                    .u64_observable_gauge("db.client.connection.count")
                    .with_unit("{connection}")
                    .with_description("Pool connections open: in use and idle")
                    .with_callback(move |gauge| {
                        let status = pool_used.status();
                        let in_use = status.size.saturating_sub(status.idle);
                        gauge.observe(in_use as u64, &pool_attrs("used"));
                        gauge.observe(status.idle as u64, &pool_attrs("idle"));
                    })
                    .build(),
                meter
                    .u64_observable_gauge("db.client.connection.max")
                    .with_unit("{connection}")
                    .with_description("The most connections the pool opens")
                    .with_callback(move |gauge| gauge.observe(pool_idle.status().max_size as u64, &[]))
                    .build(),
                meter
                    .u64_observable_gauge("db.client.connection.pending_requests")
                    .with_unit("{request}")
                    .with_description("Callers waiting for a pool connection")
                    .with_callback(move |gauge| gauge.observe(pool_waiting.status().waiting as u64, &[]))
                    .build(),
            ];
            let age = meter
                .f64_observable_gauge("formica.queue.oldest_due_age")
                .with_unit("s")
                .with_description(
                    "How long each task's oldest due job has waited, sampled with the queue depth",
                )
                .with_callback(move |gauge| {
                    wanted_age.store(true, Ordering::Relaxed);
                    let Ok(ages) = observed_ages.lock() else { return };
                    for (task, age) in ages.iter() {
                        gauge.observe(*age, &[KeyValue::new("messaging.destination.name", task.clone())]);
                    }
                })
                .build();
            let health_value = meter
                .f64_observable_gauge("formica.health.value")
                .with_description(
                    "Each health check's measure: seconds (horizon, autovacuum), rows (dead_rows), bytes (bloat), \
                     buffers per fetch (fetch_cost), differences (schema)",
                )
                .with_callback(move |gauge| {
                    wanted_values.store(true, Ordering::Relaxed);
                    let Ok(health) = observed_values.lock() else { return };
                    for (name, (_, value)) in health.iter() {
                        if let Some(value) = value {
                            gauge.observe(*value, &check(name));
                        }
                    }
                })
                .build();
            Metrics {
                completed: jobs("formica.jobs.completed", "Jobs whose task succeeded"),
                failed: jobs("formica.jobs.failed", "Failed attempts (retried or not)"),
                retried: jobs("formica.jobs.retried", "Failed attempts that will be retried"),
                permanently_failed: jobs(
                    "formica.jobs.permanently_failed",
                    "Jobs that failed their last attempt",
                ),
                returned: jobs("formica.jobs.returned", "Running jobs aborted on shutdown and given back"),
                process_duration: seconds("messaging.process.duration", "How long tasks ran"),
                fetch_duration: seconds("messaging.client.operation.duration", "How long fetching jobs took"),
                fetch_jobs: meter
                    .u64_histogram("formica.fetch.jobs")
                    .with_unit("{job}")
                    .with_description("Jobs per fetch")
                    .with_boundaries(BATCH_BOUNDARIES.to_vec())
                    .build(),
                consumed: jobs("messaging.client.consumed.messages", "Jobs fetched (locked) by the worker"),
                attributes: JobAttributeCache::default(),
                depths,
                oldest_due,
                depth_wanted,
                up,
                paused,
                health,
                health_wanted,
                _gauges: gauges,
                _age: age,
                _health_value: health_value,
                worker: KeyValue::new("messaging.consumer.group.name", worker_id.to_owned()),
            }
        }

        /// Metrics are recorded (the feature is on).
        pub(crate) fn enabled(&self) -> bool {
            true
        }

        /// Whether a reader has collected the queue gauges, so sampling them is worth a query.
        pub(crate) fn queue_depth_wanted(&self) -> bool {
            self.depth_wanted.load(Ordering::Relaxed)
        }

        /// Count `event` if it is an outcome.
        pub(crate) fn event(&self, event: &Event) {
            let seconds = |d: &chrono::Duration| d.to_std().unwrap_or_default().as_secs_f64();
            match event {
                Event::JobSuccess { task, queue, duration, .. } => {
                    let attrs = self.attributes(task, queue);
                    self.completed.add(1, &attrs.job);
                    self.process_duration.record(seconds(duration), &attrs.success);
                }
                // Completed unrun: counted as completed, with no processing time.
                Event::JobSkipped { task, queue, .. } => {
                    self.completed.add(1, &self.attributes(task, queue).job);
                }
                Event::JobError { task, queue, duration, retry_at, .. } => {
                    let attrs = self.attributes(task, queue);
                    self.failed.add(1, &attrs.job);
                    if retry_at.is_some() {
                        self.retried.add(1, &attrs.job);
                    }
                    self.process_duration.record(seconds(duration), &attrs.error);
                }
                Event::JobPermanentlyFailed { task, queue, .. } => {
                    self.permanently_failed.add(1, &self.attributes(task, queue).job);
                }
                Event::JobReturned { task, queue, duration, .. } => {
                    let attrs = self.attributes(task, queue);
                    self.returned.add(1, &attrs.job);
                    self.process_duration.record(seconds(duration), &attrs.aborted);
                }
                Event::WorkerStart { .. } | Event::LeaseRenewed => self.up.store(1, Ordering::Relaxed),
                Event::WorkerStop { .. } | Event::LeaseLapsing => self.up.store(0, Ordering::Relaxed),
                Event::FlowChanged { paused, .. } => {
                    *self.paused.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = paused.clone();
                }
                Event::JobStart { .. }
                | Event::JobComplete { .. }
                | Event::FetchStart { .. }
                | Event::FetchEmpty
                | Event::JobsGivenBack { .. }
                | Event::LockSweep { .. }
                | Event::CronSchedule { .. }
                | Event::DatabaseError { .. }
                | Event::GaveUp { .. }
                | Event::ListenerUp
                | Event::ListenerDown { .. }
                | Event::Shutdown { .. }
                | Event::BreakingMigration { .. } => {}
                // Events added after this was written.
                _ => {}
            }
        }

        /// The attribute sets of (`task`, `queue`), built the first time.
        fn attributes(&self, task: &str, queue: &Option<String>) -> Arc<JobAttributes> {
            let mut cache = self.attributes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(attrs) = cache.get(task).and_then(|queues| queues.get(queue)) {
                return attrs.clone();
            }
            let attrs = Arc::new(JobAttributes::new(task, queue.as_deref()));
            let queues = cache.entry(task.to_owned()).or_default();
            // Queue names may be many (one per customer): the cache stays bounded.
            if queues.len() >= MAX_CACHED_QUEUES {
                queues.clear();
            }
            queues.insert(queue.clone(), attrs.clone());
            attrs
        }

        /// A fetch took `duration` and brought `jobs` (`None`: it failed).
        pub(crate) fn fetched(&self, duration: Duration, jobs: Option<usize>) {
            let mut attrs = vec![
                KeyValue::new("messaging.system", SYSTEM),
                KeyValue::new("messaging.operation.name", "fetch"),
                KeyValue::new("messaging.operation.type", "receive"),
                self.worker.clone(),
            ];
            match jobs {
                Some(jobs) => {
                    self.fetch_jobs.record(jobs as u64, &attrs);
                    self.consumed.add(jobs as u64, &attrs);
                }
                None => attrs.push(KeyValue::new("error.type", "database_error")),
            }
            self.fetch_duration.record(duration.as_secs_f64(), &attrs);
        }

        /// Query the queue depth once and keep it for the gauge (an error is logged and the
        /// last sample kept).
        pub(crate) async fn sample_queue_depth(&self, utils: &WorkerUtils) {
            match queue_depth(utils).await {
                Ok(rows) => {
                    let (Ok(mut depths), Ok(mut ages)) = (self.depths.lock(), self.oldest_due.lock()) else {
                        return;
                    };
                    depths.values_mut().for_each(|count| *count = 0);
                    ages.values_mut().for_each(|age| *age = 0.0);
                    for (task, counts, age) in rows {
                        for (state, count) in STATES.iter().zip(counts) {
                            depths.insert((task.clone(), state), count);
                        }
                        ages.insert(task, age.unwrap_or(0.0));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot sample the queue depth for metrics"),
            }
        }
    }

    impl Metrics {
        /// Whether a reader has collected the health gauges.
        pub(crate) fn health_wanted(&self) -> bool {
            self.health_wanted.load(Ordering::Relaxed)
        }

        /// Make the health checks once and keep them for the gauges (an error is logged and
        /// the last sample kept).
        pub(crate) async fn sample_health(
            &self,
            utils: &WorkerUtils,
            thresholds: &crate::inspect::Thresholds,
        ) {
            match crate::inspect::health(utils, thresholds).await {
                Ok(health) => {
                    let Ok(mut sample) = self.health.lock() else { return };
                    for check in health.checks {
                        sample.insert(check.name, (check.severity.level(), check.value));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot sample the queue's health for metrics"),
            }
        }
    }

    /// Jobs per task, in the order of [`STATES`], and the age of its oldest due job.
    async fn queue_depth(utils: &WorkerUtils) -> Result<Vec<(String, [u64; 5], Option<f64>)>, Error> {
        let sql = formica_sql::render(formica_sql::worker::QUEUE_DEPTH, utils.schema());
        let client = utils.pool().get().await?;
        let rows = client.query(sql.as_str(), &[]).await?;
        rows.iter()
            .map(|row| {
                let mut counts = [0u64; 5];
                for (i, count) in counts.iter_mut().enumerate() {
                    *count = u64::try_from(row.try_get::<_, i64>(i + 1)?).unwrap_or_default();
                }
                Ok((row.try_get(0)?, counts, row.try_get(STATES.len() + 1)?))
            })
            .collect()
    }
}
