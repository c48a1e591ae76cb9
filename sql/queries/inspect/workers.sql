-- Every worker with a lease (live, or lapsed and not yet swept) and every worker holding
-- locks (graphile-worker's have no lease): its id, the jobs and queues it holds and since
-- when, its host, process, version, when its lease began and was last renewed, until when
-- it runs, when it stopped cleanly, whether it lapsed without stopping (died, by the
-- database clock), and the crontab it runs.
with locks as (
  select locked_by, count(*) filter (where is_job) as jobs, count(*) filter (where not is_job) as queues,
    min(locked_at) as since
  from (
    select locked_by, locked_at, true as is_job from :SCHEMA._private_jobs where locked_by is not null
    union all
    select locked_by, locked_at, false from :SCHEMA._private_job_queues where locked_by is not null
  ) as held
  group by locked_by
)
select coalesce(leases.worker_id, locks.locked_by) as worker_id,
  coalesce(locks.jobs, 0) as jobs, coalesce(locks.queues, 0) as queues, locks.since,
  leases.host, leases.pid, leases.version, leases.started_at, leases.heartbeat_at, leases.crontab,
  leases.expires_at as lease_until, leases.stopped_at,
  leases.expires_at <= now() and leases.stopped_at is null as lapsed,
  case when leases.expires_at > now() then leases.expires_at end as alive_until
from :RECORDS.leases as leases
full join locks on locks.locked_by = leases.worker_id
order by 1
