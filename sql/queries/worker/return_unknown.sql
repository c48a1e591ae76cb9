-- Give back every job worker $1 holds that is not among $2, the jobs it knows it holds: a
-- fetch whose answer was lost locked them. The attempt is refunded (but not to a job
-- replaced or removed meanwhile, as in return_jobs.sql), run_at is kept, the queue
-- released. Sent only while no fetch of that worker is out.
with returned as (
  update :SCHEMA._private_jobs as jobs
  set attempts = case when jobs.key is null and jobs.attempts >= jobs.max_attempts and jobs.updated_at > jobs.locked_at
    then jobs.attempts else greatest(0, jobs.attempts - 1) end,
    locked_by = null, locked_at = null
  where jobs.locked_by = $1::text and not (jobs.id = any($2::bigint[]))
  returning jobs.job_queue_id
)
update :SCHEMA._private_job_queues as job_queues
set locked_by = null, locked_at = null
from returned
where job_queues.id = returned.job_queue_id and job_queues.locked_by = $1::text
