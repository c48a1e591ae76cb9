-- Delete the jobs $2 that worker $1 still holds (a job whose lock was swept and taken by
-- another worker is left to that worker) and release their queues.
with completed as (
  delete from :SCHEMA._private_jobs as jobs
  where jobs.id = any($2::bigint[]) and jobs.locked_by = $1::text
  returning jobs.job_queue_id
)
update :SCHEMA._private_job_queues as job_queues
set locked_by = null, locked_at = null
from completed
where job_queues.id = completed.job_queue_id and job_queues.locked_by = $1::text
