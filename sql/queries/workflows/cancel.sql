-- Mark the workflow $1 cancelled with the reason $2 (a second cancel keeps the first): from
-- its commit on, nothing of it is released. Row: the graphile_worker job ids of its jobs
-- released (to cancel with cancel_jobs.sql; a sub-workflow job has none: the driver cancels its
-- workflow); none if there is no such workflow.
with marked as (
  update :RECORDS.workflows as workflows
  set cancelled_at = coalesce(workflows.cancelled_at, now()),
    cancel_reason = coalesce(workflows.cancel_reason, $2::text)
  where workflows.id = $1::bigint
  returning workflows.id
)
select array(
  select jobs.job_id from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = marked.id and jobs.state = 'released' and jobs.job_id is not null
  order by jobs.job_id)
from marked
