-- Cancel the jobs $1 with the reason $2. A job no worker holds fails for good at once
-- (attempts = max_attempts, last_error 'cancelled: <reason>'): kept, so the reason can be
-- read, until cleaned up as any permanently failed job. A held job's worker is told on
-- 'formica:cancel'; it aborts the task and fails the job the same way, unless the task
-- succeeded first. Rows: the job ids and whether each was held (told) or failed here.
with waiting as (
  update :SCHEMA._private_jobs as jobs
  set last_error = 'cancelled: ' || $2::text, attempts = jobs.max_attempts
  where jobs.id = any($1::bigint[]) and jobs.locked_at is null
  returning jobs.id
),
held as (
  select jobs.id from :SCHEMA._private_jobs as jobs
  where jobs.id = any($1::bigint[]) and jobs.locked_at is not null
),
told as (
  select pg_notify('formica:cancel', json_build_object('ids', array_agg(held.id), 'reason', $2::text)::text)
  from held
  having count(*) > 0
)
select waiting.id, false as held from waiting
union all
select held.id, true as held from held cross join (select count(*) from told) as notified
order by 1
