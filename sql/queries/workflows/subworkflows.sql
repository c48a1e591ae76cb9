-- The sub-workflows the released sub-workflow jobs of the workflows $1 wait for (what
-- cancelling those cancels too), in id order.
select array(
  select jobs.subworkflow_id from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = any($1::bigint[]) and jobs.state = 'released'
    and jobs.subworkflow_id is not null
  order by jobs.subworkflow_id)
