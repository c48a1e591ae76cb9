-- For the jobs $2 that worker $1 still holds: store the errors $3, schedule the next
-- attempts at $4 (a null entry: the later of the database clock and run_at, plus the delay
-- $7 in microseconds of a task with its own curve, else graphile-worker's), leave no attempt
-- where $5 is true (a cancelled job), store the payload $6 where it is not null (a batch job
-- keeps its failed items), unlock them and release their queues. Rows: the jobs of $2 not
-- written (fenced off), each with who holds it now (null: no one, or it is gone). The
-- comments mark where history (formica_sql::history) adds its write, where the jobs failed for
-- good are sent to their dead letters (formica_sql::dead_letters, in every form), and where a
-- failure of workflow jobs settles them (formica_sql::workflows).
with failed as (
  update :SCHEMA._private_jobs as jobs
  set last_error = u.message,
    run_at = coalesce(u.run_at,
      greatest(now(), jobs.run_at)
        + coalesce(u.delay_us * interval '1 microsecond', exp(least(jobs.attempts, 10)) * interval '1 second')),
    attempts = case when u.permanent then jobs.max_attempts else jobs.attempts end,
    payload = coalesce(u.payload::json, jobs.payload),
    locked_by = null,
    locked_at = null
  from unnest($2::bigint[], $3::text[], $4::timestamptz[], $5::bool[], $6::text[], $7::bigint[])
    as u(id, message, run_at, permanent, payload, delay_us)
  where jobs.id = u.id and jobs.locked_by = $1::text
  returning jobs.id, jobs.job_queue_id /*:WORKFLOW_COLUMNS*/ /*:HISTORY_COLUMNS*/
),
/*:HISTORY*/
/*:DEAD_LETTERS*/
/*:WORKFLOW*/
released as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_by = null, locked_at = null
  from failed
  where job_queues.id = failed.job_queue_id and job_queues.locked_by = $1::text
)
-- Only when a job was left out (a one-time filter: the usual answer costs nothing more);
-- each holder by the primary key.
select fenced.id,
  (select jobs.locked_by from :SCHEMA._private_jobs as jobs where jobs.id = fenced.id)
from unnest($2::bigint[]) as fenced(id)
where (select count(*) from failed) < cardinality($2::bigint[])
  and fenced.id not in (select failed.id from failed)
