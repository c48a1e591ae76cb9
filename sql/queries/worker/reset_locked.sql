-- Free jobs and queues locked before $1 (a time four hours back, or null: four hours
-- before the database clock): their worker is taken to be dead. The crashed attempt
-- still counts; the job becomes runnable at once. As in recover_lapsed.sql, last_error
-- says the attempt was lost and whose it was (the core's wording,
-- formica_core::worker::stale_error), so a job that lost its last attempt is listed and
-- retried as failed; with history on, sql/queries/history/recover.sql is added where
-- marked (the row of a job so ended).
with jobs_freed as (
  update :SCHEMA._private_jobs as jobs
  set locked_at = null, locked_by = null, run_at = greatest(jobs.run_at, now()),
    last_error = 'attempt ' || jobs.attempts || ' lost: worker ' || coalesce(jobs.locked_by, 'unknown')
      || ' held it over four hours'
  where jobs.locked_at < coalesce($1::timestamptz, now() - interval '4 hours')
  returning jobs.id /*:HISTORY_COLUMNS*/
),
/*:HISTORY*/
queues_freed as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_at = null, locked_by = null
  where job_queues.locked_at < coalesce($1::timestamptz, now() - interval '4 hours')
)
select count(*) from jobs_freed
