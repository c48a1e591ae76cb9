//! Differential test: the same random sequences of operations run against `core::sim`'s
//! in-memory database and against PostgreSQL with our migrations, through the real
//! statements (`formica_sql`; the worker's bound by the driver's own `statements::bind`).
//! After every operation the job tables must agree, ids aside: task, queue, payload, priority, run_at, attempts,
//! max_attempts, key, lock, flags, last_error, revision, created_at and updated_at, the
//! queues' locks, and the cancel requests (by job); so must what each operation returned.
//!
//! Each operation runs in its own PostgreSQL transaction, and the sim's clock is set to
//! that transaction's `now()`, so defaults and `updated_at` agree to the microsecond. Times
//! the test chooses are distinct (a serial number of microseconds is added to each), because
//! PostgreSQL fetches jobs of equal (priority, run_at) in whatever order it meets them.
//!
//! Sequences come from a seeded generator (`FORMICA_DIFF_SEED` picks the first seed,
//! `FORMICA_DIFF_CASES` the number of sequences, 32 by default).

use chrono::{DateTime, Duration, Utc};
use formica::statements::{bind, Catalog};
use formica_check::{Action, NewJob, Pick};
use formica_core::flow::{Control, Partition};
use formica_core::job::{Job, JobKeyMode};
use formica_core::job::{RawJob, RescheduleJobOptions};
use formica_core::sim::{CancelOutcome, Db, SplitMix};
use formica_core::worker::FetchRequest;
use formica_core::worker::{DbError, Failure, QueryResult, Snooze, Statement};
use formica_sql as sql;
use formica_tests::TestDb;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Transaction};

const SCHEMA: &str = "graphile_worker";
const TASKS: [&str; 2] = ["a", "b"];
const WORKERS: [&str; 2] = ["w0", "w1"];

/// A job row as both sides are compared: everything but the ids (each side numbers its
/// jobs and queues in its own order).
type Cmp = Job;

/// `job` without its ids.
fn cmp(job: &Job) -> Cmp {
    Job { id: 0, job_queue_id: None, ..job.clone() }
}

/// A row with the `_private_jobs` columns plus `task_identifier` and `queue_name` (the
/// names may be null in rows of statements that created the task or queue: `names` fills
/// them in from the ids), without its ids.
fn cmp_row(row: &Row, names: &Names) -> Cmp {
    let flags: Option<Value> = row.get("flags");
    let task_id: i32 = row.get("task_id");
    let queue_id: Option<i32> = row.get("job_queue_id");
    let task: Option<String> = row.get("task_identifier");
    let queue: Option<String> = row.get("queue_name");
    Job {
        id: 0,
        job_queue_id: None,
        task_identifier: task.or_else(|| names.tasks.get(&task_id).cloned()).unwrap_or_default(),
        queue_name: queue.or_else(|| queue_id.and_then(|q| names.queues.get(&q).cloned())),
        payload: row.get::<_, serde_json::Value>("payload").into(),
        priority: row.get("priority"),
        run_at: row.get("run_at"),
        attempts: row.get("attempts"),
        max_attempts: row.get("max_attempts"),
        last_error: row.get("last_error"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
        key: row.get("key"),
        locked_at: row.get("locked_at"),
        locked_by: row.get("locked_by"),
        revision: row.get("revision"),
        flags: match flags {
            Some(Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
            _ => BTreeSet::new(),
        },
    }
}

/// Every row's payload is unique (each added job carries a serial number, merged arrays
/// too): it names a job on both sides.
fn name_of(payload: &Value) -> String {
    payload.to_string()
}

fn sorted(mut rows: Vec<Cmp>) -> Vec<Cmp> {
    rows.sort_by_key(|r| name_of(&r.payload));
    rows
}

#[derive(Debug, Default)]
struct Names {
    tasks: BTreeMap<i32, String>,
    queues: BTreeMap<i32, String>,
}

// ---------------------------------------------------------------------------------------
// Operations.

struct Gen {
    rng: SplitMix,
    serial: u64,
}

impl Gen {
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.rng.below(items.len() as u64) as usize].clone()
    }

    fn maybe<T>(&mut self, per_mille: u32, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if self.rng.chance(per_mille) {
            Some(f(self))
        } else {
            None
        }
    }

    /// No partition, or one by payload field or key prefix.
    fn partition(&mut self) -> Option<Partition> {
        match self.rng.below(3) {
            0 => None,
            1 => Some(Partition::Field("n".into())),
            _ => Some(Partition::KeyPrefix("1".into())),
        }
    }

    fn offset(&mut self) -> i64 {
        match self.rng.below(10) {
            0 => -6 * 3600,
            1..=3 => self.rng.between(1, 60),
            _ => self.rng.between(-30, 0),
        }
    }

    fn job(&mut self, explicit_run_at: bool) -> NewJob {
        self.serial += 1;
        let serial = self.serial;
        let payload = if self.rng.chance(300) { json!([{ "n": serial }]) } else { json!({ "n": serial }) };
        NewJob {
            task: TASKS[self.rng.below(2) as usize].to_owned(),
            payload,
            queue: self.maybe(350, |g| format!("q{}", g.rng.below(2))),
            delay_s: if explicit_run_at || self.rng.chance(750) { Some(self.offset()) } else { None },
            max_attempts: self.rng.between(1, 3) as i16,
            key: self.maybe(500, |g| format!("k{}", g.rng.below(4))),
            mode: None,
            priority: self.rng.between(-1, 1) as i16,
            flags: self.maybe(250, |g| {
                let all = ["x", "y"];
                let n = g.rng.between(1, 2) as usize;
                all[..n].iter().map(|s| (*s).to_owned()).collect()
            }),
        }
    }

    fn picks(&mut self) -> Vec<u64> {
        (0..self.rng.between(1, 2)).map(|_| self.rng.next_u64()).collect()
    }

    fn worker(&mut self) -> String {
        WORKERS[self.rng.below(2) as usize].to_owned()
    }

    fn op(&mut self) -> Action {
        match self.rng.below(115) {
            0..=29 => {
                let mode = self.pick(&[
                    None,
                    Some(JobKeyMode::Replace),
                    Some(JobKeyMode::PreserveRunAt),
                    Some(JobKeyMode::UnsafeDedupe),
                ]);
                Action::RawJob(NewJob { mode, ..self.job(false) })
            }
            30..=39 => {
                let n = self.rng.below(4);
                Action::AddJobs {
                    jobs: (0..n).map(|_| self.job(true)).collect(),
                    preserve_run_at: self.rng.chance(500),
                }
            }
            40..=44 => Action::RemoveJob { key: format!("k{}", self.rng.below(4)) },
            45..=47 => Action::CompleteJobs { pick: Pick::Nth(self.picks()) },
            48..=50 => Action::PermanentlyFailJobs {
                pick: Pick::Nth(self.picks()),
                message: self.maybe(500, |g| format!("admin {}", g.rng.below(100))),
            },
            51..=54 => {
                let picks = self.picks();
                let single = picks.len() == 1;
                Action::RescheduleJobs {
                    delay_s: if single { self.maybe(600, Self::offset) } else { None },
                    priority: self.maybe(300, |g| g.rng.between(-1, 1) as i16),
                    attempts: self.maybe(500, |g| g.rng.between(0, 2) as i16),
                    max_attempts: self.maybe(400, |g| g.rng.between(1, 3) as i16),
                    pick: Pick::Nth(picks),
                }
            }
            55..=57 => Action::ForceUnlockWorkers(vec![self.pick(&WORKERS).to_owned()]),
            58..=79 => Action::Fetch {
                worker_id: self.worker(),
                tasks: match self.rng.below(3) {
                    0 => vec![TASKS[0].to_owned()],
                    1 => vec![TASKS[1].to_owned()],
                    _ => TASKS.map(str::to_owned).to_vec(),
                },
                forbidden: self.maybe(300, |g| vec![g.pick(&["x", "y"]).to_owned()]).unwrap_or_default(),
                accepted: self.maybe(250, |g| vec![g.pick(&["x", "y"]).to_owned()]).unwrap_or_default(),
                limit: self.rng.between(1, 4) as usize,
                now_s: self.maybe(600, |g| match g.rng.below(8) {
                    0 => -5 * 3600,
                    _ => g.rng.between(-10, 90),
                }),
                excluded: self.maybe(200, |g| vec![format!("q{}", g.rng.below(2))]).unwrap_or_default(),
                caps: self
                    .maybe(300, |g| {
                        let (task, partition) = (g.pick(&TASKS).to_owned(), g.partition());
                        vec![Control { partition, ..Control::cap(task, g.rng.between(1, 3) as u32) }]
                    })
                    .unwrap_or_default(),
                limits: self
                    .maybe(500, |g| {
                        let (task, partition) = (g.pick(&TASKS).to_owned(), g.partition());
                        // Periods from a second to a minute, against fetch times tens of
                        // seconds apart: starts both inside and outside the period count.
                        let period_ms = 1000 * g.rng.between(1, 60) as u32;
                        vec![Control {
                            partition,
                            ..Control::rate_limit(task, g.rng.between(1, 2) as u32, period_ms)
                        }]
                    })
                    .unwrap_or_default(),
                fair: self
                    .maybe(400, |g| {
                        let task = g.pick(&TASKS).to_owned();
                        let partition = g.partition().unwrap_or_else(|| Partition::KeyPrefix(":".into()));
                        let fair = Control::fair(task, partition);
                        vec![match g.rng.below(2) {
                            0 => fair,
                            _ => fair.weighted(String::new(), g.rng.between(2, 3) as u32),
                        }]
                    })
                    .unwrap_or_default(),
            },
            80..=86 => Action::WorkerComplete { worker_id: self.worker(), mask: self.rng.next_u64() },
            87..=94 => Action::WorkerFail {
                worker_id: self.worker(),
                mask: self.rng.next_u64(),
                retry_in_s: self.maybe(600, Self::offset),
            },
            95..=99 => Action::WorkerReturn { worker_id: self.worker(), mask: self.rng.next_u64() },
            100..=104 => Action::CancelJobs {
                pick: Pick::Nth(self.picks()),
                reason: format!("r{}", self.rng.below(3)),
            },
            105..=107 => Action::WorkerReadCancels { worker_id: self.worker() },
            110..=114 => Action::WorkerSnooze {
                worker_id: self.worker(),
                mask: self.rng.next_u64(),
                run_in_s: self.maybe(500, Self::offset),
            },
            _ => Action::WorkerRecover,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running an operation on both sides.

struct Both {
    sim: Db,
    /// Distinct microseconds for every time the test chooses.
    serial: i64,
}

fn at(now: DateTime<Utc>, secs: i64, serial: i64) -> DateTime<Utc> {
    now + Duration::seconds(secs) + Duration::microseconds(serial)
}

async fn names(tx: &Transaction<'_>) -> Names {
    let mut names = Names::default();
    for row in
        tx.query(&format!("select id, identifier from {SCHEMA}._private_tasks"), &[]).await.expect("tasks")
    {
        names.tasks.insert(row.get(0), row.get(1));
    }
    for row in tx
        .query(&format!("select id, queue_name from {SCHEMA}._private_job_queues"), &[])
        .await
        .expect("queues")
    {
        names.queues.insert(row.get(0), row.get(1));
    }
    names
}

/// PostgreSQL's rows by payload name, with their ids.
async fn pg_jobs(tx: &Transaction<'_>) -> BTreeMap<String, (i64, Cmp)> {
    let names = names(tx).await;
    let rows = tx
        .query(
            &format!(
                "select j.*, t.identifier as task_identifier, q.queue_name
                 from {SCHEMA}._private_jobs j
                 join {SCHEMA}._private_tasks t on t.id = j.task_id
                 left join {SCHEMA}._private_job_queues q on q.id = j.job_queue_id"
            ),
            &[],
        )
        .await
        .expect("read jobs");
    rows.iter()
        .map(|r| {
            let cmp = cmp_row(r, &names);
            (name_of(&cmp.payload), (r.get::<_, i64>("id"), cmp))
        })
        .collect()
}

fn sim_jobs(sim: &Db) -> BTreeMap<String, (i64, Cmp)> {
    sim.jobs().map(|j| (name_of(&j.payload), (j.id, cmp(j)))).collect()
}

/// What an operation gave back, comparable across the two sides.
#[derive(Debug, PartialEq)]
enum Outcome {
    Rows(Vec<Cmp>),
    /// Jobs by name, each with what it says (the holder of a job a write left out, a
    /// cancel request's reason).
    Named(Vec<(String, Option<String>)>),
    Failed,
    Nothing,
}

fn spec_of(job: &NewJob, now: DateTime<Utc>, serial: &mut i64) -> RawJob {
    *serial += 1;
    job.add_job_at(job.delay_s.map(|s| at(now, s, *serial)))
}

fn sim_rows(result: Result<Vec<Job>, DbError>) -> Outcome {
    match result {
        Ok(jobs) => Outcome::Rows(sorted(jobs.iter().map(cmp).collect())),
        Err(_) => Outcome::Failed,
    }
}

/// Runs a worker statement on PostgreSQL bound exactly as the driver binds it.
async fn pg_statement(tx: &Transaction<'_>, statement: Statement) -> QueryResult {
    static CATALOG: std::sync::LazyLock<Catalog> =
        std::sync::LazyLock::new(|| Catalog::new(SCHEMA, false).expect("the worker's SQL"));
    let bound = bind(&CATALOG, statement, &[]);
    let rows = tx.query(bound.sql, &bound.values()).await.expect("statement");
    bound.answer(&rows).expect("decoding the rows")
}

async fn pg_rows(tx: &Transaction<'_>, text: &str, params: &[&(dyn ToSql + Sync)]) -> Outcome {
    match tx.query(&sql::render(text, SCHEMA), params).await {
        Ok(rows) => {
            let names = names(tx).await;
            Outcome::Rows(sorted(rows.iter().map(|r| cmp_row(r, &names)).collect()))
        }
        Err(_) => Outcome::Failed,
    }
}

/// The ids, on each side, of the current jobs chosen by `pick` (among the sim's, in payload
/// order: the order both sides share).
fn choose(
    sim: &BTreeMap<String, (i64, Cmp)>,
    pg: &BTreeMap<String, (i64, Cmp)>,
    pick: &Pick,
) -> (Vec<i64>, Vec<i64>) {
    let in_payload_order: Vec<i64> = sim.values().map(|(id, _)| *id).collect();
    let sim_ids = pick.among(&in_payload_order);
    let pg_ids = (sim.iter())
        .filter(|(_, (id, _))| sim_ids.contains(id))
        .filter_map(|(name, _)| pg.get(name).map(|(id, _)| *id))
        .collect();
    (sim_ids, pg_ids)
}

/// The jobs `worker` holds (in payload order) selected by the bits of `mask`.
fn held(
    sim: &BTreeMap<String, (i64, Cmp)>,
    pg: &BTreeMap<String, (i64, Cmp)>,
    worker: &str,
    mask: u64,
) -> Vec<(String, i64, i64)> {
    sim.iter()
        .filter(|(_, (_, c))| c.locked_by.as_deref() == Some(worker))
        .enumerate()
        .filter(|(i, _)| mask & (1 << (i % 64)) != 0)
        .filter_map(|(_, (name, (sim_id, _)))| pg.get(name).map(|(pg_id, _)| (name.clone(), *sim_id, *pg_id)))
        .collect()
}

/// With bit 63 of `mask`, the first job (in payload order) that `worker` does not hold.
fn not_held(
    sim: &BTreeMap<String, (i64, Cmp)>,
    pg: &BTreeMap<String, (i64, Cmp)>,
    worker: &str,
    mask: u64,
) -> Option<(String, i64, i64)> {
    if mask >> 63 == 0 {
        return None;
    }
    let (name, (sim_id, _)) = sim.iter().find(|(_, (_, c))| c.locked_by.as_deref() != Some(worker))?;
    pg.get(name).map(|(pg_id, _)| (name.clone(), *sim_id, *pg_id))
}

/// A write's answer, with the jobs it left out named as in `before`.
fn fenced(result: QueryResult, before: &BTreeMap<String, (i64, Cmp)>) -> Outcome {
    match result {
        QueryResult::Done => Outcome::Nothing,
        QueryResult::Fenced(fenced) => named(before, fenced.into_iter().map(|f| (f.job_id, f.holder))),
        other => panic!("a write answered {other:?}"),
    }
}

impl Both {
    async fn run(&mut self, tx: &Transaction<'_>, op: &Action) -> (Outcome, Outcome) {
        let now: DateTime<Utc> = tx.query_one("select now()", &[]).await.expect("now").get(0);
        self.sim.set_now(now);
        let sim_before = sim_jobs(&self.sim);
        let pg_before = pg_jobs(tx).await;
        match op {
            Action::RawJob(job) => {
                let add = spec_of(job, now, &mut self.serial);
                let sim = sim_rows(self.sim.add_job(&add).map(|j| vec![j]));
                let max_attempts = add.spec.max_attempts.map(i32::from);
                let priority = add.spec.priority.map(i32::from);
                let mode = add.spec.job_key_mode.map(JobKeyMode::as_str);
                let pg = pg_rows(
                    tx,
                    sql::utils::ADD_JOB,
                    &[
                        &add.identifier,
                        &add.payload,
                        &add.spec.queue_name,
                        &add.spec.run_at,
                        &max_attempts,
                        &add.spec.job_key,
                        &priority,
                        &add.spec.flags,
                        &mode,
                    ],
                )
                .await;
                (sim, pg)
            }
            Action::AddJobs { jobs, preserve_run_at } => {
                let adds: Vec<RawJob> = jobs.iter().map(|j| spec_of(j, now, &mut self.serial)).collect();
                let sim = sim_rows(self.sim.add_jobs(&adds, *preserve_run_at));
                let specs: Vec<Value> = adds
                    .iter()
                    .map(|a| {
                        json!({
                            "identifier": a.identifier,
                            "payload": a.payload,
                            "queue_name": a.spec.queue_name,
                            "run_at": a.spec.run_at,
                            "max_attempts": a.spec.max_attempts,
                            "job_key": a.spec.job_key,
                            "priority": a.spec.priority,
                            "flags": a.spec.flags,
                        })
                    })
                    .collect();
                let pg = pg_rows(tx, sql::utils::ADD_JOBS, &[&Value::Array(specs), preserve_run_at]).await;
                (sim, pg)
            }
            Action::RemoveJob { key } => {
                let sim = sim_rows(Ok(self.sim.remove_job(key).into_iter().collect()));
                let pg = pg_rows(tx, sql::utils::REMOVE_JOB, &[key]).await;
                (sim, pg)
            }
            Action::CompleteJobs { pick } => {
                let (sim_ids, pg_ids) = choose(&sim_before, &pg_before, pick);
                let sim = sim_rows(Ok(self.sim.complete_jobs(&sim_ids)));
                let pg = pg_rows(tx, sql::utils::COMPLETE_JOBS, &[&pg_ids]).await;
                (sim, pg)
            }
            Action::PermanentlyFailJobs { pick, message } => {
                let (sim_ids, pg_ids) = choose(&sim_before, &pg_before, pick);
                let sim = sim_rows(Ok(self.sim.permanently_fail_jobs(&sim_ids, message.as_deref())));
                let pg = pg_rows(tx, sql::utils::PERMANENTLY_FAIL_JOBS, &[&pg_ids, message]).await;
                (sim, pg)
            }
            Action::RescheduleJobs { pick, delay_s, priority, attempts, max_attempts } => {
                let (sim_ids, pg_ids) = choose(&sim_before, &pg_before, pick);
                self.serial += 1;
                let with = RescheduleJobOptions {
                    run_at: delay_s.map(|s| at(now, s, self.serial)),
                    priority: *priority,
                    attempts: *attempts,
                    max_attempts: *max_attempts,
                };
                let sim = sim_rows(self.sim.reschedule_jobs(&sim_ids, &with));
                let int = |v: Option<i16>| v.map(i32::from);
                let pg = pg_rows(
                    tx,
                    sql::utils::RESCHEDULE_JOBS,
                    &[
                        &pg_ids,
                        &with.run_at,
                        &int(with.priority),
                        &int(with.attempts),
                        &int(with.max_attempts),
                    ],
                )
                .await;
                (sim, pg)
            }
            Action::ForceUnlockWorkers(workers) => {
                let refs: Vec<&str> = workers.iter().map(String::as_str).collect();
                self.sim.force_unlock_workers(&refs);
                tx.execute(&sql::render(sql::utils::FORCE_UNLOCK_WORKERS, SCHEMA), &[&refs, &true])
                    .await
                    .expect("force_unlock_workers");
                (Outcome::Nothing, Outcome::Nothing)
            }
            Action::Fetch {
                worker_id,
                tasks,
                forbidden,
                accepted,
                limit,
                now_s,
                excluded,
                caps,
                limits,
                fair,
            } => {
                self.serial += 1;
                let limits: Vec<Control> =
                    limits.iter().filter(|l| tasks.contains(&l.task)).cloned().collect();
                // A limited fetch logs its starts at its own time, else at the database's clock
                // once its locks are held (clock_timestamp(), past the transaction's now()
                // that the sim reads): given its time, both sides log the same instant.
                let now_s = now_s.or_else(|| (!limits.is_empty()).then_some(0));
                let fetch_now = now_s.map(|s| at(now, s, self.serial));
                let statement = Statement::GetJobs(FetchRequest {
                    worker_id: worker_id.clone(),
                    task_identifiers: tasks.clone(),
                    forbidden_flags: forbidden.clone(),
                    accepted_flags: accepted.clone(),
                    limit: *limit,
                    now: fetch_now,
                    excluded_queues: excluded.clone(),
                    caps: caps.iter().filter(|c| tasks.contains(&c.task)).cloned().collect(),
                    limits,
                    fair: fair.iter().filter(|c| tasks.contains(&c.task)).cloned().collect(),
                    // Every other fetch in the walking shape: the same jobs either way.
                    walk_priorities: self.serial % 2 == 0,
                });
                let sim = match self.sim.execute(&statement) {
                    QueryResult::Jobs { jobs, .. } => Outcome::Rows(sorted(jobs.iter().map(cmp).collect())),
                    other => panic!("GetJobs answered {other:?}"),
                };
                let pg = match pg_statement(tx, statement).await {
                    QueryResult::Jobs { jobs, .. } => Outcome::Rows(sorted(jobs.iter().map(cmp).collect())),
                    other => panic!("GetJobs answered {other:?}"),
                };
                (sim, pg)
            }
            Action::WorkerComplete { worker_id, mask } => {
                let mut jobs = held(&sim_before, &pg_before, worker_id, *mask);
                jobs.extend(not_held(&sim_before, &pg_before, worker_id, *mask));
                let sim_ids: Vec<i64> = jobs.iter().map(|j| j.1).collect();
                let pg_ids: Vec<i64> = jobs.iter().map(|j| j.2).collect();
                let result = self.sim.execute(&Statement::CompleteJobs {
                    worker_id: worker_id.clone(),
                    ids: sim_ids,
                    settles_workflow_jobs: false,
                });
                let pg = pg_statement(
                    tx,
                    Statement::CompleteJobs {
                        worker_id: worker_id.clone(),
                        ids: pg_ids,
                        settles_workflow_jobs: false,
                    },
                )
                .await;
                (fenced(result, &sim_before), fenced(pg, &pg_before))
            }
            Action::WorkerFail { worker_id, mask, retry_in_s } => {
                let mut jobs = held(&sim_before, &pg_before, worker_id, *mask);
                if retry_in_s.is_none() {
                    // The database computes run_at: one job at a time, so no two get the same.
                    jobs.truncate(1);
                }
                jobs.extend(not_held(&sim_before, &pg_before, worker_id, *mask));
                let mut failures = Vec::new();
                for (i, (name, sim_id, _)) in jobs.iter().enumerate() {
                    self.serial += 1;
                    failures.push(Failure {
                        job_id: *sim_id,
                        message: format!("failed {name} #{i}"),
                        run_at: retry_in_s.map(|s| at(now, s, self.serial)),
                        // As a cancelled job's: no attempt left.
                        permanent: self.serial % 3 == 0,
                        // As a batch job's that keeps its failed items (unique, it names the job).
                        payload: (self.serial % 2 == 0).then(|| json!([{ "kept": self.serial }])),
                        // As a task's with its own retry curve.
                        delay: (self.serial % 5 == 0).then(|| Duration::milliseconds(1500)),
                    });
                }
                let pg_failures: Vec<Failure> = (failures.iter().zip(&jobs))
                    .map(|(f, (_, _, pg_id))| Failure { job_id: *pg_id, ..f.clone() })
                    .collect();
                let pg = pg_statement(
                    tx,
                    Statement::FailJobs {
                        worker_id: worker_id.clone(),
                        failures: pg_failures,
                        settles_workflow_jobs: false,
                    },
                )
                .await;
                let result = self.sim.execute(&Statement::FailJobs {
                    worker_id: worker_id.clone(),
                    failures,
                    settles_workflow_jobs: false,
                });
                (fenced(result, &sim_before), fenced(pg, &pg_before))
            }
            Action::WorkerReturn { worker_id, mask } if mask >> 63 == 1 => {
                let known = held(&sim_before, &pg_before, worker_id, *mask);
                let worker_id = worker_id.clone();
                let sim_known = known.iter().map(|j| j.1).collect();
                let result = self
                    .sim
                    .execute(&Statement::ReturnUnknown { worker_id: worker_id.clone(), known: sim_known });
                assert_eq!(result, QueryResult::Done);
                let known = known.iter().map(|j| j.2).collect();
                assert_eq!(
                    pg_statement(tx, Statement::ReturnUnknown { worker_id, known }).await,
                    QueryResult::Done
                );
                (Outcome::Nothing, Outcome::Nothing)
            }
            Action::WorkerReturn { worker_id, mask } => {
                let jobs = held(&sim_before, &pg_before, worker_id, *mask);
                let sim_ids: Vec<i64> = jobs.iter().map(|j| j.1).collect();
                let pg_ids: Vec<i64> = jobs.iter().map(|j| j.2).collect();
                let result =
                    self.sim.execute(&Statement::ReturnJobs { worker_id: worker_id.clone(), ids: sim_ids });
                assert_eq!(result, QueryResult::Done);
                let pg =
                    pg_statement(tx, Statement::ReturnJobs { worker_id: worker_id.clone(), ids: pg_ids })
                        .await;
                assert_eq!(pg, QueryResult::Done);
                (Outcome::Nothing, Outcome::Nothing)
            }
            Action::WorkerSnooze { worker_id, mask, run_in_s } => {
                let mut jobs = held(&sim_before, &pg_before, worker_id, *mask);
                jobs.extend(not_held(&sim_before, &pg_before, worker_id, *mask));
                let mut snoozes = Vec::new();
                for _ in &jobs {
                    // Distinct run times, by either clock.
                    self.serial += 1;
                    let delay = Duration::seconds(3) + Duration::microseconds(self.serial);
                    let run_at = run_in_s.map(|s| at(now, s, self.serial));
                    snoozes.push(Snooze { job_id: 0, delay, run_at });
                }
                let with = |ids: Vec<i64>| {
                    (snoozes.iter().zip(ids)).map(|(s, job_id)| Snooze { job_id, ..s.clone() })
                };
                let sim_snoozes = with(jobs.iter().map(|j| j.1).collect()).collect();
                let pg_snoozes = with(jobs.iter().map(|j| j.2).collect()).collect();
                let pg = pg_statement(
                    tx,
                    Statement::SnoozeJobs { worker_id: worker_id.clone(), snoozes: pg_snoozes },
                )
                .await;
                let result = self
                    .sim
                    .execute(&Statement::SnoozeJobs { worker_id: worker_id.clone(), snoozes: sim_snoozes });
                (fenced(result, &sim_before), fenced(pg, &pg_before))
            }
            Action::CancelJobs { pick, reason } => {
                let (sim_ids, pg_ids) = choose(&sim_before, &pg_before, pick);
                let sim = self.sim.cancel_jobs(&sim_ids, reason).into_iter().map(|(id, outcome)| {
                    let holder = match outcome {
                        CancelOutcome::Failed => None,
                        CancelOutcome::Recorded { worker_id, leased } => {
                            Some(format!("{worker_id} {leased}"))
                        }
                    };
                    (id, holder)
                });
                let pg =
                    match tx.query(&sql::render(sql::utils::CANCEL_JOBS, SCHEMA), &[&pg_ids, reason]).await {
                        Ok(rows) => named(
                            &pg_before,
                            rows.iter().map(|r| {
                                let holder: Option<String> = r.get(1);
                                (r.get(0), holder.map(|h| format!("{h} {}", r.get::<_, bool>(2))))
                            }),
                        ),
                        Err(_) => Outcome::Failed,
                    };
                (named(&sim_before, sim), pg)
            }
            Action::WorkerReadCancels { worker_id } => {
                let statement = Statement::ReadCancels { worker_id: worker_id.clone() };
                let (QueryResult::Cancels(sim), QueryResult::Cancels(pg)) =
                    (self.sim.execute(&statement), pg_statement(tx, statement).await)
                else {
                    panic!("ReadCancels answers Cancels");
                };
                let sim = named(&sim_before, sim.into_iter().map(|(id, r)| (id, Some(r))));
                (sim, named(&pg_before, pg.into_iter().map(|(id, r)| (id, Some(r)))))
            }
            Action::WorkerRecover => {
                // No worker here has a lease: only the settling of cancel requests acts.
                let statement = Statement::RecoverLapsed { grace: Duration::seconds(15) };
                assert_eq!(self.sim.execute(&statement), QueryResult::Done);
                assert_eq!(pg_statement(tx, statement).await, QueryResult::Done);
                (Outcome::Nothing, Outcome::Nothing)
            }
            Action::ForceUnlockCrashed
            | Action::Steps(_)
            | Action::FinishTask { .. }
            | Action::Notify(_)
            | Action::Shutdown { .. } => unreachable!("{op:?} needs a world: the generator makes none"),
        }
    }
}

/// `items` by the name of their job in `jobs` (`gone` if it has none), sorted.
fn named(
    jobs: &BTreeMap<String, (i64, Cmp)>,
    items: impl IntoIterator<Item = (i64, Option<String>)>,
) -> Outcome {
    let name = |id: i64| jobs.iter().find(|(_, (j, _))| *j == id).map_or("gone".into(), |(n, _)| n.clone());
    let mut items: Vec<(String, Option<String>)> = items.into_iter().map(|(id, x)| (name(id), x)).collect();
    items.sort();
    Outcome::Named(items)
}

/// PostgreSQL's cancel requests, by the name of their job.
async fn pg_requests(client: &tokio_postgres::Client, jobs: &BTreeMap<String, (i64, Cmp)>) -> Outcome {
    let rows = client
        .query(&sql::render("select job_id, reason from :RECORDS.cancel_requests", SCHEMA), &[])
        .await
        .expect("cancel requests");
    named(jobs, rows.iter().map(|r| (r.get(0), Some(r.get(1)))))
}

async fn pg_queues(
    client: &tokio_postgres::Client,
) -> BTreeMap<String, (Option<DateTime<Utc>>, Option<String>)> {
    client
        .query(&format!("select queue_name, locked_at, locked_by from {SCHEMA}._private_job_queues"), &[])
        .await
        .expect("queues")
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

async fn run_sequence(seed: u64, ops: usize) {
    let db = TestDb::migrated().await;
    let mut client = db.client().await;
    let mut generator = Gen { rng: SplitMix::new(seed), serial: 0 };
    let start: DateTime<Utc> = client.query_one("select now()", &[]).await.expect("now").get(0);
    let mut both = Both { sim: Db::new(start, seed), serial: 0 };
    let mut history = Vec::new();
    for step in 0..ops {
        let op = generator.op();
        history.push(op.clone());
        let tx = client.transaction().await.expect("begin");
        let (sim, pg) = both.run(&tx, &op).await;
        if pg == Outcome::Failed {
            tx.rollback().await.expect("rollback");
        } else {
            tx.commit().await.expect("commit");
        }
        let context = || format!("seed {seed}, step {step}: {op:#?}\nafter {:#?}", &history[..step]);
        assert_eq!(sim, pg, "the operation's result (sim, PostgreSQL) differs; {}", context());

        let tx = client.transaction().await.expect("begin");
        let pg_now = pg_jobs(&tx).await;
        tx.commit().await.expect("commit");
        let sim_requests = both.sim.cancel_requests().map(|(id, r)| (id, Some(r.to_owned())));
        let sim_requests = named(&sim_jobs(&both.sim), sim_requests.collect::<Vec<_>>());
        let pg_requests = pg_requests(&client, &pg_now).await;
        assert_eq!(sim_requests, pg_requests, "cancel requests differ (sim, PostgreSQL); {}", context());
        let pg_rows: Vec<Cmp> = pg_now.into_values().map(|(_, c)| c).collect();
        let sim_rows: Vec<Cmp> = sim_jobs(&both.sim).into_values().map(|(_, c)| c).collect();
        if sim_rows != pg_rows {
            let diff: Vec<(Option<&Cmp>, Option<&Cmp>)> = (0..sim_rows.len().max(pg_rows.len()))
                .map(|i| (sim_rows.get(i), pg_rows.get(i)))
                .filter(|(a, b)| a != b)
                .collect();
            panic!("the job tables differ (sim, PostgreSQL): {diff:#?}\n{}", context());
        }
        let sim_queues: BTreeMap<String, (Option<DateTime<Utc>>, Option<String>)> =
            both.sim.queues().map(|q| (q.name.clone(), (q.locked_at, q.locked_by.clone()))).collect();
        assert_eq!(sim_queues, pg_queues(&client).await, "queue locks differ; {}", context());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_database_agrees_with_postgresql() {
    let first: u64 = std::env::var("FORMICA_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let cases: u64 = std::env::var("FORMICA_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(32);
    for seed in first..first + cases {
        run_sequence(seed, 60).await;
    }
}
