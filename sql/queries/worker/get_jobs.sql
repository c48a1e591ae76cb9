-- Lock up to $5 runnable jobs for worker $1: available, due by $4 (null: the database
-- clock), of the task identifiers $2, without any of the flags $3, with one of the flags
-- $6 unless $6 is empty (a job without flags has none of them), and in a
-- named queue only if no one holds that queue; at most one job per named queue. Each
-- job's attempts count the attempt now starting. Rows: _private_jobs columns plus task_identifier and
-- queue_name, in (priority, run_at, id) order. The comments of the last select mark where
-- the traced fetch (formica_sql::traces::fetch) adds each job's trace context.
with recursive tasks as (
  -- Looked up once per statement, so a task row deleted and added again is still found.
  select array(
    select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = any($2::text[])
  ) as ids
),
free_queues as (
  select job_queues.id from :SCHEMA._private_job_queues as job_queues
  where job_queues.is_available = true
  for update skip locked
),
priorities (priority, rank) as (
  -- The priorities of available jobs, in order, one index descent each (a loose index scan):
  -- the index orders by (priority, run_at), so the due jobs of one priority are a range of it
  -- that ends at the first job due later, where a scan of all priorities at once would read
  -- every job scheduled for later before it knows it found all those due. Past the 32nd
  -- priority, one scan takes the rest (bounded work however many priorities there are).
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
      and jobs.is_available = true
      and jobs.run_at <= coalesce($4::timestamptz, now())
      and jobs.task_id = any(tasks.ids)
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| $3::text[]) is not true
      and (cardinality($6::text[]) = 0 or (jobs.flags ?| $6::text[]) is true)
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
      and jobs.is_available = true
      and jobs.run_at <= coalesce($4::timestamptz, now())
      and jobs.task_id = any(tasks.ids)
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| $3::text[]) is not true
      and (cardinality($6::text[]) = 0 or (jobs.flags ?| $6::text[]) is true)
    order by jobs.priority asc, jobs.run_at asc
    limit $5::int
    for update skip locked
  ) as rest
  where priorities.rank = 32
  limit $5::int
),
chosen as (
  -- A queue may hold several candidates: keep its first, leave the rest untouched.
  select distinct on (candidates.job_queue_id, case when candidates.job_queue_id is null then candidates.id end)
    candidates.ctid, candidates.job_queue_id
  from candidates
  order by candidates.job_queue_id, case when candidates.job_queue_id is null then candidates.id end,
    candidates.priority, candidates.run_at
),
locked_queues as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_by = $1::text, locked_at = coalesce($4::timestamptz, now())
  from chosen
  where job_queues.id = chosen.job_queue_id
),
locked as (
  update :SCHEMA._private_jobs as jobs
  set attempts = jobs.attempts + 1, locked_by = $1::text, locked_at = coalesce($4::timestamptz, now())
  where jobs.ctid = any(array(select chosen.ctid from chosen))
  returning jobs.*
)
select locked.*, tasks.identifier as task_identifier, job_queues.queue_name /*:TRACE_COLUMNS*/
from locked
inner join :SCHEMA._private_tasks as tasks on tasks.id = locked.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = locked.job_queue_id
/*:TRACE_JOIN*/
order by locked.priority, locked.run_at, locked.id
