-- Cancel the jobs $1 with the reason $2. The jobs are locked first (in id order), so each is
-- read as it is now and no worker releases one before this commits. A job no worker holds
-- fails for good at once (attempts = max_attempts, last_error 'cancelled: <reason>'): kept,
-- so the reason can be read, until cleaned up as any permanently failed job. For a held job a
-- request is recorded in :RECORDS.cancel_requests (an earlier one keeps its reason) and the
-- workers are woken on 'formica:cancel' with an empty payload: the holder reads its requests
-- then and after each heartbeat, aborts the task and fails the job the same way, unless the
-- task succeeded first. Rows: each job id found, with its holder (null: failed here) and
-- whether that holder has a Formica lease (so it reads requests; graphile-worker does not).
with targets as (
  select jobs.id, jobs.locked_at, jobs.locked_by from :SCHEMA._private_jobs as jobs
  where jobs.id = any($1::bigint[])
  order by jobs.id
  for update
),
waiting as (
  update :SCHEMA._private_jobs as jobs
  set last_error = 'cancelled: ' || $2::text, attempts = jobs.max_attempts
  from targets
  where jobs.id = targets.id and targets.locked_at is null
  returning jobs.id
),
held as (
  select targets.id, targets.locked_by from targets where targets.locked_at is not null
),
recorded as (
  insert into :RECORDS.cancel_requests (job_id, reason)
  select held.id, $2::text from held
  on conflict (job_id) do nothing
),
woken as (
  select pg_notify('formica:cancel', '') from held having count(*) > 0
)
select waiting.id, null::text as locked_by, false as leased from waiting
union all
select held.id, coalesce(held.locked_by, '') as locked_by,
  exists (select 1 from :RECORDS.leases as leases where leases.worker_id = held.locked_by) as leased
from held cross join (select count(*) from woken) as notified
order by 1
