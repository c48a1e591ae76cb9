-- The candidates of get_jobs.sql found in one scan of the index, all priorities at once (the
-- fetch's usual form; get_jobs_walk.sql is the other). The comment in the queues' filter
-- marks where the fetch that leaves paused queues out adds its condition.
with candidates as (
  select jobs.ctid, jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at
  from :SCHEMA._private_jobs as jobs
  where jobs.is_available = true
    and jobs.run_at <= coalesce($4::timestamptz, now())
    and jobs.task_id = any(array(
      select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = any($2::text[])))
    and (jobs.job_queue_id is null or jobs.job_queue_id in (
      select job_queues.id from :SCHEMA._private_job_queues as job_queues
      where job_queues.is_available = true /*:QUEUE_FILTER*/))
    and (jobs.flags ?| $3::text[]) is not true
    and (cardinality($6::text[]) = 0 or (jobs.flags ?| $6::text[]) is true)
  order by jobs.priority asc, jobs.run_at asc
  limit $5::int
  for update skip locked
)
