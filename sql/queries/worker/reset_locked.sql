-- Free jobs and queues locked before $1 (a time four hours back, or null: four hours
-- before the database clock): their worker is taken to be dead. The crashed attempt
-- still counts; the job becomes runnable at once.
with jobs_freed as (
  update :SCHEMA._private_jobs as jobs
  set locked_at = null, locked_by = null, run_at = greatest(jobs.run_at, now())
  where jobs.locked_at < coalesce($1::timestamptz, now() - interval '4 hours')
)
update :SCHEMA._private_job_queues as job_queues
set locked_at = null, locked_by = null
where job_queues.locked_at < coalesce($1::timestamptz, now() - interval '4 hours')
