-- Workers holding locks: their id, how many jobs and queues, and since when.
select locked_by, sum(jobs) as jobs, sum(queues) as queues, min(since) as since
from (
  select locked_by, 1 as jobs, 0 as queues, locked_at as since
  from :SCHEMA._private_jobs where locked_by is not null
  union all
  select locked_by, 0, 1, locked_at from :SCHEMA._private_job_queues where locked_by is not null
) as locks
group by locked_by
order by locked_by
