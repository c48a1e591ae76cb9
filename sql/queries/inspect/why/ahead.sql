-- The jobs a fetch takes before a job of priority $1 and run_at $2 once it is due: the
-- available jobs due by then that come first in the fetch's order (priority, then run_at;
-- ties left out), walked on the fetch's own index and counted up to $4; and how many of
-- those are of task $3.
select count(*) as ahead,
  count(*) filter (where first.task_id = (
    select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = $3::text)) as of_task
from (
  select jobs.task_id
  from :SCHEMA._private_jobs as jobs
  where jobs.is_available = true
    and jobs.run_at <= greatest(now(), $2::timestamptz)
    and (jobs.priority, jobs.run_at) < ($1::smallint, $2::timestamptz)
  order by jobs.priority, jobs.run_at
  limit $4::bigint
) as first
