-- Cancel the waiting jobs of the workflow $1 with the reason $2, locked in id order (as
-- settle_workflow_jobs locks them, so the two wait for each other rather than deadlock).
-- Row: how many.
with locked as (
  select jobs.id from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = $1::bigint and jobs.state = 'waiting'
  order by jobs.id
  for update
),
cancelled as (
  update :RECORDS.workflow_jobs as jobs
  set state = 'cancelled', finished_at = now(), last_error = 'cancelled: ' || $2::text
  from locked
  where jobs.id = locked.id and jobs.state = 'waiting'
  returning jobs.id
)
select count(*) from cancelled
