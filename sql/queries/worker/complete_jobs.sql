-- Delete the jobs $2 that worker $1 still holds (a job whose lock was swept or recovered and
-- taken by another worker is left to that worker) and release their queues. Rows: the jobs
-- of $2 not deleted (fenced off), each with who holds it now (null: no one, or it is gone).
-- The trace contexts of the jobs deleted go with them (one primary-key probe each, if any
-- job is traced). The comments mark where history (formica_sql::history) adds its write,
-- and where a completion of workflow jobs settles them (formica_sql::workflows).
with completed as (
  delete from :SCHEMA._private_jobs as jobs
  where jobs.id = any($2::bigint[]) and jobs.locked_by = $1::text
  returning jobs.id, jobs.job_queue_id /*:HISTORY_COLUMNS*/
),
/*:HISTORY*/
untraced as (
  -- One look a statement, where no job is traced, spares a probe a job.
  delete from :RECORDS.job_traces as traces
  where exists (select from :RECORDS.job_traces)
    and traces.job_id in (select completed.id from completed)
),
/*:WORKFLOW*/
released as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_by = null, locked_at = null
  from completed
  where job_queues.id = completed.job_queue_id and job_queues.locked_by = $1::text
)
-- Only when a job was left out (a one-time filter: the usual answer costs nothing more);
-- each holder by the primary key.
select fenced.id,
  (select jobs.locked_by from :SCHEMA._private_jobs as jobs where jobs.id = fenced.id)
from unnest($2::bigint[]) as fenced(id)
where (select count(*) from completed) < cardinality($2::bigint[])
  and fenced.id not in (select completed.id from completed)
