-- The sub-workflows the released sub-workflow jobs of the workflows $1 wait for (what
-- cancelling those cancels too), in id order; by the index of sub-workflow jobs (as
-- cancel.sql, not by the state).
with own as materialized (
  select jobs.subworkflow_id, jobs.state from :RECORDS.workflow_jobs as jobs
  where jobs.subworkflow_id is not null and jobs.workflow_id = any($1::bigint[])
)
select array(
  select own.subworkflow_id from own
  where own.state = 'released'
  order by own.subworkflow_id)
