-- Mark the workflow $1 cancelled with the reason $2 (a second cancel keeps the first): from
-- its commit on, nothing of it is released. Row: the graphile_worker job ids of its jobs
-- released (to cancel with cancel_jobs.sql; a sub-workflow job has none: the driver cancels its
-- workflow); none if there is no such workflow.
-- Its jobs are read by the workflow's key (materialized: as a plain filter the state could be
-- looked up in the index of every workflow's released jobs).
with marked as (
  update :RECORDS.workflows as workflows
  set cancelled_at = coalesce(workflows.cancelled_at, now()),
    cancel_reason = coalesce(workflows.cancel_reason, $2::text)
  where workflows.id = $1::bigint
  returning workflows.id
),
own as materialized (
  select jobs.job_id, jobs.state from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = $1::bigint
)
select array(
  select own.job_id from own
  where own.state = 'released' and own.job_id is not null
  order by own.job_id)
from marked
