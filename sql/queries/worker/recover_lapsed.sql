-- By the database clock: suspect the Formica workers whose lease lapsed, and free the jobs
-- and named queues of those suspected more than $1 milliseconds ago and not renewed since
-- (a heartbeat clears the suspicion), forgetting those workers. The grace makes a step of
-- the database clock harmless: every live worker renews within it. Deleting a lease row is
-- the claim: two sweeps at once never both free the same worker. Locks of workers that
-- never had a lease (graphile-worker) are not touched. The lost attempt counts; run_at is
-- kept, so a freed job keeps its place in its queue (a named queue runs in order), and
-- listening workers are woken if any was freed.
with suspected as (
  update :RECORDS.leases as leases
  set suspected_at = now()
  where leases.expires_at < now() and leases.suspected_at is null
),
lapsed as (
  delete from :RECORDS.leases as leases
  where leases.expires_at < now()
    and leases.suspected_at < now() - $1::bigint * interval '1 millisecond'
  returning leases.worker_id
),
jobs_freed as (
  update :SCHEMA._private_jobs as jobs
  set locked_at = null, locked_by = null
  from lapsed
  where jobs.locked_by = lapsed.worker_id
  returning jobs.id
),
queues_freed as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_at = null, locked_by = null
  from lapsed
  where job_queues.locked_by = lapsed.worker_id
)
select pg_notify('jobs:insert', json_build_object('r', random(), 'count', count(*))::text)
from jobs_freed
having count(*) > 0
