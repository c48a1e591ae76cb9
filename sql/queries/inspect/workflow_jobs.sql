-- The jobs of workflow $1, in the order they were added: each with what it depends on (by
-- name), and, while its graphile_worker job still exists, that job's state, attempts and
-- last error (a completed job's row is gone: the workflow's record of it tells the rest).
-- `jobs` is the graphile_worker row, as :JOB_STATE reads it. What a job waits for: the
-- dependencies not settled, its signal and its timer (records step 23's workflow_waits), and
-- a sub-workflow job's workflow (records step 24). A job id drawn at the add (records step
-- 33) names a job only once the job is released.
select workflow_job.name, workflow_job.task_identifier, workflow_job.state, released.job_id,
  workflow_job.on_dependency_failure, workflow_job.callback, workflow_job.released_at,
  workflow_job.finished_at,
  case when jobs.id is not null then :JOB_STATE end as job_state,
  jobs.attempts, jobs.max_attempts,
  case when jobs.id is not null then jobs.last_error else workflow_job.last_error end as last_error,
  array(
    select dependency.name
    from :RECORDS.workflow_dependencies as dependencies
    inner join :RECORDS.workflow_jobs as dependency on dependency.id = dependencies.depends_on
    where dependencies.job = workflow_job.id
    order by dependency.id
  ) as depends_on,
  array(
    select dependency.name
    from :RECORDS.workflow_dependencies as dependencies
    inner join :RECORDS.workflow_jobs as dependency on dependency.id = dependencies.depends_on
    where dependencies.job = workflow_job.id and dependency.state in ('waiting', 'released')
    order by dependency.id
  ) as unsettled,
  waits.signal, waits.signal_deadline, waits.on_signal_timeout,
  waits.signalled_at is not null as signalled, waits.timed_out_at is not null as signal_timed_out,
  waits.delay is not null as has_timer, jobs.run_at, workflow_job.subworkflow_id
from :RECORDS.workflow_jobs as workflow_job
cross join lateral (
  select case when workflow_job.released_at is not null then workflow_job.job_id end as job_id
) as released
left join :SCHEMA._private_jobs as jobs on jobs.id = released.job_id
left join :RECORDS.workflow_waits as waits on waits.job = workflow_job.id
where workflow_job.workflow_id = $1::bigint
order by workflow_job.id
