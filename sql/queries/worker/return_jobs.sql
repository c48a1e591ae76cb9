-- Give back the jobs $2 that worker $1 holds but will not run (prefetched, or interrupted
-- by a forced shutdown): the attempt is refunded, run_at is kept. A job whose key add_job or
-- remove_job took while it was held (updated since its lock) keeps its attempts used up: it
-- was replaced or removed, and must not run again.
with returned as (
  update :SCHEMA._private_jobs as jobs
  set attempts = case when jobs.key is null and jobs.attempts >= jobs.max_attempts and jobs.updated_at > jobs.locked_at
    then jobs.attempts else greatest(0, jobs.attempts - 1) end,
    locked_by = null, locked_at = null
  where jobs.id = any($2::bigint[]) and jobs.locked_by = $1::text
  returning jobs.job_queue_id
)
update :SCHEMA._private_job_queues as job_queues
set locked_by = null, locked_at = null
from returned
where job_queues.id = returned.job_queue_id and job_queues.locked_by = $1::text
