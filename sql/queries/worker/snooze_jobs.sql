-- For the jobs $2 that worker $1 still holds: run them again at $4 (a null entry: the
-- database clock plus $3 microseconds), refund the attempt (but not to a job replaced or
-- removed while held, as in return_jobs.sql), keep last_error as it is,
-- unlock them and release their queues: a snooze is neither a failure nor a success. Rows:
-- the jobs of $2 not written (fenced off), each with who holds it now (null: no one, or
-- it is gone).
with snoozed as (
  update :SCHEMA._private_jobs as jobs
  set run_at = coalesce(u.run_at, now() + u.delay_us * interval '1 microsecond'),
    attempts = case when jobs.key is null and jobs.attempts >= jobs.max_attempts and jobs.updated_at > jobs.locked_at
      then jobs.attempts else greatest(0, jobs.attempts - 1) end,
    locked_by = null,
    locked_at = null
  from unnest($2::bigint[], $3::bigint[], $4::timestamptz[]) as u(id, delay_us, run_at)
  where jobs.id = u.id and jobs.locked_by = $1::text
  returning jobs.id, jobs.job_queue_id
),
released as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_by = null, locked_at = null
  from snoozed
  where job_queues.id = snoozed.job_queue_id and job_queues.locked_by = $1::text
)
select fenced.id,
  (select jobs.locked_by from :SCHEMA._private_jobs as jobs where jobs.id = fenced.id)
from unnest($2::bigint[]) as fenced(id)
where (select count(*) from snoozed) < cardinality($2::bigint[])
  and fenced.id not in (select snoozed.id from snoozed)
