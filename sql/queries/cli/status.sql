-- Job counts per task and queue: ready (runnable now), scheduled (runnable later), running
-- (locked), failed (waiting to retry after an error), permanently failed (out of attempts).
select jobs.task_identifier, jobs.queue_name,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.run_at <= now()) as ready,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.run_at > now()) as scheduled,
  count(*) filter (where jobs.locked_at is not null) as running,
  count(*) filter (where jobs.locked_at is null and jobs.attempts < jobs.max_attempts and jobs.last_error is not null) as failed,
  count(*) filter (where jobs.locked_at is null and jobs.attempts >= jobs.max_attempts) as permanently_failed
from :SCHEMA.jobs as jobs
group by jobs.task_identifier, jobs.queue_name
order by jobs.task_identifier, jobs.queue_name nulls first
