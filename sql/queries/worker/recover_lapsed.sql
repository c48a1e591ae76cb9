-- By the database clock: suspect the Formica workers whose lease lapsed, and free the jobs
-- and named queues of those suspected more than $1 milliseconds ago and not renewed since
-- (a heartbeat clears the suspicion), forgetting those workers. The grace makes a step of
-- the database clock harmless: every live worker renews within it. Deleting a lease row is
-- the claim: two sweeps at once never both free the same worker. Locks of workers that
-- never had a lease (graphile-worker) are not touched. The lost attempt counts; run_at is
-- kept, so a freed job keeps its place in its queue (a named queue runs in order), and
-- listening workers are woken if any was freed.
--
-- Every freed job's last_error says its attempt was lost and whose it was (the core's
-- wording, formica_core::worker::lapsed_error): the attempt counts as a failed one, so it
-- leaves the trace a failure leaves. Without it a job whose last attempt died with its
-- worker (SIGKILL, OOM) would be out of attempts with no error: failed for good, yet not
-- among the failed jobs that listings and `retry` pick (they go by last_error). With history
-- on, sql/queries/history/recover.sql is added where marked: a job so ended gets its row.
--
-- Cancel requests (:RECORDS.cancel_requests) whose job no worker will carry out are settled
-- here: a freed job with one fails for good as cancelled instead of running again; a job
-- released since the request (returned, failed, unlocked by hand) fails for good as
-- cancelled if it has attempts left; the requests of such jobs and of jobs gone are
-- forgotten. The released jobs are locked first, skipping any being fetched: one a worker
-- takes meanwhile keeps its request, and that worker reads it. Settled here rather than in
-- the workers' writes: one place for every way a job is released (returned, failed, swept,
-- unlocked by hand, recovered), nothing added to completing or failing jobs, and it runs
-- every few seconds on every running worker.
--
-- Trace contexts (:RECORDS.job_traces) of jobs deleted other than by a Formica worker's
-- completion (graphile-worker's workers, remove_job, cleanup) are forgotten once no older
-- job remains: a range of the primary key below the jobs' oldest id, cheap however many
-- traced jobs wait (a search for every row whose job is gone would read them all).
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
  set locked_at = null, locked_by = null,
    attempts = case
      when exists (select 1 from :RECORDS.cancel_requests as requests where requests.job_id = jobs.id)
      then jobs.max_attempts else jobs.attempts end,
    last_error = coalesce(
      (select 'cancelled: ' || requests.reason from :RECORDS.cancel_requests as requests
       where requests.job_id = jobs.id),
      'attempt ' || jobs.attempts || ' lost: worker ' || lapsed.worker_id || ' stopped renewing its lease')
  from lapsed
  where jobs.locked_by = lapsed.worker_id
  returning jobs.id /*:HISTORY_COLUMNS*/
),
/*:HISTORY*/
queues_freed as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_at = null, locked_by = null
  from lapsed
  where job_queues.locked_by = lapsed.worker_id
),
released as (
  select jobs.id, jobs.attempts < jobs.max_attempts as runnable
  from :SCHEMA._private_jobs as jobs
  where jobs.id in (select requests.job_id from :RECORDS.cancel_requests as requests)
    and jobs.locked_at is null
  for update skip locked
),
cancelled as (
  update :SCHEMA._private_jobs as jobs
  set last_error = 'cancelled: ' || requests.reason, attempts = jobs.max_attempts
  from released
  inner join :RECORDS.cancel_requests as requests on requests.job_id = released.id
  where jobs.id = released.id and released.runnable
),
forgotten as (
  delete from :RECORDS.cancel_requests as requests
  where requests.job_id in (select released.id from released)
    or not exists (select 1 from :SCHEMA._private_jobs as jobs where jobs.id = requests.job_id)
),
untraced as (
  delete from :RECORDS.job_traces as traces
  where traces.job_id < coalesce((select min(jobs.id) from :SCHEMA._private_jobs as jobs), 9223372036854775807)
)
select pg_notify('jobs:insert', json_build_object('r', random(), 'count', count(*))::text)
from jobs_freed
having count(*) > 0
