//! Statements of the worker loop, and the forms the worker sends them in (each made by
//! [`fill`] from its template and the parts its form takes). Each takes the worker (pool) id
//! as `$1` where it locks or releases jobs, so a worker never touches a job another one holds.

use crate::fill::{fill, FillError};
use crate::{dead_letters, history, traces, workflows};

/// `$1` worker, `$2` tasks, `$3` flags refused, `$4` now or null, `$5` limit, `$6` flags
/// one of which is required (empty: none); with [`Fetch::excluding_queues`], `$7` the named
/// queues left out. Its candidates are [`GET_JOBS_SCAN`]'s or [`GET_JOBS_WALK`]'s.
pub const GET_JOBS: &str = include_str!("../queries/worker/get_jobs.sql");
/// The candidates of [`GET_JOBS`] found in one scan of every priority (see the file).
pub const GET_JOBS_SCAN: &str = include_str!("../queries/worker/get_jobs_scan.sql");
/// The candidates of [`GET_JOBS`] found one priority at a time (see the file).
pub const GET_JOBS_WALK: &str = include_str!("../queries/worker/get_jobs_walk.sql");
/// What makes a job one [`GET_JOBS_WALK`] may take (its marker `DUE`, in both of its ranges).
const WALK_DUE: &str = include_str!("../queries/worker/get_jobs_walk_due.sql");
/// The fetch of a worker some of whose tasks are capped or rate limited (see the file).
pub const GET_JOBS_CONTROLLED: &str = include_str!("../queries/worker/get_jobs_controlled.sql");

/// A form of the plain fetch [`GET_JOBS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fetch {
    /// Walk the priorities present ([`GET_JOBS_WALK`]) rather than scan them all at once: the
    /// same jobs, cheaper when few are due among many scheduled later.
    pub walk: bool,
    /// Leave out the jobs of the named queues in `$7` (`text[]`): the plain form has no such
    /// parameter and costs nothing more.
    pub excluding_queues: bool,
    /// Answer each job's trace context too (columns `traceparent`, `tracestate`).
    pub traced: bool,
}

/// The fetch [`GET_JOBS`] in `form`.
pub fn get_jobs(form: Fetch) -> Result<String, FillError> {
    let filter = match form.excluding_queues {
        true => "and job_queues.queue_name <> all($7::text[])",
        false => "",
    };
    let candidates = match form.walk {
        true => fill(GET_JOBS_WALK, &[("QUEUE_FILTER", filter), ("DUE", walk_due().trim_end())])?,
        false => fill(GET_JOBS_SCAN, &[("QUEUE_FILTER", filter)])?,
    };
    let [columns, join] = traces::fetch_parts(form.traced);
    fill(GET_JOBS, &[("CANDIDATES", candidates.trim_end()), columns, join])
}

/// [`WALK_DUE`] without its comment lines.
fn walk_due() -> String {
    WALK_DUE.lines().filter(|line| !line.starts_with("--")).map(|line| format!("{line}\n")).collect()
}

/// The controlled fetch [`GET_JOBS_CONTROLLED`], answering each job's trace context too if
/// `traced`.
pub fn get_jobs_controlled(traced: bool) -> Result<String, FillError> {
    fill(GET_JOBS_CONTROLLED, &traces::fetch_parts(traced))
}

/// What a statement that ends jobs writes besides: their history rows, and the settling of
/// the workflow jobs among them (for a statement that ends some: a job released by a
/// workflow carries the flag `formica:workflow`, so the others stay plain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ending {
    /// Each job that ends for good gets its history row.
    pub history: bool,
    /// The workflow jobs among them settle.
    pub settling: bool,
    /// A completion with history carries the outputs of some of its jobs (`$3`, `$4`), which
    /// their history and workflow rows store.
    pub outputs: bool,
}

/// [`COMPLETE_JOBS`] writing what `ending` says; with history and outputs, `$3` job ids and
/// `$4` their outputs (JSON text).
pub fn complete_jobs(ending: Ending) -> Result<String, FillError> {
    let outputs = ending.history && ending.outputs;
    let settling = match ending.settling {
        true => workflows::complete_part(outputs)?,
        false => String::new(),
    };
    let [(columns, columns_text), (cte, cte_text)] = history::complete_parts(ending.history, outputs)?;
    fill(COMPLETE_JOBS, &[(columns, &columns_text), (cte, &cte_text), ("WORKFLOW", &settling)])
}

/// [`FAIL_JOBS`] writing what `ending` says.
pub fn fail_jobs(ending: Ending) -> Result<String, FillError> {
    let [columns, cte] = history::fail_parts(ending.history);
    let [settled_columns, settling] = workflows::fail_parts(ending.settling);
    fill(FAIL_JOBS, &[columns, cte, settled_columns, settling, ("DEAD_LETTERS", dead_letters::SEND)])
}

/// [`RECOVER_LAPSED`] writing, with `history`, the history of the jobs whose lost attempt
/// was their last.
pub fn recover_lapsed(history: bool) -> Result<String, FillError> {
    fill(RECOVER_LAPSED, &history::recover_parts(history))
}

/// [`RESET_LOCKED`] writing, with `history`, the history of the jobs whose lost attempt was
/// their last.
pub fn reset_locked(history: bool) -> Result<String, FillError> {
    fill(RESET_LOCKED, &history::recover_parts(history))
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
/// Sent before a statement that ends jobs, a completion or a failure, which it runs with its
/// generic plan (see the file).
pub const ENDING_BEGIN: &str = include_str!("../queries/worker/ending_begin.sql");
/// Sent before a fetch (`fetch_begin.sql`), with a turn's wait if `taking_turns` (`fetch_turn.sql`).
pub fn fetch_begin(schema: &str, taking_turns: bool) -> Result<String, FillError> {
    let hash = schema.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let key = i32::from_ne_bytes(hash.to_ne_bytes()).to_string(); // FNV-1a: stable, one per schema
    let turn = fill(include_str!("../queries/worker/fetch_turn.sql"), &[("TURNS_KEY", &key)])?;
    Ok(include_str!("../queries/worker/fetch_begin.sql").to_owned() + if taking_turns { &turn } else { "" })
}
/// `$1` worker runs the crontab `$2` (canonical text) and the tasks `$3`, accepts the flags
/// `$4` and refuses `$5`: recorded on its lease.
pub const RECORD_RUNS: &str = include_str!("../queries/worker/record_runs.sql");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_schema_has_turns_of_its_own() {
        let (a, b) = (fetch_begin("graphile_worker", true).unwrap(), fetch_begin("other", true).unwrap());
        assert!(a.starts_with(fetch_begin("other", false).unwrap().as_str()), "{a}");
        assert!(a.contains("pg_advisory_xact_lock") && !a.contains("TURNS_KEY"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, fetch_begin("graphile_worker", true).unwrap(), "stable");
    }

    #[test]
    fn every_fetch_form_is_made_whole() {
        for walk in [false, true] {
            for excluding_queues in [false, true] {
                for traced in [false, true] {
                    let fetch = get_jobs(Fetch { walk, excluding_queues, traced }).unwrap();
                    assert_eq!(fetch.contains("with recursive tasks as ("), walk, "{fetch}");
                    assert_eq!(fetch.matches("<> all($7::text[])").count(), usize::from(excluding_queues));
                    assert_eq!(fetch.contains("traces.traceparent, traces.tracestate"), traced);
                    assert_eq!(fetch.contains("left join :RECORDS.job_traces as traces"), traced);
                    let (_, rest) = GET_JOBS.split_once("/*:CANDIDATES*/").unwrap();
                    let (rest, _) = rest.split_once("/*:TRACE_COLUMNS*/").unwrap();
                    assert!(fetch.contains(rest), "the rest of the statement is the plain fetch's");
                }
            }
            let controlled = get_jobs_controlled(walk).unwrap();
            assert!(
                controlled.contains("lock_jobs_controlled(") && !controlled.contains("/*:"),
                "{controlled}"
            );
        }
    }

    #[test]
    fn the_ending_forms_write_history_and_settle_workflows_where_asked() {
        for history in [false, true] {
            for settling in [false, true] {
                for outputs in [false, true] {
                    let ending = Ending { history, settling, outputs };
                    for sql in [complete_jobs(ending).unwrap(), fail_jobs(ending).unwrap()] {
                        assert_eq!(sql.contains("insert into :RECORDS.job_history"), history, "{sql}");
                        assert_eq!(sql.contains("update :RECORDS.workflow_jobs"), settling, "{sql}");
                    }
                    // Each part that stores the outputs joins them, only where a completion
                    // with history carries some.
                    let complete = complete_jobs(ending).unwrap();
                    let carried = history && outputs;
                    let joins = complete.matches("unnest($3::bigint[], $4::text[])").count();
                    assert_eq!(joins, usize::from(carried) * (1 + usize::from(settling)), "{complete}");
                    assert_eq!(complete.contains("output = outputs.output::json"), carried && settling);
                    assert_eq!(complete.contains("worker_id , output)"), carried, "{complete}");
                }
            }
            for sql in [recover_lapsed(history).unwrap(), reset_locked(history).unwrap()] {
                assert_eq!(sql.contains("insert into :RECORDS.job_history"), history, "{sql}");
            }
        }
    }
}
