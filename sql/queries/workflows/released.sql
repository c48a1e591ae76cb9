-- The graphile_worker job ids of the released jobs of the workflow $1 (sub-workflow jobs have
-- none), read by the workflow's key (as cancel.sql).
with own as materialized (
  select jobs.job_id, jobs.state from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = $1::bigint
)
select array(
  select own.job_id from own
  where own.state = 'released' and own.job_id is not null
  order by own.job_id)
