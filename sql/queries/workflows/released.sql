-- The graphile_worker job ids of the released jobs of the workflow $1 (sub-workflow jobs have
-- none).
select array(
  select jobs.job_id from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = $1::bigint and jobs.state = 'released' and jobs.job_id is not null
  order by jobs.job_id)
