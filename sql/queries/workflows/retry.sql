-- Run the failed jobs of the workflow $1 again, and put back to wait those cancelled because
-- of a dependency: see retry_workflow in sql/records/000011.sql. Row: the workflow's state
-- ('missing', 'cancelled': refused, 'retried'), the names of the jobs run again and waiting again.
select retried.state,
  array(select jobs.name from :RECORDS.workflow_jobs as jobs where jobs.id = any(retried.rerun) order by jobs.id),
  array(select jobs.name from :RECORDS.workflow_jobs as jobs where jobs.id = any(retried.rewaiting) order by jobs.id)
from :RECORDS.retry_workflow($1::bigint) as retried
