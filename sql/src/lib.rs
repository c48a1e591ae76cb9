//! formica-sql: Formica's schema migrations and statements, as text. The driver runs them;
//! depend on this crate to read or run Formica's SQL with a client of your own.
//!
//! ```
//! // Statements name the schema through a placeholder, replaced when a statement is sent.
//! let sql = formica_sql::render("select count(*) from :SCHEMA.jobs", "graphile_worker");
//! assert_eq!(sql, r#"select count(*) from "graphile_worker".jobs"#);
//! // The ledger this Formica writes: graphile-worker 0.18's migrations 1 to 20.
//! assert_eq!(formica_sql::LATEST, 20);
//! ```
//!
//! Every statement names the schema through the placeholder `:SCHEMA`, which [`render`]
//! replaces with the quoted schema name each time the driver sends the statement (a string
//! replace, small beside the round trip), and Formica's own records (worker leases) through
//! `:RECORDS`: the schema [`records_schema`] names, kept apart so that graphile-worker's
//! schema and ledger stay exactly its own. The driver runs the SQL; the text stays plain.
//!
//! The ledger in `migrations` holds ids 1 to 20 with the same `breaking` flags as
//! graphile-worker 0.18, so a database migrated by either is accepted by the other. A
//! fresh database gets the final schema in one step ([`INSTALL`], recorded as ids 1 to
//! 20); a database that graphile-worker migrated to 16 or later gets the missing
//! [`STEPS`]. Older ones must first be brought to 16 by graphile-worker itself.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The placeholder every statement uses for the schema name.
pub const PLACEHOLDER: &str = ":SCHEMA";

/// Quote `schema` as an SQL identifier.
pub fn quote_ident(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// The placeholder of the schema of Formica's own records.
pub const RECORDS_PLACEHOLDER: &str = ":RECORDS";

/// The schema holding Formica's records for the graphile-worker schema `schema`:
/// `formica_<schema>` (`formica_graphile_worker` by default).
pub fn records_schema(schema: &str) -> String {
    format!("formica_{schema}")
}

/// `sql` with the placeholders replaced by the quoted `schema` and its records schema.
pub fn render(sql: &str, schema: &str) -> String {
    sql.replace(RECORDS_PLACEHOLDER, &quote_ident(&records_schema(schema)))
        .replace(PLACEHOLDER, &quote_ident(schema))
}

/// The migrations of Formica's records schema, in order (its own ledger, ids from 1).
pub const RECORDS_STEPS: &[Step] = &[
    Step { id: 1, sql: &[include_str!("../records/000001.sql")] },
    Step { id: 2, sql: &[CANCEL_REQUESTS] },
    Step { id: 3, sql: &[LEASE_IDENTITY] },
    Step { id: 4, sql: &[LEASE_CRONTAB] },
    Step { id: 5, sql: &[traces::JOB_TRACES] },
    Step { id: 6, sql: &[flow::PAUSES] },
    Step { id: 7, sql: &[history::JOB_HISTORY] },
    Step { id: 8, sql: &[schedules::TABLE] },
    Step { id: 9, sql: &[UNIQUE_CLAIMS] },
    Step { id: 10, sql: &[flow::RATE_LIMITS] },
    Step { id: 11, sql: &[workflows::TABLES] },
    Step { id: 12, sql: &[include_str!("../records/000012.sql")] },
    Step { id: 13, sql: &[include_str!("../records/000013.sql")] },
];

/// Claims of unique jobs not to add again within a period, finished or not (records step 9).
pub const UNIQUE_CLAIMS: &str = include_str!("../records/000009.sql");

/// The records' table of cancel requests for held jobs (records migration 2).
pub const CANCEL_REQUESTS: &str = include_str!("../records/000002.sql");

/// The leases' host, pid, version, start and last heartbeat (records migration 3).
pub const LEASE_IDENTITY: &str = include_str!("../records/000003.sql");

/// The crontab each worker runs, on its lease (records migration 4).
pub const LEASE_CRONTAB: &str = include_str!("../records/000004.sql");

/// The newest migration id Formica knows.
pub const LATEST: i32 = 20;
/// The oldest ledger state Formica upgrades from (graphile-worker's `_private_*` tables).
pub const OLDEST_UPGRADABLE: i32 = 16;
/// Migration ids that graphile-worker marks as breaking: a worker that knows fewer
/// refuses a database that has one of these.
pub const BREAKING: [i32; 7] = [1, 3, 11, 13, 14, 16, 19];

const ADD_JOBS_FN: &str = include_str!("../functions/add_jobs.sql");
const ADD_JOB_FN: &str = include_str!("../functions/add_job.sql");
const REMOVE_JOB_FN: &str = include_str!("../functions/remove_job.sql");
const ADMIN_FNS: &str = include_str!("../functions/admin.sql");

/// The whole schema, tables to functions, for a database that has none: recorded as
/// migrations 1 to [`LATEST`].
pub const INSTALL: &[&str] = &[
    include_str!("../migrations/schema.sql"),
    include_str!("../migrations/000017.sql"),
    ADD_JOBS_FN,
    ADD_JOB_FN,
    REMOVE_JOB_FN,
    ADMIN_FNS,
];

/// One upgrade step of the ledger.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// The ledger id it records.
    pub id: i32,
    /// Its SQL, in order, each with the schema placeholder.
    pub sql: &'static [&'static str],
}

impl Step {
    /// Whether graphile-worker counts this id as breaking.
    pub fn breaking(&self) -> bool {
        BREAKING.contains(&self.id)
    }
}

/// The steps after [`OLDEST_UPGRADABLE`], in order. Functions are written once, in their
/// final form, and (re)created by each step that changed them upstream.
pub const STEPS: &[Step] = &[
    Step { id: 17, sql: &[include_str!("../migrations/000017.sql")] },
    Step { id: 18, sql: &[include_str!("../migrations/000018.sql"), ADD_JOBS_FN, ADD_JOB_FN, REMOVE_JOB_FN] },
    Step { id: 19, sql: &[include_str!("../migrations/000019.sql")] },
    Step { id: 20, sql: &[include_str!("../migrations/000020.sql"), ADD_JOBS_FN, ADD_JOB_FN] },
];

/// Trace propagation (the driver's cargo feature `traces`): the W3C trace context a job was
/// added in, kept in the records schema beside the job, never in graphile-worker's schema.
pub mod traces {
    /// The records' table of trace contexts (records migration 5).
    pub const JOB_TRACES: &str = include_str!("../records/000005.sql");
    /// An add statement that also records its trace context: see the file.
    pub const ADD_TRACED: &str = include_str!("../queries/add_traced.sql");
    /// The line of [`ADD_TRACED`] the add statement replaces.
    const ADD_LINE: &str = "\n:ADD\n";
    /// `$1` the quoted name of the table [`JOB_TRACES`] creates, `$2` the records schema's
    /// name: whether this role can record contexts there (see the file).
    pub const RECORDABLE: &str = include_str!("../queries/trace_recordable.sql");

    /// The add statement `add` (one of `utils::ADD_JOB`, `ADD_JOBS`, `ADD_JOBS_PLAIN`), which
    /// takes `params` parameters, recording the trace context of the two after them:
    /// [`ADD_TRACED`] around it.
    pub fn add(add: &str, params: usize) -> String {
        ADD_TRACED
            .replace(":TRACEPARENT", &format!("${}", params + 1))
            .replace(":TRACESTATE", &format!("${}", params + 2))
            .replace(ADD_LINE, &format!("\n{add}\n"))
    }

    /// The worker's fetch `get_jobs` (`worker::GET_JOBS`) answering each job's trace context
    /// too (columns `traceparent`, `tracestate`), filled in where it marks them.
    pub fn fetch(get_jobs: &str) -> String {
        get_jobs.replace("/*:TRACE_COLUMNS*/", ", traces.traceparent, traces.tracestate").replace(
            "/*:TRACE_JOIN*/",
            "left join :RECORDS.job_traces as traces on traces.job_id = locked.id",
        )
    }
}

/// Workflows: jobs that wait for other jobs of their set (docs/guide/workflows.md).
pub mod workflows;

/// Job history (the worker's option `history`): the table of finished jobs, the completion
/// and failure statements that write it, and what reads and prunes it.
pub mod history;

/// Runtime schedules (records migration 8): see `records/000008.sql`.
pub mod schedules {
    /// The records' table of runtime schedules.
    pub const TABLE: &str = include_str!("../records/000008.sql");
    /// `$1` identifier, `$2` canonical line: add or replace, and notify.
    pub const PUT: &str = include_str!("../queries/schedules/put_schedule.sql");
    /// `$1` identifier: remove, and notify.
    pub const REMOVE: &str = include_str!("../queries/schedules/remove_schedule.sql");
    /// Every schedule with its `last_execution`.
    pub const LIST: &str = include_str!("../queries/schedules/list_schedules.sql");
    /// What a worker reads: identifier and line.
    pub const READ: &str = include_str!("../queries/worker/read_schedules.sql");
}

/// Flow control (pauses and caps): the records' tables and the statements behind
/// `WorkerUtils::pause`, `resume`, `paused`, `set_cap`, `remove_cap` and `caps`, and the
/// worker's fetches that leave paused named queues out and keep within caps.
pub mod flow {
    /// The records' tables of pauses and caps, and the capped fetch's function (records
    /// migration 6).
    pub const PAUSES: &str = include_str!("../records/000006.sql");
    /// See the file for parameters.
    pub const PAUSE: &str = include_str!("../queries/flow_pause.sql");
    /// See the file for parameters.
    pub const RESUME: &str = include_str!("../queries/flow_resume.sql");
    /// The pauses with their reason, author and time.
    pub const PAUSED: &str = include_str!("../queries/flow_paused.sql");
    /// The worker's read of the flow controls: see the file for the rows.
    pub const READ_FLOW: &str = include_str!("../queries/worker/read_flow.sql");
    /// See the file for parameters.
    pub const CAP: &str = include_str!("../queries/flow_cap.sql");
    /// See the file for parameters.
    pub const UNCAP: &str = include_str!("../queries/flow_uncap.sql");
    /// The caps with their author and time.
    pub const CAPS: &str = include_str!("../queries/flow_caps.sql");
    /// The fetch of a worker some of whose tasks are capped (see the file).
    pub const GET_JOBS_CAPPED: &str = include_str!("../queries/worker/get_jobs_capped.sql");
    /// The records' tables of rate limits and their starts, and the limited fetch's
    /// function (records migration 10).
    pub const RATE_LIMITS: &str = include_str!("../records/000010.sql");
    /// See the file for parameters.
    pub const LIMIT: &str = include_str!("../queries/flow_limit.sql");
    /// See the file for parameters.
    pub const UNLIMIT: &str = include_str!("../queries/flow_unlimit.sql");
    /// The rate limits with their author and time.
    pub const LIMITS: &str = include_str!("../queries/flow_limits.sql");
    /// The fetch of a worker some of whose tasks are rate limited (see the file).
    pub const GET_JOBS_LIMITED: &str = include_str!("../queries/worker/get_jobs_limited.sql");
    /// Where `worker::GET_JOBS` marks the filter of the named queues it may lock.
    const QUEUE_FILTER: &str = "/*:QUEUE_FILTER*/";

    /// The fetch `get_jobs` (`worker::GET_JOBS`, traced or not) leaving out the jobs of
    /// the named queues in its parameter `$7` (`text[]`); the plain one has no such
    /// parameter and costs nothing more.
    pub fn excluding_queues(get_jobs: &str) -> String {
        get_jobs.replace(QUEUE_FILTER, "and job_queues.queue_name <> all($7::text[])")
    }
}

/// Statements used by the migrator.
pub mod migrate {
    /// Server version and the ledger's newest and newest breaking ids.
    pub const PROBE: &str = include_str!("../queries/migration_probe.sql");
    /// Creates the schema and an empty ledger if missing.
    pub const BOOTSTRAP: &str = include_str!("../queries/migration_bootstrap.sql");
    /// Records ledger rows (the concurrency guard; run first in the migration's transaction).
    pub const RECORD: &str = include_str!("../queries/migration_record.sql");
    /// Announces applied migrations on `worker:migrate`.
    pub const NOTIFY: &str = include_str!("../queries/migration_notify.sql");
    /// Marks breaking ids in a ledger written before the column existed; `$1` the ids.
    pub const MARK_BREAKING: &str = "update :SCHEMA.migrations set breaking = true where id = any($1::int[])";
    /// Creates the records schema and its empty ledger if missing.
    pub const RECORDS_BOOTSTRAP: &str = include_str!("../queries/records_bootstrap.sql");
    /// The records' migration ids applied.
    pub const RECORDS_APPLIED: &str = include_str!("../queries/records_applied.sql");
    /// Records one records migration (the concurrency guard, as `RECORD`).
    pub const RECORDS_RECORD: &str = include_str!("../queries/records_record.sql");
}

/// Statements behind `WorkerUtils`: each that returns jobs returns `_private_jobs` columns
/// plus `task_identifier` and `queue_name`.
pub mod utils {
    /// See the file for parameters.
    pub const ADD_JOB: &str = include_str!("../queries/add_job.sql");
    /// `ADD_JOB`'s parameters, then `$10` the claim's period in microseconds: adds only if
    /// it claims the job key (see the file).
    pub const ADD_CLAIMED: &str = include_str!("../queries/add_claimed.sql");
    /// See the file for parameters.
    pub const ADD_JOBS: &str = include_str!("../queries/add_jobs.sql");
    /// See the file for parameters: [`ADD_JOBS`] for jobs without key and queue, faster.
    pub const ADD_JOBS_PLAIN: &str = include_str!("../queries/add_jobs_plain.sql");
    /// Names of task and queue ids (for rows whose names `ADD_JOBS` could not see).
    pub const NAMES: &str = include_str!("../queries/names.sql");
    /// See the file for parameters.
    pub const REMOVE_JOB: &str = include_str!("../queries/remove_job.sql");
    /// See the file for parameters.
    pub const COMPLETE_JOBS: &str = include_str!("../queries/complete_jobs.sql");
    /// See the file for parameters.
    pub const PERMANENTLY_FAIL_JOBS: &str = include_str!("../queries/permanently_fail_jobs.sql");
    /// `$1` job ids, `$2` reason; rows: (id, holder or null if failed here, whether the
    /// holder has a Formica lease). A held job gets a request in `:RECORDS.cancel_requests`.
    pub const CANCEL_JOBS: &str = include_str!("../queries/cancel_jobs.sql");
    /// See the file for parameters.
    pub const RESCHEDULE_JOBS: &str = include_str!("../queries/reschedule_jobs.sql");
    /// See the file for parameters.
    pub const FORCE_UNLOCK_WORKERS: &str = include_str!("../queries/force_unlock_workers.sql");
    /// Deletes jobs out of attempts that no worker holds.
    pub const CLEANUP_DELETE_PERMAFAILED_JOBS: &str =
        include_str!("../queries/cleanup_delete_permafailed_jobs.sql");
    /// Deletes unused task identifiers except `$1`.
    pub const CLEANUP_GC_TASK_IDENTIFIERS: &str = include_str!("../queries/cleanup_gc_task_identifiers.sql");
    /// Deletes unused, unlocked queues.
    pub const CLEANUP_GC_JOB_QUEUES: &str = include_str!("../queries/cleanup_gc_job_queues.sql");
}

/// Statements of the worker loop. Each takes the worker (pool) id as `$1` where it locks or
/// releases jobs, so a worker never touches a job another one holds.
pub mod worker {
    /// `$1` worker, `$2` tasks, `$3` flags refused, `$4` now or null, `$5` limit, `$6` flags
    /// one of which is required (empty: none).
    pub const GET_JOBS: &str = include_str!("../queries/worker/get_jobs.sql");
    /// The candidates of [`GET_JOBS`] found one priority at a time (see the file).
    const GET_JOBS_WALK: &str = include_str!("../queries/worker/get_jobs_walk.sql");

    /// The fetch `get_jobs` ([`GET_JOBS`], before its other forms are made of it) walking
    /// the priorities present (`sql/queries/worker/get_jobs_walk.sql`): the same jobs.
    pub fn walking(get_jobs: &str) -> String {
        let Some((head, rest)) = get_jobs.split_once("with candidates as (") else {
            return get_jobs.to_owned();
        };
        let Some((_, tail)) = rest.split_once("\n),\nchosen as (") else { return get_jobs.to_owned() };
        format!("{head}{},\nchosen as ({tail}", GET_JOBS_WALK.trim_end())
    }

    /// `$1` worker, `$2` job ids.
    pub const COMPLETE_JOBS: &str = include_str!("../queries/worker/complete_jobs.sql");
    /// `$1` worker, `$2` job ids, `$3` messages, `$4` next run times (null entries: backoff
    /// from the database clock), `$5` whether no attempt is left (cancelled), `$6` payloads
    /// to keep, `$7` retry delays in microseconds (null entries: graphile-worker's curve).
    pub const FAIL_JOBS: &str = include_str!("../queries/worker/fail_jobs.sql");
    /// `$1` worker, `$2` job ids: unlock with the attempt refunded.
    pub const RETURN_JOBS: &str = include_str!("../queries/worker/return_jobs.sql");
    /// See the file for parameters.
    pub const RETURN_UNKNOWN: &str = include_str!("../queries/worker/return_unknown.sql");
    /// `$1` locks older than this are freed (null: four hours before the database clock).
    pub const RESET_LOCKED: &str = include_str!("../queries/worker/reset_locked.sql");
    /// `$1` worker, `$2` lease in milliseconds: the worker is alive that long. One row:
    /// whether another Formica worker is alive.
    pub const HEARTBEAT: &str = include_str!("../queries/worker/heartbeat.sql");
    /// `$1` worker, which stopped: its lease lapses now (see the file).
    pub const END_LEASE: &str = include_str!("../queries/worker/end_lease.sql");
    /// Sent before a fetch (`fetch_begin.sql`), with a turn's wait if `taking_turns` (`fetch_turn.sql`).
    pub fn fetch_begin(schema: &str, taking_turns: bool) -> String {
        let hash = schema.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        let key = i32::from_ne_bytes(hash.to_ne_bytes()).to_string(); // FNV-1a: stable, one per schema
        let turn = include_str!("../queries/worker/fetch_turn.sql").replace(":TURNS_KEY", &key);
        include_str!("../queries/worker/fetch_begin.sql").to_owned() + if taking_turns { &turn } else { "" }
    }
    /// `$1` worker runs the crontab `$2` (canonical text): recorded on its lease.
    pub const RECORD_CRONTAB: &str = include_str!("../queries/worker/record_crontab.sql");
    /// `$1` grace in milliseconds: frees the locks of workers suspected dead for longer, and
    /// settles the cancel requests of jobs no worker holds.
    pub const RECOVER_LAPSED: &str = include_str!("../queries/worker/recover_lapsed.sql");
    /// `$1` worker: the cancel requests (job id, reason) of the jobs it holds.
    pub const READ_CANCELS: &str = include_str!("../queries/worker/read_cancels.sql");
    /// Make crontab identifiers known; rows: those known before, with their last slot.
    pub const REGISTER_CRONTABS: &str = include_str!("../queries/worker/register_crontabs.sql");
    /// Add the jobs of one cron slot, once across every worker; rows: the new job ids.
    pub const SCHEDULE_CRONTABS: &str = include_str!("../queries/worker/schedule_crontabs.sql");
    /// Jobs per task and state (runnable, scheduled, running, failed, permanently failed),
    /// sampled for metrics.
    pub const QUEUE_DEPTH: &str = include_str!("../queries/worker/queue_depth.sql");
    /// `$1` worker, `$2` job ids, `$3` delays in microseconds, `$4` run times (null entries:
    /// the database clock plus the delay): unlock with the attempt refunded, `last_error` kept.
    pub const SNOOZE_JOBS: &str = include_str!("../queries/worker/snooze_jobs.sql");
}

/// A job's one state, as an SQL expression over a `_private_jobs` row named `jobs`:
/// `running` (a worker holds it), `permanently_failed` (out of attempts), `ready` (may run
/// now, retries that are due included), `failed` (waiting to retry), `scheduled` (waiting
/// for its first run). Statements that need it name it `:JOB_STATE`; see [`with_job_state`].
pub const JOB_STATE: &str = "(case \
when jobs.locked_at is not null then 'running' \
when jobs.attempts >= jobs.max_attempts then 'permanently_failed' \
when jobs.run_at <= now() then 'ready' \
when jobs.last_error is not null then 'failed' \
else 'scheduled' end)";

/// The job states of [`JOB_STATE`], in the order people read them.
pub const JOB_STATES: [&str; 5] = ["ready", "scheduled", "running", "failed", "permanently_failed"];

/// `sql` with `:JOB_STATE` replaced by [`JOB_STATE`] (before [`render`]).
pub fn with_job_state(sql: &str) -> String {
    sql.replace(":JOB_STATE", JOB_STATE)
}

/// Read-only statements that show the queue and workflows (`formica::inspect`, behind the CLI,
/// the dashboard and `list_jobs`): none locks a row, or waits for or holds up a worker.
pub mod inspect {
    /// Counts per task, queue and state, with the oldest ready job and the failures of the
    /// last hour (uses `:JOB_STATE`).
    pub const COUNTS: &str = include_str!("../queries/inspect/counts.sql");
    /// Every worker with a lease (live or lapsed) or holding locks.
    pub const WORKERS: &str = include_str!("../queries/inspect/workers.sql");
    /// Whether worker `$1`'s lease holds (`/readyz`).
    pub const LEASE_HOLDS: &str = include_str!("../queries/inspect/lease_holds.sql");
    /// The crontab of each live worker that runs one.
    pub const LIVE_CRONTABS: &str = include_str!("../queries/inspect/live_crontabs.sql");
    /// `list_jobs`: `$1` task, `$2` queue, `$3` failed only, `$4` locked only, `$5` limit, `$6`
    /// state (uses `:JOB_STATE`); `_private_jobs` columns, `task_identifier`, `queue_name`.
    pub const LIST_JOBS: &str = include_str!("../queries/inspect/list_jobs.sql");
    /// The newest migration applied.
    pub const SCHEMA_VERSION: &str = include_str!("../queries/inspect/schema_version.sql");
    /// Jobs matching filters, before its [`JOBS_ORDER`] part (uses `:JOB_STATE`).
    pub const JOBS: &str = include_str!("../queries/inspect/jobs.sql");
    /// The orders of [`JOBS`]: name, and the part appended to it. The cursor is the last row
    /// of the previous page: `$7` its id, and for `next` `$8` its run_at and `$9` its
    /// priority. `next` is the workers' order (priority, then run_at) over the jobs that
    /// will run (not running, attempts left): it walks the fetch's own partial index.
    pub const JOBS_ORDER: [(&str, &str); 3] = [
        ("newest", "and ($7::bigint is null or jobs.id < $7::bigint) order by jobs.id desc limit $6"),
        ("oldest", "and ($7::bigint is null or jobs.id > $7::bigint) order by jobs.id limit $6"),
        (
            "next",
            // "After the cursor" as the index's range (priority, run_at) >= the cursor's,
            // less the ties already shown: a three-column row comparison instead is
            // estimated to match one row, and PostgreSQL then sorts the whole table.
            "and jobs.is_available = true \
             and ($7::bigint is null or ((jobs.priority, jobs.run_at) >= ($9::smallint, $8::timestamptz) \
               and not (jobs.priority = $9::smallint and jobs.run_at = $8::timestamptz and jobs.id <= $7::bigint))) \
             order by jobs.priority, jobs.run_at, jobs.id limit $6",
        ),
    ];
    /// One job, with its queue's lock (uses `:JOB_STATE`).
    pub const JOB: &str = include_str!("../queries/inspect/job.sql");
    /// Named queues and their lock holders.
    pub const QUEUES: &str = include_str!("../queries/inspect/queues.sql");
    /// Cron items seen and their last execution.
    pub const CRONTABS: &str = include_str!("../queries/inspect/crontabs.sql");
    /// Rows ever deleted from the jobs table; `$1` the schema name (unquoted).
    pub const DELETED_JOBS: &str = include_str!("../queries/inspect/deleted_jobs.sql");
    pub mod workflows;
}

/// Bulk actions on the jobs a filter picks (`formica::bulk`): one [`bulk::MATCHING`] for
/// every action, its dry run and each batch of its real run, with the action's own
/// condition and change filled in.
pub mod bulk {
    /// The jobs a filter picks, in id order, a batch at a time (uses `:JOB_STATE`, and
    /// `:ELIGIBLE` for the action's condition).
    pub const MATCHING: &str = include_str!("../queries/bulk/matching.sql");
    /// How many jobs `:MATCHING` picks (the dry run).
    pub const COUNT: &str = include_str!("../queries/bulk/count.sql");
    /// One batch: `:MATCHING` locked, then `:CHANGE`d.
    pub const BATCH: &str = include_str!("../queries/bulk/batch.sql");
    /// The newest job's id, where the walk ends.
    pub const LAST_ID: &str = include_str!("../queries/bulk/last_id.sql");

    /// What one action picks (`eligible`, an SQL condition on `jobs`) and does to the ids of
    /// a batch (`change`, a `select` over `batch` returning the ids changed).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Action {
        /// The condition a job must meet besides the filter.
        pub eligible: &'static str,
        /// The change.
        pub change: &'static str,
    }

    /// Run again now with a fresh set of attempts: jobs that have failed.
    pub const RETRY: Action =
        Action { eligible: "jobs.last_error is not null", change: include_str!("../queries/bulk/retry.sql") };
    /// New run_at, priority, attempts or max_attempts: any job no worker holds.
    pub const RESCHEDULE: Action =
        Action { eligible: "true", change: include_str!("../queries/bulk/reschedule.sql") };
    /// Fail for good as cancelled: jobs that would still run.
    pub const CANCEL: Action = Action {
        eligible: "jobs.attempts < jobs.max_attempts",
        change: include_str!("../queries/bulk/cancel.sql"),
    };
    /// Delete: any job no worker holds.
    pub const DELETE: Action =
        Action { eligible: "true", change: include_str!("../queries/bulk/delete.sql") };

    /// The dry run of `action`: how many jobs it would change.
    pub fn count(action: Action) -> String {
        COUNT.replace(":MATCHING", &matching(action))
    }

    /// One batch of `action`.
    pub fn batch(action: Action) -> String {
        BATCH.replace(":MATCHING", &matching(action)).replace(":CHANGE", action.change)
    }

    fn matching(action: Action) -> String {
        crate::with_job_state(MATCHING).replace(":ELIGIBLE", action.eligible)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_schema_has_turns_of_its_own() {
        let (a, b) = (worker::fetch_begin("graphile_worker", true), worker::fetch_begin("other", true));
        assert!(a.starts_with(worker::fetch_begin("other", false).as_str()), "{a}");
        assert!(a.contains("pg_advisory_xact_lock") && !a.contains(":TURNS_KEY"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, worker::fetch_begin("graphile_worker", true), "stable");
    }

    #[test]
    fn render_quotes_the_schema() {
        assert_eq!(render("select * from :SCHEMA.jobs", "my\"s"), "select * from \"my\"\"s\".jobs");
        assert_eq!(render("x):::SCHEMA.job_spec", "gw"), "x)::\"gw\".job_spec");
        assert_eq!(render(":RECORDS.leases, :SCHEMA.jobs", "gw"), "\"formica_gw\".leases, \"gw\".jobs");
    }

    #[test]
    fn the_traced_statements_fill_in_every_placeholder_of_their_own() {
        let add = traces::add(utils::ADD_JOB, 9);
        assert!(add.contains(utils::ADD_JOB) && add.contains("$10::text, $11::text"), "{add}");
        assert!(!add.contains(":ADD") && !add.contains(":TRACE"), "{add}");
        let fetch = traces::fetch(worker::GET_JOBS);
        assert!(fetch.contains("traces.traceparent, traces.tracestate"), "{fetch}");
        assert!(fetch.contains("left join :RECORDS.job_traces as traces"), "{fetch}");
    }

    #[test]
    fn the_history_statements_fill_in_every_marker() {
        for (sql, plain) in [
            (history::complete(worker::COMPLETE_JOBS), worker::COMPLETE_JOBS),
            (history::fail(worker::FAIL_JOBS), worker::FAIL_JOBS),
            (history::recover(worker::RECOVER_LAPSED), worker::RECOVER_LAPSED),
            (history::recover(worker::RESET_LOCKED), worker::RESET_LOCKED),
        ] {
            assert!(plain.contains("/*:HISTORY*/") && plain.contains("/*:HISTORY_COLUMNS*/"), "{plain}");
            assert!(!sql.contains("/*:HISTORY") && sql.contains("insert into :RECORDS.job_history"), "{sql}");
        }
    }

    #[test]
    fn the_walking_fetch_replaces_only_the_candidates() {
        let walking = worker::walking(worker::GET_JOBS);
        assert!(!walking.contains("with candidates as ("), "{walking}");
        assert!(walking.contains("with recursive tasks as (") && walking.contains("candidates as ("));
        let (_, plain_rest) = worker::GET_JOBS.split_once("\nchosen as (").unwrap();
        assert!(walking.ends_with(plain_rest), "the rest of the statement is the plain fetch's");
        assert_eq!(flow::excluding_queues(&walking).matches("<> all($7::text[])").count(), 1);
    }

    #[test]
    fn the_fetch_excluding_queues_filters_the_queues_it_locks() {
        let fetch = flow::excluding_queues(worker::GET_JOBS);
        assert!(fetch.contains("job_queues.is_available = true and job_queues.queue_name <> all($7::text[])"));
        assert_eq!(fetch.matches("$7").count(), 1, "{fetch}");
    }

    #[test]
    fn steps_run_from_oldest_upgradable_to_latest_in_order() {
        let ids: Vec<i32> = STEPS.iter().map(|s| s.id).collect();
        let expected: Vec<i32> = (OLDEST_UPGRADABLE + 1..=LATEST).collect();
        assert_eq!(ids, expected);
        assert!(STEPS.iter().find(|s| s.id == 19).is_some_and(Step::breaking));
    }
}
