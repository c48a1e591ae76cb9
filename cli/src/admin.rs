//! The utility subcommands: add and inspect jobs, and the admin functions.

use crate::output::{print_job, print_jobs, print_listing, print_table, Output};
use crate::Failure;
use clap::{Args, Subcommand};
use formica_tokio::chrono::{DateTime, Utc};
use formica_tokio::controls::ControlKind;
use formica_tokio::inspect;
use formica_tokio::{BulkAction, Job, JobFilter, JobKeyMode, JobSpec, RescheduleJobOptions, WorkerUtils};
use serde_json::{json, Value};

/// Utility subcommands.
#[derive(Debug, Subcommand)]
pub enum Admin {
    /// Add a job and print it.
    Add(AddArgs),
    /// List jobs (one line each; `formica job ID` shows one whole).
    Jobs(JobsArgs),
    /// Show one job whole: payload, full last error, lock; a finished one from the history
    /// (outcome, output).
    Job {
        /// The job id.
        id: i64,
    },
    /// Why a job is not running, and when it will: every reason (not due, its queue held,
    /// paused, its cap full, its rate limit used up, flags or a task no live worker takes,
    /// workflow dependencies, attempts used up, a dead worker's lock), where it runs if it
    /// does, and an estimate of its start (docs/guide/why.md).
    Why {
        /// The job id, or a workflow's job as WORKFLOW/NAME (`7/resize`).
        job: inspect::JobRef,
    },
    /// Jobs that ended for good, newest first, from the history (docs/guide/history.md).
    History(crate::history::HistoryArgs),
    /// Job counts per task and queue, every worker (by its lease, lapsed ones marked, or its
    /// locks), and the schema version.
    Status,
    /// Check the queue's health (vacuum's horizon, dead rows, autovacuum, bloat, the fetch's
    /// cost, the schema): each check with its evidence; exits 3 on a warning, 4 on a
    /// critical finding (docs/guide/health.md).
    Doctor(crate::doctor::DoctorArgs),
    /// Delete jobs as if they had succeeded (jobs a live worker holds are skipped).
    Complete {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Fail jobs for good (jobs a live worker holds are skipped).
    Fail {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<i64>,
        /// The reason stored as the job's last error.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Cancel jobs: a waiting one fails for good now; a running one's worker aborts it and
    /// fails it for good (unless it succeeds first). The reason is stored as its last error.
    /// With a filter (or --all, --dry-run), every waiting job it picks, never a running one.
    Cancel {
        /// Job ids.
        ids: Vec<i64>,
        /// Why (stored as `cancelled: <reason>`).
        #[arg(long, default_value = "by request")]
        reason: String,
        #[command(flatten)]
        bulk: crate::bulk::Selection,
    },
    /// Change when and how jobs run (jobs a live worker holds are skipped). With a filter (or
    /// --all, --dry-run), every job it picks.
    Reschedule(RescheduleArgs),
    /// Remove the job holding a job key.
    Remove {
        /// The job key.
        key: String,
    },
    /// Release every job and queue held by workers known to be dead, and show how many each
    /// held. Refused if one of them holds a live lease (it may be running those jobs).
    Unlock {
        /// Worker ids (as shown in `locked_by`).
        #[arg(required = true)]
        worker_ids: Vec<String>,
        /// Unlock even workers whose lease says they are alive (one killed moments ago keeps
        /// its lease until it expires). If one is in fact alive, its running jobs run twice.
        #[arg(long)]
        even_if_alive: bool,
    },
    /// Serve the web dashboard until interrupted.
    Ui(UiArgs),
    /// Run failed jobs again now with a fresh set of attempts: those a filter picks (never a
    /// running one). `redrive` is its other name, for jobs failed for good (--state
    /// permanently_failed) once their cause is fixed.
    #[command(visible_alias = "redrive")]
    Retry {
        /// Job ids.
        ids: Vec<i64>,
        #[command(flatten)]
        bulk: crate::bulk::Selection,
    },
    /// Delete the jobs a filter picks (never a running one): they will not run.
    Delete {
        /// Job ids.
        ids: Vec<i64>,
        #[command(flatten)]
        bulk: crate::bulk::Selection,
    },
    /// Runtime schedules: list, put (add or change) and remove, while workers run.
    #[command(subcommand)]
    Schedule(crate::schedule::ScheduleCommand),
    /// Pause a task (--task), a named queue (--queue) or everything (--all): Formica workers
    /// start none of its jobs until resumed; running ones finish.
    Pause(crate::controls::PauseArgs),
    /// Lift a pause (--task, --queue or --all).
    Resume(crate::controls::ResumeArgs),
    /// The pauses in force, with why, by whom and since when.
    Paused,
    /// Cap the jobs of a task running at once across every Formica worker (on the whole
    /// task, or per payload field or job key prefix); replaces its cap over that partition
    /// (a task may have one per partition, all obeyed).
    Cap(crate::controls::CapArgs),
    /// Lift the cap of a task (over the partition given; none: the whole task's).
    Uncap(crate::controls::ControlTarget),
    /// The caps in force.
    Caps,
    /// Rate limit a task: at most --max of its jobs started per --per (`1s`, `1m`) across
    /// every Formica worker (on the whole task, or per payload field or job key prefix);
    /// replaces its limit over that partition (a task may have one per partition).
    Limit(crate::controls::LimitArgs),
    /// Lift the rate limit of a task (over the partition given; none: the whole task's).
    Unlimit(crate::controls::ControlTarget),
    /// The rate limits in force.
    Limits,
    /// Age a task's waiting jobs: every --every (`30s`, `5m`) a job has been ready, its
    /// priority number falls by --step, down to --best; replaces its aging.
    Age(crate::controls::AgeArgs),
    /// Lift the aging of a task: the jobs it changed get their own priority back.
    Unage {
        /// The task identifier.
        #[arg(long)]
        task: String,
    },
    /// Bound a task's waiting jobs: an add through Formica that would leave more than --max
    /// waiting (on the whole task, or per payload field or job key prefix) waits up to
    /// --wait for room, then is refused; replaces its bound.
    Bound(crate::controls::BoundArgs),
    /// Lift the bound of a task.
    Unbound(crate::controls::ControlTarget),
    /// The agings in force.
    Agings,
    /// The bounds in force.
    Bounds,
    /// Make a task fair: its ready jobs are taken round robin across the tenants of a
    /// payload field (--per-field) or job key prefix (--per-key-prefix), weighted by
    /// --weight tenant=n; replaces its fairness.
    Fair(crate::controls::FairArgs),
    /// Lift the fairness of a task.
    Unfair(crate::controls::ControlTarget),
    /// The fairness in force.
    Fairness,
    /// Dead letters: the task a task's jobs are sent to when they fail for good.
    #[command(subcommand)]
    DeadLetter(crate::dead_letters::DeadLetterCommand),
    /// List workflows, newest first, with their states and job counts.
    Workflows(crate::workflow::ListArgs),
    /// One workflow: show it, cancel it, or retry its failed jobs.
    #[command(subcommand)]
    Workflow(crate::workflow::WorkflowCommand),
    /// Encrypted payloads (docs/guide/encrypted-payloads.md).
    #[command(subcommand)]
    Encryption(EncryptionCommand),
}

/// `formica encryption`.
#[derive(Debug, Subcommand)]
pub enum EncryptionCommand {
    /// Seal every waiting job's encrypted payload under the key ring's newest key (jobs a
    /// worker holds are left: run it again once they are done). Prints how many were
    /// rewritten and skipped; fails naming the jobs whose key the ring lacks.
    Rotate {
        /// The key ring: `id:key` pairs, oldest first, separated by commas, each key 64
        /// hexadecimal digits.
        #[arg(long, env = "FORMICA_PAYLOAD_KEYS", hide_env_values = true)]
        keys: String,
        /// Jobs read at a time.
        #[arg(long, default_value_t = 1000)]
        batch: u32,
    },
}

/// `formica ui`.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// Address to listen on; beyond 127.0.0.1 it needs --token or --read-only.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: std::net::SocketAddr,
    /// Require a token on every request (open the dashboard with ?token=...): this one is
    /// an admin's, who may do everything.
    #[arg(long, env = "FORMICA_UI_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A token that may act on jobs (add, run now, retry, cancel, delete, pause, resume) but
    /// not change caps, limits, schedules, dead letters or unlock workers.
    #[arg(long, env = "FORMICA_UI_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// A token that may only look.
    #[arg(long, env = "FORMICA_UI_VIEWER_TOKEN", hide_env_values = true)]
    viewer_token: Option<String>,
    /// Only look: refuse every action.
    #[arg(long)]
    read_only: bool,
    /// Crontab file for the cron page while no running worker records one (default: ./crontab if present).
    #[arg(long)]
    crontab: Option<std::path::PathBuf>,
}

/// `formica add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The task identifier.
    task: String,
    /// The payload, as JSON (default `{}`).
    payload: Option<String>,
    /// Named queue: its jobs run one at a time.
    #[arg(long)]
    queue: Option<String>,
    /// Earliest run time, RFC 3339 such as 2030-01-31T09:30:00Z (default now).
    #[arg(long, value_parser = parse_time)]
    run_at: Option<DateTime<Utc>>,
    /// Attempts before failing for good (default 25).
    #[arg(long)]
    max_attempts: Option<i16>,
    /// De-duplication key.
    #[arg(long)]
    job_key: Option<String>,
    /// replace, preserve_run_at, unsafe_dedupe, or replace_and_abort (also stop the run of
    /// the key's job, and start this one once that run has stopped).
    #[arg(long, value_parser = parse_mode)]
    job_key_mode: Option<JobKeyMode>,
    /// Lower runs first (default 0).
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i16>,
    /// Comma-separated flags.
    #[arg(long, value_delimiter = ',')]
    flags: Option<Vec<String>>,
}

fn parse_mode(s: &str) -> Result<JobKeyMode, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// A time as RFC 3339: date, time and UTC offset (`T` or a space between date and time).
fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    s.parse().map_err(|e| {
        format!(
            "expected an RFC 3339 time with its UTC offset, such as 2030-01-31T09:30:00Z, \
             2030-01-31T10:30:00.5+01:00 or 2030-01-31 09:30:00Z ({e})"
        )
    })
}

/// Fail naming the `asked` ids that are not among `done` (the jobs that were `past`), with
/// what such an id may mean: `why`.
fn all_matched(asked: &[i64], done: &[i64], past: &str, why: &str) -> Result<(), Failure> {
    let mut missed: Vec<i64> = asked.iter().copied().filter(|id| !done.contains(id)).collect();
    missed.sort_unstable();
    missed.dedup();
    if missed.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = missed.iter().map(i64::to_string).collect();
    let jobs = if missed.len() == 1 { "job" } else { "jobs" };
    Err(Failure::Command(format!("{jobs} {} not {past}: {why}", list.join(", "))))
}

/// Why an id of `complete`, `fail` or `reschedule` changed nothing.
const NOT_FOUND_OR_HELD: &str =
    "no such job (it completed, was removed, or never existed), or a worker holds it";

/// `formica jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs of this task.
    #[arg(long)]
    task: Option<String>,
    /// Only jobs of this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only jobs that have failed at least once.
    #[arg(long)]
    failed: bool,
    /// Only jobs a worker holds.
    #[arg(long)]
    locked: bool,
    /// Only jobs in this state: ready (may run now), scheduled (waiting for its first run),
    /// running, failed (waiting to retry), permanently_failed (out of attempts).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(inspect::JOB_STATES))]
    state: Option<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 100)]
    limit: i64,
}

/// `formica reschedule`.
#[derive(Debug, Args)]
pub struct RescheduleArgs {
    /// Job ids.
    ids: Vec<i64>,
    /// New earliest run time, RFC 3339 such as 2030-01-31T09:30:00Z.
    #[arg(long, value_parser = parse_time)]
    run_at: Option<DateTime<Utc>>,
    /// New priority.
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i16>,
    /// New attempt count.
    #[arg(long)]
    attempts: Option<i16>,
    /// New attempt limit.
    #[arg(long)]
    max_attempts: Option<i16>,
    #[command(flatten)]
    bulk: crate::bulk::Selection,
}

/// Run one utility subcommand: actions on `utils` (the primary), listings on `reads` (a read
/// replica if one was given, else the primary).
pub async fn run(
    command: Admin,
    utils: &WorkerUtils,
    reads: &WorkerUtils,
    out: Output,
) -> Result<(), Failure> {
    use crate::dead_letters::DeadLetterCommand;
    use crate::schedule::ScheduleCommand;
    use crate::workflow::WorkflowCommand;
    match command {
        Admin::Add(a) => {
            let payload: Value = match &a.payload {
                Some(text) => serde_json::from_str(text)?,
                None => json!({}),
            };
            let spec = JobSpec {
                queue_name: a.queue,
                run_at: a.run_at,
                max_attempts: a.max_attempts,
                job_key: a.job_key,
                job_key_mode: a.job_key_mode,
                priority: a.priority,
                flags: a.flags,
                unique: None,
            };
            let job = utils.add_raw_job(&a.task, payload, spec).await?;
            print_jobs(out, &[job]);
        }
        Admin::Jobs(a) => {
            let filter = JobFilter {
                task: a.task,
                queue: a.queue,
                failed: a.failed,
                locked: a.locked,
                state: a.state,
                limit: a.limit,
            };
            print_listing(out, &reads.list_jobs(&filter).await?);
        }
        Admin::Job { id } => match inspect::job(reads, id).await? {
            Some(Ok(job)) => {
                print_job(out, &job);
                crate::output::print_logs(out, &reads.job_logs(id).await?);
            }
            Some(Err(bad)) => {
                return Err(Failure::Command(format!("cannot read {}", inspect::describe(&bad))));
            }
            // A finished job left the queue: its history row tells how it ended.
            None => match reads.job_outcome(id).await? {
                Some(run) => {
                    crate::history::print_outcome(out, &run);
                    crate::output::print_logs(out, &reads.job_logs(id).await?);
                }
                None => {
                    return Err(Failure::Command(format!(
                        "no job {id}: it is not in the queue, and the history has no run of it \
                         (it never existed, or finished with history off or pruned)"
                    )))
                }
            },
        },
        Admin::Why { job } => crate::why::why(&job, reads, out).await?,
        Admin::History(a) => crate::history::list(a, reads, out).await?,
        Admin::Ui(a) => serve_ui(a, utils, reads).await?,
        Admin::Schedule(command @ ScheduleCommand::List) => crate::schedule::run(command, reads, out).await?,
        Admin::Schedule(command) => crate::schedule::run(command, utils, out).await?,
        Admin::Pause(a) => crate::controls::pause(a, utils, out).await?,
        Admin::Resume(a) => crate::controls::resume(a, utils, out).await?,
        Admin::Paused => crate::controls::paused(reads, out).await?,
        Admin::Cap(a) => crate::controls::cap(a, utils, out).await?,
        Admin::Uncap(target) => crate::controls::remove(target, ControlKind::Cap, utils, out).await?,
        Admin::Caps => crate::controls::list(ControlKind::Cap, reads, out).await?,
        Admin::Limit(a) => crate::controls::limit(a, utils, out).await?,
        Admin::Unlimit(target) => crate::controls::remove(target, ControlKind::RateLimit, utils, out).await?,
        Admin::Limits => crate::controls::list(ControlKind::RateLimit, reads, out).await?,
        Admin::Age(a) => crate::controls::age(a, utils, out).await?,
        Admin::Unage { task } => crate::controls::unage(task, utils, out).await?,
        Admin::Agings => crate::controls::agings(reads, out).await?,
        Admin::Bound(a) => crate::controls::bound(a, utils, out).await?,
        Admin::Unbound(target) => crate::controls::remove(target, ControlKind::Bound, utils, out).await?,
        Admin::Bounds => crate::controls::list(ControlKind::Bound, reads, out).await?,
        Admin::Fair(a) => crate::controls::fair(a, utils, out).await?,
        Admin::Unfair(target) => crate::controls::remove(target, ControlKind::Fair, utils, out).await?,
        Admin::Fairness => crate::controls::list(ControlKind::Fair, reads, out).await?,
        Admin::DeadLetter(command @ DeadLetterCommand::List) => {
            crate::dead_letters::run(command, reads, out).await?
        }
        Admin::DeadLetter(command) => crate::dead_letters::run(command, utils, out).await?,
        Admin::Workflows(a) => crate::workflow::list(a, reads, out).await?,
        Admin::Workflow(command @ WorkflowCommand::Show { .. }) => {
            crate::workflow::run(command, reads, out).await?
        }
        Admin::Workflow(command) => crate::workflow::run(command, utils, out).await?,
        Admin::Encryption(EncryptionCommand::Rotate { keys, batch }) => {
            let keyring = formica_tokio::Keyring::parse(&keys)?;
            let rotated = utils.rotate_payloads(&keyring, batch).await?;
            match out {
                Output::Json => crate::output::print_json(&json!(rotated)),
                _ => println!(
                    "rewritten {}, skipped {} (changed or held meanwhile)",
                    rotated.rewritten, rotated.skipped
                ),
            }
        }
        Admin::Status => {
            let overview = inspect::overview(reads).await?;
            let workers = inspect::workers(reads).await?;
            let version = inspect::schema_version(reads).await?;
            crate::output::print_status(out, &overview, &workers, version);
        }
        Admin::Doctor(args) => return crate::doctor::run(args, utils, out).await,
        Admin::Complete { ids } => {
            let jobs = utils.complete_jobs(&ids).await?;
            print_jobs(out, &jobs);
            all_matched(&ids, &job_ids(&jobs), "completed", NOT_FOUND_OR_HELD)?;
        }
        Admin::Fail { ids, reason } => {
            let jobs = utils.permanently_fail_jobs(&ids, reason.as_deref()).await?;
            print_jobs(out, &jobs);
            all_matched(&ids, &job_ids(&jobs), "failed", NOT_FOUND_OR_HELD)?;
        }
        Admin::Reschedule(a) => {
            let options = RescheduleJobOptions {
                run_at: a.run_at,
                priority: a.priority,
                attempts: a.attempts,
                max_attempts: a.max_attempts,
            };
            if a.bulk.given() {
                return crate::bulk::run(BulkAction::Reschedule(options), &a.ids, &a.bulk, utils, out).await;
            }
            by_ids(&a.ids)?;
            let jobs = utils.reschedule_jobs(&a.ids, &options).await?;
            print_jobs(out, &jobs);
            all_matched(&a.ids, &job_ids(&jobs), "rescheduled", NOT_FOUND_OR_HELD)?;
        }
        Admin::Cancel { ids, reason, bulk } => {
            if bulk.given() {
                return crate::bulk::run(BulkAction::Cancel { reason }, &ids, &bulk, utils, out).await;
            }
            by_ids(&ids)?;
            let cancelled = utils.cancel_jobs(&ids, &reason).await?;
            // What was recorded, not what a worker may have heard: a request is a row its
            // holder reads within a heartbeat.
            let mut rows: Vec<Vec<String>> = cancelled
                .failed
                .iter()
                .map(|id| vec![id.to_string(), "failed for good".to_owned()])
                .collect();
            rows.extend(cancelled.recorded.iter().map(|r| {
                let what = if r.leased {
                    format!("recorded for worker {}, which aborts it within ~3 s", r.worker_id)
                } else {
                    format!(
                        "recorded for {}, which has no Formica lease: it runs on, and fails as cancelled when released",
                        r.worker_id
                    )
                };
                vec![r.job_id.to_string(), what]
            }));
            let recorded: Vec<Value> = cancelled
                .recorded
                .iter()
                .map(|r| json!({ "id": r.job_id, "worker": r.worker_id, "leased": r.leased }))
                .collect();
            let json = json!({ "failed": cancelled.failed, "recorded": recorded });
            print_table(out, &["id", "cancelled"], rows, json);
            let done: Vec<i64> =
                cancelled.failed.iter().copied().chain(cancelled.recorded.iter().map(|r| r.job_id)).collect();
            all_matched(
                &ids,
                &done,
                "cancelled",
                "no such job (it completed, was removed, or never existed)",
            )?;
        }
        Admin::Retry { ids, bulk } => crate::bulk::run(BulkAction::Retry, &ids, &bulk, utils, out).await?,
        Admin::Delete { ids, bulk } => crate::bulk::run(BulkAction::Delete, &ids, &bulk, utils, out).await?,
        Admin::Remove { key } => {
            let Some(job) = utils.remove_job(&key).await? else {
                return Err(Failure::Command(format!("no job has the key {key:?}")));
            };
            print_jobs(out, &[job]);
        }
        Admin::Unlock { worker_ids, even_if_alive } => {
            // What each held, read first: a mistyped id then shows as holding nothing.
            let holders = inspect::workers(utils).await?;
            let ids: Vec<&str> = worker_ids.iter().map(String::as_str).collect();
            let unlocked = if even_if_alive {
                utils.force_unlock_workers_even_if_alive(&ids).await
            } else {
                utils.force_unlock_workers(&ids).await
            };
            if let Err(e @ formica_tokio::Error::WorkersAlive(_)) = unlocked {
                return Err(Failure::Command(format!(
                    "{e}. If you know they are dead, run again with --even-if-alive."
                )));
            }
            unlocked?;
            let held: Vec<(&str, i64, i64)> = ids
                .iter()
                .map(|&id| {
                    let holder = holders.iter().find(|w| w.worker_id == id);
                    holder.map_or((id, 0, 0), |w| (id, w.jobs, w.queues))
                })
                .collect();
            let json: Vec<Value> = held
                .iter()
                .map(|(id, jobs, queues)| json!({ "worker": id, "jobs": jobs, "queues": queues }))
                .collect();
            let rows = held
                .iter()
                .map(|(id, jobs, queues)| vec![id.to_string(), jobs.to_string(), queues.to_string()]);
            print_table(
                out,
                &["worker", "jobs released", "queues released"],
                rows.collect(),
                json!({ "unlocked": json }),
            );
        }
    }
    Ok(())
}

/// Refuse a verb that works by id given none (and no filter).
fn by_ids(ids: &[i64]) -> Result<(), Failure> {
    if ids.is_empty() {
        return Err(Failure::Command("give job ids, or a filter (--task, --failed, ... or --all)".into()));
    }
    Ok(())
}

fn job_ids(jobs: &[Job]) -> Vec<i64> {
    jobs.iter().map(|job| job.id).collect()
}

/// Serve the dashboard on `a.bind` until Ctrl-C or SIGTERM.
async fn serve_ui(a: UiArgs, utils: &WorkerUtils, reads: &WorkerUtils) -> Result<(), Failure> {
    let default_crontab = std::path::PathBuf::from("crontab");
    let crontab = match a.crontab.or_else(|| default_crontab.is_file().then_some(default_crontab)) {
        Some(file) => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Failure::Command(format!("cannot read {}: {e}", file.display())))?;
            Some(
                formica_tokio::cron::parse(&text)
                    .map_err(|e| Failure::Command(format!("{}: {e}", file.display())))?,
            )
        }
        None => None,
    };
    let tokens = [(formica_ui::Role::Operator, a.operator_token), (formica_ui::Role::Viewer, a.viewer_token)];
    let tokens = tokens.into_iter().filter_map(|(role, token)| Some((role, token?))).collect();
    // With no replica given, `reads` shares the primary's pool.
    let reads = Some(reads.clone());
    let options = formica_ui::Options { read_only: a.read_only, token: a.token, tokens, crontab, reads };
    formica_ui::check_bind(&a.bind, &options).map_err(Failure::Command)?;
    let listener = tokio::net::TcpListener::bind(a.bind)
        .await
        .map_err(|e| Failure::Command(format!("cannot listen on {}: {e}", a.bind)))?;
    let mode = if options.read_only { " (read-only)" } else { "" };
    tracing::info!("dashboard on http://{}/{mode}", a.bind);
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term = async {
            match term.as_mut() {
                Some(t) => t.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    };
    formica_ui::serve(listener, utils.clone(), options, shutdown)
        .await
        .map_err(|e| Failure::Command(format!("the dashboard stopped: {e}")))
}
