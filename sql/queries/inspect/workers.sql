-- Workers holding locks: their id, how many jobs and queues, since when, and until when
-- their lease says they are alive (null: no live lease, as graphile-worker's workers).
select locks.locked_by, sum(locks.jobs) as jobs, sum(locks.queues) as queues,
  min(locks.since) as since, min(leases.expires_at) filter (where leases.expires_at > now()) as alive_until
from (
  select locked_by, 1 as jobs, 0 as queues, locked_at as since
  from :SCHEMA._private_jobs where locked_by is not null
  union all
  select locked_by, 0, 1, locked_at from :SCHEMA._private_job_queues where locked_by is not null
) as locks
left join :RECORDS.leases as leases on leases.worker_id = locks.locked_by
group by locks.locked_by
order by locks.locked_by
