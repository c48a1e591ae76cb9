-- The candidates of get_jobs.sql found one priority at a time (formica_sql::worker::get_jobs
-- puts this in place of get_jobs_scan.sql; the same parameters, the same jobs). The index
-- orders by (priority, run_at), so one priority's due jobs are a range of it that ends at
-- its first job due later, where a single scan of all priorities reads every job scheduled
-- for later before it knows it found all those due. The priorities present are walked with
-- one index descent each (a loose index scan); past the 32nd, one scan takes the rest, so
-- the work stays bounded however many priorities there are. Worth its extra planning only
-- when few jobs are due among many scheduled later: the worker sends it after a short fetch
-- was slow.
with recursive tasks as (
  select array(
    select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = any($2::text[])
  ) as ids
),
free_queues as (
  select job_queues.id from :SCHEMA._private_job_queues as job_queues
  where job_queues.is_available = true /*:QUEUE_FILTER*/
),
priorities (priority, rank) as (
  (select jobs.priority, 1 from :SCHEMA._private_jobs as jobs
   where jobs.is_available = true order by jobs.priority limit 1)
  union all
  select (select jobs.priority from :SCHEMA._private_jobs as jobs
          where jobs.is_available = true and jobs.priority > priorities.priority
          order by jobs.priority limit 1),
    priorities.rank + 1
  from priorities
  where priorities.priority is not null and priorities.rank < 32
),
candidates as (
  select due.* from priorities, tasks cross join lateral (
    select jobs.ctid, jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at
    from :SCHEMA._private_jobs as jobs
    where jobs.priority = priorities.priority
      /*:DUE*/
    order by jobs.run_at asc
    limit $5::int
    for update skip locked
  ) as due
  where priorities.rank < 32
  union all
  select rest.* from priorities, tasks cross join lateral (
    select jobs.ctid, jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at
    from :SCHEMA._private_jobs as jobs
    where jobs.priority >= priorities.priority
      /*:DUE*/
    order by jobs.priority asc, jobs.run_at asc
    limit $5::int
    for update skip locked
  ) as rest
  where priorities.rank = 32
  -- No sort: the priorities come in order, and the limit stops the walk (and its locking)
  -- once it has its jobs.
  limit $5::int
)
