-- Jobs per task and state, for metrics; the states do not overlap, so they add up to the
-- jobs there are: running (locked), permanently failed (out of attempts), failed (waiting
-- to retry after an error, due or not), runnable (due now, never failed), scheduled (due
-- later, never failed). One scan of the jobs table. And how long the oldest due job (not
-- locked, attempts left, run_at passed) has waited, in seconds (null: none is due).
select tasks.identifier as task,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.last_error is null and jobs.run_at <= now()) as runnable,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.last_error is null and jobs.run_at > now()) as scheduled,
  count(*) filter (where jobs.locked_at is not null) as running,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.last_error is not null) as failed,
  count(*) filter (where jobs.locked_at is null and jobs.attempts >= jobs.max_attempts) as permanently_failed,
  extract(epoch from now() - min(jobs.run_at) filter (
    where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.run_at <= now()))::float8 as oldest_due_age
from :SCHEMA._private_jobs as jobs
join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
group by tasks.identifier
